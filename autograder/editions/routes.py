"""Find every function of a lab's edition that computes what the edition leaves out: a route to the lab's answer.

An edition of lab NN leaves out lab NN's TODOs and their declared ``equivalents`` (``autograder/labs/labNN_*/
__init__.py``). When code added later (a new lab's reference) computes the same thing, a student could delegate to
it and nothing else would say so: this search finds such code by what it does, not by how it is written.

``python -m autograder.editions.routes`` runs in a process whose ``paged_kv`` is the strictest edition (the first
graded lab's: every lab's TODOs are stubs). For each graded lab in course order it

1. puts the reference back into the lab's stubs (their code objects, compiled from the repository's source; every
   alias follows) and runs the lab's own checks (``checks.py``: every ``check_*`` marked ``@grades``) against an
   answer made of the references, recording the arguments of the calls of each left-out function (``PER_CHECK``
   from each check, ``MAX_CALLS`` in all: ``autograder.editions.calls``);
2. replays each recorded call on the reference, noting what it returned, how it left its arguments (its ``self``
   included) and, for a function of two or more parameters, the values its locals ended with, but not those it
   was handed (an argument, an attribute of one) or got from a given function it called; run again, it must do
   the same (every run starts the package's id counters alike), else a copy of it could not be told by what it
   does and the search says it is blind to it;
3. leaves the lab out again, as its grading box does (a part graded in a box of its own keeps the lab's other
   parts), and replays the same calls on every other function of the package that takes those arguments (with or
   without a method's ``self``; a method only on an object of a class related to its own): one that returns what
   the left-out function returned or leaves its arguments as it left them on ``SHARE`` of the calls, or returns
   what one of its locals held on every call (``_hits`` hands back the blocks ``allocate`` walked), is a finding;
4. keeps the lab's reference afterwards: the next lab's edition holds it.

A finding is a function to declare in the lab's ``equivalents``, or, if it is not a way to the answer, to list in
``REVIEWED`` (``autograder/editions/manifest.py``) with the reason. Lab 06's TODOs are Triton kernels graded from
their text, which cannot call the package: it is not searched (its kernels stay left out for the later labs).
What the search cannot see: code that computes an answer from other arguments than the TODO's (lab 03's
``may_append`` works on a ``Sequence``, the TODO on a ``Request``); such code is found by reading, as before.

Prints the findings (``--json``: as JSON, one a line) and exits 1 when there is one; ``--labs`` searches some labs only, ``--undeclare DOTTED`` treats a
declared equivalent as undeclared (to show the search finds it).
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import itertools
import json
import os
import pkgutil
import subprocess
import sys
import tempfile
import types
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

from autograder.course.model import Lab, Stub
from autograder.editions.calls import Call, given, no_figures, plain, quiet, recording, run

MAX_CALLS = 24  # calls recorded per left-out function
PER_CHECK = 8  # of them from one check (so that every check's cases are there); a check ends once it made them
SCREEN = 4  # a function that matches nothing on the first calls is not tried on the rest
SHARE = 0.8  # of the calls on which a function returns what the left-out one returned (or leaves what it left)
MIN_CALLS = 3
GRADED_FROM_TEXT = ("06-",)  # labs whose TODOs are Triton kernels, graded from their text


@dataclass(frozen=True)
class Finding:
    lab: str
    left_out: str  # module:qualname
    module: str  # inside paged_kv/, as a Stub names it
    qualname: str
    key: str
    matched: int
    of: int

    def __str__(self) -> str:
        left_out = self.left_out.split(":")[1]
        what = {"return": f"returns what {left_out} returns", "state": f"leaves its arguments as {left_out} does"}
        did = what.get(self.key, f"returns what {left_out}'s {self.key} ends with")
        return (
            f"the edition of lab {self.lab} keeps {self.module}:{self.qualname}, which {did} on {self.matched} of "
            f"{self.of} calls the lab's checks make: a student could delegate to it. Declare "
            f'Stub("{self.module}", "{self.qualname}") in the equivalents of that TODO\'s part '
            f"(autograder/labs/{_folder(self.lab)}/__init__.py), or, if it is no way to the answer, list "
            f'"{self.module}:{self.qualname}" in REVIEWED (autograder/editions/manifest.py) with the reason.'
        )


def _folder(lab: str) -> str:
    from autograder.labs import package_name

    return package_name(lab)


# ---- the package's stubs and their reference ------------------------------------------------------------------
def _raw(value: Any) -> Optional[types.FunctionType]:
    """The plain function behind a method, staticmethod, classmethod, property getter or decorator (else None)."""
    if isinstance(value, (classmethod, staticmethod)):
        value = value.__func__
    elif isinstance(value, property):
        value = value.fget
    while not isinstance(value, types.FunctionType) and hasattr(value, "__wrapped__"):
        value = value.__wrapped__
    return value if isinstance(value, types.FunctionType) else None


def stub_function(stub: Stub) -> types.FunctionType:
    """The function object of ``stub`` in the running package (every alias of it is this object)."""
    value: Any = importlib.import_module(stub.dotted[: -len(stub.qualname) - 1])
    for name in stub.qualname.split("."):
        value = inspect.getattr_static(value, name)
    found = _raw(value)
    if found is None:
        raise TypeError(f"{stub.dotted} is not a function here")
    return found


def _codes(code: types.CodeType) -> Iterator[types.CodeType]:
    yield code
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from _codes(const)


def reference_code(stub: Stub, package: Path) -> types.CodeType:
    """``stub``'s code object compiled from ``package``'s source (the repository's, every answer in it)."""
    path = package / stub.module
    found = [c for c in _codes(compile(path.read_text(), str(path), "exec")) if c.co_qualname == stub.qualname]
    if len(found) != 1 or found[0].co_freevars:
        raise ValueError(f"{stub.dotted}: expected one code object without free variables in {path}")
    return found[0]


class Swap:
    """Puts the reference into an edition's stubs and takes it out again, in place (so every alias follows)."""

    def __init__(self, stubs: Sequence[Stub], package: Path):
        from paged_kv.cache.todo import MARK

        self.mark = MARK
        self.functions = {s: stub_function(s) for s in stubs}
        self.stubbed = {s: f.__code__ for s, f in self.functions.items()}
        self.reference = {s: reference_code(s, package) for s in stubs}

    def answer(self, stubs: Sequence[Stub]) -> None:
        for s in stubs:
            self.functions[s].__code__ = self.reference[s]
            self.functions[s].__dict__.pop(self.mark, None)

    def leave_out(self, stubs: Sequence[Stub]) -> None:
        for s in stubs:
            self.functions[s].__code__ = self.stubbed[s]
            setattr(self.functions[s], self.mark, True)


# ---- 1 and 2: the calls the checks make, and what the reference does with them --------------------------------
def answer_for(lab: Lab, reference: Any) -> Any:
    """What a check of ``lab`` grades, as a student who wrote the reference would hand it: the reference function
    itself, or for a method the lab's starter class with the reference's TODOs (``with_reference_todos``)."""
    qualname = reference.__qualname__
    if "." not in qualname:
        return reference
    from paged_kv.lab import starters

    owner = getattr(importlib.import_module(reference.__module__), qualname.split(".")[0])
    todos = {t.qualname.split(".", 1)[1] for t in lab.stubs if t.qualname.startswith(owner.__name__ + ".")}
    for name in dir(starters):
        made = getattr(starters, name)
        if getattr(made, "__starter_of__", None) is owner and set(made.__todo__) == todos:
            return starters.with_reference_todos(made)
    raise LookupError(f"lab {lab.lab}: no starter of {owner.__name__} whose TODOs are {sorted(todos)}")


def record(lab: Lab, stubs: Sequence[Stub], swap: Swap) -> Dict[Stub, List[Call]]:
    """The calls of ``stubs`` (``lab``'s, answered) that its checks make against the reference."""
    from autograder.labs import checks_module

    module = importlib.import_module(checks_module(lab.lab))
    calls: Dict[Stub, List[Call]] = {s: [] for s in stubs}
    targets = {swap.reference[s]: s for s in stubs}
    for name, check in sorted(vars(module).items()):
        if not (name.startswith("check_") and getattr(check, "__grades__", None)):
            continue
        wanted = tuple(targets[r.__code__] for r in check.__grades__ if getattr(r, "__code__", None) in targets)
        with recording(targets, calls, wanted, PER_CHECK, MAX_CALLS), quiet():
            check(answer_for(lab, check.__grades__[0]))
    return calls


def reference_outcomes(function: types.FunctionType, calls: List[Call], fresh: Callable[[], None]) -> List[Call]:
    """The calls on which the reference returned, each with what it did (only what tells it from doing nothing:
    a value returned, its arguments changed, a local it was not handed), those that show most first."""
    code = function.__code__
    kept = []
    for call in calls:
        done = run(function, call, code, fresh=fresh)
        if done is None:
            continue
        call.helpers = done.pop("ran")
        args, kwargs = call.arguments
        returned, state, handed = done.pop("return"), done.pop("state"), given((*args, *kwargs.values()))
        call.outcomes = {"return": returned} if returned is not None else {}
        if state != plain((args, kwargs)):
            call.outcomes["state"] = state
        if code.co_argcount >= 2:
            call.outcomes.update((key, value) for key, value in done.items() if repr(value) not in handed)
        if call.outcomes:
            kept.append(call)
    return sorted(kept, key=lambda call: -len(call.outcomes))


def unrepeatable(function: types.FunctionType, calls: List[Call], fresh: Callable[[], None]) -> int:
    """How many of ``calls`` the reference, run again on the same arguments, answers otherwise: where it is not 0,
    a copy of it could not be told by what it does (the search is blind to it)."""
    differ = 0
    for call in calls:
        done = run(function, call, function.__code__, fresh=fresh)
        if done is None or any(done.get(key, done["return"]) != value for key, value in call.outcomes.items()):
            differ += 1
    return differ


# ---- 3: every other function of the package -------------------------------------------------------------------
@dataclass(frozen=True)
class Candidate:
    """A function of the package, and the class whose method it is (None for a function or staticmethod)."""

    function: types.FunctionType
    owner: Optional[type] = None

    def takes(self, args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> bool:
        """Whether it accepts these arguments, a method only with an object (or class) related to its own as its
        ``self`` (``ChunkedBlockManager``'s on a ``BlockManager``): what a student could hand it."""
        try:
            inspect.signature(self.function).bind(*args, **kwargs)
        except (TypeError, ValueError):
            return False
        if self.owner is None:
            return True
        mine = args[0] if isinstance(args[0], type) else type(args[0])
        return bool((set(mine.__mro__) & set(self.owner.__mro__)) - {object})

    @property
    def where(self) -> Tuple[str, str]:
        """``(module inside paged_kv/, qualname)``, as a ``Stub`` names it."""
        return self.function.__module__.split(".", 1)[1].replace(".", "/") + ".py", self.function.__qualname__


class Counters:
    """The package's id counters (``Sequence._ids``, an ``itertools.count``): every run starts them at the same
    value, so that what a call makes (a fork's new sequence) is named alike by the reference and a candidate."""

    START = 10**6  # above every id a recorded call holds

    def __init__(self):
        import paged_kv

        self.found: List[Tuple[Any, str]] = []
        for info in pkgutil.walk_packages(paged_kv.__path__, "paged_kv."):
            module = importlib.import_module(info.name)
            owners = [module] + [v for v in vars(module).values() if isinstance(v, type) and v.__module__ == info.name]
            for owner in owners:
                self.found += [(owner, n) for n, v in vars(owner).items() if isinstance(v, itertools.count)]

    def __call__(self) -> None:
        for owner, name in self.found:
            setattr(owner, name, itertools.count(self.START))


def package_functions() -> List[Candidate]:
    """Every function and method defined in ``paged_kv`` (dunders but ``__call__`` aside), from every module."""
    import paged_kv

    found: List[Candidate] = []
    for info in pkgutil.walk_packages(paged_kv.__path__, "paged_kv."):
        module = importlib.import_module(info.name)
        for value in vars(module).values():
            if isinstance(value, type) and value.__module__ == module.__name__:
                for attr, member in vars(value).items():
                    function = _raw(member)
                    if function is not None and (not attr.startswith("__") or attr == "__call__"):
                        found.append(Candidate(function, None if isinstance(member, staticmethod) else value))
            elif (function := _raw(value)) is not None and function.__module__ == module.__name__:
                found.append(Candidate(function))
    return found


def findings_for(
    lab: Lab, stub: Stub, calls: List[Call], candidates: List[Candidate], fresh: Callable[[], None]
) -> List[Finding]:
    """Every candidate that is not a stub and does what ``stub`` did on ``calls`` (step 3 of the module's doc)."""
    from paged_kv.cache.todo import is_stub

    found = []
    args, kwargs = calls[0].arguments
    for candidate in candidates:
        function = candidate.function
        if is_stub(function):
            continue
        if candidate.takes(args, kwargs):
            receiver = True
        elif "." in stub.qualname and len(args) > 1 and candidate.takes(args[1:], kwargs):
            receiver = False  # handed a method's arguments but its self
        else:
            continue
        matched: Dict[str, int] = {}
        for index, call in enumerate(calls):
            if index == SCREEN and not matched:
                break
            with no_figures():
                done = run(function, call, receiver=receiver, fresh=fresh)
            for key, expected in call.outcomes.items() if done else ():
                if done["state" if key == "state" else "return"] == expected:
                    matched[key] = matched.get(key, 0) + 1
        helper = any(function.__code__ in call.helpers for call in calls)
        for key, count in matched.items():
            shown = [repr(call.outcomes[key]) for call in calls if key in call.outcomes]
            local = key.startswith("local ")
            if local and helper:
                continue  # the reference asks this given function for that value: a step it is given too
            if count >= max(MIN_CALLS, (1.0 if local else SHARE) * len(shown)) and len(set(shown)) >= 2:
                found.append(
                    Finding(lab.lab, f"{stub.module}:{stub.qualname}", *candidate.where, key, count, len(shown))
                )
    return found


def _reviewed(finding: Finding, reviewed: Sequence[str]) -> bool:
    return f"{finding.module}:{finding.qualname}" in reviewed or finding.module in reviewed


def routes(
    package: Path, labs: Optional[Sequence[str]] = None, undeclared: Sequence[str] = ()
) -> Tuple[List[Finding], List[str]]:
    """Steps 1 to 4 of the module's doc for every graded lab (or ``labs``), in course order; ``undeclared``: dotted
    names of declared equivalents to search as if they were not declared. Returns the findings, and the left-out
    functions the search is blind to (``unrepeatable``: their reference answers the same call otherwise)."""
    from autograder.editions.manifest import LABS, REVIEWED

    searched = [lab for lab in LABS if not lab.lab.startswith(GRADED_FROM_TEXT)]
    swap = Swap([s for lab in searched for s in lab.stubs], package)
    unknown = set(undeclared) - {s.dotted for lab in searched for s in lab.stubs}
    if unknown:
        raise ValueError(f"--undeclare {sorted(unknown)}: not a declared TODO or equivalent of a searched lab")
    swap.answer([s for s in swap.functions if s.dotted in undeclared])
    candidates, fresh = package_functions(), Counters()
    found: List[Finding] = []
    blind: List[str] = []
    for lab in searched:
        stubs = [s for s in lab.stubs if s.dotted not in undeclared]
        swap.answer(stubs)
        if labs is not None and lab.lab not in labs:
            continue
        calls = record(lab, stubs, swap)
        outcomes = {s: reference_outcomes(swap.functions[s], c, fresh) for s, c in calls.items()}
        for stub, kept in outcomes.items():
            differ = unrepeatable(swap.functions[stub], kept, fresh)
            if differ:
                blind.append(
                    f"{stub.module}:{stub.qualname} answers {differ} of {len(kept)} calls otherwise when run again"
                )
        for part in lab.parts:
            box = [s for s in (part.stubs if part.own_box else lab.stubs) if s.dotted not in undeclared]
            swap.leave_out(box)
            for stub in part.stubs:
                if outcomes.get(stub):
                    found += findings_for(lab, stub, outcomes[stub], candidates, fresh)
            swap.answer(box)
    return [f for f in found if not _reviewed(f, tuple(REVIEWED))], blind


def _in_strictest_edition() -> bool:
    from autograder.editions.manifest import LABS
    from paged_kv.cache import edition

    return edition.LAB == LABS[0].lab and edition.PART is None


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Print the findings (``--json``: one JSON object a line); 1 when there are any. Run from the repository,
    it runs itself again in a process whose package is the strictest edition."""
    from autograder.editions.build import PACKAGE, REPO, build_edition
    from autograder.editions.manifest import LABS

    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--labs", nargs="*", help="search these labs only (ids, e.g. 05-prefix-cache)")
    parser.add_argument("--undeclare", nargs="*", default=[], help="dotted names of declared equivalents")
    parser.add_argument("--json", action="store_true", help="one JSON object a finding")
    options = parser.parse_args(argv)
    if not _in_strictest_edition():
        folder = build_edition(LABS[0].lab)
        path = os.pathsep.join([str(folder), str(REPO)])
        env = dict(os.environ, PYTHONPATH=path, MPLBACKEND="Agg", TRITON_INTERPRET="1")
        with tempfile.TemporaryDirectory() as scratch:  # whatever a function called writes, it writes there
            return subprocess.run([sys.executable, "-m", __spec__.name, *argv], cwd=scratch, env=env).returncode
    found, blind = routes(PACKAGE, options.labs, options.undeclare)
    for finding in found:
        print(json.dumps({"finding": asdict(finding)}) if options.json else f"{finding}\n")
    for line in blind:
        print(json.dumps({"blind": line}) if options.json else f"the search cannot compare: {line}\n")
    if not options.json:
        print(f"{len(found)} function(s) of an edition compute what it leaves out", file=sys.stderr)
    return 1 if found or blind else 0


if __name__ == "__main__":
    sys.exit(main())
