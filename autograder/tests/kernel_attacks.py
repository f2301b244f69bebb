"""The red team's attacks on lab 06's kernels (``attacks``): a fake Triton, the launchers replaced by torch answers,
and kernels that the GPU compiler and Triton's interpreter read differently (issue 35)."""

from __future__ import annotations

import ast
import copy
import textwrap


from autograder.course.notebook import cell_text, nbgrader
from autograder.proof.classroom import Lab
from attack_notebooks import setup_index, with_cells


def fake_triton(base: dict, lab: Lab) -> dict:
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
    nb = with_cells(base, setup_index(lab) + 1, [fake], "triton")
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


def launchers_replaced(base: dict, lab: Lab) -> dict:
    """Lab 06 with its launchers (in the grading kernel) answering in torch and kernels that do nothing."""
    nb = with_cells(base, setup_index(lab) + 1, [_FAKE_LAUNCHERS], "launchers")
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


def docstring_def(base: dict) -> dict:
    """Every kernel TODO of lab 06 as ``docstring_def_kernel``: the GPU build is an empty kernel, the interpreter runs
    the docstring's function, which computes the answer in torch."""
    return _each_kernel_todo(base, lambda name, stub: docstring_def_kernel(stub, name))


def interpreter_only(base: dict, lab: Lab) -> dict:
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


def constexpr_varies(base: dict) -> dict:
    """Step 1's kernel replaced by ``CONSTEXPR_KERNEL`` (its grid function kept)."""
    nb = copy.deepcopy(base)
    for cell in nb["cells"]:
        text = cell_text(cell)
        if nbgrader(cell).get("solution") and not nbgrader(cell).get("grade") and "def gather_keys_kernel(" in text:
            start = text.index("@triton.jit")
            end = text.index("def gather_keys_grid(")
            cell["source"] = text[:start] + CONSTEXPR_KERNEL + "\n\n" + text[end:]
    return nb
