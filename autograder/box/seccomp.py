"""Seccomp filters as plain classic BPF, installed with ``prctl`` (no libseccomp needed).

``install(rules)`` makes the calling process (and everything it starts, across ``exec``) refuse the
system calls ``rules`` name. Two rule sets are used:

- ``BOX_RULES``, in every grading box at every level: Linux's key management (``add_key``, ``keyctl``,
  ``request_key``). The kernel keyring is shared by every process of a uid and is not namespaced: a key
  left by one notebook would be read by the next kernel given the same uid, or by any uid when made
  readable to all (``/proc/keys``). Refusing the calls closes that channel between boxes. Also System V IPC
  and POSIX message queues (shared by every uid and outliving their process), and inotify and fanotify
  instances (counted per uid on the whole host: a box must not use up another's).
- ``DOCKER_RULES``, for the tests' emulation of a default Docker container (Gradescope, PrairieLearn):
  what Docker's default profile refuses to a container without CAP_SYS_ADMIN that matters to the box:
  ``unshare``, ``setns``, ``clone`` with a namespace flag, ``clone3`` (``ENOSYS``, so that the C library
  falls back to ``clone``), and the key management calls.

A call made through another ABI than the machine's own (i386 or x32 calls on x86_64) is refused
whole, since its numbers differ. x86_64 and aarch64 are known; elsewhere ``install`` raises.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import struct
from dataclasses import dataclass
from typing import Dict, Sequence

PR_SET_NO_NEW_PRIVS = 38
PR_SET_SECCOMP = 22
SECCOMP_MODE_FILTER = 2

SECCOMP_RET_ALLOW = 0x7FFF0000
SECCOMP_RET_ERRNO = 0x00050000

# classic BPF opcodes
_LD_ABS_W = 0x20  # BPF_LD | BPF_W | BPF_ABS
_JEQ = 0x15  # BPF_JMP | BPF_JEQ | BPF_K
_JGE = 0x35  # BPF_JMP | BPF_JGE | BPF_K
_JSET = 0x45  # BPF_JMP | BPF_JSET | BPF_K
_RET = 0x06  # BPF_RET | BPF_K

_X32_BIT = 0x40000000
CLONE_NAMESPACES = 0x7E020080  # CLONE_NEWNS|NEWCGROUP|NEWUTS|NEWIPC|NEWUSER|NEWPID|NEWNET|NEWTIME


@dataclass(frozen=True)
class Arch:
    audit: int  # AUDIT_ARCH_* as seccomp_data.arch reports it
    numbers: Dict[str, int]  # system call numbers by name


ARCHES = {
    "x86_64": Arch(
        0xC000003E,
        {
            "add_key": 248,
            "request_key": 249,
            "keyctl": 250,
            "unshare": 272,
            "setns": 308,
            "clone": 56,
            "clone3": 435,
            "shmget": 29,
            "msgget": 68,
            "semget": 64,
            "mq_open": 240,
            "inotify_init": 253,
            "inotify_init1": 294,
            "fanotify_init": 300,
        },
    ),
    "aarch64": Arch(
        0xC00000B7,
        {
            "add_key": 217,
            "request_key": 218,
            "keyctl": 219,
            "unshare": 97,
            "setns": 268,
            "clone": 220,
            "clone3": 435,
            "shmget": 194,
            "msgget": 186,
            "semget": 190,
            "mq_open": 180,
            "inotify_init1": 26,
            "fanotify_init": 262,
        },
    ),
}


@dataclass(frozen=True)
class Rule:
    """Refuse ``call`` with ``error``; with ``flags``, only when its first argument has one of those bits."""

    call: str
    error: int = errno.EPERM
    flags: int = 0


KEYRING = (Rule("add_key"), Rule("keyctl"), Rule("request_key"))
# Every box: no key store; no System V IPC or POSIX message queue (they outlive the process, shared by every uid);
# no inotify or fanotify instance (counted per uid on the whole host: 128 inotify instances by default).
BOX_RULES = KEYRING + (
    Rule("shmget"),
    Rule("msgget"),
    Rule("semget"),
    Rule("mq_open"),
    Rule("inotify_init", errno.ENOSYS),
    Rule("inotify_init1", errno.ENOSYS),
    Rule("fanotify_init", errno.ENOSYS),
)


def rules_for(level: str) -> Sequence[Rule]:
    """What a box at isolation ``level`` refuses (``autograder.box.sandbox.LEVELS``): ``BOX_RULES`` at every level.

    Not sockets: without a network namespace (level rlimits) refusing every socket but a Unix one would keep a
    kernel off the network, but ipykernel binds a TCP pipe on 127.0.0.1 for its children's output and ZeroMQ
    aborts the kernel when that socket cannot be made."""
    return BOX_RULES


DOCKER_RULES = KEYRING + (
    Rule("unshare"),
    Rule("setns"),
    Rule("clone", flags=CLONE_NAMESPACES),
    Rule("clone3", error=errno.ENOSYS),
)


def _op(code: int, k: int, jt: int = 0, jf: int = 0) -> bytes:
    return struct.pack("HBBI", code, jt, jf, k & 0xFFFFFFFF)


def program(rules: Sequence[Rule], machine: str = "") -> bytes:
    """The filter for ``rules`` on ``machine`` (default: this one), as packed ``sock_filter`` entries."""
    arch = ARCHES.get(machine or platform.machine())
    if arch is None:
        raise OSError(f"no seccomp numbers for {machine or platform.machine()!r}: the box knows {', '.join(ARCHES)}")
    deny_all = _op(_RET, SECCOMP_RET_ERRNO | errno.ENOSYS)
    allow = _op(_RET, SECCOMP_RET_ALLOW)
    ops = [
        _op(_LD_ABS_W, 4),
        _op(_JEQ, arch.audit, jt=1),
        deny_all,  # another ABI: refused
        _op(_LD_ABS_W, 0),
        _op(_JGE, _X32_BIT, jt=0, jf=1),
        deny_all,
    ]  # x32 numbers: refused
    for rule in rules:
        number = arch.numbers.get(rule.call)
        if number is None:  # no such call on this machine (inotify_init on aarch64)
            continue
        refuse = _op(_RET, SECCOMP_RET_ERRNO | rule.error)
        if rule.flags:
            # nr == number? then load the low word of args[0], test the flags, reload nr after.
            ops += [
                _op(_JEQ, number, jt=0, jf=4),
                _op(_LD_ABS_W, 16),
                _op(_JSET, rule.flags, jt=0, jf=1),
                refuse,
                _op(_LD_ABS_W, 0),
            ]
        else:
            ops += [_op(_JEQ, number, jt=0, jf=1), refuse]
    ops.append(allow)
    return b"".join(ops)


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def install(rules: Sequence[Rule]) -> None:
    """Make this process and its descendants refuse what ``rules`` name (sets no-new-privileges first, which
    a filter needs without CAP_SYS_ADMIN). Raises OSError when the kernel refuses the filter."""
    code = program(rules)
    buffer = ctypes.create_string_buffer(code, len(code))
    prog = _SockFprog(len(code) // 8, ctypes.cast(buffer, ctypes.c_void_p))
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS) failed")
    if libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(prog), 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_SECCOMP) refused the filter")


def supported() -> bool:
    """Whether this machine's architecture has numbers here."""
    return platform.machine() in ARCHES


if __name__ == "__main__":  # pragma: no cover - a manual check: python -m autograder.box.seccomp
    install(BOX_RULES)
    print("filter installed in pid", os.getpid())
