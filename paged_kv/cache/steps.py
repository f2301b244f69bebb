"""The few lines of an engine loop that drive a ``BlockManager`` (what nano-vllm's scheduler does).

``prefill`` admits a sequence (prefix hits first) and caches its prompt; ``decode_step`` adds one
generated token and caches it. Both raise ``RuntimeError('OOM ...')`` and change nothing when the
pool is too small. Tests, graders, pictures and benchmarks all drive managers through these.
"""

from __future__ import annotations

from paged_kv.cache.checks import check_instance
from paged_kv.cache.prefix_cache import BlockManagerBase, Sequence


def compute_rest(manager: BlockManagerBase, seq: Sequence) -> None:
    """The model computed every token of ``seq`` not cached yet (a prefill); see ``compute``."""
    compute(manager, seq, len(seq) - seq.num_cached_tokens)


def compute(manager: BlockManagerBase, seq: Sequence, num_tokens: int) -> None:
    """The engine's part of a step after the model ran ``num_tokens`` of ``seq``'s tokens: the manager
    registers the blocks they filled (``hash_blocks``), then they count as cached."""
    seq.num_scheduled_tokens = num_tokens
    manager.hash_blocks(seq)
    seq.num_cached_tokens += seq.num_scheduled_tokens
    seq.num_scheduled_tokens = 0


def prefill(manager: BlockManagerBase, seq: Sequence) -> int:
    """Allocate ``seq`` (reusing cached prefix blocks), cache all its tokens; return the blocks hit."""
    check_instance("manager", manager, BlockManagerBase)
    num_cached_blocks = manager.can_allocate(seq)
    if num_cached_blocks == -1:
        raise RuntimeError(
            f"OOM: sequence {seq.seq_id} needs up to {seq.num_blocks} block(s), only {manager.num_free_blocks} free"
        )
    manager.allocate(seq, num_cached_blocks)
    compute_rest(manager, seq)
    return num_cached_blocks


def decode_step(manager: BlockManagerBase, seq: Sequence, token_id: int) -> None:
    """Append ``token_id`` to a prefilled ``seq``, give it a slot (new block if needed), cache it."""
    check_instance("manager", manager, BlockManagerBase)
    check_instance("seq", seq, Sequence)
    seq.append_token(token_id)
    try:
        manager.may_append(seq)
    except Exception:
        seq.token_ids.pop()  # leave the sequence as it was
        raise
    compute_rest(manager, seq)
