"""Build a student's Triton kernels for an NVIDIA GPU from their submitted text, in a fresh box.

``python -m autograder.agent.compile_box`` runs in its own boxed process, started by the trusted
grader (``autograder.verdict.kernels``), never in the student's kernel: nothing the notebook did can
reach it. It reads requests as ``wire`` frames on stdin and answers on stdout:

- ``{"op": "define", "sources": [...]}``: the ``@triton.jit`` functions of the student's cells (the
  grader has checked that each is a plain ``def`` under ``@triton.jit`` with constant defaults), run
  in a namespace holding only ``triton``, ``tl`` and the functions defined so far;
- ``{"op": "build", "name": ..., "args": [...], "arch": 90}``: ``paged_kv.kernels.triton_compile.compile_for_gpu``
  of that function with arguments rebuilt from their descriptions (a tensor's dtype and alignment, an
  int's or a float's value); the answer is the build's resources or the compiler's message;
- ``{"op": "launch", "name": ..., "launcher": "run_gather", "case": <recipe>, "grid": [...], "params": {...}}``:
  lab 06's trusted launcher (``paged_kv.lab.kernel_lab``) runs the function defined here from the submitted
  text on a case rebuilt here from its recipe (a ``paged_kv.lab.kernel_cases`` maker, its arguments), with
  the grid the grader computed from the student's grid function and checked; the answer is the output
  tensor (a wire buffer) or the check that failed. The student's kernel process never touches the result.

Kernels run where ``paged_kv.kernels.triton_mode`` decides (natively on a supported GPU, else in Triton's
interpreter), decided before any kernel is defined.
"""
from __future__ import annotations

import os
import sys
from typing import Any, Dict, List, Tuple


def _argument(spec: Any):
    import torch

    kind = spec[0]
    if kind == "tensor":
        dtype = getattr(torch, spec[1])
        if not isinstance(dtype, torch.dtype):
            raise ValueError(f"unknown dtype {spec[1]!r}")
        aligned = bool(spec[2])
        base = torch.empty(64, dtype=dtype)
        return base[16:32] if aligned else base[1:17]
    if kind in ("int", "float", "bool"):
        return spec[1]
    raise ValueError(f"unknown argument kind {kind!r}")


def _define(namespace: Dict[str, Any], sources: List[str]) -> None:
    import linecache

    for number, source in enumerate(sources):
        filename = f"<your kernel {number}>"
        # Triton reads a kernel's source through inspect (linecache), as it does for a notebook cell's.
        linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
        code = compile(source, filename, "exec")
        exec(code, namespace)  # noqa: S102 - the student's kernel text, checked by the grader, in a box


def _build(namespace: Dict[str, Any], request: Dict[str, Any]) -> Dict[str, Any]:
    from paged_kv.kernels.triton_compile import compile_error_message, compile_for_gpu, kernel_parameters

    kernel = namespace.get(request["name"])
    if kernel is None:
        return {"error": f"{request['name']} is not defined by a @triton.jit function of your cells"}
    params = kernel_parameters(kernel)
    args = [_argument(a) for a in request["args"]]
    if len(params) != len(args):
        return {"error": f"the kernel takes {len(params)} parameters, the lab passes {len(args)}",
                "hint": "keep the stub's parameter list as it is"}
    try:
        build = compile_for_gpu(kernel, dict(zip(params, args)), arch=int(request.get("arch", 90)))
    except Exception as error:  # noqa: BLE001 - any compiler error is the student's feedback
        return {"error": compile_error_message(error), "compiler": True}
    return {"ok": {"arch": build.arch, "num_warps": build.num_warps, "num_stages": build.num_stages,
                   "shared_bytes": build.shared_bytes, "registers": build.registers,
                   "spill_bytes": build.spill_bytes, "dots": list(build.dots)}}


# The lab's launchers a grader may ask for, and the keyword parameters each takes besides the case.
LAUNCHERS = {"run_gather": ("seq", "kv_head"), "run_scores": ("seq", "q_head"), "run_attend": ("seq", "q_head"),
             "run_decode": (), "run_fast_decode": ("tile",)}
CASE_MAKERS = ("paged_kv.lab.kernel_cases.paged_case", "paged_kv.lab.kernel_cases.far_pool_case")


def _refuse_tags(tag: str, _payload: Any) -> Any:
    from autograder.agent import wire

    raise wire.WireError(f"{tag} cannot be sent to the compile box")


def _launch(namespace: Dict[str, Any], request: Dict[str, Any], buffers: List[bytes]) -> Tuple[dict, List[bytes]]:
    """Run one of lab 06's launchers on the kernel defined here; ``({"ok": tensor tree}, buffers)`` or a failure."""
    from autograder.agent import wire
    from paged_kv.lab import kernel_cases, kernel_lab
    from paged_kv.lab.feedback import CheckFailed

    name, launcher = request.get("name"), request.get("launcher")
    if launcher not in LAUNCHERS:
        return {"error": f"no launcher {launcher!r}"}, []
    kernel = namespace.get(name) if type(name) is str else None
    if kernel is None:
        return {"error": f"{name} is not defined by a @triton.jit function of your cells"}, []
    path, args, kwargs = wire.decode(request.get("case"), buffers, _refuse_tags)
    if path not in CASE_MAKERS or type(args) is not tuple or type(kwargs) is not dict:
        return {"error": f"a case must be made by one of {CASE_MAKERS}"}, []
    params = request.get("params") or {}
    if set(params) - set(LAUNCHERS[launcher]) or not all(type(v) is int for v in params.values()):
        return {"error": f"{launcher} takes int parameters {LAUNCHERS[launcher]}"}, []
    grid = request.get("grid")
    try:
        case = getattr(kernel_cases, path.rpartition(".")[2])(*args, **kwargs)
        call = getattr(kernel_lab, launcher)
        if launcher in ("run_attend", "run_fast_decode"):
            out = call(kernel, case, **params, name=name)
        else:
            out = call(kernel, lambda *_: tuple(grid or ()), case, **params, name=name)
    except NotImplementedError as error:
        return {"todo": str(error)[:2000]}, []
    except CheckFailed as error:
        shown = {}
        for field in ("expected", "got"):
            value = getattr(error, field)
            if value is not kernel_lab._NO_VALUE:
                shown[field] = value if type(value) in (int, float, str, bool) else repr(value)[:400]
        return {"check": [type(error).__name__, error.case, error.problem, error.hint, shown]}, []
    except MemoryError as error:
        return {"memory": str(error)[:600]}, []
    out_buffers: List[bytes] = []
    return {"ok": wire.encode_tensor(out, out_buffers)}, out_buffers


def main() -> int:
    from autograder.agent import wire
    from paged_kv.kernels.triton_mode import configure

    configure()  # before any kernel is defined: the interpreter sets TRITON_INTERPRET=1
    reader, writer = sys.stdin.buffer, sys.stdout.buffer
    sys.stdout = sys.stderr  # whatever else prints must not reach the answers' pipe
    import triton
    import triton.language as tl

    namespace: Dict[str, Any] = {"triton": triton, "tl": tl, "__name__": "student_kernels"}
    pipe = _Pipe(reader, writer)
    while True:
        try:
            request, buffers = wire.recv_frame(pipe)
        except wire.WireError:
            return 0
        out: List[bytes] = []
        try:
            if request.get("op") == "define":
                _define(namespace, list(request["sources"]))
                reply: Dict[str, Any] = {"ok": True}
            elif request.get("op") == "build":
                reply = _build(namespace, request)
            elif request.get("op") == "launch":
                reply, out = _launch(namespace, request, buffers)
            else:
                return 0
        except Exception as error:  # noqa: BLE001 - a kernel whose definition fails, a case that cannot be made
            reply, out = {"error": f"{type(error).__name__}: {str(error)[:600]}"}, []
        wire.send_frame(pipe, reply, out)


class _Pipe:
    """A socket-like face on stdin/stdout for ``wire``'s frames."""

    def __init__(self, reader, writer):
        self.reader, self.writer = reader, writer

    def settimeout(self, _value) -> None:
        pass

    def recv(self, count: int) -> bytes:
        return self.reader.read1(count) if hasattr(self.reader, "read1") else self.reader.read(count)

    def sendall(self, data: bytes) -> None:
        self.writer.write(data)
        self.writer.flush()


if __name__ == "__main__":
    sys.exit(main())
