"""The provenance checks read the submitted text: every attack is found, no honest code is.

Fast and static (no kernel runs): each lab's solution, correct variants and catalogued bugs must have no
finding; every integrity attack of the red team (``attacks.py``) and every delegation must have one,
on the line that does it. The class simulation then proves the same through nbgrader.
"""

from __future__ import annotations

import json
from pathlib import Path

import nbformat
import pytest

from autograder.proof import classroom, report
from autograder.tests import attacks, kernel_attacks
from autograder.course.notebook import nbgrader
from autograder.grade import submission
from autograder.verdict import given_names
from autograder.verdict import notebook as nbview
from autograder.verdict import provenance

REPO = Path(__file__).resolve().parents[2]
LABS = report.graded_labs(REPO / "solutions")


def _findings(lab: str, notebook: dict):
    source = REPO / "solutions" / lab / next(p.name for p in (REPO / "solutions" / lab).glob("*.ipynb"))
    nb = nbformat.reads(json.dumps(notebook), as_version=4)
    view = nbview.classify(nb, nbview.LabSource.read(source))
    graded = [c for c in view if c.kind == nbview.GRADED]
    refs = submission.references(graded, view)
    todo = set()
    for cell in view:
        if cell.kind == nbview.ANSWER and cell.tree is not None:
            todo |= {n.name for n in cell.tree.body if hasattr(n, "name") and hasattr(n, "body")}
    return provenance.check_submission(view, given_names.lab_names(view, refs, todo))


def _students(kinds):
    out = []
    for lab in LABS:
        info = classroom.load_lab(lab, REPO / "solutions", REPO / "course")
        for student in classroom.build_class(info, Path("/nonexistent")):
            if student.kind in kinds:
                out.append(pytest.param(lab, student, id=f"{lab}-{student.kind}-{student.label}"))
    return out


@pytest.mark.parametrize("lab, student", _students({"solution", "variant", "bug", "untouched", "bystander"}))
def test_honest_code_has_no_finding(lab, student):
    found = _findings(lab, json.loads(student.content))
    assert found == [], [f.describe() for f in found]


@pytest.mark.parametrize("lab, student", _students({"attack", "delegation"}))
def test_every_attack_is_found(lab, student):
    if student.label.startswith("super()"):
        pytest.skip("super() reaches the starter's stub: it needs no finding, it earns nothing by itself")
    if student.label.startswith(attacks.SYNTAX_FAMILIES):
        pytest.skip(
            "the syntax families need no finding (the text rules are a report): they reach the box "
            "edition's stub and earn nothing by construction (class_simulation, test_editions)"
        )
    if student.label.startswith(kernel_attacks.CONSTEXPR_VARIES):
        pytest.skip(
            "Triton code the compile box builds for each launch: refused by construction, logged as "
            "launch-not-built (test_lab06_kernel_text); the text rules have nothing to say"
        )
    if student.label.startswith(kernel_attacks.DOCSTRING_DEF):
        pytest.skip(
            "its Python is in strings (a docstring): the kernel-text rules refuse it, logged as not-triton "
            "(test_lab06_kernel_text); provenance reads code, not strings"
        )
    found = _findings(lab, json.loads(student.content))
    assert found, f"{student.label}: no finding"


def test_a_finding_names_the_cell_the_line_and_the_rule():
    info = classroom.load_lab("02-atomic-prefill", REPO / "solutions", REPO / "course")
    nb = classroom._with_answer(
        info,
        classroom.inject("import sys\nreturn sys.modules['paged_kv'].KVCacheManager.allocate_for_prefill(self, req)"),
    )
    found = _findings("02-atomic-prefill", nb)
    text = "\n".join(f.describe() for f in found)
    assert "answer cell `lab02-prefill`" in text and "import sys" in text and "sys.modules" in text


@pytest.mark.parametrize(
    "code, rule",
    [
        ("%timeit 1 + 1", None),
        ("%%time\nx = 1", None),
        ("!ls /", "shell"),
        ("%run other.py", "magics"),
        ("import os", "imports os"),
        ("x = eval('1')", "eval"),
        ("y = (lambda: 0).__code__", "introspection"),
        ("import torch\ntorch.zeros = None", "monkeypatching"),
        ("import numpy as torch", "rebinds"),
        ("g = getattr(object, 'x' + 'y')", "computed name"),
        ("import torch\nt = torch._C", "private"),
        ("import math\nprint(math.ceil(2.5))", None),
        ("from collections import deque\nq = deque()", None),
    ],
)
def test_rules_on_an_added_cell(code, rule):
    info = classroom.load_lab("02-atomic-prefill", REPO / "solutions", REPO / "course")
    cell = dict(nbformat.v4.new_code_cell(code))
    cell["id"] = "added-probe"
    found = _findings("02-atomic-prefill", classroom._insert(info.source, info.answer_index + 1, cell))
    rules = " ".join(f.rule for f in found)
    if rule is None:
        assert found == [], rules
    else:
        assert rule in rules, rules
        assert all(f.scope == provenance.BELOW for f in found)


def test_an_exploration_cell_may_read_the_visible_tests_objects():
    """Reading a test cell's variable at the top level (to look at it) is fine; storing it for a TODO is not."""
    info = classroom.load_lab("02-atomic-prefill", REPO / "solutions", REPO / "course")
    visible = next(i for i, c in enumerate(info.source["cells"]) if nbgrader(c).get("grade"))
    look = dict(nbformat.v4.new_code_cell("print(manager.free_blocks, len(req.block_table))"))
    look["id"] = "added-look"
    assert _findings("02-atomic-prefill", classroom._insert(info.source, visible + 1, look)) == []
    keep = dict(nbformat.v4.new_code_cell("helper = manager\n\n\ndef later():\n    return helper.free_blocks"))
    keep["id"] = "added-keep"
    found = _findings("02-atomic-prefill", classroom._insert(info.source, visible + 1, keep))
    assert any("helper" in f.rule for f in found), [f.describe() for f in found]


# ---- every way of handing a TODO to the reference, as a student would type it -------------------------------
def _class_forms(lab: str):
    """Answer cells (or TODO bodies) that delegate, for a lab whose TODO is a class."""
    import attack_notebooks

    info = classroom.load_lab(lab, REPO / "solutions", REPO / "course")
    t = attack_notebooks.target(info)
    if not t["class"]:
        return []
    cls, starter = t["class"], t["starter"]
    method = t["function"]
    module, owner = t["methods"][method]
    args = t["args"]
    call = f"(self, {args})" if args else "(self)"
    whole = {
        "inherits the reference class": f"import paged_kv\n\n\nclass {cls}(paged_kv.{owner}):\n    pass",
        "assigns the reference method": f"import paged_kv\n\n\nclass {cls}({starter}):\n"
        f"    {method} = paged_kv.{owner}.{method}",
        "copies the reference's code object": f"import types\nimport paged_kv\n\n\nclass {cls}({starter}):\n"
        f"    {method} = types.FunctionType(paged_kv.{owner}.{method}.__code__, "
        f"globals(), '{method}')",
        "partialmethod of the reference": f"import functools\nfrom {module} import {owner} as _R\n\n\n"
        f"class {cls}({starter}):\n    {method} = functools.partialmethod(_R.{method})",
        "a property returning a partial": f"import functools\nimport paged_kv\n\n\nclass {cls}({starter}):\n"
        f"    {method} = property(lambda self: functools.partial("
        f"paged_kv.{owner}.{method}, self))",
        "__getattribute__ hands out the reference": f"import functools\nimport paged_kv\n\n\nclass {cls}({starter}):\n"
        "    def __getattribute__(self, name):\n"
        f"        if name == '{method}':\n"
        f"            return functools.partial(paged_kv.{owner}.{method}, self)\n"
        "        return object.__getattribute__(self, name)",
        "code compiled under the package's file name": f"import paged_kv\n\n\nclass {cls}({starter}):\n"
        f"    exec(compile('def {method}(self, *a): return R.{method}"
        f"(self, *a)', paged_kv.__file__, 'exec'), "
        f"{{'R': paged_kv.{owner}}}, locals())",
        "the module-level setup of a given cell's variable": None,
    }
    body = {
        "calls the reference directly": f"return paged_kv.{owner}.{method}{call}",
        "imports it under another name": f"from {module} import {owner} as _Engine\nreturn _Engine.{method}{call}",
        "delegates to a reference object": f"ref = paged_kv.{owner}.__new__(paged_kv.{owner})\n"
        f"ref.__dict__ = self.__dict__\nreturn ref.{method}({args})",
    }
    out = []
    for label, source in whole.items():
        if source:
            out.append((lab, label, classroom._with_answer(info, lambda _s, text=source: text)))
    for label, code in body.items():
        out.append((lab, label, classroom._with_answer(info, classroom.inject(code))))
    if lab == "05-prefix-cache":
        out.append(
            (
                lab,
                "inherits with_reference_todos",
                classroom._with_answer(
                    info,
                    lambda _s: (
                        "class HashingManager(with_reference_todos(BlockManagerWithoutPrefixCache, 'can_allocate')):\n    pass"
                    ),
                ),
            )
        )
        out.append(
            (
                lab,
                "calls the private chain hash",
                classroom._with_answer(
                    info,
                    lambda _s: (
                        "from paged_kv.cache.prefix_cache import _chain_hash\n\n\nclass HashingManager(BlockManagerWithoutPrefixCache):\n"
                        "    @classmethod\n    def compute_hash(cls, token_ids, prefix=-1):\n"
                        "        return _chain_hash(list(token_ids), prefix)"
                    ),
                ),
            )
        )
    return out


def _function_forms():
    lab = "01-capacity-ledger"
    info = classroom.load_lab(lab, REPO / "solutions", REPO / "course")
    name = "estimate_kv_cache_bytes"
    return [
        (lab, label, classroom._with_answer(info, lambda _s, text=text: text))
        for label, text in [
            ("is the reference", f"from paged_kv import {name}"),
            (
                "a library decorator around the reference",
                f"import torch\nimport paged_kv\n{name} = torch.no_grad()(paged_kv.{name})",
            ),
            (
                "a partial of the reference",
                f"import functools\nimport paged_kv\n{name} = functools.partial(paged_kv.{name})",
            ),
            (
                "a callable object",
                f"import paged_kv\n\n\nclass _Call:\n    __call__ = staticmethod(paged_kv.{name})\n\n\n"
                f"{name} = _Call()",
            ),
            (
                "goes through a preset",
                f"import paged_kv.cache.ledger\n\n\ndef {name}(*args):\n"
                f"    return dict(paged_kv.cache.ledger.{name}(*args))",
            ),
            ("calls capacity_plan, which calls the reference", f"def {name}(*args):\n    return capacity_plan(*args)"),
        ]
    ]


def _kernel_forms():
    lab = "06-triton-paged-attention"
    info = classroom.load_lab(lab, REPO / "solutions", REPO / "course")
    return [
        (lab, label, classroom._with_answer(info, classroom.inject(code)))
        for label, code in [
            ("calls the package's kernel", "paged_kv.kernels.triton_kernels.paged_decode_kernel"),
            ("uses the torch reference", "paged_decode_attention_ref"),
        ]
    ] + [
        (
            lab,
            "is the package's kernel",
            classroom._with_answer(
                info, lambda _s: "from paged_kv.kernels.triton_kernels import paged_decode_kernel as gather_keys_kernel"
            ),
        )
    ]


def _forms():
    out = []
    for lab in LABS:
        out += _class_forms(lab)
    return out + _function_forms() + _kernel_forms()


@pytest.mark.parametrize("lab, label, notebook", [pytest.param(*f, id=f"{f[0]}-{f[1]}") for f in _forms()])
def test_delegation_in_any_form_is_found(lab, label, notebook):
    found = _findings(lab, notebook)
    assert found, f"{label}: no finding"
