"""What every step of lab 06's catalogue of kernels shares: Triton set up for this machine, ``define_kernel``
(a ``@triton.jit`` function made from a source text, the way a bug is switched on in a shared program) and the lab's
grids (``blocks_grid`` for steps 1 and 2, ``decode_grid`` for step 4)."""

from paged_kv.kernels.triton_mode import configure

configure()  # the interpreter or the GPU, decided before triton is imported

import triton  # noqa: E402
import triton.language as tl  # noqa: E402, F401 - the steps' kernels take tl from here


def define_kernel(source: str, name: str, names: dict = None):
    """The @triton.jit function ``name`` that ``source`` defines, with triton, tl and ``names`` in scope (its source
    kept in ``linecache``, so ``inspect.getsource`` reads it as the grader reads a student's cell)."""
    import linecache

    filename = f"<lab06 catalogue {name}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    namespace = {**globals(), **(names or {})}
    exec(compile(source, filename, "exec"), namespace)
    return namespace[name]


def blocks_grid(seq_len, block_size):
    return (triton.cdiv(seq_len, block_size),)


def decode_grid(num_seqs, num_kv_heads):
    return (num_seqs, num_kv_heads)
