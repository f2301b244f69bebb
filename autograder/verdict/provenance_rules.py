"""What a submitted cell may not use, and what a refusal is: the lists ``autograder.verdict.provenance`` reads a
submission against (its module doc says why each is refused) and its ``Finding``."""

from __future__ import annotations

import re
from dataclasses import dataclass

ALLOWED_MODULES = {
    "math",
    "cmath",
    "collections",
    "itertools",
    "functools",
    "heapq",
    "bisect",
    "typing",
    "dataclasses",
    "enum",
    "random",
    "statistics",
    "time",
    "copy",
    "numbers",
    "fractions",
    "decimal",
    "array",
    "abc",
    "textwrap",
    "pprint",
    "re",
    "json",
    "hashlib",
    "struct",
    "contextlib",
    "warnings",
    "operator",
    "datetime",
    "numpy",
    "torch",
    "triton",
    "xxhash",
    "matplotlib",
    "ipywidgets",
    "__future__",
}
DENIED_SUBMODULES = (
    "torch.utils.cpp_extension",
    "torch.multiprocessing",
    "torch.hub",
    "torch.package",
    "torch.serialization",
    "torch.distributed",
    "torch.utils.data",
    "torch.jit",
    "torch.library",
    "numpy.ctypeslib",
    "numpy.f2py",
    "numpy.distutils",
    "triton.runtime",
    "triton.backends",
    "triton.compiler",
    "matplotlib.cbook",
    "ipywidgets.embed",
)
DENIED_NAMES = {
    "eval",
    "exec",
    "compile",
    "__import__",
    "globals",
    "locals",
    "vars",
    "breakpoint",
    "get_ipython",
    "In",
    "Out",
    "_ih",
    "_oh",
    "_dh",
    "_i",
    "_ii",
    "_iii",
    "exit",
    "quit",
    "__builtins__",
    "__builtin__",
    "__loader__",
    "__spec__",
    "__file__",
    "input",
    "help",
}
HISTORY_NAME = re.compile(r"^_(i?\d+|_+)$")
MODEL_DUNDERS = {
    "__init__",
    "__new__",
    "__post_init__",
    "__name__",
    "__qualname__",
    "__doc__",
    "__repr__",
    "__str__",
    "__format__",
    "__len__",
    "__iter__",
    "__next__",
    "__reversed__",
    "__contains__",
    "__getitem__",
    "__setitem__",
    "__delitem__",
    "__missing__",
    "__eq__",
    "__ne__",
    "__lt__",
    "__le__",
    "__gt__",
    "__ge__",
    "__hash__",
    "__bool__",
    "__call__",
    "__enter__",
    "__exit__",
    "__add__",
    "__sub__",
    "__mul__",
    "__truediv__",
    "__floordiv__",
    "__mod__",
    "__pow__",
    "__neg__",
    "__pos__",
    "__abs__",
    "__index__",
    "__int__",
    "__float__",
    "__radd__",
    "__rsub__",
    "__rmul__",
    "__iadd__",
    "__isub__",
    "__matmul__",
    "__and__",
    "__or__",
    "__xor__",
}
DENIED_ATTRIBUTES = {
    "mro",
    "sys",
    "os",
    "builtins",
    "gc",
    "inspect",
    "importlib",
    "ctypes",
    "ctypeslib",
    "types",
    "subprocess",
    "modules",
    "pickle",
    "marshal",
    "threading",
    "multiprocessing",
    "signal",
    "socket",
    "attrgetter",
    "methodcaller",
    "get_type_hints",
    "load_library",
    "load_inline",
    "cpp_extension",
    "get_field",
    "f2py",
}
DENIED_MODULE_CALLS = {
    ("numpy", "load"),
    ("torch", "load"),
    ("numpy", "loads"),
    ("torch", "loads"),
    ("numpy", "fromregex"),
}
FRAME_ATTRIBUTE = re.compile(r"^(f|tb|gi|cr|ag|co)_[a-z]+$")
DENIED_COURSE_NAMES = {"with_reference_todos", "starter"}
ALLOWED_MAGICS = {"time", "timeit", "matplotlib"}
TODO, BELOW = "todo", "below"  # a finding costs its TODO's tests, or every test below it


@dataclass
class Finding:
    """One refused construct: where (cell, line, the line's text), why, and what it costs."""

    cell_index: int
    cell_label: str
    line: int
    code: str
    rule: str
    scope: str = TODO

    def describe(self) -> str:
        return f"{self.cell_label}, line {self.line}: `{self.code}`: {self.rule}"
