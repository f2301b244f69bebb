"""The trusted end of the grading channel: handles to the student's objects, plain data back.

``Channel`` owns a Unix socket in the grading kernel's private folder. At each graded cell the grader
asks the kernel to run ``autograder.agent.serve.serve`` on it (see ``autograder.grade.graded_cells``), accepts
the connection and opens a ``Session``. Through the session the graded cell's text and the graders
see the student's objects as ``Remote`` proxies: attribute reads, calls, indexing, iteration,
arithmetic and comparisons are sent to the kernel and done there; what comes back is a plain value
(``None``, ``bool``, ``int``, ``float``, ``str``, ``bytes``) or another ``Remote``. ``value(x)`` fetches
plain data (builtins and tensors; ``NotPlain`` markers for anything else). A student exception comes
back as a local exception of the same builtin kind (a ``RuntimeError`` subclass named like theirs,
``NotImplementedError`` for an unwritten TODO), and the course's own failure messages as
``CheckFailed``: a failure the kernel reports can only cost the student points, never earn them.

Objects of the grader's own side go to the kernel only as plain data, tensors, recipes (a course
function and its arguments, for the lab's test inputs) or course dataclasses; anything else is
refused, so no trusted object is ever handed to student code.
"""

from __future__ import annotations

import builtins
import dataclasses
import os
import re
import socket
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

from autograder.agent import wire
from paged_kv.lab.feedback import CheckFailed, TodoNotWritten

COURSE_PREFIX = "paged_kv."
GRACE_S = 5.0  # after an interrupt, how long the kernel has to answer before it counts as stuck


class ChannelError(Exception):
    """The channel broke: a malformed answer, or an object that cannot be sent to the kernel."""


class TimeLimit(Exception):
    """The student's code did not answer before the graded cell's deadline."""


class KernelGone(Exception):
    """The kernel died (or stopped answering after an interrupt) during a graded cell."""


class StudentExit(Exception):
    """The student's code called ``sys.exit()`` (or ``exit()``/``quit()``) while being graded."""


# ---- what came back --------------------------------------------------------------------------------
class NotPlain:
    """A value from the kernel that is not plain data: its type's name and its repr, as text."""

    __slots__ = ("type_name", "text")

    def __init__(self, type_name: str, text: str):
        self.type_name, self.text = type_name, text

    def __repr__(self) -> str:
        return self.text

    def __eq__(self, other: Any) -> bool:
        return False

    __hash__ = object.__hash__


_not_plain_classes: Dict[str, type] = {}
_raised_classes: Dict[Tuple[str, type], type] = {}


def not_plain(type_name: str, text: str) -> NotPlain:
    """A ``NotPlain`` whose class is named after the remote type (so messages say "got an ndarray")."""
    short = _identifier(type_name.rsplit(".", 1)[-1]) or "object"
    cls = _not_plain_classes.get(short)
    if cls is None:
        cls = _not_plain_classes[short] = type(short, (NotPlain,), {"__slots__": ()})
    return cls(type_name, text)


def _identifier(text: str) -> str:
    return re.sub(r"\W", "_", str(text))[:60]


class RemoteRaised:
    """Mixed into the local exception that stands for one raised in the kernel."""

    remote: Dict[str, Any] = {}


def remote_exception(info: Any) -> BaseException:
    """The local exception for a kernel's ``error`` reply (see the module doc)."""
    if not isinstance(info, dict):
        return ChannelError("a malformed error reply")
    kind, message = str(info.get("type", "Exception")), str(info.get("message", ""))
    mro = [str(m) for m in info.get("mro", [])] if isinstance(info.get("mro"), list) else []
    check = info.get("check")
    if isinstance(check, dict) and "CheckFailed" in mro:
        shown = {k: _Shown(str(check[k])) for k in ("expected", "got") if k in check}
        error: BaseException = CheckFailed(
            str(check.get("case", "")), str(check.get("problem", "")), hint=str(check.get("hint", "")), **shown
        )
    elif "TodoNotWritten" in mro:
        error = TodoNotWritten(message)
    elif kind == "KeyboardInterrupt":
        error = TimeLimit(message)
    elif kind == "SystemExit" or "SystemExit" in mro:
        error = StudentExit(f"the code called sys.exit() ({message or 'no message'})")
    else:
        base = next(
            (
                getattr(builtins, m)
                for m in mro
                if isinstance(getattr(builtins, m, None), type) and issubclass(getattr(builtins, m), Exception)
            ),
            Exception,
        )
        if base in (BaseException,):
            base = Exception
        name = _identifier(kind) or "Exception"
        cls = _raised_classes.get((name, base))
        if cls is None:
            cls = _raised_classes[(name, base)] = type(name, (RemoteRaised, base), {})
        try:
            error = cls(message)
        except Exception:  # noqa: BLE001 - a builtin that wants other arguments (UnicodeError and the like)
            error = type(name, (RemoteRaised, Exception), {})(message)
    try:
        error.remote = dict(info)
    except AttributeError:
        pass
    return error


class _Shown(str):
    """Text shown as it is (no quotes) on a failure's expected/got lines."""

    def __repr__(self) -> str:
        return str(self)


# ---- the proxies -----------------------------------------------------------------------------------
class Remote:
    """An object that lives in the grading kernel. Every use is a request; see the module doc."""

    __slots__ = ("_pkv_session", "_pkv_id", "_pkv_type", "_pkv_tname", "__weakref__")

    def __init__(self, session: "Session", hid: int, tid: int, tname: str):
        object.__setattr__(self, "_pkv_session", session)
        object.__setattr__(self, "_pkv_id", hid)
        object.__setattr__(self, "_pkv_type", tid)
        object.__setattr__(self, "_pkv_tname", tname)

    # attributes
    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)  # protocol probes (copy, pickle, numpy) stay local
        return self._pkv_session.getattr(self, name)

    def __setattr__(self, name: str, value: Any) -> None:
        self._pkv_session.request("setattr", self, name, value)

    def __delattr__(self, name: str) -> None:
        self._pkv_session.request("delattr", self, name)

    # containers and calls
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._pkv_session.request("call", self, list(args), dict(kwargs))

    def __getitem__(self, key: Any) -> Any:
        return self._pkv_session.request("getitem", self, key)

    def __setitem__(self, key: Any, value: Any) -> None:
        self._pkv_session.request("setitem", self, key, value)

    def __delitem__(self, key: Any) -> None:
        self._pkv_session.request("delitem", self, key)

    def __iter__(self):
        return iter(self._pkv_session.request("iter", self))

    def __contains__(self, item: Any) -> bool:
        return _strict_bool(self._pkv_session.request("contains", self, item))

    def __len__(self) -> int:
        return _strict_int(self._pkv_session.request("unop", "len", self), "len()")

    def __bool__(self) -> bool:
        return _strict_bool(self._pkv_session.request("unop", "bool", self))

    def __index__(self) -> int:
        return _strict_int(self._pkv_session.request("unop", "index", self), "an index")

    def __int__(self) -> int:
        return _strict_int(self._pkv_session.request("unop", "int", self), "int()")

    def __float__(self) -> float:
        value = self._pkv_session.request("unop", "float", self)
        if type(value) is not float:
            raise ChannelError("float() of a kernel object did not give a float")
        return value

    def __repr__(self) -> str:
        try:
            return str(self._pkv_session.request("repr", self))
        except Exception:  # noqa: BLE001 - a message must not fail because the kernel did
            return f"<{self._pkv_tname} in the grading kernel>"

    def __str__(self) -> str:
        try:
            return str(self._pkv_session.request("str", self))
        except Exception:  # noqa: BLE001
            return f"<{self._pkv_tname} in the grading kernel>"

    def __format__(self, spec: str) -> str:
        return format(str(self), spec)

    def __hash__(self) -> int:
        return object.__hash__(self)

    def __reduce__(self):
        raise TypeError("an object of the grading kernel cannot be copied or pickled")

    def __pkv_value__(self) -> Any:
        return self._pkv_session.value(self)

    @classmethod
    def __pkv_values__(cls, items: List["Remote"]) -> List[Any]:
        sessions = {id(item._pkv_session): item._pkv_session for item in items}
        if len(sessions) != 1:
            return [item.__pkv_value__() for item in items]
        return next(iter(sessions.values())).values(items)


def _binary(name: str, swap: bool = False) -> Callable:
    def method(self, other):
        left, right = (other, self) if swap else (self, other)
        return self._pkv_session.request("binop", name, left, right)

    method.__name__ = f"__{'r' if swap else ''}{name.rstrip('_')}__"
    return method


for _name in wire.ARITHMETIC_OPERATORS:
    setattr(Remote, f"__{_name.rstrip('_')}__", _binary(_name))
    setattr(Remote, f"__r{_name.rstrip('_')}__", _binary(_name, swap=True))
for _name in wire.COMPARISON_OPERATORS:
    setattr(Remote, f"__{_name}__", _binary(_name))
for _name in ("neg", "pos", "abs", "invert"):
    setattr(Remote, f"__{_name}__", (lambda op: lambda self: self._pkv_session.request("unop", op, self))(_name))


class BoundRemote:
    """``remote.method`` for a plain method of the object's class: calling it is one request."""

    __slots__ = ("_pkv_target", "_pkv_name")

    def __init__(self, target: Remote, name: str):
        object.__setattr__(self, "_pkv_target", target)
        object.__setattr__(self, "_pkv_name", name)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        target = self._pkv_target
        return target._pkv_session.request("callmethod", target, self._pkv_name, list(args), dict(kwargs))

    def _pkv_resolve(self) -> Remote:
        target = self._pkv_target
        return target._pkv_session.request("getattr", target, self._pkv_name)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") and name.endswith("__") and name not in ("__name__", "__qualname__", "__doc__"):
            raise AttributeError(name)
        return getattr(self._pkv_resolve(), name)

    def __repr__(self) -> str:
        return f"<method {self._pkv_name} of {self._pkv_target._pkv_tname} in the grading kernel>"

    def __reduce__(self):
        raise TypeError("an object of the grading kernel cannot be copied or pickled")


def _strict_bool(value: Any) -> bool:
    if type(value) is not bool:
        raise ChannelError("the kernel answered a yes/no question with something else than a bool")
    return value


def _strict_int(value: Any, what: str) -> int:
    if type(value) is not int:
        raise ChannelError(f"{what} of a kernel object did not give an int")
    return value


def is_remote(value: Any) -> bool:
    return type(value) in (Remote, BoundRemote)


# ---- a session -------------------------------------------------------------------------------------
class Session:
    """One graded cell's conversation with the kernel's agent (see ``autograder.agent.serve``)."""

    def __init__(self, sock: socket.socket, deadline: float, on_timeout: Optional[Callable[[], None]] = None):
        self.sock = sock
        self.deadline = deadline
        self.on_timeout = on_timeout
        self.handles: Dict[int, Remote] = {}
        self.methods: set = set()
        self.imports: Dict[str, Any] = {}
        self.requests = 0
        self.closed = False
        self.broken: Optional[BaseException] = None
        self._out_buffers: List[bytes] = []
        self._in_buffers: List[bytes] = []
        self._last_method = False

    # -- requests
    def request(self, op: str, *args: Any) -> Any:
        if self.broken is not None:
            raise self.broken
        self._out_buffers: List[bytes] = []
        header = {"op": op, "args": [wire.encode(a, self._out_buffers, self._outgoing) for a in args]}
        try:
            wire.send_frame(self.sock, header, self._out_buffers)
            reply, self._in_buffers = self._receive()
        except (TimeLimit, KernelGone) as error:
            self.broken = error
            raise
        except wire.ChannelClosed:
            self.broken = KernelGone("the grading kernel stopped (it died or closed the channel)")
            raise self.broken from None
        except (wire.WireError, OSError) as error:
            self.broken = ChannelError(f"the grading channel failed: {error}")
            raise self.broken from None
        self.requests += 1
        if not isinstance(reply, dict):
            raise ChannelError("a malformed reply")
        if "error" in reply:
            error = remote_exception(reply["error"])
            if isinstance(error, TimeLimit):
                self.broken = error
            raise error
        if "ok" not in reply:
            raise ChannelError("a malformed reply")
        self._last_method = False
        try:
            return wire.decode(reply["ok"], self._in_buffers, self._incoming)
        except wire.WireError as error:
            raise ChannelError(f"a malformed reply: {error}") from None

    def _receive(self):
        try:
            return wire.recv_frame(self.sock, self.deadline)
        except wire.ChannelTimeout:
            pass
        if self.on_timeout is not None:  # interrupt the student's code, give it a moment to answer
            try:
                self.on_timeout()
            except Exception:  # noqa: BLE001
                pass
        try:
            wire.recv_frame(self.sock, time.monotonic() + GRACE_S)
        except wire.WireError:
            raise KernelGone("the student's code did not stop when interrupted") from None
        raise TimeLimit("the graded cell ran out of time")

    def end(self) -> None:
        """Close the session (the agent returns, so the kernel's silent execution finishes)."""
        if self.closed:
            return
        self.closed = True
        if self.broken is None:
            try:
                wire.send_frame(self.sock, {"op": "end"})
                wire.recv_frame(self.sock, time.monotonic() + GRACE_S)
            except (wire.WireError, OSError):
                pass
        try:
            self.sock.close()
        except OSError:
            pass

    # -- encoding what goes out
    def _outgoing(self, value: Any) -> Any:
        kind = type(value)
        if kind is Remote:
            if value._pkv_session is not self:
                raise ChannelError("an object of an earlier graded cell cannot be used in this one")
            return {"$h": value._pkv_id}
        if kind is BoundRemote:
            return {"$bm": [self._outgoing(value._pkv_target)["$h"], value._pkv_name]}
        recipe = getattr(value, "_pkv_recipe", None)
        if recipe:
            path, args, kwargs = recipe
            if not str(path).startswith(COURSE_PREFIX):
                raise ChannelError(f"a recipe must name a course function, not {path!r}")
            return {
                "$r": [
                    path,
                    wire.encode(tuple(args), self._out_buffers, self._outgoing),
                    wire.encode(dict(kwargs), self._out_buffers, self._outgoing),
                ]
            }
        module = getattr(kind, "__module__", "") or ""
        if dataclasses.is_dataclass(value) and not isinstance(value, type) and (module + ".").startswith(COURSE_PREFIX):
            fields = {f.name: getattr(value, f.name) for f in dataclasses.fields(value) if f.init}
            return {"$dc": [f"{module}.{kind.__qualname__}", wire.encode(fields, self._out_buffers, self._outgoing)]}
        raise ChannelError(f"a {kind.__name__} of the grader's side cannot be handed to the student's code")

    # -- decoding what comes back
    def _incoming(self, tag: str, payload: Any) -> Any:
        if tag == "$h":
            if not (
                isinstance(payload, list)
                and len(payload) == 4
                and type(payload[0]) is int
                and type(payload[1]) is int
                and type(payload[2]) is str
            ):
                raise ChannelError("a malformed handle")
            hid, tid, tname, method = payload
            remote = self.handles.get(hid)
            if remote is None:
                remote = self.handles[hid] = Remote(self, hid, tid, tname[:200])
            self._last_method = method == 1
            return remote
        if tag == "$np":
            if not (isinstance(payload, list) and len(payload) == 2):
                raise ChannelError("a malformed value")
            return not_plain(str(payload[0]), str(payload[1])[:4000])
        if tag == "$dc":
            return self._dataclass(payload)
        raise ChannelError(f"the kernel sent {tag}, which it may not")

    def _dataclass(self, payload: Any) -> Any:
        if not (isinstance(payload, list) and len(payload) == 2 and isinstance(payload[0], str)):
            raise ChannelError("a malformed dataclass")
        path = payload[0]
        fields = wire.decode(payload[1], self._in_buffers, self._incoming)
        cls = _course_dataclass(path)
        if cls is None or not isinstance(fields, dict):
            return not_plain(path, f"<{path}>")
        try:
            return cls(**fields)
        except Exception:  # noqa: BLE001 - fields the class refuses: not the course's value
            return not_plain(path, f"<{path} with fields {sorted(map(str, fields))}>")

    # -- the proxies' operations
    def getattr(self, target: Remote, name: str) -> Any:
        if (target._pkv_type, name) in self.methods:
            return BoundRemote(target, name)
        value = self.request("getattr", target, name)
        if self._last_method and type(value) is Remote:
            self.methods.add((target._pkv_type, name))
            return BoundRemote(target, name)
        return value

    def value(self, item: Any) -> Any:
        if type(item) is BoundRemote:
            item = item._pkv_resolve()
        return self.request("value", item)

    def values(self, items: List[Any]) -> List[Any]:
        items = [i._pkv_resolve() if type(i) is BoundRemote else i for i in items]
        got = self.request("values", items)
        if type(got) is not list or len(got) != len(items):
            raise ChannelError("a malformed reply to a batch of values")
        return got

    def import_(self, path: str) -> Any:
        """The kernel's object at ``path``, imported once per session (later changes to it are not seen)."""
        if path not in self.imports:
            self.imports[path] = self.request("import", path)
        return self.imports[path]

    def name(self, name: str) -> Any:
        return self.request("name", name)


def _course_dataclass(path: str) -> Optional[type]:
    """The course dataclass at ``path`` (only ``paged_kv.*`` dataclasses are rebuilt)."""
    if not (path + ".").startswith(COURSE_PREFIX):
        return None
    import importlib

    module_name, _, name = path.rpartition(".")
    try:
        cls = getattr(importlib.import_module(module_name), name)
    except (ImportError, AttributeError, ValueError):
        return None
    return cls if isinstance(cls, type) and dataclasses.is_dataclass(cls) else None


class Channel:
    """The trusted end for one grading kernel: a listening socket in its private folder."""

    def __init__(self, folder: str):
        self.path = os.path.join(folder, "verdict.sock")
        if os.path.exists(self.path):
            os.unlink(self.path)
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(self.path)
        os.chmod(self.path, 0o777)  # the kernel may run as another user
        self.listener.listen(1)

    def accept(self, deadline: float, on_timeout: Optional[Callable[[], None]] = None) -> Session:
        """The session the kernel's agent opens (``KernelGone`` if it does not connect in time)."""
        self.listener.settimeout(max(0.05, min(deadline, time.monotonic() + 30) - time.monotonic()))
        try:
            sock, _ = self.listener.accept()
        except (socket.timeout, OSError):
            raise KernelGone("the grading kernel did not open the grading channel") from None
        sock.setblocking(True)
        return Session(sock, deadline, on_timeout)

    def close(self) -> None:
        try:
            self.listener.close()
        finally:
            if os.path.exists(self.path):
                os.unlink(self.path)
