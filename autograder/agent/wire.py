"""The grading channel's wire format, shared by the kernel's agent and the trusted grader.

A message is one frame: ``u32 header length | header (UTF-8 JSON) | u32 buffer count | (u64 length |
bytes)*``. Values travel as JSON trees in which ``None``, ``bool``, ``int``, ``float`` and ``str`` stand
for themselves and everything else is a one-key dict tagged with what it is:

``$l`` list, ``$t`` tuple, ``$d`` dict (a list of key-value pairs), ``$s`` set, ``$f`` frozenset, ``$b`` bytes
(a buffer), ``$T`` tensor (dtype, shape, a buffer), ``$dt`` a torch dtype, ``$sl`` slice, ``$e`` Ellipsis, ``$h`` an object that
stays in the kernel (a handle), ``$bm`` a method of a handle, ``$r`` a recipe (a course function and
its arguments, rebuilt by the receiver), ``$dc`` a course dataclass (rebuilt from its fields), ``$np``
a value that is not plain data (its type and repr, as text).

Nothing is pickled. Decoding builds builtins and tensors only; tags that stand for objects are
handed to the caller (``on_tag``), which decides what, if anything, it builds for them. Limits on
depth, element count and bytes bound what one message can cost the receiver.
"""

from __future__ import annotations

import json
import socket
import struct
import sys
import time
import weakref
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

MAX_HEADER_BYTES = 64 * 1024 * 1024
MAX_BUFFER_BYTES = 1024 * 1024 * 1024
MAX_BUFFERS = 4096
MAX_DEPTH = 48
MAX_ITEMS = 2_000_000

TAGS = ("$l", "$t", "$d", "$s", "$f", "$b", "$T", "$dt", "$sl", "$e", "$h", "$bm", "$r", "$dc", "$np")

# The operators a ``binop`` request may name (``operator``'s function names): arithmetic and bitwise ones, which
# have reflected forms (``__radd__``), and comparisons, which do not.
ARITHMETIC_OPERATORS = (
    "add",
    "sub",
    "mul",
    "truediv",
    "floordiv",
    "mod",
    "pow",
    "matmul",
    "and_",
    "or_",
    "xor",
    "lshift",
    "rshift",
)
COMPARISON_OPERATORS = ("eq", "ne", "lt", "le", "gt", "ge")


class WireError(Exception):
    """A frame or a value that breaks the format or its limits (the other end misbehaved or died)."""


class ChannelClosed(WireError):
    """The other end closed the connection."""


class ChannelTimeout(WireError):
    """No complete frame arrived before the deadline."""


# ---- frames ----------------------------------------------------------------------------------------
def send_frame(sock: socket.socket, header: Any, buffers: Sequence[bytes] = ()) -> None:
    """Write one frame (``header`` must be JSON-serialisable)."""
    data = json.dumps(header, separators=(",", ":"), allow_nan=True).encode()
    parts = [struct.pack("<I", len(data)), data, struct.pack("<I", len(buffers))]
    for buffer in buffers:
        parts += [struct.pack("<Q", len(buffer)), buffer]
    if sum(map(len, parts)) < (1 << 20):
        sock.sendall(b"".join(parts))
        return
    for part in parts:  # a large frame: no big copy, piece by piece
        sock.sendall(part)


_PENDING: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()  # bytes read past a frame, per socket


def _read_exactly(sock, count: int, deadline: Optional[float]) -> bytes:
    """``count`` bytes, reading ahead in large pieces (one system call per frame, not one per field)."""
    pending = _PENDING.get(sock)
    if pending is None:
        pending = _PENDING[sock] = bytearray()
    while len(pending) < count:
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise ChannelTimeout("no answer in time")
            sock.settimeout(left)
        try:
            chunk = sock.recv(max(1 << 16, min(count - len(pending), 1 << 22)))
        except socket.timeout:
            raise ChannelTimeout("no answer in time") from None
        except OSError as error:
            raise ChannelClosed(f"the connection failed: {error}") from None
        if not chunk:
            raise ChannelClosed("the other end closed the connection")
        pending += chunk
    data = bytes(pending[:count])
    del pending[:count]
    return data


def recv_frame(
    sock: socket.socket, deadline: Optional[float] = None, max_bytes: int = MAX_BUFFER_BYTES
) -> Tuple[Any, List[bytes]]:
    """Read one frame: ``(header, buffers)``; ``deadline`` is a ``time.monotonic()`` time or None."""
    (size,) = struct.unpack("<I", _read_exactly(sock, 4, deadline))
    if size > MAX_HEADER_BYTES:
        raise WireError(f"a frame header of {size} bytes is larger than {MAX_HEADER_BYTES}")
    try:
        header = json.loads(_read_exactly(sock, size, deadline))
    except ValueError as error:
        raise WireError(f"a frame header is not JSON: {error}") from None
    (count,) = struct.unpack("<I", _read_exactly(sock, 4, deadline))
    if count > MAX_BUFFERS:
        raise WireError(f"a frame carries {count} buffers, more than {MAX_BUFFERS}")
    buffers, total = [], 0
    for _ in range(count):
        (length,) = struct.unpack("<Q", _read_exactly(sock, 8, deadline))
        total += length
        if total > max_bytes:
            raise WireError(f"a frame carries more than {max_bytes} bytes")
        buffers.append(_read_exactly(sock, length, deadline))
    return header, buffers


# ---- values ----------------------------------------------------------------------------------------
_SCALARS = (type(None), bool, int, float, str)


def _tensor_type():
    """torch and its Tensor type once something imported torch, else (None, None): no value can be a tensor
    before that, and a box whose student code never needs torch never pays for importing it."""
    torch = sys.modules.get("torch")
    tensor = getattr(torch, "Tensor", None)
    return (torch, tensor) if isinstance(tensor, type) else (None, None)


def encode(value: Any, buffers: List[bytes], other: Callable[[Any], Any], _depth: int = 0) -> Any:
    """``value`` as a JSON tree; ``other(obj)`` encodes what is not plain data (or raises)."""
    kind = type(value)
    if kind in _SCALARS:
        return value
    if _depth > MAX_DEPTH:
        raise WireError(f"a value nested more than {MAX_DEPTH} levels deep")
    if kind is list:
        return {"$l": [encode(v, buffers, other, _depth + 1) for v in value]}
    if kind is tuple:
        return {"$t": [encode(v, buffers, other, _depth + 1) for v in value]}
    if kind is dict:
        return {
            "$d": [
                [encode(k, buffers, other, _depth + 1), encode(v, buffers, other, _depth + 1)] for k, v in value.items()
            ]
        }
    if kind is set or kind is frozenset:
        return {"$s" if kind is set else "$f": [encode(v, buffers, other, _depth + 1) for v in value]}
    if kind is bytes:
        buffers.append(value)
        return {"$b": len(buffers) - 1}
    if kind is slice:
        return {"$sl": [encode(v, buffers, other, _depth + 1) for v in (value.start, value.stop, value.step)]}
    if value is Ellipsis:
        return {"$e": 0}
    torch, tensor = _tensor_type()
    if tensor is not None and kind is torch.Size:
        return {"$t": [int(v) for v in value]}
    if tensor is not None and kind is tensor:
        return encode_tensor(value, buffers)
    if tensor is not None and kind is torch.dtype:
        return {"$dt": str(value).replace("torch.", "")}
    return other(value)


def encode_tensor(value, buffers: List[bytes]) -> dict:
    import torch

    data = value.detach().to("cpu").contiguous()
    flat = data.reshape(-1)
    raw = flat.view(torch.uint8).numpy().tobytes() if flat.numel() else b""
    buffers.append(raw)
    return {"$T": [str(data.dtype).replace("torch.", ""), list(data.shape), len(buffers) - 1]}


def decode_tensor(payload: Any, buffers: List[bytes]):
    import torch

    if not (isinstance(payload, list) and len(payload) == 3):
        raise WireError("a malformed tensor")
    dtype_name, shape, index = payload
    dtype = getattr(torch, dtype_name, None) if type(dtype_name) is str else None
    if not isinstance(dtype, torch.dtype):
        raise WireError(f"unknown tensor dtype {dtype_name!r}")
    if not (isinstance(shape, list) and all(type(s) is int and s >= 0 for s in shape)):
        raise WireError("a malformed tensor shape")
    raw = _buffer(buffers, index)
    count = 1
    for s in shape:
        count *= s
    itemsize = torch.empty((), dtype=dtype).element_size()
    if len(raw) != count * itemsize:
        raise WireError(
            f"a tensor of shape {shape} and dtype {dtype_name} needs {count * itemsize} bytes, got {len(raw)}"
        )
    if count == 0:
        return torch.empty(shape, dtype=dtype)
    return torch.frombuffer(bytearray(raw), dtype=torch.uint8).view(dtype).reshape(shape)


def _buffer(buffers: List[bytes], index: Any) -> bytes:
    if type(index) is not int or not 0 <= index < len(buffers):
        raise WireError("a value names a buffer that is not in its frame")
    return buffers[index]


class _Budget:
    def __init__(self) -> None:
        self.items = 0

    def take(self, count: int) -> None:
        self.items += count
        if self.items > MAX_ITEMS:
            raise WireError(f"a value with more than {MAX_ITEMS} elements")


def decode(
    tree: Any,
    buffers: List[bytes],
    on_tag: Callable[[str, Any], Any],
    _depth: int = 0,
    _budget: Optional[_Budget] = None,
) -> Any:
    """The value a JSON tree stands for; ``on_tag(tag, payload)`` builds handles, recipes and the like."""
    budget = _budget or _Budget()
    kind = type(tree)
    if kind in _SCALARS:
        return tree
    if _depth > MAX_DEPTH:
        raise WireError(f"a value nested more than {MAX_DEPTH} levels deep")
    if kind is not dict or len(tree) != 1:
        raise WireError(f"not a value of the wire format: {str(tree)[:80]}")
    ((tag, payload),) = tree.items()
    sub = lambda item: decode(item, buffers, on_tag, _depth + 1, budget)  # noqa: E731
    if tag in ("$l", "$t", "$s", "$f"):
        if type(payload) is not list:
            raise WireError(f"a malformed {tag} value")
        budget.take(len(payload))
        items = [sub(v) for v in payload]
        return {"$l": list, "$t": tuple, "$s": set, "$f": frozenset}[tag](items) if tag != "$l" else items
    if tag == "$d":
        if type(payload) is not list or not all(type(p) is list and len(p) == 2 for p in payload):
            raise WireError("a malformed dict")
        budget.take(len(payload))
        return {sub(k): sub(v) for k, v in payload}
    if tag == "$b":
        return _buffer(buffers, payload)
    if tag == "$T":
        return decode_tensor(payload, buffers)
    if tag == "$dt":
        import torch

        dtype = getattr(torch, payload, None) if type(payload) is str else None
        if not isinstance(dtype, torch.dtype):
            raise WireError(f"unknown dtype {payload!r}")
        return dtype
    if tag == "$sl":
        if type(payload) is not list or len(payload) != 3:
            raise WireError("a malformed slice")
        return slice(*(sub(v) for v in payload))
    if tag == "$e":
        return Ellipsis
    if tag in TAGS:
        return on_tag(tag, payload)
    raise WireError(f"unknown tag {tag!r}")


def error_info(kind: str, message: str, **extra: Any) -> Dict[str, Any]:
    """The ``error`` part of a reply: what kind of failure, and a message for the student."""
    return {"type": kind, "message": message, **extra}
