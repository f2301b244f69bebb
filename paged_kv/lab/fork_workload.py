"""Lab 08's measurements: parallel sampling and beam search on the tiny model, with and without sharing.

``PAPER_FIG15`` holds what the vLLM paper reports for the same comparison (Kwon et al., "Efficient
Memory Management for Large Language Model Serving with PagedAttention", SOSP 2023, arXiv:2309.06180,
section 6.3 and Figure 15: OPT-13B serving the Alpaca trace; memory saving = blocks saved by sharing
divided by the blocks needed without sharing, averaged).
"""

from __future__ import annotations

from typing import Callable, Dict, Iterable, Optional, Sequence as SequenceType, Tuple

from paged_kv.cache.forking import ForkingBlockManager
from paged_kv.engine.cache_ops import copy_blocks as _copy_blocks
from paged_kv.engine.forking import ForkStats, advance_beams, beam_search, parallel_sample
from paged_kv.lab.i18n import N_

PAPER_FIG15 = {
    "parallel sampling": {2: 0.0609, 4: 0.0853, 6: 0.0979},  # number of output sequences
    "beam search": {2: 0.3756, 4: 0.5313, 6: 0.5516},  # beam width
}
PAPER_LABEL = N_("vLLM paper, Fig. 15 (OPT-13B, Alpaca trace)")  # translated where it is shown


def measure_savings(
    model,
    prompt_ids: SequenceType[int],
    sizes: Iterable[int] = (2, 4, 6),
    *,
    max_tokens: int = 48,
    block_size: int = 16,
    temperature: float = 0.8,
    seed: int = 0,
    manager_class: type = ForkingBlockManager,
    copy_blocks: Callable = _copy_blocks,
    advance: Callable = advance_beams,
) -> Dict[str, Dict[int, ForkStats]]:
    """``{"parallel sampling": {n: stats}, "beam search": {width: stats}}`` for one prompt."""
    sizes = list(sizes)
    out: Dict[str, Dict[int, ForkStats]] = {"parallel sampling": {}, "beam search": {}}
    for n in sizes:
        _, out["parallel sampling"][n] = parallel_sample(
            model,
            prompt_ids,
            n,
            max_tokens,
            temperature=temperature,
            seed=seed,
            block_size=block_size,
            manager_class=manager_class,
            copy_blocks=copy_blocks,
        )
        _, out["beam search"][n] = beam_search(
            model,
            prompt_ids,
            n,
            max_tokens,
            block_size=block_size,
            manager_class=manager_class,
            copy_blocks=copy_blocks,
            advance=advance,
        )
    return out


def savings_table(
    measured: Dict[str, Dict[int, ForkStats]], paper: Optional[Dict[str, Dict[int, float]]] = None
) -> str:
    """A text table: per kind and size, blocks held summed over steps (shared / independent) and the saving."""
    paper = PAPER_FIG15 if paper is None else paper
    rows = [f"{'':18} {'size':>4} {'blocks x steps, shared':>23} {'independent':>12} {'saved':>7} {'paper':>7}"]
    for kind, by_size in measured.items():
        for n, stats in by_size.items():
            theirs = paper.get(kind, {}).get(n)
            rows.append(
                f"{kind:18} {n:>4} {sum(stats.shared):>23} {sum(stats.independent):>12} "
                f"{100 * stats.saving:>6.1f}% " + (f"{100 * theirs:>6.2f}%" if theirs is not None else f"{'-':>7}")
            )
    return "\n".join(rows)


def expected_parallel_saving(prompt_len: int, max_tokens: int, n: int, block_size: int) -> Tuple[int, int]:
    """Blocks held at the end of parallel sampling: ``(shared, independent)``, counted the same way as
    ``ForkStats`` (after the last decode step, ``max_tokens - 1`` tokens appended to each branch).

    The prompt's full blocks are held once; each branch holds its own copy of the partial prompt block
    (copied on its first write, except the last writer's) and the blocks of its new tokens."""
    length = prompt_len + max_tokens - 1
    total = -(-length // block_size)
    shared_prompt = prompt_len // block_size
    return shared_prompt + n * (total - shared_prompt), n * total
