"""Where Triton kernels run: natively on a supported NVIDIA GPU, or in Triton's interpreter on the CPU.

Decided once per process by :func:`configure`, which must run before any ``@triton.jit`` kernel is
defined: in interpreter mode it sets ``TRITON_INTERPRET=1`` first (Triton reads it when a kernel is
decorated, so a kernel defined before would stay a GPU kernel). Importing ``paged_kv.kernels.triton_kernels``
calls it for you. Rules, in order:

1. ``PAGED_KV_TRITON=interpret`` or ``=native`` forces a mode (``native`` still needs a CUDA GPU).
2. ``TRITON_INTERPRET=1`` already set: interpreter.
3. A CUDA GPU of compute capability 8.0 or newer (Ampere, Ada, Hopper, Blackwell): native. Triton's
   README lists "NVIDIA GPUs (Compute Capability 8.0+)" since Triton 3.3 (triton-lang/triton PR
   #5066, which made pre-Ampere GPUs fall back to FMA instead of tensor cores); older GPUs such as
   Colab's T4 (sm_75) are no longer supported (a T4 may still pass tests, as a user reports in that
   PR's thread), so they get the interpreter and an explanation instead of a crash.
4. Otherwise (no GPU): interpreter.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import warnings
from dataclasses import dataclass
from typing import Optional, Tuple

from paged_kv.cache.messages import N_

MIN_CAPABILITY = (8, 0)
_OVERRIDE = "PAGED_KV_TRITON"


@dataclass(frozen=True)
class TritonMode:
    """The decision: ``native`` (GPU kernels) or not (interpreter on CPU), the torch device to put
    tensors on, and a one-line ``reason`` a student can read."""

    native: bool
    device: str
    reason: str
    capability: Optional[Tuple[int, int]] = None

    @property
    def name(self) -> str:
        return N_("native GPU") if self.native else N_("interpreter (CPU)")

    def describe(self) -> str:
        return N_(f"Triton mode: {self.name}. {self.reason}")


_MODE: Optional[TritonMode] = None


def _cuda_capability() -> Tuple[Optional[Tuple[int, int]], str]:
    import torch

    if not torch.cuda.is_available():
        return None, ""
    return tuple(torch.cuda.get_device_capability()), torch.cuda.get_device_name()


def decide(
    override: Optional[str], interpret_env: Optional[str], capability: Optional[Tuple[int, int]], gpu_name: str = ""
) -> TritonMode:
    """Pure decision from the environment and the GPU's compute capability (``None``: no CUDA GPU)."""
    if override not in (None, "", "interpret", "native"):
        raise ValueError(f"{_OVERRIDE} must be 'interpret' or 'native', got {override!r}")
    if override == "native":
        if capability is None:
            raise RuntimeError(f"{_OVERRIDE}=native but torch sees no CUDA GPU; unset it to use the interpreter")
        return TritonMode(
            True,
            "cuda",
            N_(f"forced by {_OVERRIDE}=native on {gpu_name} (sm_{capability[0]}{capability[1]})"),
            capability,
        )
    if override == "interpret":
        reason = N_(f"forced by {_OVERRIDE}=interpret: kernels run on the CPU, slowly")
        return TritonMode(False, "cpu", reason, capability)
    if interpret_env not in (None, "", "0", "false", "False"):
        return TritonMode(False, "cpu", N_("TRITON_INTERPRET=1 was already set: kernels run on the CPU"), capability)
    if capability is None:
        return TritonMode(
            False,
            "cpu",
            N_(
                "no CUDA GPU: kernels run in Triton's interpreter on the CPU "
                "(same code, numpy underneath; correct but slow, so sizes stay small)"
            ),
        )
    sm = f"sm_{capability[0]}{capability[1]}"
    if tuple(capability) < MIN_CAPABILITY:
        return TritonMode(
            False,
            "cpu",
            N_(
                f"{gpu_name or 'this GPU'} is {sm}; Triton 3.3+ supports compute capability "
                "8.0+ only (a T4 is 7.5), so kernels run in the interpreter on the CPU. "
                "For native speed choose an L4, A100 or H100 runtime."
            ),
            capability,
        )
    return TritonMode(True, "cuda", N_(f"{gpu_name} ({sm}): kernels are compiled for the GPU"), capability)


def configure() -> TritonMode:
    """Decide the mode once (idempotent); set ``TRITON_INTERPRET=1`` when kernels must be interpreted."""
    global _MODE
    if _MODE is not None:
        return _MODE
    capability, gpu_name = _cuda_capability()
    mode = decide(os.environ.get(_OVERRIDE), os.environ.get("TRITON_INTERPRET"), capability, gpu_name)
    _check_not_imported_in_other_mode(mode)
    problem = None if mode.native else interpreter_problem(_installed_version("triton"), _installed_version("numpy"))
    if problem:
        warnings.warn(problem, RuntimeWarning, stacklevel=2)
        mode = TritonMode(mode.native, mode.device, N_(f"{mode.reason} WARNING: {problem}"), mode.capability)
    if not mode.native:
        os.environ["TRITON_INTERPRET"] = "1"
        if triton_available():
            _scope_device_calls()
    elif os.environ.get("TRITON_INTERPRET") not in (None, "", "0"):
        os.environ["TRITON_INTERPRET"] = "0"
    _MODE = mode
    return mode


def _version_tuple(version: str) -> Tuple[int, int]:
    parts = (version.split("+")[0].split(".") + ["0"])[:2]
    return tuple(int("".join(ch for ch in part if ch.isdigit()) or 0) for part in parts)


def interpreter_problem(triton_version: Optional[str], numpy_version: Optional[str]) -> Optional[str]:
    """Why this Triton cannot interpret kernels with this numpy, or ``None``. Triton's interpreter before 3.7
    turns 1-element arrays into ints with ``int(array)``, which numpy 2.4 refuses ("only 0-dimensional
    arrays can be converted to Python scalars": triton-lang/triton#9171, fixed by #9172 in Triton 3.7)."""
    if not triton_version or not numpy_version:
        return None
    if _version_tuple(triton_version) < (3, 7) and _version_tuple(numpy_version) >= (2, 4):
        return N_(
            f"Triton {triton_version}'s interpreter fails with numpy {numpy_version} (triton-lang/triton#9171): "
            "`pip install 'numpy<2.4'` or `pip install 'triton>=3.7'`."
        )
    return None


def _installed_version(package: str) -> Optional[str]:
    try:
        from importlib.metadata import PackageNotFoundError, version
    except ImportError:  # pragma: no cover - Python < 3.8
        return None
    try:
        return version(package)
    except PackageNotFoundError:
        return None


def _check_not_imported_in_other_mode(mode: TritonMode) -> None:
    """Triton decorates its own library (``tl.max``, ``tl.sum``) when first imported: it must agree with ``mode``."""
    language = sys.modules.get("triton.language")
    if language is None:
        return
    interpreted = type(getattr(language, "max", None)).__name__ == "InterpretedFunction"
    if interpreted != (not mode.native):
        raise RuntimeError(
            f"triton was imported before the course chose its mode ({mode.name}), in the other mode. "
            "Restart the kernel and run the setup cell before importing triton yourself."
        )


def _scope_device_calls() -> None:
    """Make the interpreter undo its language patches after each call of a jit helper (``tl.max``...).

    Triton 3.7's ``InterpretedFunction.__call__`` patches ``triton.language.core`` for the helper and
    never restores it, so after any kernel that calls ``tl.max`` or ``tl.sum`` the compiler would see
    interpreter builtins and ``triton.compile`` for a GPU target would fail in the same process.
    """
    from triton.runtime import interpreter

    call = interpreter.InterpretedFunction.__call__
    if getattr(call, "_paged_kv_scoped", False) or not hasattr(interpreter, "_patch_lang"):
        return
    original_patch = interpreter._patch_lang

    def scoped_call(self, *args, **kwargs):
        scopes = []

        def recording_patch(fn):
            scope = original_patch(fn)
            scopes.append(scope)
            return scope

        interpreter._patch_lang = recording_patch
        try:
            return call(self, *args, **kwargs)
        finally:
            interpreter._patch_lang = original_patch
            for scope in reversed(scopes):
                if hasattr(scope, "restore"):
                    scope.restore()

    scoped_call._paged_kv_scoped = True
    interpreter.InterpretedFunction.__call__ = scoped_call


def triton_available() -> bool:
    """Whether the ``triton`` package is installed (Colab's CPU runtimes do not ship it)."""
    if "triton" in sys.modules:
        return sys.modules["triton"] is not None
    try:
        return importlib.util.find_spec("triton") is not None
    except (ImportError, ValueError):
        return False


def require_triton() -> None:
    """Raise a readable ``ImportError`` when triton is missing."""
    if not triton_available():
        raise ImportError(
            "the Triton kernels need the 'triton' package, which this Python does not have "
            "(Colab's CPU runtimes do not ship it). Install it with `pip install triton` "
            "(Linux x86-64); on CPU its interpreter runs the kernels."
        )
