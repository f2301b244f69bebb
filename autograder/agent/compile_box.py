"""Build a student's Triton kernels for an NVIDIA GPU from their submitted text, in a fresh box.

``python -m autograder.agent.compile_box`` runs in its own boxed process, started by the trusted
grader (``autograder.verdict.kernels``), never in the student's kernel: nothing the notebook did can
reach it. It reads requests as ``wire`` frames on stdin and answers on stdout:

- ``{"op": "define", "sources": [...]}``: the ``@triton.jit`` functions of the student's cells (the
  grader has checked that each is a plain ``def`` under ``@triton.jit`` with constant defaults), run
  in a namespace holding only ``triton``, ``tl`` and the functions defined so far; with ``"counted": true``, the
  same text with its dots counted (``autograder.verdict.dot_probe``, made by the grader), in a namespace of its own
  (a fresh one each time);
- ``{"op": "build", "name": ..., "args": [...], "arch": 90}``: ``paged_kv.kernels.triton_compile.compile_for_gpu``
  of that function with arguments rebuilt from their descriptions (a tensor's dtype and alignment, an
  int's or a float's value); the answer is the build's resources or the compiler's message;
- ``{"op": "launch", "name": ..., "launcher": "run_gather", "case": <recipe>, "grid": [...], "params": {...}}``:
  lab 06's trusted launcher (``paged_kv.lab.kernel_lab``) runs the function defined here from the submitted
  text on a case rebuilt here from its recipe (a ``paged_kv.lab.kernel_cases`` maker, its arguments), with
  the grid the grader computed from the student's grid function and checked; the answer is the output
  tensor (a wire buffer) or the check that failed. The student's kernel process never touches the result.
  Before the interpreter runs a launch, the launch's own specialisation (what Triton compiles a kernel for:
  its constexprs, the ints equal to 1, which ints and pointers are divisible by 16) is built for sm_90 through
  Triton's GPU IR, once per key (what the program computes is fixed there; each kernel's lowering to PTX and a
  cubin is built once, by ``_build``): the compiler resolves an ``if`` on a constexpr when it builds and never sees the other branch, so a
  launch whose build fails does not run, and its check fails with the constexprs it was built for. The request's
  ``built`` names keys the grader saw build for the same text in an earlier box; the answer's ``builds`` the
  keys built here. With ``"counted": true`` the kernel launched is the counted one, its specialisation built from
  the text as submitted.

In the interpreter a float converted to an integer type that is NaN or outside the type's range fails the launch
(``triton_compile.refuse_undefined_casts``): a branch on such a value could run one way when graded and another on a
GPU (issue 47).

Kernels run where ``paged_kv.kernels.triton_mode`` decides (natively on a supported GPU, else in Triton's
interpreter), decided before any kernel is defined.
"""

from __future__ import annotations

import sys
from typing import Any, Dict, List, Optional, Tuple


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


def _define(namespace: Dict[str, Any], sources: List[str], kind: str = "your kernel") -> None:
    import linecache

    for number, source in enumerate(sources):
        filename = f"<{kind} {number}>"
        # Triton reads a kernel's source through inspect (linecache), as it does for a notebook cell's.
        linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
        code = compile(source, filename, "exec")
        exec(code, namespace)  # noqa: S102 - the student's kernel text, checked by the grader, in a box


# What this box built: {(kernel name, specialisation key, arch): None when it built, else the compiler's message}.
Built = Dict[Tuple[str, str, int], Optional[str]]
LAUNCH_ARCH = 90
BUILD_HINT = (
    "the interpreter runs any Python, the GPU compiler only Triton code: inside @triton.jit use tl.* "
    "operations on tensors, and check the branches your constexprs (BLOCK_SIZE, HEAD_DIM, ...) choose"
)


def _build(namespace: Dict[str, Any], request: Dict[str, Any], built: Built) -> Dict[str, Any]:
    from paged_kv.kernels.triton_compile import (
        compile_error_message,
        compile_for_gpu,
        kernel_parameters,
        specialisation,
    )

    kernel = namespace.get(request["name"])
    if kernel is None:
        return {"error": f"{request['name']} is not defined by a @triton.jit function of your cells"}
    params = kernel_parameters(kernel)
    args = [_argument(a) for a in request["args"]]
    if len(params) != len(args):
        return {
            "error": f"the kernel takes {len(params)} parameters, the lab passes {len(args)}",
            "hint": "keep the stub's parameter list as it is",
        }
    arch = int(request.get("arch", 90))
    key, _ = specialisation(kernel, dict(zip(params, args)))
    try:
        build = compile_for_gpu(kernel, dict(zip(params, args)), arch=arch)
    except Exception as error:  # noqa: BLE001 - any compiler error is the student's feedback
        built[(request["name"], key, arch)] = compile_error_message(error)
        return {"error": compile_error_message(error), "compiler": True}
    built[(request["name"], key, arch)] = None
    return {
        "ok": {
            "arch": build.arch,
            "num_warps": build.num_warps,
            "num_stages": build.num_stages,
            "shared_bytes": build.shared_bytes,
            "registers": build.registers,
            "spill_bytes": build.spill_bytes,
            "dots": list(build.dots),
        },
        "key": key,
    }


def _built_first(kernel, name: str, built: Built, made: Dict[str, Any]):
    """``before_launch`` for the lab's launchers: the launch's own specialisation is built for sm_90 (once per
    key) before the interpreter runs it; a launch whose build fails does not run (its check fails). ``made``
    gathers the keys built here (``builds``) and whether a failed one's kernel built at another key (``unbuilt``)."""
    from paged_kv.kernels.triton_compile import (
        compile_error_message,
        compile_program_for_gpu,
        kernel_parameters,
        specialisation,
    )
    from paged_kv.lab.feedback import CheckFailed

    def before_launch(args) -> None:
        params = kernel_parameters(kernel)
        if len(params) != len(args):
            raise CheckFailed(
                name,
                f"the kernel takes {len(params)} parameters, the lab passes {len(args)}",
                hint="keep the stub's parameter list as it is",
            )
        mapping = dict(zip(params, args))
        key, described = specialisation(kernel, mapping)
        slot = (name, key, LAUNCH_ARCH)
        if slot not in built:
            try:
                compile_program_for_gpu(kernel, mapping, arch=LAUNCH_ARCH)  # the program; its lowering: ``_build``
                built[slot] = None
                made["builds"].append(key)
            except Exception as error:  # noqa: BLE001 - any compiler error is the student's feedback
                built[slot] = compile_error_message(error)
        if built[slot] is not None:
            if any(result is None for (other, _, _), result in built.items() if other == name):
                made["unbuilt"] = True  # another launch of this kernel built: this one's constexprs choose other code
            raise CheckFailed(
                name,
                f"does not compile for an NVIDIA GPU (sm_{LAUNCH_ARCH}) as this case launches "
                f"it ({described or 'no constexpr'}): {built[slot][:600]}",
                hint=BUILD_HINT,
            )

    return before_launch


# The lab's launchers a grader may ask for, and the keyword parameters each takes besides the case.
LAUNCHERS = {
    "run_gather": ("seq", "kv_head"),
    "run_scores": ("seq", "q_head"),
    "run_attend": ("seq", "q_head"),
    "run_decode": (),
    "run_fast_decode": ("tile",),
}
CASE_MAKERS = ("paged_kv.lab.kernel_cases.paged_case", "paged_kv.lab.kernel_cases.far_pool_case")


def _refuse_tags(tag: str, _payload: Any) -> Any:
    from autograder.agent import wire

    raise wire.WireError(f"{tag} cannot be sent to the compile box")


def _launch(
    namespace: Dict[str, Any],
    request: Dict[str, Any],
    buffers: List[bytes],
    built: Optional[Built] = None,
    counted: Optional[Dict[str, Any]] = None,
) -> Tuple[dict, List[bytes]]:
    """Run one of lab 06's launchers on the kernel defined here; ``({"ok": tensor tree}, buffers)`` or a failure.
    The launch's own specialisation is built for sm_90 first (``_built_first``); the reply's ``builds`` lists
    the keys built for it here, and the request's ``built`` those the grader saw build for the same text."""
    built = {} if built is None else built
    made: Dict[str, Any] = {"builds": [], "unbuilt": False}
    reply, out = _launch_built(namespace, request, buffers, built, made, counted)
    if made["unbuilt"] and "check" in reply:
        reply["unbuilt"] = True
    reply["builds"] = made["builds"]
    return reply, out


def _launch_built(
    namespace: Dict[str, Any],
    request: Dict[str, Any],
    buffers: List[bytes],
    built: Built,
    made: Dict[str, Any],
    counted: Optional[Dict[str, Any]],
) -> Tuple[dict, List[bytes]]:
    from autograder.agent import wire
    from paged_kv.lab import kernel_cases, kernel_lab
    from paged_kv.lab.feedback import CheckFailed

    name, launcher = request.get("name"), request.get("launcher")
    if launcher not in LAUNCHERS:
        return {"error": f"no launcher {launcher!r}"}, []
    kernel = namespace.get(name) if type(name) is str else None
    if kernel is None:
        return {"error": f"{name} is not defined by a @triton.jit function of your cells"}, []
    launched = kernel
    if request.get("counted") is True:  # the text with its dots counted (its build: the text as submitted)
        launched = (counted or {}).get(name)
        if launched is None:
            return {"error": f"{name} has no counted text: define it first"}, []
    path, args, kwargs = wire.decode(request.get("case"), buffers, _refuse_tags)
    if path not in CASE_MAKERS or type(args) is not tuple or type(kwargs) is not dict:
        return {"error": f"a case must be made by one of {CASE_MAKERS}"}, []
    params = request.get("params") or {}
    if set(params) - set(LAUNCHERS[launcher]) or not all(type(v) is int for v in params.values()):
        return {"error": f"{launcher} takes int parameters {LAUNCHERS[launcher]}"}, []
    grid = request.get("grid")
    known = request.get("built") or []
    if not (isinstance(known, list) and all(type(k) is str for k in known)):
        return {"error": "built must be a list of keys"}, []
    for key in known:  # what the grader saw build, for this very text, in an earlier notebook's box
        built.setdefault((name, key, LAUNCH_ARCH), None)
    before_launch = _built_first(kernel, name, built, made)
    try:
        case = getattr(kernel_cases, path.rpartition(".")[2])(*args, **kwargs)
        call = getattr(kernel_lab, launcher)
        if launcher in ("run_attend", "run_fast_decode"):
            out = call(launched, case, **params, name=name, before_launch=before_launch)
        else:
            out = call(launched, lambda *_: tuple(grid or ()), case, **params, name=name, before_launch=before_launch)
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

    mode = configure()  # before any kernel is defined: the interpreter sets TRITON_INTERPRET=1
    reader, writer = sys.stdin.buffer, sys.stdout.buffer
    sys.stdout = sys.stderr  # whatever else prints must not reach the answers' pipe
    import triton
    import triton.language as tl

    if not mode.native:
        from paged_kv.kernels.triton_compile import refuse_undefined_casts

        refuse_undefined_casts()
    namespace: Dict[str, Any] = _fresh_namespace(triton, tl)
    counted: Optional[Dict[str, Any]] = None  # the same text with its dots counted, once the grader sends it
    built: Built = {}
    pipe = _Pipe(reader, writer)
    while True:
        try:
            request, buffers = wire.recv_frame(pipe)
        except wire.WireError:
            return 0
        out: List[bytes] = []
        try:
            if request.get("op") == "define" and request.get("counted") is True:
                counted = _fresh_namespace(triton, tl)
                _define(counted, list(request["sources"]), "your kernel, dots counted,")
                reply: Dict[str, Any] = {"ok": True}
            elif request.get("op") == "define":
                _define(namespace, list(request["sources"]))
                reply = {"ok": True}
            elif request.get("op") == "build":
                reply = _build(namespace, request, built)
            elif request.get("op") == "launch":
                reply, out = _launch(namespace, request, buffers, built, counted)
            else:
                return 0
        except Exception as error:  # noqa: BLE001 - a kernel whose definition fails, a case that cannot be made
            reply, out = {"error": f"{type(error).__name__}: {str(error)[:600]}"}, []
        wire.send_frame(pipe, reply, out)


def _fresh_namespace(triton, tl) -> Dict[str, Any]:
    return {"triton": triton, "tl": tl, "__name__": "student_kernels"}


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
