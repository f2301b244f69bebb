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

from typing import Dict, List, Optional, Tuple


from autograder.proof.classroom import Expect, Lab
from attack_notebooks import answer_indices, inject_into_todo, replace_todo, setup_index, target, with_cells
from box_attacks import (
    CROSS_PART_CELLS,
    cross_part_attack,
    feedback_attacks,
    harm_attacks,
    key_attacks,
    leak_attacks,
    link_students,
)
from kernel_attacks import (
    CONSTEXPR_VARIES,
    DOCSTRING_DEF,
    INTERPRETER_ONLY,
    KERNEL_ATTACK_EVENTS,
    LAUNCHERS_REPLACED,
    constexpr_varies,
    docstring_def,
    fake_triton,
    interpreter_only,
    launchers_replaced,
)


# ---- the attacks ----------------------------------------------------------------------------------------
def _integrity_attacks(lab: Lab, base: dict, only: Optional[set] = None) -> List[Tuple[str, dict]]:
    """``(label, notebook)`` for every integrity attack on ``base`` (a notebook of the lab), or those in ``only``."""
    t = target(lab)
    setup = setup_index(lab) + 1
    after_answer = answer_indices(lab)[0] + 1
    grader = next((lab.hidden_check(g) for g in lab.grade_cells if lab.hidden_check(g)), "check_")
    out: List[Tuple[str, dict]] = []

    def add(label, nb_or_builder):
        if only is None or label in only:
            out.append((label, nb_or_builder() if callable(nb_or_builder) else nb_or_builder))

    add(
        "replaces the graders' checks and the visible helpers",
        with_cells(
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
        with_cells(
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
        with_cells(
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
            with_cells(
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
            with_cells(
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
            with_cells(
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
            lambda: replace_todo(base, f"import {module}\n\n\nclass {t['class']}({module}.{owner}):\n    pass\n"),
        )
        head, tail = owner[: len(owner) // 2], owner[len(owner) // 2 :]
        call = f"({t['args']})" if t["classmethod"] else (f"(self, {t['args']})" if t["args"] else "(self)")
        add(
            "a computed name finds the reference",
            lambda: inject_into_todo(
                base,
                lab,
                f"return getattr(getattr(__import__('{module}', fromlist=['x']), '{head}' + '{tail}'), "
                f"'{method}'){call}",
            ),
        )
        add(
            "gc finds the reference",
            lambda: inject_into_todo(
                base,
                lab,
                "import gc\n_found = next(o for o in gc.get_objects() if type(o).__name__ == 'function' and "
                f"o.__qualname__ == '{owner}.{method}' and o.__module__ == '{module}')\nreturn _found{call}",
            ),
        )
        add(
            "sys.modules finds the reference",
            lambda: inject_into_todo(base, lab, f"import sys\nreturn sys.modules['{module}'].{owner}.{method}{call}"),
        )
        add(
            "torch.sys.modules finds the reference",
            lambda: inject_into_todo(
                base, lab, f"import torch\nreturn torch.sys.modules['{module}'].{owner}.{method}{call}"
            ),
        )
        add(
            "the starter's reference class holds the reference",
            lambda: inject_into_todo(base, lab, f"return {t['starter']}.__starter_of__.{method}{call}"),
        )
        add(
            "ctypes turns an address into the reference",
            lambda: inject_into_todo(
                base,
                lab,
                f"import ctypes\n_module = ctypes.cast(id(__import__('{module}', fromlist=['x'])), "
                f"ctypes.py_object).value\nreturn getattr(_module, '{owner}').{method}{call}",
            ),
        )
        pickle = f"c{module}\\n{owner}\\n.".encode().decode()
        add(
            "a pickle loaded by numpy brings the reference",
            lambda: inject_into_todo(
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
            with_cells(
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
            with_cells(
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
            lambda: inject_into_todo(
                base, lab, f"return getattr(__import__('paged_kv'), '{name[:5]}' + '{name[5:]}'){call}"
            ),
        )
        add(
            "sys.modules finds the reference",
            lambda: inject_into_todo(base, lab, f"import sys\nreturn sys.modules['{module}'].{name}{call}"),
        )
        add(
            "gc finds the reference",
            lambda: inject_into_todo(
                base,
                lab,
                f"import gc\nreturn next(o for o in gc.get_objects() if type(o).__name__ == 'function' and "
                f"o.__qualname__ == '{name}' and o.__module__ == '{module}'){call}",
            ),
        )
    for label, code in _syntax_families(t).items():
        add(label, lambda code=code: inject_into_todo(base, lab, code))
    if t["kernel"]:
        add(INTERPRETER_ONLY, lambda: interpreter_only(base, lab))
        add(CONSTEXPR_VARIES, lambda: constexpr_varies(base))
        add(DOCSTRING_DEF, lambda: docstring_def(base))
        add("a fake triton whose 'kernel' computes in torch", lambda: fake_triton(base, lab))
        add(
            "the kernel hands its work to the package's kernel",
            lambda: inject_into_todo(base, lab, "paged_kv.kernels.triton_kernels.paged_decode_kernel"),
        )
        add(LAUNCHERS_REPLACED, lambda: launchers_replaced(base, lab))
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
    for label, nb in leak_attacks(lab):
        out.append(
            (
                "leak",
                label,
                nb,
                Expect(total=total, full=all_ids, boxed_output=[] if "history" in label else ["grader files seen: 0"]),
                False,
            )
        )
    for label, nb in key_attacks(lab):
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
    for label, nb in cross_part_attack(lab):  # graded with findings costing nothing, like every delegation
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
    for label, nb in feedback_attacks(lab):
        out.append(("xss", label, nb, Expect(total=total, full=all_ids, events={"integrity"}), False))
    harms, end = harm_attacks(lab)
    for number, (label, sources, expect) in enumerate(harms):
        expect = Expect(total=total, full=all_ids, events=expect.events, boxed_output=expect.boxed_output)
        out.append(("harm", label, with_cells(lab.source, end, sources, "harm"), expect, True))
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
