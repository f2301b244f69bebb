"""Build the student's Triton kernels for an NVIDIA GPU from their submitted text, in a compile box.

A kernel TODO earns points only if it compiles for a real GPU (the interpreter runs any Python). The
kernel object in the grading kernel could be anything the notebook made, so the build starts from
the submitted text instead: every top-level ``@triton.jit`` function of the student's cells (and
their literal constants) is checked here -- a plain ``def``, only ``@triton.jit`` above it, literal
defaults, ``tl.constexpr`` annotations -- and sent to a fresh boxed process
(``autograder.agent.compile_box``) that defines them with nothing but Triton around and compiles the
one asked for. One box per notebook serves all its builds; results are kept per kernel text.

Lab 06's hidden checks also *launch* the kernels there (``KernelBuilder.launch``): the box runs the lab's
trusted launcher on the kernel it defined from the text, on a case rebuilt from its recipe, and sends the
output back as data. The grading kernel's own launchers (which the student's code can replace) only
serve the notebook's visible run.

The compiler and the interpreter read a kernel differently (issue 35): the compiler resolves an ``if`` whose
condition is not a tensor when it builds and never visits the other branch, the interpreter runs the text as
Python. So every kernel's whole text must be Triton (``triton_text``), and the box builds each launch's own
specialisation before it runs it (``compile_box``); the keys that built are kept per text, for the next notebook.
A launch may run the text with its dots counted (``dot_probe``), to see which products the dots carry (issue 47).
"""

from __future__ import annotations

import ast
import hashlib
import subprocess
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from autograder.agent import wire
from autograder.verdict import dot_probe, triton_text
from autograder.verdict.notebook import Cell, python_of
from paged_kv.lab.feedback import CheckFailed

BUILD_TIMEOUT_S = 120
LAUNCH_TIMEOUT_S = 150  # the launcher's own child stops a kernel after 90 s (kernel_lab.CHILD_TIMEOUT_S)
# Build results shared by every notebook this grading process grades: a result is a function of the kernels'
# text, the launch arguments' description and the architecture alone (the key), so a second notebook with
# the same text gets what its own compile box would say, without starting one. Only replies that cannot
# depend on load are kept: a build, or the compiler's refusal; never a timeout or a box that failed.
_BUILT: Dict[str, dict] = {}
_BUILT_MOST = 512
# The specialisations each kernel text's launches built (Triton's keys: constexprs, ints equal to 1, divisibility
# by 16), by hash of (the kernels' text, the kernel's name): a later notebook's compile box with the same text
# builds only those it has not seen build. Only builds are kept, never a failure.
_LAUNCH_BUILT: Dict[str, set] = {}
_LAUNCH_BUILT_MOST = 4096
BUILD_HINT = (
    "the interpreter runs any Python, the GPU compiler only Triton code: inside @triton.jit use tl.* "
    "operations on tensors, no torch/numpy calls, no int(x) or .item() on a tensor, no Python lists "
    "of values"
)


def _is_jit(node: ast.AST) -> bool:
    target = node.func if isinstance(node, ast.Call) else node
    return (
        isinstance(target, ast.Attribute)
        and target.attr == "jit"
        and isinstance(target.value, ast.Name)
        and target.value.id == "triton"
    )


def _literal(node: Optional[ast.AST]) -> bool:
    if node is None:
        return True
    try:
        ast.literal_eval(node)
        return True
    except ValueError:
        return False


# why_not_buildable's answers (the kernel's shape), as against triton_text's (its body's language)
SHAPE_RULES = ("a kernel must be", "@triton.jit(...)", "a kernel's default", "a kernel's parameters", "a kernel has no")


def why_not_buildable(node: ast.FunctionDef) -> str:
    """Why a kernel's definition cannot be sent to the compile box as it is ('' when it can)."""
    if len(node.decorator_list) != 1 or not _is_jit(node.decorator_list[0]):
        return "a kernel must be a plain function under one @triton.jit decorator"
    decorator = node.decorator_list[0]
    if isinstance(decorator, ast.Call) and (decorator.args or not all(_literal(k.value) for k in decorator.keywords)):
        return "@triton.jit(...) may only take literal keyword arguments"
    args = node.args
    if not all(_literal(d) for d in [*args.defaults, *args.kw_defaults]):
        return "a kernel's default arguments must be literals"
    if not all(
        a.annotation is None or triton_text.is_constexpr(a.annotation)
        for a in [*args.posonlyargs, *args.args, *args.kwonlyargs]
    ):
        return "a kernel's parameters may only be annotated with tl.constexpr"
    if node.returns is not None:
        return "a kernel has no return annotation"
    return ""


def submitted_kernels(cells: Sequence[Cell]) -> Tuple[List[str], Dict[str, str]]:
    """``(definitions to send, {kernel name: why it cannot be built})`` from the student's cells, in order.

    A later definition of a name replaces an earlier one, as it does in the notebook. Every kernel's whole
    text is read against the Triton language (``triton_text.why_not_triton``: both branches of every ``if``),
    and a kernel that calls a refused one is refused with it: nothing refused reaches the compile box."""
    latest: Dict[str, Tuple[int, str]] = {}
    nodes: Dict[str, ast.FunctionDef] = {}
    refused: Dict[str, str] = {}
    constants: set = set()  # globals bound to tl.constexpr(<a scalar literal>): the only ones a kernel may read
    lines: Dict[str, str] = {}  # each kernel's cell, to quote its lines
    order = 0
    for cell in cells:
        if not cell.student or cell.tree is None:
            continue
        for node in cell.tree.body:
            order += 1
            if isinstance(node, ast.FunctionDef) and any(_is_jit(d) for d in node.decorator_list):
                constants.discard(node.name)
                reason = why_not_buildable(node)
                if reason:
                    refused[node.name] = reason
                    latest.pop(node.name, None)
                    nodes.pop(node.name, None)
                else:
                    refused.pop(node.name, None)
                    latest[node.name] = (order, ast.unparse(node))
                    nodes[node.name] = node
                    lines[node.name] = cell.source
            elif isinstance(node, (ast.Assign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                value = node.value
                constant = (
                    isinstance(value, ast.Call)
                    and triton_text.is_constexpr(value.func)
                    and len(value.args) == 1
                    and not value.keywords
                    and _scalar_literal(value.args[0])
                )
                if (
                    value is not None
                    and all(isinstance(t, ast.Name) for t in targets)
                    and (_literal(value) or constant)
                ):
                    for target in targets:
                        if target.id in triton_text.MODULES or target.id.startswith("_"):
                            continue  # the compile box's own names (tl, triton, __builtins__) stay its own
                        latest[target.id] = (order, ast.unparse(node))
                        nodes.pop(target.id, None)
                        (constants.add if constant else constants.discard)(target.id)
    kernels = set(nodes) | set(refused)
    for name, node in nodes.items():
        reason = triton_text.why_not_triton(node, kernels, constants, python_of(lines[name]).splitlines())
        reason = reason or triton_text.why_not_one_def(latest[name][1])  # the text the box defines, and reads back
        if reason:
            refused[name] = reason
    while True:  # a kernel that calls a refused one cannot be built either
        spread = {}
        for name, node in nodes.items():
            if name in refused:
                continue
            used = {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
            calls = sorted((used - triton_text.bound_names(node)) & set(refused))
            if calls:
                spread[name] = f"it calls {calls[0]}, which cannot be built: {refused[calls[0]]}"
        if not spread:
            break
        refused.update(spread)
    for name in refused:
        latest.pop(name, None)
    return [text for _, text in sorted(latest.values())], refused


def stub_kernels(cells: Sequence[Cell]) -> set:
    """The student's kernels whose latest text names NotImplementedError (``kernel_lab.is_stub``: never launched)."""
    stubs: set = set()
    for cell in cells:
        if not cell.student or cell.tree is None:
            continue
        for node in cell.tree.body:
            if isinstance(node, ast.FunctionDef) and any(_is_jit(d) for d in node.decorator_list):
                (
                    stubs.add
                    if any(
                        isinstance(n, ast.Name)
                        and n.id == "NotImplementedError"
                        or isinstance(n, ast.Attribute)
                        and n.attr == "NotImplementedError"
                        for n in ast.walk(node)
                    )
                    else stubs.discard
                )(node.name)
    return stubs


def _scalar_literal(node: ast.AST) -> bool:
    try:
        value = ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError):
        return False
    return value is None or type(value) in (bool, int, float, str)


def describe_args(args: Sequence[Any]) -> List[list]:
    """The launch arguments as the compile box rebuilds them: a tensor's dtype and alignment, a value."""
    import torch

    from paged_kv.lab.feedback import materialize

    out = []
    for value in args:
        value = materialize(value)
        if isinstance(value, torch.Tensor):
            aligned = (value.data_ptr() % 16 == 0) if value.numel() else True
            out.append(["tensor", str(value.dtype).replace("torch.", ""), aligned])
        elif type(value) is bool:
            out.append(["bool", value])
        elif type(value) is int:
            out.append(["int", value])
        elif type(value) is float:
            out.append(["float", value])
        else:
            raise CheckFailed("build", f"cannot describe a kernel argument of type {type(value).__name__}")
    return out


class KernelBuilder:
    """One compile box for one notebook (started at the first build, stopped by ``close``)."""

    def __init__(self, cells: Sequence[Cell], start: Callable[[], subprocess.Popen]):
        self.sources, self.refused = submitted_kernels(cells)
        self.stubs = stub_kernels(cells)
        self._start = start
        self._process: Optional[subprocess.Popen] = None
        self._counted: Optional[tuple] = None  # the tile shapes the box's counted texts were made for
        self._results: Dict[str, Any] = {}
        # For the instructor's log (``autograder.grade.hardened``): {(kind, kernel name): detail}, once each.
        # not-triton: a kernel refused for a line that is not Triton; launch-not-built: a graded launch whose own
        # specialisation does not compile for sm_90 while another of the same kernel does.
        self.events: Dict[Tuple[str, str], str] = {}

    def _refusal(self, name: str) -> Exception:
        """The failure of every check that builds or launches a refused kernel: the line and the rule (for a
        kernel that still raises NotImplementedError, the launcher's 'still the stub', as where it runs)."""
        if name in self.stubs:
            from paged_kv.lab.kernel_lab import unwritten

            return unwritten(name)
        reason = self.refused[name]
        shape = reason.startswith(SHAPE_RULES)
        if not shape:
            self.events.setdefault(("not-triton", name), reason)
        return CheckFailed(
            name,
            f"cannot be built for a GPU: {reason}",
            hint="write the kernel as `@triton.jit` above a plain `def`, as the stub is" if shape else triton_text.HINT,
        )

    def _request(self, request: dict, timeout: float = BUILD_TIMEOUT_S) -> dict:
        return self._exchange(request, [], timeout)[0]

    def _exchange(self, request: dict, buffers: List[bytes], timeout: float) -> Tuple[dict, List[bytes]]:
        if self._process is None:
            self._process = self._start()
            self._pipe = _ProcessPipe(self._process)
            self._counted = None
            self._request({"op": "define", "sources": self.sources})
        wire.send_frame(self._pipe, request, buffers)
        reply, answer = wire.recv_frame(self._pipe, time.monotonic() + timeout)
        if not isinstance(reply, dict):
            raise wire.WireError("a malformed reply from the compile box")
        if request.get("op") == "define" and "error" in reply:
            self._define_error = str(reply["error"])
        return reply, answer

    def launch(
        self,
        name: str,
        launcher: str,
        case: Any,
        grid: Optional[Sequence[int]] = None,
        *,
        counted_dots: Optional[Sequence[Tuple[int, int, int]]] = None,
        **params: int,
    ):
        """``paged_kv.lab.kernel_lab.<launcher>`` of the submitted kernel ``name``, run in the compile box on
        ``case`` (rebuilt there from its recipe) with ``grid`` (checked plain ints): the output tensor, or the
        launcher's ``CheckFailed`` / ``TodoNotWritten``. With ``counted_dots`` (tile shapes ``(M, K, N)``), the
        kernel launched is the text with its dots counted (``dot_probe``: each tensor-core dot of those tiles
        halved); the launch's own specialisation is still built from the text as submitted."""
        from paged_kv.lab.feedback import TodoNotWritten
        from paged_kv.lab.kernel_lab import KernelFailed

        if name in self.refused:
            raise self._refusal(name)
        if counted_dots is not None:
            shapes = tuple(tuple(shape) for shape in counted_dots)
            if self._counted != shapes:  # the box defines the counted texts once per set of tiles
                reply = self._request(
                    {"op": "define", "sources": dot_probe.counted_sources(self.sources, shapes), "counted": True}
                )
                if "error" in reply:
                    raise CheckFailed(name, f"its dots could not be counted: {str(reply['error'])[:600]}")
                self._counted = shapes
        path, args, kwargs = case._pkv_recipe
        buffers: List[bytes] = []
        seen = _LAUNCH_BUILT.get(self._text_key(name), set())
        request = {
            "op": "launch",
            "name": name,
            "launcher": launcher,
            "params": dict(params),
            "grid": None if grid is None else [int(g) for g in grid],
            "case": wire.encode((path, tuple(args), dict(kwargs)), buffers, _no_objects),
            "built": sorted(seen),
            "counted": counted_dots is not None,
        }
        try:
            reply, answer = self._exchange(request, buffers, LAUNCH_TIMEOUT_S)
        except wire.WireError as error:
            raise CheckFailed(
                name,
                f"the compile box that runs your kernel failed ({error})",
                hint="a kernel that runs for minutes or crashes its process ends here: check "
                "your loop bounds and the offsets you add to pointers",
            ) from None
        self._remember_builds(name, reply.get("builds"))
        if "ok" in reply:
            tree = reply["ok"]
            if not (isinstance(tree, dict) and set(tree) == {"$T"}):
                raise CheckFailed(name, "the compile box sent back something that is not a tensor")
            return wire.decode_tensor(tree["$T"], answer)
        if "todo" in reply:
            raise TodoNotWritten(str(reply["todo"]))
        if "check" in reply:
            kind, case_label, problem, hint, shown = reply["check"]
            if reply.get("unbuilt"):
                self.events.setdefault(("launch-not-built", name), str(problem)[:600])
            cls = KernelFailed if kind == "KernelFailed" else CheckFailed
            return _raise(cls(str(case_label), str(problem), hint=str(hint), **dict(shown)))
        if "memory" in reply:
            raise MemoryError(str(reply["memory"]))
        raise CheckFailed(
            name,
            f"the compile box could not run your kernel: {str(reply.get('error'))[:800]}",
            hint=str(reply.get("hint", "")) or BUILD_HINT,
        )

    def build(self, name: str, args: Sequence[Any], arch: int = 90):
        """``paged_kv.kernels.triton_compile.GpuBuild`` of the submitted ``name``, or ``CheckFailed`` (the lab's messages)."""
        from paged_kv.kernels.triton_compile import GpuBuild

        if name in self.refused:
            raise self._refusal(name)
        described = describe_args(args)
        key = hashlib.sha256(repr((self.sources, name, described, arch)).encode()).hexdigest()
        if key not in self._results and key in _BUILT:
            self._results[key] = _BUILT[key]
        if key not in self._results:
            try:
                reply = self._request({"op": "build", "name": name, "args": described, "arch": arch})
            except wire.WireError as error:
                reply = {"error": f"the compile box failed ({error})"}
            self._results[key] = reply
            if ("ok" in reply or reply.get("compiler")) and len(_BUILT) < _BUILT_MOST:
                _BUILT[key] = reply
        reply = self._results[key]
        if "ok" in reply:
            if arch == 90:  # the arch every launch is built for
                self._remember_builds(name, [reply.get("key")])
            info = reply["ok"]
            return GpuBuild(
                int(info["arch"]),
                int(info["num_warps"]),
                int(info["num_stages"]),
                int(info["shared_bytes"]),
                info.get("registers"),
                info.get("spill_bytes"),
                {},
                tuple(str(d) for d in info.get("dots", ()))[:16],
            )
        message = str(reply.get("error", "the kernel could not be built"))[:800]
        if reply.get("compiler"):
            raise CheckFailed(name, f"does not compile for an NVIDIA GPU (sm_{arch}): {message}", hint=BUILD_HINT)
        raise CheckFailed(name, message, hint=str(reply.get("hint", "")) or BUILD_HINT)

    def _text_key(self, name: str) -> str:
        return hashlib.sha256(repr((self.sources, name)).encode()).hexdigest()

    def _remember_builds(self, name: str, keys: Any) -> None:
        """Keep the specialisation keys a compile box built for ``name`` (for the next notebook with this text)."""
        if not isinstance(keys, list):
            return
        keys = [k for k in keys if type(k) is str]
        if keys and sum(len(v) for v in _LAUNCH_BUILT.values()) + len(keys) <= _LAUNCH_BUILT_MOST:
            _LAUNCH_BUILT.setdefault(self._text_key(name), set()).update(keys)

    def close(self) -> None:
        if self._process is not None:
            try:
                self._process.stdin.close()
            except OSError:
                pass
            try:
                self._process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
            self._process = None
            self._counted = None


def _raise(error: BaseException):
    raise error


def _no_objects(value: Any) -> Any:
    raise CheckFailed("launch", f"a case's recipe holds a {type(value).__name__}, which cannot go to the compile box")


class _ProcessPipe:
    """``wire``'s socket face on a child's stdin/stdout (with a deadline through ``select``)."""

    def __init__(self, process: subprocess.Popen):
        self.process = process
        self.timeout: Optional[float] = None

    def settimeout(self, value: Optional[float]) -> None:
        self.timeout = value

    def recv(self, count: int) -> bytes:
        import os
        import select
        import socket

        fd = self.process.stdout.fileno()
        ready, _, _ = select.select([fd], [], [], self.timeout)
        if not ready:
            raise socket.timeout("the compile box did not answer in time")
        return os.read(fd, count)

    def sendall(self, data: bytes) -> None:
        self.process.stdin.write(data)
        self.process.stdin.flush()
