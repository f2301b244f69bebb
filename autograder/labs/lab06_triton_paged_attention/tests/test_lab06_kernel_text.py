"""Issue 35: what the GPU compiler and Triton's interpreter read differently earns nothing.

The grader builds each submitted kernel for sm_90 and runs its text in the interpreter. The compiler resolves an
``if`` whose condition is not a tensor when it builds and never visits the other branch; the interpreter runs the
kernel as Python. So (1) a kernel's whole text, both branches of every ``if``, must be Triton
(``autograder.verdict.triton_text``), and (2) every graded launch's own specialisation is built for sm_90 before it
runs (``autograder.agent.compile_box``). These tests read text only, except those that start a compile box (a plain
child process: the pieces, not the sandbox), on the CPU.
"""

import ast
import inspect
import json
from pathlib import Path

import pytest

from paged_kv.kernels.triton_mode import triton_available

if not triton_available():
    pytest.skip("triton is not installed", allow_module_level=True)

import attacks  # noqa: E402
import kernel_attacks  # noqa: E402
from autograder.labs.lab06_triton_paged_attention.tests import bugs as catalogue  # noqa: E402
from autograder.proof import classroom  # noqa: E402
from autograder.course.layout import LABS, SOURCE_DIR  # noqa: E402
from autograder.course.notebook import cell_text, nbgrader  # noqa: E402
from autograder.verdict import kernels, triton_text  # noqa: E402
from autograder.verdict.notebook import Cell  # noqa: E402
from paged_kv.lab.feedback import CheckFailed  # noqa: E402

LAB = "06-triton-paged-attention"
STEP_KERNELS = ("gather_keys_kernel", "scores_kernel", "attend_kernel", "paged_decode_kernel", "fast_decode_kernel")


def cells_of(nb: dict):
    """The student's cells of a lab 06 notebook, as the grader reads them (answer cells)."""
    out = []
    for index, cell in enumerate(nb["cells"]):
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if cell["cell_type"] == "code" and meta.get("solution") and not meta.get("grade"):
            text = cell_text(cell)
            out.append(Cell(index, "answer", text, tree=ast.parse(text)))
    return out


def cells_of_text(text: str):
    return [Cell(0, "answer", text, tree=ast.parse(text))]


@pytest.fixture(scope="module")
def lab():
    return classroom.load_lab(LAB, SOURCE_DIR, SOURCE_DIR.parent / "course")


# ---- (1) the text --------------------------------------------------------------------------------------
def test_the_solutions_kernels_are_all_triton(lab):
    sources, refused = kernels.submitted_kernels(cells_of(lab.source))
    assert refused == {}
    assert {n for n in STEP_KERNELS} <= {ast.parse(s).body[0].name for s in sources}


def _catalogue_kernels():
    """Every @triton.jit function of the catalogue's steps, with its own source (the generated ones from linecache)."""
    found = {}
    for module in catalogue.STEP_MODULES.values():
        for value in vars(module).values():
            if type(value).__name__ in ("JITFunction", "InterpretedFunction"):
                node = ast.parse(inspect.getsource(value.fn)).body[0]
                found[node.name] = node
    return found


def test_every_catalogued_kernel_is_triton_but_the_one_that_borrows_the_package():
    """Correct variants and bugs alike are Triton (bugs must lose their points for their mistake, not here); the
    one that calls the package's kernel reaches a name no kernel may read."""
    found = _catalogue_kernels()
    refused = {name: triton_text.why_not_triton(node, set(found)) for name, node in found.items()}
    refused = {name: why for name, why in refused.items() if why}
    assert set(refused) == {"decode_calls_the_package_kernel"}, refused
    assert "`triton_kernels` is neither a parameter" in refused["decode_calls_the_package_kernel"]
    variants = {k.fn.__name__ for pairs in catalogue.STEP_VARIANTS.values() for k, _ in pairs}
    assert variants <= set(found)


ALLOWED = {
    "tl.cdiv and tl.maximum": "n = tl.cdiv(seq_len, B)\n    m = tl.maximum(n, 1)",
    "a tensor's .to and .dtype": "x = tl.load(p).to(tl.float32)\n    y = x.to(p.dtype.element_ty)",
    "tl.static_range and min/max": "for g in tl.static_range(B):\n        x = min(g, 2) + max(g, 1)",
    "a constexpr variable": "S: tl.constexpr = B * 2\n    x = tl.arange(0, S)",
    "triton.language and triton.cdiv": "x = triton.language.arange(0, B) + triton.cdiv(seq_len, B)",
    "tl.math": "x = tl.math.exp2(tl.load(p))",
    "a ternary on a constexpr": "x = tl.load(p) if B == 4 else tl.zeros([B], dtype=tl.float32)",
    "a static assert with an f-string": 'tl.static_assert(B >= 1, f"B is {B}")',
    "is None": "x = 1 if p is None else 2",
    "float('-inf') and shapes": 'x = tl.full([B], float("-inf"), dtype=tl.float32)\n    y = x.shape[0]\n    z = x.T',
    "a global made with tl.constexpr": "x = tl.arange(0, WIDTH) * SCALE",
    "another kernel of the cells": "helper(p, B)",
    "a variable named like a builtin": "id = tl.program_id(0)\n    max = id + 1",
    "the stub": "raise NotImplementedError()",
}
REFUSED = {
    "hasattr": ('if hasattr(p.handle, "data"):\n        pass', "`hasattr` is Python introspection"),
    "getattr": ('x = getattr(p, "dtype")', "`getattr` is Python introspection"),
    "isinstance": ("if isinstance(B, int):\n        pass", "`isinstance` is Python introspection"),
    "type": ("if type(p) == int:\n        pass", "`type` is Python introspection"),
    "import": ("import torch", "`import` is Python"),
    ".handle": ("x = p.handle", "`.handle` is not part"),
    ".data": ("x = tl.load(p).data", "`.data` is not part"),
    ".item": ("x = tl.load(p).item()", "`.item` is not part"),
    ".tolist": ("x = tl.load(p).tolist()", "`.tolist` is not part"),
    ".numpy": ("x = tl.load(p).numpy()", "`.numpy` is not part"),
    "a private attribute": ("x = p._flatten_ir", "`._flatten_ir` is not part"),
    "torch": ("x = torch.zeros(3)", "`torch` is neither"),
    "a global that is not constexpr": ("x = PLAIN + 1", "`PLAIN` is neither"),
    "a dunder name": ("x = __builtins__", "`__builtins__` is neither"),
    "tl.extra": ("x = tl.extra.cuda.num_threads()", "`tl.extra` is not part"),
    "tl.target_info": ("x = tl.target_info.is_cuda()", "`tl.target_info` is not part"),
    "triton.knobs": ("x = triton.knobs.runtime.interpret", "`triton.knobs.runtime.interpret` is not part"),
    "is on a specialised int": ("if seq_len is 1:\n        pass", "`is` compares with None only"),
    "an f-string as a value": ('if f"{seq_len}" == "1":\n        pass', "an f-string in a kernel is only a message"),
    "a nested def": ("def f():\n        pass", "a function or class defined inside a kernel"),
    "a lambda": ("f = lambda: 1", "`Lambda` is not an expression"),
    "try": ("try:\n        pass\n    except Exception:\n        pass", "`try` is not a statement"),
    "with": ("with open('x') as f:\n        pass", "`with` is not a statement"),
    "for ... else": ("for i in range(3):\n        pass\n    else:\n        pass", "a loop's `else:`"),
    "a loop over a list": ("for i in [1, 2]:\n        pass", "a kernel loops over range"),
    "a dict": ("x = {1: 2}", "`Dict` is not an expression"),
    "a walrus": ("if (x := 1):\n        pass", "`NamedExpr` is not an expression"),
    "a chained comparison": ("x = 0 < seq_len < 4", "one comparison at a time"),
    "a comprehension with if": ("x = [i for i in (1, 2) if i]", "a comprehension in a kernel"),
    "an attribute store": ("p.dtype = 1", "assigns to its own variables only"),
    "global": ("global WIDTH", "`global` is not a statement"),
    "another raise": ("raise ValueError('no')", "the only `raise` in a kernel"),
    "rebinding tl": ("tl = 1", "a kernel may not rebind `tl`"),
    "exec": ("exec('x = 1')", "`exec` is Python introspection"),
    "matmul": ("x = p @ p", "the operator MatMult is not Triton"),
    "a ternary whose dead side is Python": ("x = tl.load(p) if B == 4 else torch.ones(1)", "`torch` is neither"),
}
HEAD = (
    "WIDTH = tl.constexpr(16)\nSCALE = triton.language.constexpr(2.0)\nPLAIN = 16\n\n\n@triton.jit\ndef helper(p, B: tl.constexpr):\n    pass\n\n\n"
    "@triton.jit\ndef k(p, seq_len, B: tl.constexpr):\n    "
)


@pytest.mark.parametrize("body", ALLOWED.values(), ids=list(ALLOWED))
def test_triton_written_differently_is_allowed(body):
    sources, refused = kernels.submitted_kernels(cells_of_text(HEAD + body + "\n"))
    assert refused == {}


@pytest.mark.parametrize("body, rule", REFUSED.values(), ids=list(REFUSED))
def test_what_is_not_triton_is_refused_with_its_line_and_rule(body, rule):
    text = HEAD + body + "\n"
    sources, refused = kernels.submitted_kernels(cells_of_text(text))
    assert set(refused) == {"k"}, refused
    line = text.splitlines().index("    " + body.splitlines()[0]) + 1
    assert refused["k"].startswith(f"line {line} of its cell: `"), refused["k"]
    assert rule in refused["k"], refused["k"]
    assert not any("def k(" in s for s in sources), "a refused kernel reached the compile box"


def test_a_kernel_that_calls_a_refused_one_is_refused_with_it():
    text = (
        HEAD.replace(
            "def helper(p, B: tl.constexpr):\n    pass",
            "def helper(p, B: tl.constexpr):\n    if hasattr(p, 'handle'):\n        pass",
        )
        + "helper(p, B)\n"
    )
    sources, refused = kernels.submitted_kernels(cells_of_text(text))
    assert set(refused) == {"helper", "k"}
    assert refused["k"].startswith("it calls helper, which cannot be built: line 8 of its cell")
    assert not any("hasattr" in s for s in sources)


def test_a_parameter_annotated_with_a_string_is_refused():
    """The compiler reads ``"tl.constexpr"`` as a constexpr, the interpreter as a value: one more difference."""
    text = "@triton.jit\ndef k(p, B: 'tl.constexpr'):\n    pass\n"
    _, refused = kernels.submitted_kernels(cells_of_text(text))
    assert refused == {"k": "a kernel's parameters may only be annotated with tl.constexpr"}


def test_the_compile_box_keeps_its_own_names():
    """A literal the student binds to tl, triton or a dunder name is not sent to the box (it would replace the
    box's own); a plain literal is (a kernel may not read it, as the compiler would not)."""
    text = "tl = 1\n__builtins__ = {}\nPLAIN = 2\nWIDTH = tl.constexpr(3)\n"
    sources, _ = kernels.submitted_kernels(cells_of_text(text))
    assert sources == ["PLAIN = 2", "WIDTH = tl.constexpr(3)"]


def _attack(label: str, lab) -> dict:
    (found,) = [nb for name, nb in attacks._integrity_attacks(lab, lab.release, only={label})]
    return found


TEXT_ATTACKS = {
    kernel_attacks.INTERPRETER_ONLY: ("`if hasattr(k_cache_ptr.handle, \"data\"):", "is Python introspection"),
    kernel_attacks.DOCSTRING_DEF: ("`def ", "a line of a string in a kernel starts with `def`"),
}


@pytest.mark.parametrize("label", list(TEXT_ATTACKS))
def test_an_attack_on_the_kernel_text_is_refused_on_every_step_with_its_line(lab, label):
    """Each step's kernel computes in torch behind ``if hasattr(k_cache_ptr.handle, "data")``, or in a function its
    docstring holds: refused on that line, before anything is built or run; each step's checks fail with the line
    and the rule, and the instructor's log gets it."""
    code, rule = TEXT_ATTACKS[label]
    cells = cells_of(_attack(label, lab))
    builder = kernels.KernelBuilder(cells, start=lambda: pytest.fail("a compile box was started"))
    assert set(STEP_KERNELS) <= set(builder.refused)
    for name in STEP_KERNELS:
        reason = builder.refused[name]
        assert reason.startswith("line ") and code in reason and rule in reason, reason
        with pytest.raises(CheckFailed, match="cannot be built for a GPU: line [0-9]+ of its cell"):
            builder.build(name, [])
        with pytest.raises(CheckFailed, match=rule.replace("(", r"\(")):
            builder.launch(name, "run_attend", None)
    assert {kind for kind, _ in builder.events} == {"not-triton"}
    assert {name for _, name in builder.events} == set(STEP_KERNELS)


def test_an_unwritten_stub_is_still_reported_as_the_stub():
    from paged_kv.lab.feedback import TodoNotWritten

    text = "@triton.jit\ndef k(p):\n    raise NotImplementedError()\n    x = undefined_name\n"
    builder = kernels.KernelBuilder(cells_of_text(text), start=lambda: pytest.fail("a compile box was started"))
    assert "k" in builder.refused
    with pytest.raises(TodoNotWritten, match="still the stub"):
        builder.build("k", [])
    assert builder.events == {}


# ---- (2) a compile box: the attacks would earn points without the rules; each launch is built ------------------
def _compile_box_for(cells):
    from test_lab06_compile_box import compile_box_for_cells

    return compile_box_for_cells(cells)


def _first_cases():
    """One small case per step: (kernel, launcher, case maker kwargs, grid, params)."""
    from autograder.labs.lab06_triton_paged_attention import checks as grader

    decode = grader.paged_case([5, 9], block_size=4, num_q_heads=4, num_kv_heads=2, seed=3)
    fast = grader.paged_case([10, 5], block_size=4, num_q_heads=4, num_kv_heads=2, dtype=grader.torch.float16, seed=3)
    small = grader.paged_case([9, 3], block_size=4, num_q_heads=4, num_kv_heads=2, seed=3)
    return [
        ("gather_keys_kernel", "run_gather", small, (3,), {"seq": 0, "kv_head": 1}, small.expected_keys(0, 1)),
        ("scores_kernel", "run_scores", small, (3,), {"seq": 0, "q_head": 3}, small.expected_scores(0, 3)),
        ("attend_kernel", "run_attend", small, None, {"seq": 0, "q_head": 3}, small.expected_head(0, 3)),
        ("paged_decode_kernel", "run_decode", decode, (2, 2), {}, decode.expected()),
        ("fast_decode_kernel", "run_fast_decode", fast, None, {"tile": 16}, fast.expected()),
    ]


@pytest.mark.parametrize("label", list(TEXT_ATTACKS))
def test_without_the_text_rules_an_attack_on_the_kernel_text_would_pass_every_step(lab, monkeypatch, label):
    """What the rules stop is real: with them switched off, every step's kernel builds for sm_90 (the else branch
    or the first def: an empty kernel, or step 5's honest tiles) and, launched in the compile box, returns the right
    answer computed by torch (each launch's own build included: the compiler reads the same text at every key)."""
    from paged_kv.lab.kernel_lab import expect_close

    monkeypatch.setattr(triton_text, "why_not_triton", lambda *a, **k: "")
    monkeypatch.setattr(triton_text, "why_not_one_def", lambda *a, **k: "")
    monkeypatch.setattr(kernels, "_LAUNCH_BUILT", {})
    builder = _compile_box_for(cells_of(_attack(label, lab)))
    try:
        assert not set(STEP_KERNELS) & set(builder.refused)
        assert builder.build("gather_keys_kernel", _gather_build_args()).registers is not None
        for name, launcher, case, grid, params, expected in _first_cases():
            got = builder.launch(name, launcher, case, grid, **params)
            expect_close(name, got, expected, atol=2e-3, rtol=2e-3)
    finally:
        builder.close()


def _gather_build_args(block_size: int = 4):
    """Step 1's build arguments as check_step1_gather makes them (its first case)."""
    import torch

    from autograder.labs.lab06_triton_paged_attention import checks as grader

    case = grader.paged_case([9, 3], block_size=block_size, num_kv_heads=2)
    return grader.lab.gather_args(case, torch.empty(9, 16), 0, 1)


def test_a_constexpr_the_build_fixes_and_a_case_varies_is_built_for_each_launch(lab, monkeypatch):
    """Step 1 honest at the build's block size (4) and int() of a tensor at every other: the interpreter alone
    gets every case right; the build of the first case compiles; a launch at block size 4 runs; a launch at
    block size 8 is built first, does not compile, and fails with the constexprs it was built for (and the log
    says a launch of this kernel did not build while another did)."""
    from autograder.labs.lab06_triton_paged_attention import checks as grader
    from paged_kv.lab import kernel_lab
    from paged_kv.lab.kernel_lab import expect_close

    monkeypatch.setattr(kernels, "_LAUNCH_BUILT", {})
    nb = _attack(kernel_attacks.CONSTEXPR_VARIES, lab)
    four = grader.paged_case([9, 3], block_size=4, num_kv_heads=2, seed=3)
    eight = grader.paged_case([16, 5], block_size=8, num_kv_heads=2, seed=2)
    namespace = _interpreted(nb)  # the interpreter alone: right at block size 8 too
    expect_close(
        "interpreter",
        kernel_lab.run_gather(namespace["gather_keys_kernel"], namespace["gather_keys_grid"], eight, 1, 1),
        eight.expected_keys(1, 1),
        atol=0,
        rtol=0,
    )
    builder = _compile_box_for(cells_of(nb))
    try:
        assert builder.refused == {}
        builder.build("gather_keys_kernel", _gather_build_args())
        got = builder.launch("gather_keys_kernel", "run_gather", four, (3,), seq=0, kv_head=1)
        expect_close("block size 4", got, four.expected_keys(0, 1), atol=0, rtol=0)
        with pytest.raises(
            CheckFailed,
            match=r"does not compile for an NVIDIA GPU \(sm_90\) as this case launches it "
            r"\(.*BLOCK_SIZE=8, HEAD_DIM=16\)",
        ):
            builder.launch("gather_keys_kernel", "run_gather", eight, (1,), seq=1, kv_head=1)
        assert set(builder.events) == {("launch-not-built", "gather_keys_kernel")}
    finally:
        builder.close()


def _interpreted(nb: dict) -> dict:
    """The notebook's setup and answer cells run here, in the interpreter (the student's own kernel process)."""
    import tempfile

    from notebook_code import namespace_after_answer

    path = Path(tempfile.mkdtemp()) / LABS[LAB]
    nb = json.loads(json.dumps(nb))
    keep = [
        c
        for c in nb["cells"]
        if c["cell_type"] != "code"
        or nbgrader(c).get("solution")
        or nbgrader(c).get("grade")
        or "import triton" in cell_text(c)
    ]
    nb["cells"] = keep
    path.write_text(json.dumps(nb))
    return namespace_after_answer(path)


def test_each_specialisation_is_built_once_and_a_later_notebook_with_the_same_text_builds_none(monkeypatch):
    """The box builds a launch's key once; the grader keeps the keys that built per (text, kernel), and the next
    notebook's box with the same text is told them and builds nothing."""
    from autograder.labs.lab06_triton_paged_attention import checks as grader
    from test_lab06_compile_box import GATHER_TEXT

    monkeypatch.setattr(kernels, "_LAUNCH_BUILT", {})
    case = grader.paged_case([9, 3], block_size=4, num_kv_heads=2, seed=3)
    other = grader.paged_case([9, 3], block_size=8, num_kv_heads=2, seed=3)
    first = _compile_box_for(cells_of_text(GATHER_TEXT))
    try:
        first.launch("gather_keys_kernel", "run_gather", case, (3,), seq=0, kv_head=1)
        first.launch("gather_keys_kernel", "run_gather", case, (3,), seq=0, kv_head=1)
        first.launch("gather_keys_kernel", "run_gather", other, (2,), seq=0, kv_head=1)
    finally:
        first.close()
    (keys,) = kernels._LAUNCH_BUILT.values()
    assert (
        len(keys) == 2 and any("'BLOCK_SIZE', '4'" in k for k in keys) and any("'BLOCK_SIZE', '8'" in k for k in keys)
    )
    second = _compile_box_for(cells_of_text(GATHER_TEXT))
    seen = []
    monkeypatch.setattr(second, "_remember_builds", lambda name, built: seen.append(built))
    try:
        second.launch("gather_keys_kernel", "run_gather", other, (2,), seq=0, kv_head=1)
    finally:
        second.close()
    assert seen == [[]], "a second notebook with the same text built again"
