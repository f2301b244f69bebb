"""Lab 08's test helpers: what sharing looks like as plain data, small caches to copy, one engine step.

``pool_shape`` names blocks by where they first appear (``b0`` is the first block of the first table,
and so on; a copy's source is named just before its destination, so a copy on write reads source ->
destination, ``("b1", "b2")``), so two managers that share the same logical blocks compare equal whatever
physical ids their free queues handed out.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Dict, List, Sequence as SequenceType, Tuple

from paged_kv.cache.checks import check_instance, check_int, check_positive_int
from paged_kv.cache.prefix_cache import BlockManagerBase, Sequence
from paged_kv.cache.steps import compute
from paged_kv.lab.feedback import CheckFailed, materialize
from paged_kv.lab.i18n import _

if TYPE_CHECKING:  # annotations only: the lab's other helpers run in boxes that never import torch
    import torch


def canonical_names(
    tables: SequenceType[SequenceType[int]], copies: SequenceType[Tuple[int, int]] = ()
) -> Dict[int, str]:
    """``{physical id: "b<k>"}``, ``k`` counting blocks in their order of first appearance in ``tables``;
    a block that is the destination of one of ``copies`` ``(src, dst)`` gets its name right after its
    source's, so every copy reads in name order (source first) when the source is still in a table."""
    names: Dict[int, str] = {}
    source_of = {}
    held = {b for table in tables for b in table}
    for src, dst in copies:
        if src in held:
            source_of.setdefault(dst, src)
    for table in tables:
        for block_id in table:
            if block_id not in names and block_id in source_of:
                names.setdefault(source_of[block_id], f"b{len(names)}")
            names.setdefault(block_id, f"b{len(names)}")
    return names


def shape_of_state(
    tables: SequenceType[SequenceType[int]],
    ref_counts: SequenceType[int],
    num_free: int,
    copies: SequenceType[Tuple[int, int]],
) -> dict:
    """``pool_shape`` from plain values: tables, ``ref_counts`` indexed by block id, free count, copies."""
    names = canonical_names(tables, copies)
    return {
        "tables": [[names[b] for b in table] for table in tables],
        "ref counts": {names[b]: ref_counts[b] for b in names},
        "free blocks": num_free,
        "copies": [
            (names.get(src, f"block {src}, in no table"), names.get(dst, f"block {dst}, in no table"))
            for src, dst in copies
        ],
    }


def pool_shape(manager: BlockManagerBase, seqs: SequenceType[Sequence]) -> dict:
    """The sharing of ``seqs``' tables, independent of physical ids: ``{"tables": [["b0", "b2"], ["b0",
    "b1"]], "ref counts": {"b0": 2, ...}, "free blocks": n, "copies": [("b1", "b2")]}`` (copies: the
    manager's ``pending_copies``, if it has them, as (source, destination)). Blocks are named ``b0, b1,
    ...`` in the order they first appear in the tables, except that a copy's source is named just before
    its destination; a block that a copy names but no table lists shows as ``"block <id>, in no table"``."""
    check_instance("manager", manager, BlockManagerBase)
    seqs = list(seqs)
    for seq in seqs:
        check_instance("seq", seq, Sequence)
    return shape_of_state(
        [list(s.block_table) for s in seqs],
        [b.ref_count for b in manager.blocks],
        manager.num_free_blocks,
        list(getattr(manager, "pending_copies", [])),
    )


def step_computed(manager: BlockManagerBase, seqs: SequenceType[Sequence]) -> List[Tuple[int, int]]:
    """The engine's part of a decode step after ``may_append``: take the step's copies (the runner would
    perform them now), then each sequence's newest token is computed and cached. Returns the copies."""
    copies = manager.take_copies() if hasattr(manager, "take_copies") else []
    for seq in seqs:
        compute(manager, seq, len(seq) - seq.num_cached_tokens)
    return copies


def make_caches(
    num_layers: int, num_blocks: int, block_size: int = 2, num_kv_heads: int = 1, head_dim: int = 2
) -> Tuple[List["torch.Tensor"], List["torch.Tensor"]]:
    """``(k_caches, v_caches)``: per layer ``[num_blocks, block_size, num_kv_heads, head_dim]`` float32
    tensors whose every value is different (K positive, V negative), so a copy shows where it came from."""
    import torch  # here, not at the top: the lab's other helpers run in boxes that never need torch

    shape = (
        check_positive_int("num_blocks", num_blocks),
        check_positive_int("block_size", block_size),
        check_positive_int("num_kv_heads", num_kv_heads),
        check_positive_int("head_dim", head_dim),
    )
    per_layer = num_blocks * block_size * num_kv_heads * head_dim
    k = [
        torch.arange(per_layer, dtype=torch.float32).reshape(shape) + 1 + layer * per_layer
        for layer in range(check_positive_int("num_layers", num_layers))
    ]
    return k, [-t for t in k]


SEQUENCE_FIELDS = ("block_size", "token_ids", "num_prompt_tokens", "num_cached_tokens", "num_scheduled_tokens")


def fork_fields(child: Sequence, parent: Sequence) -> dict:
    """What a fork must get right about the child itself, as plain data: each of ``SEQUENCE_FIELDS``
    (a missing one reads ``None``), whether it is a new ``Sequence`` with its own ``seq_id``, and whether
    its ``token_ids`` and ``block_table`` are lists of its own rather than the parent's."""
    check_instance("parent", parent, Sequence)
    fields = {name: _plain(getattr(child, name, None)) for name in SEQUENCE_FIELDS}
    fields["a Sequence"] = isinstance(child, Sequence)
    fields["its own seq_id"] = child is not parent and getattr(child, "seq_id", None) != parent.seq_id
    fields["its own token_ids list"] = getattr(child, "token_ids", None) is not parent.token_ids
    fields["its own block_table list"] = getattr(child, "block_table", None) is not parent.block_table
    return fields


def _plain(value):
    """``value`` as plain data: ints, lists of ints; anything else as its type's name (never the object)."""
    if type(value) is int:
        return value
    if type(value) is list and all(type(v) is int for v in value):
        return list(value)
    return f"<{type(value).__name__}>"


# -- the reference's beam search on the notebook's picture, recorded -------------------------------------
BEAMS_RECORDED = Path(__file__).with_name("beam_search_recording.json")


def beam_key(prompt_ids: SequenceType[int], width: int, max_tokens: int, block_size: int) -> str:
    """The recording's key for one beam search of the tiny model."""
    prompt = [check_int("token id", t, minimum=0) for t in prompt_ids]
    return (
        f"prompt={','.join(map(str, prompt))};width={check_positive_int('width', width)};"
        f"max_tokens={check_positive_int('max_tokens', max_tokens)};"
        f"block_size={check_positive_int('block_size', block_size)}"
    )


def recorded_beam_search(prompt_ids: SequenceType[int], width: int, max_tokens: int, block_size: int) -> dict:
    """What the reference's ``beam_search`` of the tiny model gave on these arguments: ``{"choices":
    [[(parent, token), ...] per step], "beams": [generated tokens, best first]}`` (written by
    ``tools/record_beam_search.py``). ``KeyError`` if this search was not recorded."""
    key = beam_key(prompt_ids, width, max_tokens, block_size)
    recorded = json.loads(BEAMS_RECORDED.read_text())
    if key not in recorded:
        raise KeyError(f"no recorded beam search for {key}; run python -m tools.record_beam_search")
    entry = recorded[key]
    return {"choices": [[tuple(c) for c in step] for step in entry["choices"]], "beams": entry["beams"]}


def expect_reference_beams(
    results, choices, prompt_ids: SequenceType[int], width: int, max_tokens: int, block_size: int
) -> None:
    """``CheckFailed`` at the first step where a beam search's choices (``ForkStats.choices``) leave the
    reference's recorded ones, or if its final beams (``(tokens, score)``, best first) differ."""
    want = recorded_beam_search(prompt_ids, width, max_tokens, block_size)
    got = [[tuple(c) for c in step] for step in materialize(choices)]
    hint = _(
        "the search scored each beam with the logits of another sequence than the one it expected: new beam "
        "i must be the one choices[i] names (part 3), with its own blocks and copies (parts 1, 2, 4)"
    )
    for step, (mine, theirs) in enumerate(zip(got, want["choices"])):
        if mine != theirs:
            number = step + 1
            raise CheckFailed(
                _(f"beam search, step {number}: (beam, token) chosen"),
                _("they differ from the reference's beam search on the same model and prompt"),
                expected=theirs,
                got=mine,
                hint=hint,
            )
    tokens = [list(t) for t, _ in materialize(results)]
    if len(got) != len(want["choices"]) or tokens != want["beams"]:
        raise CheckFailed(
            _("beam search: the final beams' tokens"),
            _("they differ from the reference's"),
            expected=want["beams"],
            got=tokens,
            hint=hint,
        )
