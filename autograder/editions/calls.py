"""Calls of a function, recorded and replayed: what ``autograder.editions.routes`` compares functions by.

``recording`` keeps a frozen copy of the arguments of each call of some code objects while a lab's checks run;
``run`` calls a function on a fresh copy of them and tells, as plain data (``plain``), what it returned, how it
left its arguments and, when asked, the values its locals ended with and the code it ran. Nothing here knows of
labs or editions.
"""

from __future__ import annotations

import contextlib
import faulthandler
import inspect
import io
import math
import pickle
import signal
import sys
import types
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

CALL_SECONDS = 1.0  # a call that runs longer is taken as not answering (a route answers as fast as the TODO)
HANG_SECONDS = 60  # a call stuck this long inside C (no alarm reaches it) ends the process with its traceback


@dataclass
class Call:
    """One recorded call: its arguments (``frozen``, thawed afresh for every run) and, once the reference ran on
    them, what it did (``outcomes``: ``"return"``, ``"state"``, ``"local <name>"``, as plain data) and the code it
    ran (``helpers``)."""

    frozen: bytes
    helpers: frozenset = frozenset()
    outcomes: Dict[str, Any] = field(default_factory=dict)

    @property
    def arguments(self) -> Tuple[Tuple[Any, ...], Dict[str, Any]]:
        return pickle.loads(self.frozen)


# ---- freezing arguments ----------------------------------------------------------------------------------------
_SHARED: Dict[int, Any] = {}  # what a copy shares rather than copies: classes, functions, modules (by id)


def _shared(key: int) -> Any:
    return _SHARED[key]


class _Freezer(pickle.Pickler):
    """Pickles for this process only: classes, functions and modules (a class made at run time included) are
    kept by identity, as ``copy.deepcopy`` keeps them, and the rest by value (several times faster to thaw)."""

    def reducer_override(self, obj):
        if obj is _shared:
            return NotImplemented  # pickled by name, as any module-level function
        if isinstance(obj, (type, types.FunctionType, types.BuiltinFunctionType, types.ModuleType, types.MethodType)):
            _SHARED[id(obj)] = obj
            return _shared, (id(obj),)
        return NotImplemented


def freeze(value: Any) -> bytes:
    out = io.BytesIO()
    _Freezer(out, protocol=pickle.HIGHEST_PROTOCOL).dump(value)
    return out.getvalue()


def arguments_of(frame: types.FrameType) -> Tuple[Tuple[Any, ...], Dict[str, Any]]:
    """The arguments a frame was called with (read at its first event): positional, then keyword-only."""
    code, local = frame.f_code, frame.f_locals
    args = tuple(local[n] for n in code.co_varnames[: code.co_argcount])
    at = code.co_argcount + code.co_kwonlyargcount
    kwargs = {n: local[n] for n in code.co_varnames[code.co_argcount : at]}
    if code.co_flags & inspect.CO_VARARGS:
        args += tuple(local[code.co_varnames[at]])
        at += 1
    if code.co_flags & inspect.CO_VARKEYWORDS:
        kwargs.update(local[code.co_varnames[at]])
    return args, kwargs


# ---- recording -------------------------------------------------------------------------------------------------
class Enough(BaseException):
    """Ends a check once it made the calls wanted of it (a check's own ``except Exception`` lets it through)."""


@contextlib.contextmanager
def recording(
    targets: Dict[types.CodeType, Any], calls: Dict[Any, List[Call]], wanted: Tuple[Any, ...], each: int, most: int
) -> Iterator[None]:
    """While inside, a call of a code object of ``targets`` (code: key) appends a frozen copy of its arguments to
    ``calls[key]``: ``each`` per key at most while inside, ``most`` in all. Once every key of ``wanted`` has its
    share, the code inside is ended (``Enough``, caught here)."""
    made = {key: 0 for key in calls}

    def full(key) -> bool:
        return made[key] >= each or len(calls[key]) >= most

    def tracer(frame, event, arg):
        key = targets.get(frame.f_code)
        if key is None or full(key):
            return None
        with contextlib.suppress(Exception):  # arguments that cannot be copied: that call is not kept
            calls[key].append(Call(freeze(arguments_of(frame))))
            made[key] += 1
        if wanted and all(full(k) for k in wanted):
            raise Enough()
        return None

    previous = sys.gettrace()
    sys.settrace(tracer)
    try:
        yield
    except Enough:
        pass
    finally:
        sys.settrace(previous)


# ---- what a call did, as plain data ----------------------------------------------------------------------------
def plain(value: Any, depth: int = 0, seen: Optional[frozenset] = None) -> Any:
    """``value`` as comparable plain data: containers by content, objects by their attributes (not their class),
    tensors and arrays by shape and rounded values, functions and classes by name."""
    seen = frozenset() if seen is None else seen
    if value is None or isinstance(value, (bool, int, str, bytes)):
        return value
    if isinstance(value, float):
        return round(value, 6) if math.isfinite(value) else repr(value)
    if depth > 8 or id(value) in seen:
        return "..."
    if isinstance(value, (types.FunctionType, types.BuiltinFunctionType, type, types.ModuleType)):
        return f"<{getattr(value, '__qualname__', getattr(value, '__name__', '?'))}>"
    if hasattr(value, "detach") and hasattr(value, "shape"):  # a torch tensor
        data = value.detach().cpu()
        data = data.double().round(decimals=5) if data.is_floating_point() else data
        return ("tensor", tuple(data.shape), data.flatten().tolist()[:4096])
    if type(value).__module__ == "numpy" and hasattr(value, "tolist"):
        return ("array", plain(value.tolist(), depth + 1, seen))
    seen = seen | {id(value)}
    inner = depth + 1
    if isinstance(value, dict):
        return ("dict", sorted((repr(plain(k, inner, seen)), plain(v, inner, seen)) for k, v in value.items()))
    if isinstance(value, (set, frozenset)):
        return ("set", sorted(repr(plain(v, inner, seen)) for v in value))
    if isinstance(value, (list, tuple)) or type(value).__name__ == "deque":
        return [plain(v, inner, seen) for v in value]
    attributes = dict(getattr(value, "__dict__", {}))
    for name in getattr(type(value), "__slots__", ()):
        if hasattr(value, name):
            attributes[name] = getattr(value, name)
    if not attributes:
        return f"<{type(value).__name__}>"
    return ("object", plain(attributes, inner, seen))


def given(values: Tuple[Any, ...]) -> set:
    """What a call is handed rather than computes: each argument, its attributes and its properties' values (as
    ``repr`` of plain data). A local equal to one of them (``cached = seq.num_cached_tokens``) is no step of an
    answer."""
    found = set()
    for value in values:
        found.add(repr(plain(value)))
        for attribute in getattr(value, "__dict__", {}).values():
            found.add(repr(plain(attribute)))
        for klass in type(value).__mro__:
            for member in vars(klass).values():
                if isinstance(member, property):
                    with contextlib.suppress(Exception):
                        found.add(repr(plain(member.fget(value))))
    return found


# ---- running a call --------------------------------------------------------------------------------------------
class _TimedOut(BaseException):
    pass


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        yield


@contextlib.contextmanager
def no_figures() -> Iterator[None]:
    """A function that draws a figure is a picture, not an answer: it stops at its first figure (drawing one costs
    more than every other call of a search)."""
    figure = sys.modules.get("matplotlib.figure")
    if figure is None:
        yield
        return

    def refuse(*args, **kwargs):
        raise RuntimeError("no figures here")

    made = figure.Figure.__init__
    figure.Figure.__init__ = refuse
    try:
        yield
    finally:
        figure.Figure.__init__ = made


def run(
    function: Callable,
    call: Call,
    code: Optional[types.CodeType] = None,
    receiver: bool = True,
    fresh: Optional[Callable[[], None]] = None,
) -> Optional[Dict[str, Any]]:
    """``function`` on a fresh copy of ``call``'s arguments (without the first, a method's ``self`` or ``cls``,
    unless ``receiver``): ``{"return", "state"}`` (all the arguments after the call) and, when ``code`` is given,
    the locals its frame ended with (``"local <name>"``) and the code objects it ran (``"ran"``); None when it
    raised or ran longer than ``CALL_SECONDS``. ``fresh`` runs just before the call (to reset what every run
    shares, as a counter of ids)."""
    args, kwargs = call.arguments
    if fresh is not None:
        fresh()
    ended: Dict[str, Any] = {}
    ran = set()

    def local(frame, event, arg):
        if event == "return":
            ended.clear()
            ended.update(frame.f_locals)
        return local

    def tracer(frame, event, arg):
        ran.add(frame.f_code)
        if frame.f_code is code:
            frame.f_trace_lines = False
            return local
        return None

    def alarm(signum, frame):
        raise _TimedOut()

    previous = signal.signal(signal.SIGALRM, alarm)
    signal.setitimer(signal.ITIMER_REAL, CALL_SECONDS)
    faulthandler.dump_traceback_later(HANG_SECONDS, exit=True, file=sys.__stderr__)
    traced = code is not None
    try:
        if traced:
            sys.settrace(tracer)
        with quiet():
            returned = function(*(args if receiver else args[1:]), **kwargs)
    except (Exception, _TimedOut):  # noqa: BLE001 - any failure is "does not compute it"
        return None
    finally:
        if traced:
            sys.settrace(None)
        faulthandler.cancel_dump_traceback_later()
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    out = {"return": plain(returned), "state": plain((args, kwargs))}
    if traced:
        out["ran"] = frozenset(ran)
        parameters = set(code.co_varnames[: code.co_argcount + code.co_kwonlyargcount])
        for name, value in ended.items():
            if name not in parameters and not (value is None or isinstance(value, bool) or callable(value)):
                out[f"local {name}"] = plain(value)
    return out
