"""A default Docker container, emulated faithfully enough to grade in it: where Gradescope and PrairieLearn run.

``in_container(script, binds)`` runs ``script`` (bash) the way a platform's autograder runs in its container
(``../shared/notes/containers-and-isolation.md``), as root, in a private mount namespace and a pid namespace of its
own (``unshare -m -p -f --mount-proc``: its ``/proc`` shows its own processes, as a container's does, and they all
end with it), set up like this before the script starts:

- ``binds``: folders bind-mounted where the platform expects them (``/autograder``, ``/grade``);
- its own world-writable folders, as an image and Docker's own ``/dev/shm`` give it: ``/tmp`` (on disk),
  ``/var/tmp``, ``/run/lock`` and ``/dev/shm``, empty (``private_places``);
- the checkout this test runs from is hidden (an empty tmpfs over it, its Python environment bound back): a
  real image holds only what the platform's zip or question put there;
- a Python under a folder other accounts cannot enter (pyenv under ``/root``) is made reachable, as an image's
  ``/usr`` or ``/opt/venv`` is (``open_python``: a tmpfs over the closed folder, the Python bound back into it);
  with ``closed_python`` it is left closed, as a grader whose Python sits in a home folder;
- ``/sys/fs/cgroup`` is an empty read-only folder: no cgroup of the grader's own;
- then, in the script's own process: the capability bounding set is cut to Docker's default set (``0xa80425fb``:
  no CAP_SYS_ADMIN, so no mount and no tmpfs; CAP_SETUID and CAP_SETGID are kept), and a seccomp filter
  refuses what Docker's default profile refuses to such a container that matters here (``unshare``, ``setns``,
  ``clone`` with namespace flags, ``clone3``, the key management calls: ``autograder.box.seccomp.DOCKER_RULES``).

So bubblewrap and ``unshare`` really fail there (``probe`` in the container says so), and the box falls back to
level ``rlimits`` with a uid per kernel, as on the platforms. Right after the script, still inside, ``AFTER`` lists
every task and every file in those folders that is not root's (``done.after``): what grading left behind. Two
emulated containers run side by side as two on one host do: each its own pid namespace and /tmp, the same uids.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import stat
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from autograder.box import seccomp

q = shlex.quote

REPO = Path(__file__).resolve().parents[2]
DOCKER_CAPS = 0xA80425FB  # CHOWN DAC_OVERRIDE FOWNER FSETID KILL SETGID SETUID SETPCAP NET_BIND_SERVICE NET_RAW
#                           SYS_CHROOT MKNOD AUDIT_WRITE SETFCAP

# Runs as the container's first process: cut the capabilities, install the filter, become the script.
ENTER = r"""
import ctypes, os, struct, sys
libc = ctypes.CDLL(None, use_errno=True)
keep = int(os.environ.pop("PKV_KEEP_CAPS"), 16)
last = int(open("/proc/sys/kernel/cap_last_cap").read())
for cap in range(last + 1):
    if not keep >> cap & 1 and libc.prctl(24, cap, 0, 0, 0) != 0:  # PR_CAPBSET_DROP
        sys.exit(f"could not drop capability {cap}")
code = bytes.fromhex(os.environ.pop("PKV_FILTER"))
class Prog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]
buffer = ctypes.create_string_buffer(code, len(code))
prog = Prog(len(code) // 8, ctypes.cast(buffer, ctypes.c_void_p))
if libc.prctl(38, 1, 0, 0, 0) or libc.prctl(22, 2, ctypes.byref(prog), 0, 0):  # NO_NEW_PRIVS, SECCOMP
    sys.exit("could not install the seccomp filter")
os.execvp("bash", ["bash", "-c", sys.argv[1]])
"""


PRIVATE_TMPFS = ("/var/tmp", "/run/lock", "/dev/shm")  # with /tmp: the world-writable folders of a Debian image
AFTER_MARK = "PKV-AFTER "
# Runs in the container right after its script: every task left that is not root's, and every file left in its
# world-writable folders (and those the isolation probe found) that is not root's.
AFTER = r"""
import json, os, stat
tasks = []
for pid in (p for p in os.listdir("/proc") if p.isdigit()):
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        continue
    for tid in tids:
        try:
            fields = dict(l.split(":", 1) for l in open(f"/proc/{pid}/task/{tid}/status") if ":" in l)
        except OSError:
            continue
        uid = int(fields["Uid"].split()[0])
        if uid != 0:
            tasks.append({"pid": int(pid), "tid": int(tid), "uid": uid, "state": fields["State"].split()[0],
                          "name": fields["Name"].strip()})
folders = ["/tmp", "/var/tmp", "/run/lock", "/dev/shm"]
try:
    folders += json.load(open("/tmp/paged-kv-uids/writable-places.json"))["result"]["dirs"]
except (OSError, ValueError, TypeError, KeyError):
    pass
files, seen = [], set()
while folders:
    folder = folders.pop()
    if folder in seen:
        continue
    seen.add(folder)
    try:
        entries = list(os.scandir(folder))
    except OSError:
        continue
    for entry in entries:
        try:
            info = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        if info.st_uid != 0:
            files.append({"path": entry.path, "uid": info.st_uid})
        elif stat.S_ISDIR(info.st_mode) and info.st_mode & 0o002:
            folders.append(entry.path)
print("PKV-AFTER " + json.dumps({"tasks": tasks, "files": files}), flush=True)
"""


def problem() -> str:
    """Why the emulation cannot run here ("" when it can)."""
    if os.geteuid() != 0:
        return "needs root (a private mount namespace, bind mounts, dropping capabilities)"
    if shutil.which("unshare") is None:
        return "needs unshare (util-linux)"
    if not seccomp.supported():
        return "no seccomp numbers for this architecture"
    if subprocess.run(["unshare", "-m", "true"], capture_output=True).returncode != 0:
        return "unshare -m is not allowed here"
    if open_python_plans() is None:
        return "the Python used here sits more than one closed folder deep"
    return ""


def _open_to_others(folder: str) -> bool:
    return bool(os.stat(folder).st_mode & stat.S_IXOTH)


def _python_paths() -> List[str]:
    """What a kernel's uid must reach to run this Python: the environment (its site-packages) and the
    interpreter it links to."""
    return list(dict.fromkeys(os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, sys.executable)))


def _closed_on_the_way(path: str) -> List[str]:
    """The folders above ``path`` (not ``/``) that other accounts cannot enter, outermost first."""
    parts = path.strip("/").split("/")
    return [
        folder for folder in ("/" + "/".join(parts[:i]) for i in range(1, len(parts))) if not _open_to_others(folder)
    ]


def closed_python_folder() -> Optional[str]:
    """The outermost folder above this Python or its environment that other accounts cannot enter (``/root``, a
    ``mktemp -d`` folder holding the checkout), or None."""
    closed = [folder for path in _python_paths() for folder in _closed_on_the_way(path)]
    return min(closed, key=len) if closed else None


def open_python_plans() -> Optional[List[Tuple[str, str]]]:
    """``[(closed folder, its child on the way to Python)]``, one per closed folder above the Python or its
    environment ([] when all is open); None when a path is closed at more than one level (not handled)."""
    plans = []
    for path in _python_paths():
        closed = _closed_on_the_way(path)
        if not closed:
            continue
        if len(closed) > 1:
            return None
        child = closed[0].rstrip("/") + "/" + path[len(closed[0]) :].strip("/").split("/")[0]
        if (closed[0], child) not in plans:
            plans.append((closed[0], child))
    return plans


def setup_lines(
    binds: Dict[str, Path],
    scratch: Path,
    closed_python: bool = False,
    docker: bool = True,
    seen: Sequence[Path] = (),
) -> str:
    """The bash lines, run as root in the new mount namespace, that lay the container out (without ``docker``:
    only the binds, an open Python and world-writable folders of its own, the machine's checkout and cgroups left as
    they are; ``seen``: folders of the machine's /tmp still seen at their path)."""
    lines = ["set -e", "mount --make-rprivate /"]
    keep = scratch / "keep"
    keep.mkdir(parents=True, exist_ok=True)
    # First make the Python and its environment reachable for every account, as an image's /usr or /opt/venv is:
    # a tmpfs over each closed folder on the way, the child on the way bound back (with what is mounted in it).
    for number, (closed, child) in enumerate([] if closed_python else (open_python_plans() or [])):
        held = keep / f"open-{number}"
        lines += [
            f"mkdir -p {q(str(held))}",
            f"mount --rbind {q(child)} {q(str(held))}",
            f"mount -t tmpfs -o mode=0755 tmpfs {q(closed)}",
            f"mkdir -p {q(child)}",
            f"mount --move {q(str(held))} {q(child)}",
        ]
    for target, source in binds.items():
        lines += [f"mkdir -p {q(target)}", f"mount --bind {q(str(source))} {q(target)}"]
    venv = Path(os.path.realpath(sys.prefix))
    checkout = str(REPO)
    if docker and str(venv).startswith(checkout + "/"):  # hide the checkout, keep its environment
        inside = str(venv)[len(checkout) :].strip("/")
        lines += [
            f"mkdir -p {q(str(keep / 'venv'))}",
            f"mount --bind {q(str(venv))} {q(str(keep / 'venv'))}",
            f"mount -t tmpfs -o mode=0755 tmpfs {q(checkout)}",
            f"mkdir -p {q(checkout + '/' + inside)}",
            f"mount --move {q(str(keep / 'venv'))} {q(checkout + '/' + inside)}",
        ]
    elif docker:
        lines += [f"mount -t tmpfs -o mode=0755 tmpfs {q(checkout)}"]
        link = REPO / ".venv"
        if link.is_symlink():  # a clone whose environment is another checkout's: its link stays, as its path is used
            lines += [f"ln -s {q(os.readlink(link))} {q(str(link))}"]
    if docker:
        lines += ["mount -t tmpfs -o ro,mode=0755 tmpfs /sys/fs/cgroup"]
    lines += private_places(scratch, seen, carried=_machine_tmp_entries([checkout, *_python_paths()]))
    return "\n".join(lines)


def _machine_tmp_entries(paths: Sequence[str]) -> List[str]:
    """The entries of the machine's ``/tmp`` that hold any of ``paths`` (a checkout cloned under /tmp, its Python)."""
    inside = (os.path.relpath(os.path.realpath(path), "/tmp") for path in paths)
    return sorted({"/tmp/" + rel.split("/")[0] for rel in inside if not rel.startswith("..") and rel != "."})


def private_places(scratch: Path, seen: Sequence[Path] = (), carried: Sequence[str] = ()) -> List[str]:
    """The container's own world-writable folders, as a container's image and its own ``/dev/shm`` give it: ``/tmp``
    on disk (a folder of ``scratch``, bound last: binds from the machine's ``/tmp`` are made before; ``seen``, folders
    of the machine's /tmp, bound into it at their path; ``carried``, entries of the machine's /tmp that hold the
    checkout or its Python, bound with what is mounted in them, as the container's image would hold them),
    ``/var/tmp``, ``/run/lock`` and ``/dev/shm`` empty tmpfs, all 1777."""
    own_tmp = scratch / "tmp"
    own_tmp.mkdir(parents=True, exist_ok=True)
    os.chmod(own_tmp, 0o1777)
    lines = []
    for entry in carried:
        (own_tmp / os.path.basename(entry)).mkdir(exist_ok=True)
        lines.append(f"mount --rbind {q(entry)} {q(str(own_tmp / os.path.basename(entry)))}")
    for folder in seen:
        inside = os.path.relpath(os.path.realpath(folder), "/tmp")
        if inside.startswith(".."):
            raise ValueError(f"seen takes folders of /tmp, not {folder}")
        (own_tmp / inside).mkdir(parents=True, exist_ok=True)
        lines.append(f"mount --bind {q(str(folder))} {q(str(own_tmp / inside))}")
    lines.append(f"mount --rbind {q(str(own_tmp))} /tmp")
    for folder in PRIVATE_TMPFS:
        if os.path.isdir(folder) and not os.path.islink(folder):
            lines.append(f"mount -t tmpfs -o mode=1777,nosuid,nodev tmpfs {q(folder)}")
    return lines


CLOSED = "/srv/pkv-closed"  # a folder only root may enter, in the container: the checkout and a class in it
COURSE = CLOSED + "/course"


def checkout_binds(folder: Path) -> Dict[str, Path]:
    """Binds that put this checkout in the container at ``COURSE``, under ``CLOSED`` (``folder``, made 0700), as an
    instructor runs ``make grade`` inside Docker (the checkout closed to other accounts, not hidden)."""
    (folder / "course").mkdir(parents=True, exist_ok=True)
    folder.chmod(0o700)
    return {CLOSED: folder, COURSE: REPO}


def in_container(
    script: str,
    binds: Dict[str, Path],
    scratch: Path,
    env: Optional[Dict[str, str]] = None,
    closed_python: bool = False,
    timeout: int = 600,
    docker: bool = True,
    seen: Sequence[Path] = (),
) -> subprocess.CompletedProcess:
    """``script`` (bash) run as a platform runs its autograder: see the module doc. With ``docker``, the container
    has its own pid namespace (its ``/proc`` shows its own processes; they all end with it) and its own ``/tmp``,
    ``/var/tmp``, ``/run/lock`` and ``/dev/shm``; right after the script, still inside, ``AFTER`` lists what is left
    there of any uid but root's (``done.after``: ``{"tasks": [...], "files": [...]}``). Without ``docker``, only a
    mount namespace where Python is open to every account and world-writable folders of its own (the machine's own
    capabilities, no filter; ``seen``: folders of the machine's /tmp it still sees)."""
    environment = dict(env if env is not None else os.environ)
    environment.update(PKV_KEEP_CAPS=f"{DOCKER_CAPS:x}", PKV_FILTER=seccomp.program(seccomp.DOCKER_RULES).hex())
    # The container's own temporary folder (kernels' private folders are made there): what its processes' command
    # lines name, so that a test can tell this container's processes from any other grader's on the machine.
    name = "pkv-container-" + os.urandom(6).hex()
    outside = scratch / "tmp" / name
    outside.mkdir(parents=True)
    os.chmod(outside, 0o711)
    tmpdir = f"/tmp/{name}"
    environment["TMPDIR"] = tmpdir
    python = q(os.path.realpath(sys.executable))
    if docker:
        inner = f"( {script} ); rc=$?; {python} -I -c {q(AFTER)}; exit $rc"
        enter = f"mkdir -p -m 0711 {q(tmpdir)}\nexec {python} -I -c {q(ENTER)} {q(inner)}"
        command = ["unshare", "-m", "-p", "-f", "--mount-proc", "bash", "-c"]
    else:
        enter = f"exec bash -c {q(script)}"
        command = ["unshare", "-m", "bash", "-c"]
    wrapped = setup_lines(binds, scratch, closed_python, docker, seen) + "\n" + enter
    try:
        done = subprocess.run(command + [wrapped], env=environment, capture_output=True, text=True, timeout=timeout)
    finally:
        shutil.rmtree(outside, ignore_errors=True)
    done.tmpdir = tmpdir  # type: ignore[attr-defined]
    found = [line for line in done.stdout.splitlines() if line.startswith(AFTER_MARK)]
    done.after = json.loads(found[-1][len(AFTER_MARK) :]) if found else None  # type: ignore[attr-defined]
    return done


def left_behind(*tags: str) -> list:
    """Processes still running whose command line names one of ``tags`` (a container's ``tmpdir``, a marker)."""
    left = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            command = Path(f"/proc/{entry.name}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if any(tag and tag in command for tag in tags):
            left.append(f"{entry.name}: {command[:160]}")
    return left
