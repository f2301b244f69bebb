"""Compile a Triton kernel for an NVIDIA GPU target without a GPU (and while the interpreter is on).

``compile_for_gpu(kernel, args)`` turns the launch arguments into Triton's signature, compiles the
kernel through TTIR, TTGIR, LLVM IR and PTX to a cubin for ``sm_80`` or ``sm_90``, and returns its
resources (registers, spills, shared memory). That proves a kernel is a real GPU kernel: code that
only the interpreter can run (Python or torch calls on values, ``int(tensor)``, numpy) fails here
with a ``CompilationError``. In interpreter mode every ``@triton.jit`` function, the student's and
Triton's own standard library (``tl.max``, ``tl.sum``...), is an ``InterpretedFunction``; the
compile swaps in real ``JITFunction`` twins for its duration and puts everything back after.
"""

from __future__ import annotations

import inspect
import re
import subprocess
import sys
import tempfile
import types
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, Iterator, Mapping, Optional, Tuple

import torch

from paged_kv.cache.messages import N_
from paged_kv.kernels.triton_mode import require_triton


@dataclass(frozen=True)
class GpuBuild:
    """What the GPU compiler made of a kernel: its IRs and the resources one program needs."""

    arch: int
    num_warps: int
    num_stages: int
    shared_bytes: int
    registers: Optional[int]
    spill_bytes: Optional[int]
    asm: Mapping[str, Any]
    dots: Tuple[str, ...] = ()  # each tl.dot of the kernel, as "16x128xf16 * 128x64xf16 -> 16x64xf32"

    def summary(self) -> str:
        regs = "?" if self.registers is None else self.registers
        spills = "?" if self.spill_bytes is None else self.spill_bytes
        return (
            f"sm_{self.arch}: {regs} registers/thread, {spills} bytes spilled, {self.shared_bytes} bytes shared "
            f"memory, {self.num_warps} warps, {self.num_stages} stages"
        )


def signature_of(kernel, args: Mapping[str, Any]):
    """Triton's ``(signature, constexprs, attrs)`` for launching ``kernel`` with ``args`` (name -> value).

    Specialised the way a real launch would be: an int equal to 1 becomes a constant, ints and pointers
    divisible by 16 get a divisibility hint (what lets the compiler vectorise loads).
    """
    from triton._C.libtriton import native_specialize_impl
    from triton.backends.compiler import BaseBackend

    fn = _python_function(kernel)
    names = list(inspect.signature(fn).parameters)
    missing = [n for n in names if n not in args]
    if missing:
        raise TypeError(f"no value for the kernel parameter(s) {missing}")
    signature, constexprs, attrs = {}, {}, {}
    for index, name in enumerate(names):
        value = args[name]
        if _is_constexpr(fn.__annotations__.get(name)):
            kind, spec = "constexpr", value
        elif isinstance(value, (torch.Tensor, bool, int, float)):
            kind, spec = native_specialize_impl(BaseBackend, value, False, True, True)
        else:
            raise TypeError(f"kernel argument {name} = {value!r}: pass tensors, ints, floats or bools")
        signature[name] = kind
        if kind == "constexpr":
            constexprs[name] = spec
        elif isinstance(spec, str) and spec:
            attrs[(index,)] = BaseBackend.parse_attr(spec)
    return signature, constexprs, attrs


def compile_for_gpu(
    kernel, args: Mapping[str, Any], *, arch: int = 90, num_warps: int = 4, num_stages: int = 2, resources: bool = True
) -> GpuBuild:
    """Compile ``kernel`` for ``sm_{arch}`` as if launched with ``args``; raise Triton's error if it cannot be.
    ``resources=False`` skips asking ``ptxas`` for registers and spills (``None`` in the build)."""
    require_triton()
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    signature, constexprs, attrs = signature_of(kernel, args)
    with _real_jit_functions() as to_jit:
        source = ASTSource(fn=to_jit(kernel), signature=signature, constexprs=constexprs, attrs=attrs)
        compiled = triton.compile(
            source, target=GPUTarget("cuda", arch, 32), options={"num_warps": num_warps, "num_stages": num_stages}
        )
    registers, spills = _ptxas_resources(compiled.asm.get("ptx"), arch) if resources else (None, None)
    return GpuBuild(
        arch,
        num_warps,
        num_stages,
        int(compiled.metadata.shared),
        registers,
        spills,
        compiled.asm,
        dot_shapes(compiled.asm.get("ttir")),
    )


def compile_program_for_gpu(
    kernel, args: Mapping[str, Any], *, arch: int = 90, num_warps: int = 4, num_stages: int = 2
) -> str:
    """Compile ``kernel`` for ``sm_{arch}`` as launched with ``args`` through Triton's GPU IR (TTGIR) and return that
    IR's text; raise Triton's error if it cannot be. What the program computes is fixed by then (constexprs
    folded, dead branches dropped, types checked); LLVM IR, PTX and the cubin are left out (about three quarters
    of a full build's time), so check each kernel once with ``compile_for_gpu`` for those. Where this Triton has
    no stages hook (``knobs.runtime.add_stages_inspection_hook``) the build runs whole and ``""`` is returned."""
    require_triton()
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    signature, constexprs, attrs = signature_of(kernel, args)
    try:
        with _real_jit_functions() as to_jit, _stages_through_ttgir():
            source = ASTSource(fn=to_jit(kernel), signature=signature, constexprs=constexprs, attrs=attrs)
            triton.compile(
                source, target=GPUTarget("cuda", arch, 32), options={"num_warps": num_warps, "num_stages": num_stages}
            )
    except _ProgramBuilt as done:
        return done.ttgir
    return ""


class _ProgramBuilt(Exception):
    """Raised in place of Triton's LLVM IR stage: the pipeline stops there, holding the TTGIR's text."""

    def __init__(self, ttgir: str):
        super().__init__("built through TTGIR")
        self.ttgir = ttgir


@contextmanager
def _stages_through_ttgir() -> Iterator[None]:
    """While open, Triton's pipeline stops where it would lower TTGIR to LLVM IR (its stages hook; a full build's
    cache entry is never taken for one of these, nor the other way round)."""
    try:
        from triton import knobs

        runtime = knobs.runtime
        before = runtime.add_stages_inspection_hook
    except (ImportError, AttributeError):  # an older Triton: the whole build runs
        yield
        return

    def stop(src, metadata):
        raise _ProgramBuilt(str(src))

    def through_ttgir(*args):
        if not args:  # asked for a cache key
            return "paged-kv:stop-before-llir", "paged-kv:stop-before-llir"
        if before is not None:
            before(*args)
        args[1]["llir"] = stop
        return None

    runtime.add_stages_inspection_hook = through_ttgir
    try:
        yield
    finally:
        runtime.add_stages_inspection_hook = before


_DOT = re.compile(r"tt\.dot\b[^:]*:\s*tensor<([^>]+)>\s*\*\s*tensor<([^>]+)>\s*->\s*tensor<([^>]+)>")


def specialisation(kernel, args: Mapping[str, Any]) -> Tuple[str, str]:
    """``(key, description)`` of the build a launch with ``args`` runs: what Triton specialises a kernel on (each
    argument's type, the constexprs' values, ints equal to 1, and which ints and pointers are divisible by 16).
    Two launches with the same key run the same compiled code; the description names the constexprs and the
    ints specialised to 1 (``"BLOCK_SIZE=4, HEAD_DIM=16, kv_head=1"``)."""
    signature, constexprs, attrs = signature_of(kernel, args)
    key = repr(
        (
            sorted(signature.items()),
            sorted((k, repr(v)) for k, v in constexprs.items()),
            sorted((k, repr(v)) for k, v in attrs.items()),
        )
    )
    return key, ", ".join(f"{name}={value!r}" for name, value in constexprs.items())


def dot_shapes(ttir: Optional[str]) -> Tuple[str, ...]:
    """Each ``tt.dot`` of a kernel's Triton IR as ``"MxK<a> * KxN<b> -> MxN<acc>"`` (``16x128xf16 * ...``), in order."""
    return tuple(f"{a} * {b} -> {c}" for a, b, c in _DOT.findall(ttir or ""))


def kernel_parameters(kernel) -> list:
    """The names of a jit kernel's parameters, in order."""
    return list(inspect.signature(_python_function(kernel)).parameters)


def _python_function(kernel):
    fn = getattr(kernel, "fn", None)
    if not callable(fn):
        raise TypeError(f"expected a @triton.jit kernel, got {type(kernel).__name__}")
    return fn


def _is_constexpr(annotation) -> bool:
    if annotation is None:
        return False
    if isinstance(annotation, str):
        return annotation.split(".")[-1] == "constexpr"
    import triton.language as tl

    return annotation is tl.constexpr


_LIBRARY_TWINS: Dict[int, Tuple[Any, Any]] = {}  # id(InterpretedFunction of triton.language) -> (it, its twin)


@contextmanager
def _real_jit_functions() -> Iterator:
    """Yield ``to_jit(kernel)``; meanwhile Triton's library uses ``JITFunction`` twins of interpreted ones."""
    from triton.runtime.jit import JITFunction

    try:
        from triton.runtime.interpreter import InterpretedFunction
    except ImportError:  # pragma: no cover - very old Triton
        InterpretedFunction = ()
    made: Dict[int, Any] = {}
    patched = []

    def twin(value):  # Triton's own functions live as long as the process: their twins are made once
        if not isinstance(value, InterpretedFunction):
            return value
        if id(value) not in _LIBRARY_TWINS:
            jit = JITFunction(value.fn, **{k: v for k, v in value.kwargs.items() if v is not None})
            _LIBRARY_TWINS[id(value)] = (value, jit)  # the original is held, so its id is never reused
        return _LIBRARY_TWINS[id(value)][1]

    def to_jit(kernel):
        return _rebind(kernel, JITFunction, made)

    namespaces = [
        m.__dict__
        for name, m in list(sys.modules.items())
        if name.startswith("triton.language") and isinstance(m, types.ModuleType)
    ]
    import triton.language as tl

    for namespace in namespaces:
        for name, value in list(namespace.items()):
            if isinstance(value, InterpretedFunction):
                patched.append((namespace, name, value))
                namespace[name] = twin(value)
    for name, value in list(vars(tl.tensor).items()):
        if isinstance(value, InterpretedFunction):
            patched.append((tl.tensor, name, value))
            setattr(tl.tensor, name, twin(value))
    try:
        yield to_jit
    finally:
        for owner, name, value in reversed(patched):
            if isinstance(owner, dict):
                owner[name] = value
            else:
                setattr(owner, name, value)


def _rebind(kernel, JITFunction, made):
    """A ``JITFunction`` of ``kernel``'s Python function whose globals hold JIT twins of jit helpers."""
    if id(kernel) in made and isinstance(made[id(kernel)], JITFunction):
        return made[id(kernel)]
    fn = _python_function(kernel)
    scope = dict(fn.__globals__)
    clone = types.FunctionType(fn.__code__, scope, fn.__name__, fn.__defaults__, fn.__closure__)
    clone.__module__, clone.__qualname__, clone.__doc__ = fn.__module__, fn.__qualname__, fn.__doc__
    clone.__annotations__ = dict(fn.__annotations__)
    kwargs = {k: v for k, v in getattr(kernel, "kwargs", {}).items() if v is not None}
    jit = JITFunction(clone, **kwargs)
    made[id(kernel)] = jit
    for name in fn.__code__.co_names:
        value = scope.get(name)
        if value is not kernel and type(value).__name__ in ("InterpretedFunction", "JITFunction"):
            scope[name] = _rebind(value, JITFunction, made)
    return jit


def _ptxas_resources(ptx: Optional[str], arch: int):
    """Registers per thread and spill bytes reported by ``ptxas -v`` (``None`` when ptxas is unavailable)."""
    if not ptx:
        return None, None
    try:
        from triton.backends.nvidia.compiler import get_ptxas, sm_arch_from_capability

        ptxas = get_ptxas(arch).path
        gpu_name = sm_arch_from_capability(arch)
    except Exception:  # noqa: BLE001 - resources are a bonus; the compile itself already succeeded
        return None, None
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "kernel.ptx"
        src.write_text(ptx)
        result = subprocess.run(
            [ptxas, "-v", f"--gpu-name={gpu_name}", str(src), "-o", str(Path(tmp) / "k.cubin")],
            capture_output=True,
            text=True,
        )
    log = result.stdout + result.stderr
    regs = re.search(r"Used (\d+) registers", log)
    stores = re.search(r"(\d+) bytes spill stores", log)
    return (int(regs.group(1)) if regs else None), (int(stores.group(1)) if stores else None)


def compile_error_message(error: BaseException) -> str:
    """What a Triton compile error says is wrong: the innermost cause's last line that is not a caret or blank
    (the outer errors only point at the call that led there)."""
    chain = [error]
    while len(chain) < 16:
        inner = chain[-1].__cause__ or chain[-1].__context__
        if inner is None or inner in chain:
            break
        chain.append(inner)
    for item in reversed(chain):
        lines = [line.strip() for line in str(item).strip().splitlines() if line.strip() and line.strip() != "^"]
        if lines:
            return lines[-1]
    return type(error).__name__


CAST_REFUSED = N_(
    "a float converted to an integer type is NaN or outside that type's range: Triton's interpreter gives "
    "-2147483648 there and a GPU build something else (LLVM's fptosi leaves it undefined: poison), so the two "
    "could take different branches; convert only values the integer type can hold"
)


def refuse_undefined_casts() -> None:
    """Make Triton's interpreter (in this process) raise ``ValueError(CAST_REFUSED)`` on a float-to-integer
    conversion of NaN or of a value outside the integer type's range, where it would give its own answer
    (numpy's: -2147483648 for int32) and a GPU build another. Idempotent."""
    import numpy as np
    from triton.runtime import interpreter

    builder = interpreter.interpreter_builder
    for method in ("create_fp_to_si", "create_fp_to_ui"):
        original = getattr(builder, method)
        if getattr(original, "_paged_kv_checked", False):
            continue

        def checked(src, dst_type, _original=original):
            target = np.dtype(interpreter._get_np_dtype(dst_type))
            if np.issubdtype(target, np.integer):
                data = np.asarray(src.data, dtype=np.float64)
                info = np.iinfo(target)
                # trunc(x) lies in [min, max] when min - 1 < x < max + 1 (at 64 bits float64 rounds the bounds: a
                # value at the very edge is refused with the rest)
                if np.isnan(data).any() or (data <= float(info.min) - 1).any() or (data >= float(info.max) + 1).any():
                    raise ValueError(CAST_REFUSED)
            return _original(src, dst_type)

        checked._paged_kv_checked = True
        setattr(builder, method, checked)
