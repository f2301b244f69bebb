"""The kernel's end of the grading channel: answer the trusted grader's questions about the student's objects.

The grader starts a session at each graded cell by running, silently in the grading kernel,
``serve(path, globals())``: the agent connects to the Unix socket at ``path`` (inside the kernel's
private folder) and answers requests until the grader sends ``end``. A request names an operation
and its arguments (``wire`` values); the reply is a result or an error:

- results that are ``None``, ``bool``, ``int``, ``float``, ``str`` or ``bytes`` come back as values;
  every other object stays here and comes back as a handle (an id, its type's name and id, and
  whether the attribute just read is a plain method of its class);
- ``value`` sends an object's plain data (builtins and tensors all the way down; anything else as a
  ``$np`` marker with its type and repr); course dataclasses (``paged_kv.*``) as their fields;
- errors come back as the exception's type, its class hierarchy, its message and, for the course's
  own failure messages (``CheckFailed``), their parts; the student's code may raise anything.

Handles live for one session. The student's code runs inside these calls, in this process: it can
change anything here, this module included, and so can make the answers say anything. The grader
therefore believes an answer only as "what the student's code did", decides everything itself, and
checks the submitted text for code that reaches the reference (``autograder.verdict.provenance``).
"""

from __future__ import annotations

import dataclasses
import importlib
import operator
import reprlib
import socket
import sys
import traceback
from typing import Any, Dict, List

from autograder.agent import wire

MAX_TEXT = 4000  # characters of a message, repr or str sent back
MAX_ITER = 1_000_000  # items one ``iter`` may return
COURSE_PREFIX = "paged_kv."

_BINARY = {name: getattr(operator, name) for name in wire.ARITHMETIC_OPERATORS + wire.COMPARISON_OPERATORS}
_UNARY = {
    "neg": operator.neg,
    "pos": operator.pos,
    "abs": abs,
    "invert": operator.invert,
    "int": int,
    "float": float,
    "index": operator.index,
    "bool": bool,
    "len": len,
    "hash": hash,
}
_short = reprlib.Repr()
_short.maxstring, _short.maxother, _short.maxlist, _short.maxdict, _short.maxlevel = 200, 200, 20, 12, 4


def _cap(text: str) -> str:
    return text if len(text) <= MAX_TEXT else text[:MAX_TEXT] + " ..."


def _text_of(function, value: Any) -> str:
    try:
        return _cap(str(function(value)))
    except BaseException:  # noqa: BLE001 - a student's __repr__/__str__ may fail in any way
        return f"<{type(value).__name__} object>"


def _importable(path: str):
    """The object at ``path`` (``package.module.Name.attr``): the longest importable module, then attributes."""
    parts = path.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attr in parts[cut:]:
            obj = getattr(obj, attr)
        return obj
    raise ImportError(f"nothing to import at {path!r}")


def _course_object(path: Any):
    if type(path) is not str or not (path + ".").startswith(COURSE_PREFIX):
        raise wire.WireError(f"only the course package's names can be rebuilt here, not {path!r}")
    return _importable(path)


class Session:
    """One graded cell's conversation: the handle table and the request loop."""

    def __init__(self, sock: socket.socket, namespace: Dict[str, Any]):
        self.sock = sock
        self.namespace = namespace
        self.objects: Dict[int, Any] = {}
        self.ids: Dict[int, int] = {}
        self._in: List[bytes] = []
        self._out: List[bytes] = []

    # ---- handles -----------------------------------------------------------------------------------
    def handle(self, obj: Any) -> int:
        key = id(obj)
        hid = self.ids.get(key)
        if hid is None or self.objects.get(hid) is not obj:
            hid = len(self.objects) + 1
            self.objects[hid] = obj  # kept alive for the session, so that ids are never reused
            self.ids[key] = hid
        return hid

    def obj(self, hid: Any) -> Any:
        if type(hid) is not int or hid not in self.objects:
            raise wire.WireError(f"unknown handle {hid!r}")
        return self.objects[hid]

    # ---- encoding ----------------------------------------------------------------------------------
    def result(self, value: Any, method: bool = False) -> Any:
        """Values for plain scalars and bytes, a handle for everything else."""
        kind = type(value)
        if kind in (type(None), bool, int, float, str):
            return value
        if kind is bytes:
            self._out.append(value)
            return {"$b": len(self._out) - 1}
        cls = type(value)
        return {"$h": [self.handle(value), self.handle(cls), _type_name(cls), 1 if method else 0]}

    def plain(self, value: Any) -> Any:
        """The value's plain data (see the module doc)."""
        return wire.encode(value, self._out, self._not_plain)

    def _not_plain(self, value: Any) -> Any:
        cls = type(value)
        module = getattr(cls, "__module__", "") or ""
        if dataclasses.is_dataclass(value) and not isinstance(value, type) and (module + ".").startswith(COURSE_PREFIX):
            fields = {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
            return {"$dc": [_type_name(cls), wire.encode(fields, self._out, self._not_plain)]}
        return {"$np": [_type_name(cls), _text_of(_short.repr, value)]}

    # ---- decoding ----------------------------------------------------------------------------------
    def arg(self, tree: Any) -> Any:
        return wire.decode(tree, self._in, self._on_tag)

    def _on_tag(self, tag: str, payload: Any) -> Any:
        if tag == "$h":
            return self.obj(payload)
        if tag == "$bm":
            if not (type(payload) is list and len(payload) == 2 and type(payload[1]) is str):
                raise wire.WireError("a malformed method reference")
            return getattr(self.obj(payload[0]), payload[1])
        if tag == "$r":
            if not (type(payload) is list and len(payload) == 3):
                raise wire.WireError("a malformed recipe")
            function = _course_object(payload[0])
            args, kwargs = self.arg(payload[1]), self.arg(payload[2])
            return function(*args, **kwargs)
        if tag == "$dc":
            if not (type(payload) is list and len(payload) == 2):
                raise wire.WireError("a malformed dataclass")
            return _course_object(payload[0])(**self.arg(payload[1]))
        raise wire.WireError(f"{tag} cannot be sent to the kernel")

    # ---- the loop ----------------------------------------------------------------------------------
    def run(self) -> None:
        while True:
            try:
                header, self._in = wire.recv_frame(self.sock)
            except wire.WireError:
                return
            if not isinstance(header, dict) or header.get("op") == "end":
                wire.send_frame(self.sock, {"ok": "end"})
                return
            self._out = []
            try:
                reply = {"ok": self.dispatch(header.get("op"), header.get("args", []))}
            except BaseException as error:  # noqa: BLE001 - everything the student's code raises is an answer
                reply, self._out = {"error": describe(error)}, []
            try:
                wire.send_frame(self.sock, reply, self._out)
            except (TypeError, ValueError) as error:  # a value JSON cannot carry (e.g. a huge int)
                wire.send_frame(self.sock, {"error": wire.error_info("WireError", str(error)[:MAX_TEXT])})
            except OSError:
                return

    def dispatch(self, op: Any, args: Any) -> Any:
        if type(args) is not list:
            raise wire.WireError("arguments must be a list")
        a = [self.arg(x) for x in args]
        if op == "name":
            if a[0] not in self.namespace:
                raise NameError(f"name '{a[0]}' is not defined")
            return self.result(self.namespace[a[0]])
        if op == "import":
            return self.result(_importable(a[0]))
        if op == "getattr":
            target, name = a
            value = getattr(target, name)
            method = callable(value) and _is_plain_method(target, name)
            return self.result(value, method=method)
        if op == "setattr":
            setattr(a[0], a[1], a[2])
            return None
        if op == "delattr":
            delattr(a[0], a[1])
            return None
        if op == "getitem":
            return self.result(a[0][a[1]])
        if op == "setitem":
            a[0][a[1]] = a[2]
            return None
        if op == "delitem":
            del a[0][a[1]]
            return None
        if op == "call":
            return self.result(a[0](*a[1], **a[2]))
        if op == "callmethod":
            return self.result(getattr(a[0], a[1])(*a[2], **a[3]))
        if op == "iter":
            out = []
            for item in a[0]:
                out.append(self.result(item))
                if len(out) > MAX_ITER:
                    raise wire.WireError(f"an iteration of more than {MAX_ITER} items")
            return {"$l": out}
        if op == "contains":
            return bool(a[1] in a[0])
        if op == "binop":
            function = _BINARY.get(a[0])
            if function is None:
                raise wire.WireError(f"unknown operator {a[0]!r}")
            return self.result(function(a[1], a[2]))
        if op == "unop":
            function = _UNARY.get(a[0])
            if function is None:
                raise wire.WireError(f"unknown operation {a[0]!r}")
            return self.result(function(a[1]))
        if op == "repr":
            return _text_of(repr, a[0])
        if op == "str":
            return _text_of(str, a[0])
        if op == "value":
            return self.plain(a[0])
        if op == "values":
            return {"$l": [self.plain(v) for v in a[0]]}
        if op == "type":
            cls = a[0] if isinstance(a[0], type) else type(a[0])
            return {"$l": [_type_name(k) for k in getattr(cls, "__mro__", (cls,))]}
        if op == "isinstance":
            return bool(isinstance(a[0], a[1]))
        raise wire.WireError(f"unknown operation {op!r}")


def _type_name(cls: Any) -> str:
    try:
        return f"{getattr(cls, '__module__', '?')}.{getattr(cls, '__qualname__', cls.__name__)}"
    except BaseException:  # noqa: BLE001 - a hostile metaclass
        return "?"


def _is_plain_method(target: Any, name: str) -> bool:
    """``target.name`` is a function defined on its class (not an instance attribute, property or class)."""
    if isinstance(target, type):
        return False
    try:
        instance = vars(target)
    except TypeError:
        instance = {}
    if name in instance:
        return False
    for klass in type(target).__mro__:
        found = klass.__dict__.get(name)
        if found is not None:
            return type(found).__name__ == "function"
    return False


def describe(error: BaseException) -> Dict[str, Any]:
    """What the grader needs to rebuild an exception: its type, hierarchy, message, the course's parts."""
    cls = type(error)
    info = wire.error_info(
        cls.__name__, _text_of(str, error), mro=[k.__name__ for k in cls.__mro__], module=getattr(cls, "__module__", "")
    )
    if all(hasattr(error, f) for f in ("case", "problem", "hint")) and hasattr(error, "_lines"):
        info["check"] = {
            "case": _text_of(str, error.case),
            "problem": _text_of(str, error.problem),
            "hint": _text_of(str, error.hint),
        }
        for name in ("expected", "got"):
            value = getattr(error, name, None)
            if value is not None and type(value).__name__ != "object":
                info["check"][name] = _text_of(_short.repr, value)
    info["where"] = _student_frame(error)
    return info


def _student_frame(error: BaseException) -> str:
    """The innermost frame of code that is not this agent's, the standard library's or a package's."""
    try:
        frames = traceback.extract_tb(error.__traceback__)
    except Exception:  # noqa: BLE001
        return ""
    for frame in reversed(frames):
        name = frame.filename or ""
        if (
            name.startswith("<")
            or "/site-packages/" not in name
            and "/lib/python" not in name
            and "/paged_kv/" not in name
            and "/autograder/" not in name
        ):
            code = (frame.line or "").strip()
            return f"{frame.name}, line {frame.lineno}" + (f": {code[:160]}" if code else "")
    return ""


def serve(path: str, namespace: Dict[str, Any]) -> None:
    """Connect to the grader's socket at ``path`` and answer until it ends the session."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(path)
        Session(sock, namespace).run()
    finally:
        sock.close()
        sys.stdout.flush()
