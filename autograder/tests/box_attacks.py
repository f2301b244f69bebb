"""The red team's attacks on the box and the feedback (``attacks``): leaks of the grader's files, its keys and earlier
students', a part's box serving another part the reference, scripts in the feedback, harm to the machine and links
out of the submission."""

from __future__ import annotations

import copy
from typing import List, Tuple

import nbformat

from autograder.proof import classroom
from autograder.course.notebook import nbgrader
from autograder.proof.classroom import Expect, Lab
from attack_notebooks import code_cell, with_cells


HOG_SECONDS = 6  # how long a harm attack keeps the machine busy (the bystander's grading overlaps it)


def leak_attacks(lab: Lab) -> List[Tuple[str, dict]]:
    end = len(lab.source["cells"])
    return [
        (
            "looks for the graders' files and prints them",
            with_cells(
                lab.source,
                end,
                [
                    "import glob\nfound = []\n"
                    "for depth in range(6):\n    prefix = '/' + '*/' * depth\n"
                    "    for pattern in ('autograder/labs/*/checks.py', 'autograder/tests/*.py', 'solutions/*/*.ipynb', "
                    "'labs/*/checks.py'):\n"
                    "        found += glob.glob(prefix + pattern)\n"
                    "print('grader files seen:', len(found))\nfor path in found[:20]:\n    print(open(path).read())"
                ],
                "files",
            ),
        ),
        (
            "prints the kernel's history after every test",
            with_cells(lab.source, end, ["print(In)\nprint(Out)\nprint(_ih)"], "history"),
        ),
    ]


# A key in the kernel's keyring (add_key through ctypes) outlives the kernel unless the box refuses the call, and
# the next kernel, usually given the same uid, can search for it (issue 35, item 6). This student leaves a key and
# looks for one left by the students graded before it (it is one of the leaks, dealt to every other lab): the
# call must be refused, and no key seen.
KEY_STUDENT = """\
import ctypes, os
_libc = ctypes.CDLL(None, use_errno=True)
_ADD_KEY, _KEYCTL = {"x86_64": (248, 250), "aarch64": (217, 219)}[os.uname().machine]
_USER_KEYRING, _KEYCTL_SEARCH = -4, 10
_left = _libc.syscall(_ADD_KEY, b"user", b"pkv-key-for-the-next-student", b"the answer", 10, _USER_KEYRING)
print("key left:", "yes" if _left > 0 else "refused")
_seen = int(_libc.syscall(_KEYCTL, _KEYCTL_SEARCH, _USER_KEYRING, b"user", b"pkv-key-for-the-next-student", 0) > 0)
try:
    _seen += sum("pkv-key-for-the-next-student" in line for line in open("/proc/keys"))
except OSError:
    pass
print("keys of earlier students seen:", _seen)
"""


def key_attacks(lab: Lab) -> List[Tuple[str, dict]]:
    return [
        (
            "leaves a key in its uid's keyring for the next student and searches for one",
            with_cells(lab.source, len(lab.source["cells"]), [KEY_STUDENT], "key"),
        )
    ]


# Lab 05's register part delegated to the release part's own box (issue 35, item 6). That box holds the reference
# of every part but its own, hash_blocks among them. An added cell, run again in every box that replays the
# student's cells, serves the reference's code wherever it is the reference, over an abstract Unix socket and as
# files in /tmp and /dev/shm, and fetches it wherever it is a stub; the register TODO runs what was fetched (where
# the reference is at hand, its own: so the attack earns the part wherever it reaches the reference, which
# ``test_grading_pieces`` shows). Boxes of one notebook are never alive together and share no socket or folder,
# so the part earns nothing.
CROSS_PART_LAB = "05-prefix-cache"
CROSS_PART_CELLS = ("lab05-visible-hash-blocks", "lab05-hidden-hash-blocks")


def serve_or_fetch(module: str, reference: str, probe: str, name: str) -> str:
    """A cell that, wherever ``reference`` (an attribute path under ``module``, imported as ``_ref_module``) is the
    reference (``probe`` does not reach a stub), puts its code in ``_fetched`` and serves it over the abstract Unix
    socket ``name`` and as files ``/tmp/<name>``, ``/dev/shm/<name>``; wherever it is a stub, fetches it from them."""
    return (
        SERVE_OR_FETCH.replace("MODULE", module)
        .replace("REFERENCE", reference)
        .replace("PROBE", probe)
        .replace("NAME", name)
    )


SERVE_OR_FETCH = """\
import marshal, os, socket, threading, time, types
import MODULE as _ref_module
_ADDRESS, _FILES, _fetched = "\\0NAME", ("/tmp/NAME", "/dev/shm/NAME"), []
def _serve(code):
    for path in _FILES:
        try:
            with open(path, "wb") as handle:
                handle.write(code)
            os.chmod(path, 0o666)
        except OSError:
            pass
    server = socket.socket(socket.AF_UNIX)
    server.bind(_ADDRESS)
    server.listen(8)
    while True:
        client, _ = server.accept()
        client.sendall(code)
        client.close()
def _fetch():
    for _ in range(3000):
        for path in _FILES:
            try:
                _fetched.append(open(path, "rb").read())
                return
            except OSError:
                pass
        try:
            client = socket.socket(socket.AF_UNIX)
            client.connect(_ADDRESS)
            data = b""
            while chunk := client.recv(65536):
                data += chunk
            _fetched.append(data)
            return
        except OSError:
            time.sleep(0.02)
_code = marshal.dumps(_ref_module.REFERENCE.__code__)
try:
    PROBE
    _holds_reference = True
except Exception as _error:
    _holds_reference = "leaves it out" not in str(_error)
if _holds_reference:
    _fetched.append(_code)
threading.Thread(target=(lambda: _serve(_code)) if _holds_reference else _fetch, daemon=True).start()
"""
CROSS_PART_SERVE = serve_or_fetch(
    "paged_kv.cache.prefix_cache",
    "BlockManager.hash_blocks",
    "_ref_module.BlockManager.hash_blocks(None, None)",
    "pkv-cross-part-05",
)
CROSS_PART_REGISTER = '''\
class RegisteringManager(ReleasingManager):
    def hash_blocks(self, seq):
        """Register the blocks this step filled: from num_cached_tokens to + num_scheduled_tokens."""
        for _ in range(100):
            if _fetched:
                return types.FunctionType(marshal.loads(_fetched[0]), vars(_ref_module))(self, seq)
            time.sleep(0.05)
        raise RuntimeError("no box to delegate to")
'''


def cross_part_attack(lab: Lab) -> List[Tuple[str, dict]]:
    if lab.name != CROSS_PART_LAB:
        return []
    nb = copy.deepcopy(lab.source)
    cells = nb["cells"]
    todo = next(c for c in cells if nbgrader(c).get("grade_id") == "lab05-todo-register")
    todo["source"] = CROSS_PART_REGISTER
    first = next(i for i, c in enumerate(cells) if nbgrader(c).get("solution") and not nbgrader(c).get("grade"))
    cells.insert(first, code_cell(CROSS_PART_SERVE, "attack-cross-part"))
    return [("its register part delegated to the release part's own box (socket, /tmp, /dev/shm)", nb)]


# What a student puts in a notebook so that its feedback page runs script when someone opens it (#25).
XSS_MARKDOWN = (
    "## My notes <script>alert('markdown script')</script>\n\n"
    "<img src=x onerror=\"alert('markdown handler')\"> [a link](javascript:alert('markdown link'))\n"
    "<a href=\"javascript:alert('raw link')\">raw link</a> <iframe srcdoc=\"<script>alert(1)</script>\"></iframe>\n"
    "<svg onload=alert('svg')></svg> <form action=\"javascript:alert('form')\"><button>go</button></form>\n"
    "<meta http-equiv=\"refresh\" content=\"0;url=javascript:alert('meta')\"> <base href=\"javascript:alert(1)//\">\n"
    "<object data=\"javascript:alert('object')\"></object> <embed src=\"javascript:alert('embed')\">\n"
)
XSS_OUTPUTS = (
    "from IPython.display import HTML, SVG, Javascript, Markdown, display\nimport ipywidgets\n\n\n"
    "class _Shiny:\n    def _repr_html_(self):\n"
    "        return \"<script>alert('repr')</script><b onmouseover=alert('hover')>shiny</b>\"\n\n\n"
    "class _Drawn:\n    def _repr_svg_(self):\n"
    "        return '<svg xmlns=\"http://www.w3.org/2000/svg\" onload=\"alert(1)\"><script>1</script></svg>'\n\n\n"
    "display(_Shiny())\ndisplay(_Drawn())\n"
    "display(HTML(\"<img src=x onerror=alert('html')><a href='javascript:alert(3)'>x</a>\"))\n"
    "display(Javascript(\"alert('javascript')\"))\n"
    "display(Markdown(\"[md](javascript:alert('md')) <script>alert('md script')</script>\"))\n"
    "display({'image/png': 'iVBORw0KGgo=\\\" onerror=\\\"alert(4)', 'text/plain': 'a forged image'}, raw=True,\n"
    "        metadata={'image/png': {'width': '1 onerror=alert(5)'}})\n"
    "ipywidgets.HTML(\"<script>alert('widget')</script>\")"
)
# provenance refuses eval and quotes its line in the Grading notes: a backtick there ends a code span.
XSS_QUOTED = "_quoted = eval(\"'`<img src=x onerror=alert(6)>` <script>alert(7)</script>'\")"


def feedback_attacks(lab: Lab) -> List[Tuple[str, dict]]:
    """The solution with, right after its last test, every way to put live markup into its feedback: a
    markdown cell of HTML (script, handler, ``javascript:`` links, frames, forms, ``<meta>``, ``<base>``), a
    raw HTML cell, a cell whose outputs are HTML, SVG, JavaScript, markdown, a forged image and a widget, and
    a line provenance refuses and quotes (a backtick, then a tag). Below every test, none of it costs a
    point (its code earns the solution's); above the lab's closing demos, which are then still skipped."""
    nb = copy.deepcopy(lab.source)
    at = max(i for i, c in enumerate(nb["cells"]) if nbgrader(c).get("grade")) + 1
    raw = dict(nbformat.v4.new_raw_cell("<script>alert('raw cell')</script>"), id="attack-xss-raw")
    raw["metadata"] = {"raw_mimetype": "text/html", "format": "text/html"}
    nb["cells"][at:at] = [
        dict(nbformat.v4.new_markdown_cell(XSS_MARKDOWN), id="attack-xss-markdown"),
        raw,
        code_cell(XSS_OUTPUTS, "attack-xss-outputs"),
        code_cell(XSS_QUOTED, "attack-xss-quoted"),
    ]
    return [("puts live markup in its feedback (markdown, outputs, a quoted line)", nb)]


def harm_attacks(lab: Lab) -> List[Tuple[str, dict, Expect]]:
    end = len(lab.source["cells"])
    busy = f"while time.time() - t0 < {HOG_SECONDS}:"
    return [
        (
            "busy threads on every core",
            [
                "import time\nimport torch\ntorch.set_num_threads(16)\na = torch.randn(1200, 1200)\nt0 = time.time()\n"
                f"{busy}\n    a @ a"
            ],
            Expect(),
        ),
        (
            "busy children in their own sessions",
            [
                "import os, time\nfor _ in range(20):\n    if os.fork() == 0:\n        os.setsid()\n        t0 = time.time()\n"
                f"        {busy}\n            pass\n        os._exit(0)\ntime.sleep(1)"
            ],
            Expect(),
        ),
        (
            "forks that each take 1.5 GiB",
            [
                "import os, time\nfor _ in range(12):\n    if os.fork() == 0:\n        block = bytearray(1536 * 2**20)\n"
                "        for i in range(0, len(block), 4096):\n            block[i] = 1\n"
                f"        time.sleep({HOG_SECONDS})\n        os._exit(0)\nfor _ in range(12):\n    os.wait()"
            ],
            Expect(events={"memory"}),
        ),
        (
            "fills the disk",
            [
                "for n in range(4):\n    with open(f'/tmp/fill-{n}', 'wb') as handle:\n        for _ in range(400):\n"
                "            handle.write(b'x' * 2**20)"
            ],
            Expect(boxed_output=["No space left on device"]),
        ),
        (
            "floods the output and the error message",
            ["print('x' * 60_000_000)", "raise ValueError('y' * 30_000_000)"],
            Expect(events={"output-cut"}),
        ),
    ], end


def link_students(lab: Lab) -> List[Tuple[str, str, None, Expect, bool, str]]:
    """Submissions that are symbolic links, as ``unzip`` keeps them in a class's export (``classroom.write_export``
    makes them): a notebook linked to the lab's solution (the instructor's, which no student can read) and
    a folder linked to the solution student's. Collection refuses both (score 0, the reason in the log and
    the Grading notes); the student linked to is graded as themselves."""
    refused = Expect(
        total=0.0,
        zero=set(lab.grade_cells),
        repairs={"refused-entry"},
        output=["was not collected: it is a symbolic link"],
    )
    solution = classroom.TESTS_DIR.parents[1] / "solutions" / lab.name / lab.notebook
    return [
        ("link", "links its notebook to the lab's solution", None, refused, False, str(solution)),
        ("link", "links its folder to the solution student's folder", None, refused, False, "student:solution"),
    ]
