"""The Triton language a kernel's text may use, as fixed lists: what ``triton_text`` reads a kernel against.

The builtins the code generator accepts less introspection, ``tl``'s public names (from the installed Triton, less
those whose answer depends on the target), ``tl.math``'s functions, the public API of ``tl.tensor`` and of Triton's
dtypes, the attributes never allowed, the calls whose f-strings are only a message, and the operators the compiler
lowers. The builtins, the dtype API and the tensor API were reviewed against Triton 3.7's code generator
(``builtin_namespace``) and ``dir(tl.tensor)``.
"""

from __future__ import annotations

import ast
from functools import lru_cache

# The code generator's builtin_namespace (len, list, range, float, int, isinstance, getattr, hasattr, print,
# min, max) less what inspects an object: the compiler answers those once, on its own values.
BUILTINS = frozenset({"range", "min", "max", "float", "int", "len", "list", "print"})
INTROSPECTION = frozenset(
    {
        "hasattr",
        "getattr",
        "setattr",
        "delattr",
        "isinstance",
        "issubclass",
        "type",
        "vars",
        "dir",
        "globals",
        "locals",
        "id",
        "callable",
        "eval",
        "exec",
        "compile",
        "__import__",
        "open",
        "super",
        "object",
        "repr",
        "str",
        "bool",
        "breakpoint",
        "input",
        "memoryview",
    }
)
MODULES = ("tl", "triton")
TRITON_FUNCTIONS = frozenset({"cdiv", "next_power_of_2"})
TL_REFUSED = frozenset({"extra", "target_info"})  # answers that depend on the target the code is built for
# tl.tensor's public methods and attributes (dir(tl.tensor) in Triton 3.7, and what __init__ sets), less
# .item and .handle: the interpreter's tensors hold numpy arrays there.
TENSOR_API = frozenset(
    {
        "T",
        "abs",
        "advance",
        "argmax",
        "argmin",
        "associative_scan",
        "atomic_add",
        "atomic_and",
        "atomic_cas",
        "atomic_max",
        "atomic_min",
        "atomic_or",
        "atomic_xchg",
        "atomic_xor",
        "broadcast_to",
        "cast",
        "cdiv",
        "ceil",
        "cos",
        "cumprod",
        "cumsum",
        "erf",
        "exp",
        "exp2",
        "expand_dims",
        "flip",
        "floor",
        "gather",
        "histogram",
        "log",
        "log2",
        "logical_and",
        "logical_or",
        "max",
        "min",
        "permute",
        "ravel",
        "reduce",
        "reduce_or",
        "reshape",
        "rsqrt",
        "sigmoid",
        "sin",
        "softmax",
        "sort",
        "split",
        "sqrt",
        "sqrt_rn",
        "store",
        "sum",
        "to",
        "trans",
        "view",
        "xor_sum",
        "dtype",
        "shape",
        "type",
        "numel",
    }
)
# Triton's dtypes (tl.dtype, tl.pointer_type, tl.block_type): what a kernel asks of them.
DTYPE_API = frozenset(
    {
        "element_ty",
        "scalar",
        "name",
        "primitive_bitwidth",
        "int_bitwidth",
        "int_signedness",
        "fp_mantissa_width",
        "exponent_bias",
        "address_space",
        "const",
        "nbytes",
        "with_element_ty",
        "get_int_max_value",
        "get_int_min_value",
        "is_bf16",
        "is_block",
        "is_bool",
        "is_const",
        "is_dtype",
        "is_floating",
        "is_fp16",
        "is_fp32",
        "is_fp64",
        "is_fp8",
        "is_fp8e4b15",
        "is_fp8e4b8",
        "is_fp8e4nv",
        "is_fp8e5",
        "is_fp8e5b16",
        "is_int",
        "is_int1",
        "is_int16",
        "is_int32",
        "is_int64",
        "is_int8",
        "is_int_signed",
        "is_int_unsigned",
        "is_ptr",
        "is_standard_floating",
        "is_uint16",
        "is_uint32",
        "is_uint64",
        "is_uint8",
        "is_void",
    }
)
NEVER = frozenset({"handle", "data", "item", "tolist", "numpy", "fn", "src"})
MESSAGE_CALLS = frozenset({"print", "static_print", "device_print", "static_assert", "device_assert"})
BIN_OPS = (
    ast.Add,
    ast.Sub,
    ast.Mult,
    ast.Div,
    ast.FloorDiv,
    ast.Mod,
    ast.Pow,
    ast.LShift,
    ast.RShift,
    ast.BitAnd,
    ast.BitOr,
    ast.BitXor,
)
COMPARE_OPS = (ast.Eq, ast.NotEq, ast.Lt, ast.LtE, ast.Gt, ast.GtE)


@lru_cache(maxsize=1)
def tl_names() -> frozenset:
    """``triton.language``'s public names a kernel may use (``tl.load``, ``tl.float32``, ``tl.math``, ...)."""
    try:
        from paged_kv.kernels.triton_mode import configure

        configure()  # the course decides GPU or interpreter before triton is imported, once per process
        import triton.language as tl
    except ImportError:  # pragma: no cover - no Triton, no kernel lab
        return frozenset()
    return frozenset(n for n in getattr(tl, "__all__", ()) if not n.startswith("_")) - TL_REFUSED


@lru_cache(maxsize=1)
def tl_math_names() -> frozenset:
    """``tl.math``'s functions a kernel may call (``tl.math.exp2``, ...): its lower-case public names, no module."""
    if not tl_names():  # pragma: no cover
        return frozenset()
    try:
        import triton.language as tl
    except ImportError:  # pragma: no cover
        return frozenset()
    import types

    return frozenset(
        n
        for n in dir(tl.math)
        if not n.startswith("_") and not isinstance(getattr(tl.math, n), types.ModuleType) and n[0].islower()
    )
