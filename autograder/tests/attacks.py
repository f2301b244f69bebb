"""What a dishonest student would try, as notebooks: the red team of the class simulation.

``attack_students(lab)`` returns ``(kind, label, notebook, expectation)`` for every attack class, built
from the lab's own notebooks (so a new lab gets every attack with no new code):

- **integrity** attacks try to earn points the code does not: replace the graders' checks and the
  visible helpers, swallow every error with an IPython AST transformer, make the kernel reply ``ok``,
  point the reference at the student's code, and hand the TODO to paged_kv's implementation in
  disguise (the reference's source ``exec``-ed under the TODO's name, its bytecode renamed, plain
  inheritance, a name computed from strings, ``gc``, ``sys.modules``, ``torch.sys``, the starter's
  ``__todo__``, ``ctypes``, a pickle loaded by numpy, a fake ``triton`` whose "kernel" computes in torch).
  Each is tried on the untouched release (its own code earns nothing) and the strongest also on a
  catalogued bug (its code earns that bug's points): it must earn exactly that, and show in the log;
- **leak** attacks, after the last test, look for the graders' files, print the kernel's history, and leave a
  key in the kernel's keyring for the next student while searching for one left before: the feedback must
  carry no grader source and no hidden test, the key must be refused and none seen;
- lab 05's **cross-part delegation**: its register part runs the reference's code fetched from the release
  part's own box (a socket, /tmp, /dev/shm), and must earn nothing for that part;
- the **xss** student, the solution with cells after its last test that carry every way into its feedback
  page of live markup (markdown, raw HTML, rich outputs, a line the Grading notes quote): it keeps the
  solution's points, and its feedback, like every student's, must have nothing that runs or loads;
- **harm** attacks, after the last test, try to slow, starve or fail the students graded beside them
  (busy threads, busy children in their own sessions, forks that take memory, a full disk, a flood of
  output); each is graded beside an honest *bystander*, who must keep full marks in a normal time;
- **link** attacks are submissions that are symbolic links in the class's export, to the lab's solution
  and to another student's folder: collection must refuse them, and the student linked to keeps their own.

The **collision** attacks, two entries of an export that give one student id (``alice/`` and ``@alice/``;
Moodle participant 42's folder under another name; a flat Moodle file named with another participant's id),
are not notebooks and need no grading: ``test_collect_student_ids.py`` tries them on the folder and the Moodle
paths (both entries refused and named).
"""

from __future__ import annotations

import ast
import copy
import textwrap
from typing import Dict, List, Optional, Tuple

import nbformat

from autograder.proof import classroom
from autograder.course.notebook import cell_text, nbgrader
from autograder.proof.classroom import Expect, Lab

HOG_SECONDS = 6  # how long a harm attack keeps the machine busy (the bystander's grading overlaps it)


# ---- what a lab's TODO is -------------------------------------------------------------------------------
def _answer_indices(lab: Lab) -> List[int]:
    return [
        i for i, c in enumerate(lab.source["cells"]) if nbgrader(c).get("solution") and not nbgrader(c).get("grade")
    ]


def _setup_index(lab: Lab) -> int:
    return next(i for i, c in enumerate(lab.source["cells"]) if c["cell_type"] == "code")


def _entry_point(lab: Lab, names: List[str]) -> str:
    """The first of the answer cell's TODO functions that no other one calls in the solution (lab 07's
    ``schedule`` calls ``preempt``): the tests reach it first, so a route planted there is the one they meet."""
    tree = ast.parse(cell_text(lab.source["cells"][lab.answer_index]))
    called = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name in names:
            for inner in ast.walk(node):
                if isinstance(inner, ast.Call):
                    target = inner.func
                    name = target.attr if isinstance(target, ast.Attribute) else getattr(target, "id", None)
                    if name in names and name != node.name:
                        called.add(name)
    return next((n for n in names if n not in called), names[0])


def _target(lab: Lab) -> dict:
    """The TODO the tests reach first: its class (and starter) or function, the answer cell's methods, their
    reference paths."""
    functions = classroom.todo_functions(lab)
    klass = classroom._class_answer(lab)
    first_name = _entry_point(lab, list(functions))
    first = functions[first_name]
    kernel = any("jit" in ast.unparse(d) for d in first.decorator_list)
    info = {
        "kernel": kernel,
        "function": first_name,
        "args": classroom._call_args(first),
        "class": None,
        "starter": None,
        "methods": {},
        "classmethod": any("classmethod" in ast.unparse(d) for d in first.decorator_list),
    }
    if klass is not None:
        base = klass.bases[0].id if klass.bases and isinstance(klass.bases[0], ast.Name) else None
        info["class"], info["starter"] = klass.name, base
        for name in functions:
            reference = classroom._starter_reference(base, name)
            if reference is not None:
                owner = reference.__qualname__.split(".")[0]
                info["methods"][name] = (reference.__module__, owner)
    else:
        import paged_kv

        reference = getattr(paged_kv, first_name, None)
        if reference is not None:
            info["methods"][first_name] = (reference.__module__, None)
    return info


def _code_cell(source: str, cell_id: str) -> dict:
    cell = dict(nbformat.v4.new_code_cell(source))
    cell["id"] = cell_id
    return cell


def _with_cells(nb: dict, at: int, sources: List[str], tag: str) -> dict:
    nb = copy.deepcopy(nb)
    for offset, source in enumerate(sources):
        nb["cells"].insert(at + offset, _code_cell(source, f"attack-{tag}-{offset}"))
    return nb


def _inject_into_todo(nb: dict, lab: Lab, code: str) -> dict:
    """``code`` at the top of the targeted TODO's body (``_target``: its solution region, or its stub in the
    release)."""
    nb = copy.deepcopy(nb)
    index = next(i for i, c in enumerate(nb["cells"]) if nbgrader(c).get("solution") and not nbgrader(c).get("grade"))
    cell = nb["cells"][index]
    lines = cell_text(cell).splitlines()
    name = _target(lab)["function"]
    span = next(
        (
            (n.lineno - 1, n.end_lineno)
            for n in ast.walk(ast.parse(cell_text(cell)))
            if isinstance(n, ast.FunctionDef) and n.name == name
        ),
        (0, len(lines)),
    )
    at = next((i for i in range(*span) if "### BEGIN SOLUTION" in lines[i] or "YOUR CODE HERE" in lines[i]), None)
    if at is None:
        raise ValueError(f"{lab.name}: no solution marker in the first answer cell")
    indent = lines[at][: len(lines[at]) - len(lines[at].lstrip())]
    cell["source"] = "\n".join(lines[: at + 1] + [indent + line for line in code.splitlines()] + lines[at + 1 :])
    return nb


def _replace_todo(nb: dict, source: str) -> dict:
    nb = copy.deepcopy(nb)
    index = next(i for i, c in enumerate(nb["cells"]) if nbgrader(c).get("solution") and not nbgrader(c).get("grade"))
    nb["cells"][index]["source"] = source
    return nb


# ---- the attacks ----------------------------------------------------------------------------------------
def _integrity_attacks(lab: Lab, base: dict, only: Optional[set] = None) -> List[Tuple[str, dict]]:
    """``(label, notebook)`` for every integrity attack on ``base`` (a notebook of the lab), or those in ``only``."""
    t = _target(lab)
    setup = _setup_index(lab) + 1
    after_answer = _answer_indices(lab)[0] + 1
    grader = next((lab.hidden_check(g) for g in lab.grade_cells if lab.hidden_check(g)), "check_")
    out: List[Tuple[str, dict]] = []

    def add(label, nb_or_builder):
        if only is None or label in only:
            out.append((label, nb_or_builder() if callable(nb_or_builder) else nb_or_builder))

    add(
        "replaces the graders' checks and the visible helpers",
        _with_cells(
            base,
            setup,
            [
                "import importlib, pkgutil\nimport autograder.labs as _labs\n"
                "for _info in pkgutil.iter_modules(_labs.__path__):\n"
                "    try:\n        _module = importlib.import_module('autograder.labs.' + _info.name + '.checks')\n"
                "    except ImportError:\n        continue\n"
                "    for _name in dir(_module):\n"
                "        if _name.startswith('check_'):\n"
                "            setattr(_module, _name, lambda *a, **k: None)",
                "expect_equal = expect = attempt = expect_raises = lambda *a, **k: None\n"
                f"{grader} = lambda *a, **k: None",
            ],
            "checks",
        ),
    )
    add(
        "an IPython AST transformer swallows every error",
        _with_cells(
            base,
            setup,
            [
                "import ast\n\n\nclass _Swallow(ast.NodeTransformer):\n"
                "    def visit_Module(self, node):\n"
                "        handler = ast.ExceptHandler(type=ast.Name('BaseException', ast.Load()), name=None, body=[ast.Pass()])\n"
                "        node.body = [ast.Try(body=node.body or [ast.Pass()], handlers=[handler], orelse=[], finalbody=[])]\n"
                "        return ast.fix_missing_locations(node)\n\n\n"
                "get_ipython().ast_transformers.append(_Swallow())"
            ],
            "ast",
        ),
    )
    add(
        "the kernel always replies ok and shows no traceback",
        _with_cells(
            base,
            setup,
            [
                "_shell = get_ipython()\n_shell.showtraceback = lambda *a, **k: None\n_shell._showtraceback = lambda *a, **k: None\n"
                "_kernel = _shell.kernel\n_original = _kernel.do_execute\n\n\n"
                "async def _always_ok(*args, **kwargs):\n    reply = _original(*args, **kwargs)\n"
                "    if hasattr(reply, '__await__'):\n        reply = await reply\n    reply['status'] = 'ok'\n"
                "    return reply\n\n\n_kernel.do_execute = _always_ok"
            ],
            "ok",
        ),
    )
    if t["class"] and t["methods"]:
        method = t["function"]
        module, owner = t["methods"][method]
        names = list(t["methods"])
        add(
            "points the reference at its own code",
            _with_cells(
                base,
                after_answer,
                [
                    f"import {module} as _reference\n"
                    f"for _name in {names!r}:\n"
                    f"    setattr(_reference.{owner}, _name, getattr({t['class']}, _name))"
                ],
                "agree",
            ),
        )
        add(
            "exec of the reference's source under the TODO's name",
            _with_cells(
                base,
                after_answer,
                [
                    "import inspect, sys, textwrap\n"
                    f"for _name, _ref in ((n, getattr({t['starter']}.__starter_of__, n)) for n in {t['starter']}.__todo__):\n"
                    "    _scope = {}\n"
                    "    exec(textwrap.dedent(inspect.getsource(_ref)), vars(sys.modules[_ref.__module__]), _scope)\n"
                    f"    setattr({t['class']}, _name, _scope[_ref.__name__])"
                ],
                "exec",
            ),
        )
        add(
            "the reference's bytecode renamed and rewrapped",
            _with_cells(
                base,
                after_answer,
                [
                    "import types\n"
                    f"for _name, _ref in ((n, getattr({t['starter']}.__starter_of__, n)) for n in {t['starter']}.__todo__):\n"
                    "    _ref = getattr(_ref, '__func__', _ref)\n"
                    "    _code = _ref.__code__.replace(co_filename='/tmp/ipykernel_1/123.py', co_name=_name)\n"
                    f"    setattr({t['class']}, _name, types.FunctionType(_code, _ref.__globals__, _name, _ref.__defaults__))"
                ],
                "bytecode",
            ),
        )
        add(
            "inherits the reference outright",
            lambda: _replace_todo(base, f"import {module}\n\n\nclass {t['class']}({module}.{owner}):\n    pass\n"),
        )
        head, tail = owner[: len(owner) // 2], owner[len(owner) // 2 :]
        call = f"({t['args']})" if t["classmethod"] else (f"(self, {t['args']})" if t["args"] else "(self)")
        add(
            "a computed name finds the reference",
            lambda: _inject_into_todo(
                base,
                lab,
                f"return getattr(getattr(__import__('{module}', fromlist=['x']), '{head}' + '{tail}'), "
                f"'{method}'){call}",
            ),
        )
        add(
            "gc finds the reference",
            lambda: _inject_into_todo(
                base,
                lab,
                "import gc\n_found = next(o for o in gc.get_objects() if type(o).__name__ == 'function' and "
                f"o.__qualname__ == '{owner}.{method}' and o.__module__ == '{module}')\nreturn _found{call}",
            ),
        )
        add(
            "sys.modules finds the reference",
            lambda: _inject_into_todo(base, lab, f"import sys\nreturn sys.modules['{module}'].{owner}.{method}{call}"),
        )
        add(
            "torch.sys.modules finds the reference",
            lambda: _inject_into_todo(
                base, lab, f"import torch\nreturn torch.sys.modules['{module}'].{owner}.{method}{call}"
            ),
        )
        add(
            "the starter's reference class holds the reference",
            lambda: _inject_into_todo(base, lab, f"return {t['starter']}.__starter_of__.{method}{call}"),
        )
        add(
            "ctypes turns an address into the reference",
            lambda: _inject_into_todo(
                base,
                lab,
                f"import ctypes\n_module = ctypes.cast(id(__import__('{module}', fromlist=['x'])), "
                f"ctypes.py_object).value\nreturn getattr(_module, '{owner}').{method}{call}",
            ),
        )
        pickle = f"c{module}\\n{owner}\\n.".encode().decode()
        add(
            "a pickle loaded by numpy brings the reference",
            lambda: _inject_into_todo(
                base,
                lab,
                f"import numpy as np\nwith open('/tmp/ref.npy', 'wb') as _f:\n    _f.write(b'{pickle}')\n"
                f"return np.load('/tmp/ref.npy', allow_pickle=True).{method}{call}",
            ),
        )
    elif t["methods"]:  # a function TODO
        module = next(iter(t["methods"].values()))[0]
        name = t["function"]
        call = f"({t['args']})"
        add(
            "exec of the reference's source under the TODO's name",
            _with_cells(
                base,
                after_answer,
                [
                    f"import inspect, sys\nimport {module} as _reference\n_scope = {{}}\n"
                    f"exec(inspect.getsource(_reference.{name}), vars(sys.modules['{module}']), _scope)\n"
                    f"{name} = _scope['{name}']"
                ],
                "exec",
            ),
        )
        add(
            "the reference's bytecode renamed and rewrapped",
            _with_cells(
                base,
                after_answer,
                [
                    f"import types\nimport {module} as _reference\n_ref = _reference.{name}\n"
                    f"{name} = types.FunctionType(_ref.__code__.replace(co_filename='/tmp/ipykernel_1/9.py'), "
                    "_ref.__globals__, _ref.__name__, _ref.__defaults__)"
                ],
                "bytecode",
            ),
        )
        add(
            "a computed name finds the reference",
            lambda: _inject_into_todo(
                base, lab, f"return getattr(__import__('paged_kv'), '{name[:5]}' + '{name[5:]}'){call}"
            ),
        )
        add(
            "sys.modules finds the reference",
            lambda: _inject_into_todo(base, lab, f"import sys\nreturn sys.modules['{module}'].{name}{call}"),
        )
        add(
            "gc finds the reference",
            lambda: _inject_into_todo(
                base,
                lab,
                f"import gc\nreturn next(o for o in gc.get_objects() if type(o).__name__ == 'function' and "
                f"o.__qualname__ == '{name}' and o.__module__ == '{module}'){call}",
            ),
        )
    for label, code in _syntax_families(t).items():
        add(label, lambda code=code: _inject_into_todo(base, lab, code))
    if t["kernel"]:
        add(INTERPRETER_ONLY, lambda: _interpreter_only(base, lab))
        add(CONSTEXPR_VARIES, lambda: _constexpr_varies(base))
        add(DOCSTRING_DEF, lambda: _docstring_def(base))
        add("a fake triton whose 'kernel' computes in torch", lambda: _fake_triton(base, lab))
        add(
            "the kernel hands its work to the package's kernel",
            lambda: _inject_into_todo(base, lab, "paged_kv.kernels.triton_kernels.paged_decode_kernel"),
        )
        add(LAUNCHERS_REPLACED, lambda: _launchers_replaced(base, lab))
    return out


# The syntax families that reach an object by means no rule about names can list (issue 25): a builtin used as
# a value, a function that takes attribute names as data, structural pattern matching (which reads attributes,
# dunders included, and dict keys without an attribute node) through a function's __globals__ to __import__.
# In the grading box they reach the edition's stub: nothing is there to delegate to.
SYNTAX_FAMILIES = (
    "builtins as values: functools.reduce(getattr, ...)",
    "attribute names as data: operator.attrgetter",
    "pattern matching through __globals__ to __import__",
)


INHERITS = "inherits the reference outright"
# The attacks that call the reference itself, by a route the text rules know (they also show as findings).
REFERENCE_ROUTES = (
    "exec of the reference's source under the TODO's name",
    "the reference's bytecode renamed and rewrapped",
    "inherits the reference outright",
    "a computed name finds the reference",
    "gc finds the reference",
    "sys.modules finds the reference",
    "torch.sys.modules finds the reference",
    "the starter's reference class holds the reference",
    "ctypes turns an address into the reference",
    "a pickle loaded by numpy brings the reference",
)


def _syntax_families(t: dict) -> Dict[str, str]:
    """``{label: code at the top of the TODO's body}``: the first TODO handed to its reference by each family."""
    if not t["methods"] or t["kernel"]:
        return {}
    method = t["function"]
    module, owner = t["methods"][method]
    dotted = ".".join(module.split(".")[1:] + ([owner] if owner else []) + [method])
    if owner:
        call = f"({t['args']})" if t["classmethod"] else (f"(self, {t['args']})" if t["args"] else "(self)")
        anchor = t["starter"]  # given in the notebook: its __init__ is a function of the package
        globals_of = "object(__init__=object(__globals__={'__builtins__': {'__import__': _imp}}))"
        reach = f"case object({owner}=object({method}=_ref)):\n            return _ref{call}"
    else:
        call = f"({t['args']})"
        anchor = "install_notebook_hooks"  # every lab's setup imports it from the package
        globals_of = "object(__globals__={'__builtins__': {'__import__': _imp}})"
        reach = f"case object({method}=_ref):\n            return _ref{call}"
    return {
        SYNTAX_FAMILIES[0]: f"import functools\nimport {module}\n"
        f"return functools.reduce(getattr, {dotted.split('.')!r}, paged_kv){call}",
        SYNTAX_FAMILIES[1]: f"from operator import attrgetter\nimport {module}\n"
        f"return attrgetter({dotted!r})(paged_kv){call}",
        SYNTAX_FAMILIES[2]: (
            f"match {anchor}:\n    case {globals_of}:\n"
            f"        _mod = _imp({module!r}, None, None, [{(owner or method)!r}])\n"
            f"match _mod:\n    {reach}"
        ),
    }


def _fake_triton(base: dict, lab: Lab) -> dict:
    """Step 1's kernel as a Python launcher that gathers the keys with torch, behind a fake ``triton.jit``;
    its ``def`` keeps a body that compiles (``pass``)."""
    fake = (
        "import torch\n\n\nclass InterpretedFunction:\n"
        "    def __init__(self, fn=None, **kwargs):\n        self.fn, self.kwargs = fn, kwargs\n\n"
        "    def __call__(self, fn):\n        return InterpretedFunction(fn)\n\n"
        "    def __getitem__(self, grid):\n"
        "        def launch(k_cache, table, out, seq_len, kv_head, sb, ss, sh, block_size, head_dim):\n"
        "            t = torch.arange(seq_len)\n"
        "            out.copy_(k_cache[table[t // block_size].long(), t % block_size, kv_head])\n"
        "        return launch\n\n\n"
        "class _FakeTriton:\n    jit = InterpretedFunction()\n\n\ntriton = _FakeTriton()"
    )
    nb = _with_cells(base, _setup_index(lab) + 1, [fake], "triton")
    index = next(i for i, c in enumerate(nb["cells"]) if nbgrader(c).get("solution") and not nbgrader(c).get("grade"))
    text = cell_text(nb["cells"][index]).replace("raise NotImplementedError()", "pass")
    nb["cells"][index]["source"] = text
    return nb


LAUNCHERS_REPLACED = "the lab's launchers replaced by torch answers"
# Every launcher of lab 06 answers with the case's own expected values (a PagedCase carries them), and every
# kernel body is ``pass``: it compiles for a GPU and is no stub, but computes nothing.
_FAKE_LAUNCHERS = (
    "import paged_kv.lab.kernel_lab as _kl\n"
    "_kl.check_kernel = lambda *a, **k: None\n"
    "_kl.run_gather = lambda kernel, grid_fn, case, seq=0, kv_head=0, name='': case.expected_keys(seq, kv_head)\n"
    "_kl.run_scores = lambda kernel, grid_fn, case, seq=0, q_head=0, name='': case.expected_scores(seq, q_head)\n"
    "_kl.run_attend = lambda kernel, case, seq=0, q_head=0, name='': case.expected_head(seq, q_head)\n"
    "_kl.run_decode = lambda kernel, grid_fn, case, name='': case.expected()\n"
    "_kl.run_fast_decode = lambda kernel, case, tile=64, name='': case.expected()\n"
    "run_gather, run_scores, run_attend = _kl.run_gather, _kl.run_scores, _kl.run_attend\n"
    "run_decode, run_fast_decode = _kl.run_decode, _kl.run_fast_decode"
)


def _launchers_replaced(base: dict, lab: Lab) -> dict:
    """Lab 06 with its launchers (in the grading kernel) answering in torch and kernels that do nothing."""
    nb = _with_cells(base, _setup_index(lab) + 1, [_FAKE_LAUNCHERS], "launchers")
    for cell in nb["cells"]:
        if nbgrader(cell).get("solution") and not nbgrader(cell).get("grade"):
            cell["source"] = cell_text(cell).replace("raise NotImplementedError()", "pass")
    return nb


# ---- lab 06: kernels the GPU compiler and Triton's interpreter read differently (issue 35) ----------------
# The grader builds each kernel for sm_90 from its text and runs the text in the interpreter. The compiler resolves
# an ``if`` whose condition is not a tensor when it builds and never visits the other branch; the interpreter runs
# the kernel as Python. Each attack must score 0 on every step it touches.
INTERPRETER_ONLY = "interpreter-only kernels: Python and torch behind an `if` the GPU compiler resolves away"
CONSTEXPR_VARIES = "a kernel whose constexpr the build fixes and a graded case varies"
DOCSTRING_DEF = "kernels whose docstring holds the def the interpreter runs (the compiler reads the first def line)"
# What the instructor's log shows for each (the kernel-text refusal; exec is also a provenance finding).
KERNEL_ATTACK_EVENTS = {
    INTERPRETER_ONLY: {"integrity", "not-triton"},
    CONSTEXPR_VARIES: {"launch-not-built"},
    DOCSTRING_DEF: {"not-triton"},
}

# Inside ``if hasattr(k_cache_ptr.handle, "data"):`` (true only in the interpreter, whose tensors hold numpy data;
# the compiler's hold IR values, so it builds the ``else`` branch): Python that reads and writes the tensors' memory
# through ctypes and computes every answer in torch. It is ``exec``-ed from a string the cell binds (the interpreter
# rewrites each assignment in a kernel's own body into a Triton tensor, and reads a kernel's source from its last
# line that starts with ``def``), with the kernel's arguments as its names.
_PY_HELPERS = """\
import ctypes
import torch

def py(x):  # the Python number inside an interpreter tensor
    return x.handle.data.item() if hasattr(x, "handle") else getattr(x, "value", x)

def memory(ptr, offset, count):  # `count` elements at ptr + offset, as a torch tensor over that memory
    dtype = {"fp16": torch.float16, "fp32": torch.float32, "int32": torch.int32,
             "int64": torch.int64}[str(ptr.dtype.element_ty)]
    size = torch.empty(0, dtype=dtype).element_size()
    start = int(ptr.handle.data.reshape(-1)[0]) + offset * size
    return torch.frombuffer((ctypes.c_byte * (count * size)).from_address(start), dtype=dtype)

def tokens(cache_ptr, table_ptr, table_at, n, head):  # [n, HEAD_DIM] of one KV head, through the block table
    bs, dim, sb, ss, sh = py(BLOCK_SIZE), py(HEAD_DIM), py(stride_kb), py(stride_ks), py(stride_kh)
    rows = []
    for b in range(-(-n // bs)):
        block = int(memory(table_ptr, table_at + b, 1)[0])
        slab = memory(cache_ptr, block * sb + head * sh, (bs - 1) * ss + dim)
        rows += [slab[s * ss:s * ss + dim] for s in range(min(bs, n - b * bs))]
    return torch.stack(rows).float()

"""
_DECODE_IN_TORCH = """\
seq, kv_head = py(tl.program_id(0)), py(tl.program_id(1))
n, dim, group = int(memory(seq_lens_ptr, seq, 1)[0]), py(HEAD_DIM), py(GROUP)
k = tokens(k_cache_ptr, block_tables_ptr, seq * py(stride_bt), n, kv_head)
v = tokens(v_cache_ptr, block_tables_ptr, seq * py(stride_bt), n, kv_head)
for h in range(kv_head * group, (kv_head + 1) * group):
    q = memory(q_ptr, seq * py(stride_qs) + h * py(stride_qh), dim).float()
    out = memory(out_ptr, seq * py(stride_os) + h * py(stride_oh), dim)
    out[:] = (torch.softmax(k @ q * py(scale), dim=0) @ v).to(out.dtype)
"""
INTERPRETER_ONLY_BODIES = {
    "gather_keys_kernel": """\
i = py(tl.program_id(0))
n, bs, dim = py(seq_len), py(BLOCK_SIZE), py(HEAD_DIM)
keys = tokens(k_cache_ptr, block_table_ptr, 0, n, py(kv_head))
out = memory(out_ptr, 0, n * dim).view(n, dim)
out[i * bs:(i + 1) * bs] = keys[i * bs:(i + 1) * bs].to(out.dtype)
""",
    "scores_kernel": """\
i = py(tl.program_id(0))
n, bs, dim = py(seq_len), py(BLOCK_SIZE), py(HEAD_DIM)
q = memory(q_ptr, 0, dim).float()
live = tokens(k_cache_ptr, block_table_ptr, 0, n, py(kv_head))[i * bs:(i + 1) * bs]
scores = torch.full((bs,), float("-inf"))
scores[:len(live)] = live @ q * py(scale)
memory(scores_ptr, i * bs, bs)[:] = scores
""",
    "attend_kernel": """\
n, dim = py(seq_len), py(HEAD_DIM)
q = memory(q_ptr, 0, dim).float()
k = tokens(k_cache_ptr, block_table_ptr, 0, n, py(kv_head))
v = tokens(v_cache_ptr, block_table_ptr, 0, n, py(kv_head))
out = memory(out_ptr, 0, dim)
out[:] = (torch.softmax(k @ q * py(scale), dim=0) @ v).to(out.dtype)
""",
    "paged_decode_kernel": _DECODE_IN_TORCH,
    "fast_decode_kernel": _DECODE_IN_TORCH,
}


def interpreter_only_kernel(stub: str, name: str, built: str = "pass") -> str:
    """``stub`` (a kernel's source whose body is the stub's ``raise NotImplementedError()``) preceded by the string
    of Python it runs, ``TORCH_<NAME>``, and with the body ``if hasattr(k_cache_ptr.handle, "data"): exec(that
    string) else: <built>``."""
    code = f"TORCH_{name.upper()}"
    lines = stub.splitlines()
    at = next(i for i, line in enumerate(lines) if line.strip() == "raise NotImplementedError()")
    indent = lines[at][: len(lines[at]) - len(lines[at].lstrip())]
    body = [
        f'{indent}if hasattr(k_cache_ptr.handle, "data"):  # the interpreter only: the GPU build never sees this',
        f"{indent}    exec({code}, {{**globals(), **locals()}})",
        f"{indent}else:  # what the GPU compiler builds",
    ]
    body += [indent + "    " + line if line.strip() else "" for line in textwrap.dedent(built).splitlines()]
    return _torch_code(name) + "\n".join(lines[:at] + body + lines[at + 1 :])


def _torch_code(name: str) -> str:
    """``TORCH_<NAME> = \"\"\"<Python and torch computing kernel name's answer>\"\"\"`` and two blank lines."""
    text = _PY_HELPERS + INTERPRETER_ONLY_BODIES[name]
    return f'TORCH_{name.upper()} = """\\\n{text}"""\n\n\n'


def docstring_def_kernel(stub: str, name: str) -> str:
    """``stub`` whose body is a docstring holding ``def <name>(<its parameters>): exec(TORCH_<NAME>)``: Triton's
    compiler reads a kernel from its first ``def`` line (an empty kernel), the interpreter from its last (the one in
    the docstring, which ends on a comment that swallows the closing quotes)."""
    tree = ast.parse(textwrap.dedent(stub.replace("raise NotImplementedError()", "pass")))
    params = ", ".join(a.arg for a in tree.body[0].args.args)
    lines = stub.splitlines()
    at = next(i for i, line in enumerate(lines) if line.strip() == "raise NotImplementedError()")
    indent = lines[at][: len(lines[at]) - len(lines[at].lstrip())]
    body = [
        f'{indent}"""',
        f"def {name}({params}):",
        f"    exec(TORCH_{name.upper()}, {{**globals(), **locals()}})",
        '    done = True  #"""',
    ]
    return _torch_code(name) + "\n".join(lines[:at] + body + lines[at + 1 :])


def _solution_body(lab: Lab, name: str) -> str:
    """The solution's body of kernel ``name`` (between its solution markers), indented as in the kernel."""
    for cell in lab.source["cells"]:
        text = cell_text(cell)
        if f"def {name}(" in text and "### BEGIN SOLUTION" in text:
            tail = text.split(f"def {name}(", 1)[1]
            return tail.split("### BEGIN SOLUTION\n", 1)[1].split("### END SOLUTION", 1)[0].rstrip(" ")
    raise ValueError(f"{lab.name}: no solution of {name}")


def _each_kernel_todo(base: dict, rewrite) -> dict:
    """A copy of ``base`` whose kernel TODOs of lab 06 (``INTERPRETER_ONLY_BODIES``, still stubs) are each replaced by
    ``rewrite(name, stub)``, ``stub`` being the TODO's text from ``@triton.jit`` to its ``raise NotImplementedError()``."""
    nb = copy.deepcopy(base)
    for cell in nb["cells"]:
        if not (nbgrader(cell).get("solution") and not nbgrader(cell).get("grade")):
            continue
        text = cell_text(cell)
        for name in INTERPRETER_ONLY_BODIES:
            if f"@triton.jit\ndef {name}(" in text and "raise NotImplementedError()" in text:
                head, rest = text.split(f"@triton.jit\ndef {name}(", 1)
                stub, after = rest.split("raise NotImplementedError()", 1)
                text = head + rewrite(name, f"@triton.jit\ndef {name}({stub}raise NotImplementedError()") + after
        cell["source"] = text
    return nb


def _docstring_def(base: dict) -> dict:
    """Every kernel TODO of lab 06 as ``docstring_def_kernel``: the GPU build is an empty kernel, the interpreter runs
    the docstring's function, which computes the answer in torch."""
    return _each_kernel_todo(base, lambda name, stub: docstring_def_kernel(stub, name))


def _interpreter_only(base: dict, lab: Lab) -> dict:
    """Every kernel TODO of lab 06 computed in Python and torch behind ``if hasattr(k_cache_ptr.handle, "data")``:
    the GPU build is the ``else`` branch (empty, and step 5's honest tiles so that its build check has its tl.dot),
    the interpreter runs the torch code. Before issue 35 this scored 10/10 with no finding."""
    return _each_kernel_todo(
        base,
        lambda name, stub: interpreter_only_kernel(
            stub, name, _solution_body(lab, name) if name == "fast_decode_kernel" else "pass"
        ),
    )


# Step 1 built at the build's block size (the first case's, 4) in honest Triton; every other block size takes a
# branch the build never compiles: int() of a loaded tensor, which only the interpreter can run (Python ints, so
# no int32 overflow either). Before issue 35 the build used the first case's constexprs for every launch.
CONSTEXPR_KERNEL = """\
@triton.jit
def gather_keys_kernel(k_cache_ptr, block_table_ptr, out_ptr, seq_len, kv_head,
                       stride_kb, stride_ks, stride_kh,
                       BLOCK_SIZE: tl.constexpr, HEAD_DIM: tl.constexpr):
    i = tl.program_id(0)
    if BLOCK_SIZE == 4:  # the block size the step's build uses
        base = tl.load(block_table_ptr + i).to(tl.int64) * stride_kb
    else:  # never built: int() of a tensor is Python, which only the interpreter runs
        base = int(tl.load(block_table_ptr + i)) * int(stride_kb)
    slots = tl.arange(0, BLOCK_SIZE)
    dims = tl.arange(0, HEAD_DIM)
    tokens = i * BLOCK_SIZE + slots
    live = tokens < seq_len
    keys = tl.load(k_cache_ptr + base + slots[:, None] * stride_ks + kv_head * stride_kh + dims[None, :],
                   mask=live[:, None], other=0.0)
    tl.store(out_ptr + tokens[:, None] * HEAD_DIM + dims[None, :], keys, mask=live[:, None])
"""


def _constexpr_varies(base: dict) -> dict:
    """Step 1's kernel replaced by ``CONSTEXPR_KERNEL`` (its grid function kept)."""
    nb = copy.deepcopy(base)
    for cell in nb["cells"]:
        text = cell_text(cell)
        if nbgrader(cell).get("solution") and not nbgrader(cell).get("grade") and "def gather_keys_kernel(" in text:
            start = text.index("@triton.jit")
            end = text.index("def gather_keys_grid(")
            cell["source"] = text[:start] + CONSTEXPR_KERNEL + "\n\n" + text[end:]
    return nb


def _leak_attacks(lab: Lab) -> List[Tuple[str, dict]]:
    end = len(lab.source["cells"])
    return [
        (
            "looks for the graders' files and prints them",
            _with_cells(
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
            _with_cells(lab.source, end, ["print(In)\nprint(Out)\nprint(_ih)"], "history"),
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


def _key_attacks(lab: Lab) -> List[Tuple[str, dict]]:
    return [
        (
            "leaves a key in its uid's keyring for the next student and searches for one",
            _with_cells(lab.source, len(lab.source["cells"]), [KEY_STUDENT], "key"),
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


def _cross_part_attack(lab: Lab) -> List[Tuple[str, dict]]:
    if lab.name != CROSS_PART_LAB:
        return []
    nb = copy.deepcopy(lab.source)
    cells = nb["cells"]
    todo = next(c for c in cells if nbgrader(c).get("grade_id") == "lab05-todo-register")
    todo["source"] = CROSS_PART_REGISTER
    first = next(i for i, c in enumerate(cells) if nbgrader(c).get("solution") and not nbgrader(c).get("grade"))
    cells.insert(first, _code_cell(CROSS_PART_SERVE, "attack-cross-part"))
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


def _feedback_attacks(lab: Lab) -> List[Tuple[str, dict]]:
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
        _code_cell(XSS_OUTPUTS, "attack-xss-outputs"),
        _code_cell(XSS_QUOTED, "attack-xss-quoted"),
    ]
    return [("puts live markup in its feedback (markdown, outputs, a quoted line)", nb)]


def _harm_attacks(lab: Lab) -> List[Tuple[str, dict, Expect]]:
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


# ---- the students ---------------------------------------------------------------------------------------
def attack_students(lab: Lab, bug_notebook: Optional[dict]) -> List[Tuple[str, str, dict, Expect, bool]]:
    """``(kind, label, notebook, expectation, graded beside the hogs)`` for every attack on ``lab``; a link
    attack adds its target (``link_students``)."""
    cells = lab.grade_cells
    all_ids = set(cells)
    total = sum(cells.values())
    out = []
    for label, nb in _integrity_attacks(lab, lab.release):
        # Graded with findings costing nothing (classroom: findings_free): 0 by construction. A route to the
        # reference ends at the box edition's stub, which the log shows ("reached-stub"); the classic forms
        # are also read from the text (provenance), the syntax families need not be.
        events = set() if label in SYNTAX_FAMILIES else KERNEL_ATTACK_EVENTS.get(label, {"integrity"})
        if label in SYNTAX_FAMILIES or (label in REFERENCE_ROUTES and label != INHERITS):
            events.add("reached-stub")  # (a class that inherits the reference may be refused before any call)
        out.append(("attack", f"{label} (untouched code)", nb, Expect(total=0.0, zero=all_ids, events=events), False))
    if bug_notebook is not None:
        strongest = {
            "points the reference at its own code",
            "a fake triton whose 'kernel' computes in torch",
            "exec of the reference's source under the TODO's name",
        }
        for label, nb in _integrity_attacks(lab, bug_notebook, only=strongest):
            if label in strongest:
                out.append(
                    (
                        "attack",
                        f"{label} (a catalogued bug)",
                        nb,
                        Expect(total=0.0, zero=all_ids, events={"integrity"}),
                        False,
                    )
                )
    for label, nb in _leak_attacks(lab):
        out.append(
            (
                "leak",
                label,
                nb,
                Expect(total=total, full=all_ids, boxed_output=[] if "history" in label else ["grader files seen: 0"]),
                False,
            )
        )
    for label, nb in _key_attacks(lab):
        out.append(
            (
                "leak",
                label,
                nb,
                Expect(
                    total=total, full=all_ids, boxed_output=["key left: refused", "keys of earlier students seen: 0"]
                ),
                False,
            )
        )
    for label, nb in _cross_part_attack(lab):  # graded with findings costing nothing, like every delegation
        part = set(CROSS_PART_CELLS)
        out.append(
            (
                "delegation",
                label,
                nb,
                Expect(total=total - sum(cells[g] for g in part), zero=part, full=all_ids - part),
                False,
            )
        )
    for label, nb in _feedback_attacks(lab):
        out.append(("xss", label, nb, Expect(total=total, full=all_ids, events={"integrity"}), False))
    harms, end = _harm_attacks(lab)
    for number, (label, sources, expect) in enumerate(harms):
        expect = Expect(total=total, full=all_ids, events=expect.events, boxed_output=expect.boxed_output)
        out.append(("harm", label, _with_cells(lab.source, end, sources, "harm"), expect, True))
        if number in (0, 2):  # with one worker per core, each bystander is graded while the next hogs run
            out.append(
                (
                    "bystander",
                    f"honest, graded beside the harm attacks ({number // 2 + 1})",
                    lab.source,
                    Expect(total=total, full=all_ids),
                    True,
                )
            )
    return out + link_students(lab)
