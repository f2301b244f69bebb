"""copy_blocks: copy-on-write's copies in every layer, at once, refusing what would depend on order."""

from __future__ import annotations

import pytest
import torch

from paged_kv.engine.cache_ops import copy_blocks


def _caches(layers=2, blocks=6):
    torch.manual_seed(0)
    return (
        [torch.randn(blocks, 4, 2, 8) for _ in range(layers)],
        [torch.randn(blocks, 4, 2, 8) for _ in range(layers)],
    )


def test_every_layers_destination_gets_its_sources_slots_and_nothing_else_changes():
    ks, vs = _caches()
    before = [c.clone() for c in ks + vs]
    copy_blocks(ks, vs, [(1, 4), (3, 0)])
    for old, new in zip(before, ks + vs):
        assert torch.equal(new[4], old[1]) and torch.equal(new[0], old[3])
        assert all(torch.equal(new[b], old[b]) for b in (1, 2, 3, 5))


@pytest.mark.parametrize(
    "copies, says",
    [([(1, 9)], "outside the pool"), ([(1, 2), (2, 3)], "also a source"), ([(1, 2), (3, 2)], "written twice")],
)
def test_copies_that_cannot_be_done_at_once_are_refused_and_change_nothing(copies, says):
    ks, vs = _caches()
    before = [c.clone() for c in ks + vs]
    with pytest.raises(ValueError, match=says):
        copy_blocks(ks, vs, copies)
    assert all(torch.equal(a, b) for a, b in zip(before, ks + vs))
