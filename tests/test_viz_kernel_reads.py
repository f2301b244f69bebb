"""The kernel-reads picture colours read slots, hatches masked tail slots and labels padding entries."""
import pytest
import torch

from paged_kv.viz import draw_kernel_reads


def test_reads_picture_marks_tails_padding_and_splits(tmp_path):
    tables = torch.tensor([[5, 2, 7, -1], [0, 3, 99, 99]], dtype=torch.int32)
    fig = draw_kernel_reads(tables, torch.tensor([10, 5]), block_size=4, num_blocks=9, tokens_per_split=8)
    fig.savefig(tmp_path / "reads.png")
    texts = [t.get_text() for ax in fig.axes for t in ax.texts]
    assert "pad (-1)" in texts and "pad (99)" in texts and "seq 0, 10 tok" in texts
    hatched = [p for p in fig.axes[0].patches if p.get_hatch()]
    assert len(hatched) == (12 - 10) + (8 - 5)  # unused slots of each sequence's last block
    assert len(fig.axes[1].lines) == 1          # one split boundary (seq 0 at token 8)


def test_reads_picture_rejects_tables_outside_the_pool():
    with pytest.raises(ValueError, match="outside the pool"):
        draw_kernel_reads([[0, 12]], [5], block_size=4, num_blocks=8)
    with pytest.raises(ValueError, match="does not fit"):
        draw_kernel_reads([[0]], [5], block_size=4, num_blocks=8)


def test_highlighted_sequence_shows_logical_order():
    fig = draw_kernel_reads([[5, 2, 7], [0, 3, 1]], [10, 9], block_size=4, num_blocks=8, highlight=0)
    texts = [t.get_text() for t in fig.axes[0].texts]
    assert {"block 5 = #0", "block 2 = #1", "block 7 = #2", "block 0"} <= set(texts)
