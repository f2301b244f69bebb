"""The kernel-reads picture colours read slots, hatches masked tail slots and labels padding entries."""

import pytest
import torch

from paged_kv.lab.viz import draw_kernel_reads, pool_columns


def test_reads_picture_marks_tails_padding_and_splits(tmp_path):
    tables = torch.tensor([[5, 2, 7, -1], [0, 3, 99, 99]], dtype=torch.int32)
    fig = draw_kernel_reads(tables, torch.tensor([10, 5]), block_size=4, num_blocks=9, tokens_per_split=8)
    fig.savefig(tmp_path / "reads.png")
    texts = [t.get_text() for ax in fig.axes for t in ax.texts]
    assert "pad (-1)" in texts and "pad (99)" in texts and "seq 0, 10 tok" in texts
    hatched = [p for p in fig.axes[0].patches if p.get_hatch()]
    assert len(hatched) == (12 - 10) + (8 - 5)  # unused slots of each sequence's last block
    assert len(fig.axes[1].lines) == 1  # one split boundary (seq 0 at token 8)


def test_reads_picture_rejects_tables_outside_the_pool():
    with pytest.raises(ValueError, match="outside the pool"):
        draw_kernel_reads([[0, 12]], [5], block_size=4, num_blocks=8)
    with pytest.raises(ValueError, match="does not fit"):
        draw_kernel_reads([[0]], [5], block_size=4, num_blocks=8)


def test_highlighted_sequence_shows_logical_order():
    fig = draw_kernel_reads([[5, 2, 7], [0, 3, 1]], [10, 9], block_size=4, num_blocks=8, highlight=0)
    texts = [t.get_text() for t in fig.axes[0].texts]
    assert {"block 5 = #0", "block 2 = #1", "block 7 = #2", "block 0"} <= set(texts)


@pytest.mark.parametrize("num_blocks, rows", [(1, 1), (9, 1), (12, 1), (13, 2), (20, 2), (21, 3), (64, 7)])
def test_pool_rows_are_even_and_no_block_is_left_alone_on_a_row(num_blocks, rows):
    ncols = pool_columns(num_blocks)
    assert -(-num_blocks // ncols) == rows
    last_row = num_blocks - (rows - 1) * ncols
    assert ncols <= 12 and (rows == 1 or last_row >= ncols - rows), (ncols, last_row)


def test_poisoned_batch_of_nine_blocks_is_one_row_with_labels_clear_of_the_next_row():
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    tables = [[4, 0, 9, 3], [6, 5, 7, 10], [2, 9, 10, 10]]  # lab 06's poisoned batch: 9 blocks, garbage padding
    fig = draw_kernel_reads(tables, [7, 12, 1], block_size=4, num_blocks=9)
    ax = fig.axes[0]
    labels = {t.get_text(): t for t in ax.texts}
    assert {t.get_position()[1] for t in labels.values()} == {labels["block 0"].get_position()[1]}, "one row"
    fig = draw_kernel_reads([list(range(20))], [80], block_size=4, num_blocks=20)
    ax = fig.axes[0]
    renderer = FigureCanvasAgg(fig).get_renderer()
    to_data = ax.transData.inverted()
    label = next(t for t in ax.texts if t.get_text() == "block 10")  # first block of the second row
    top = label.get_window_extent(renderer).transformed(to_data).y1
    above = max(p.get_y() for p in ax.patches if abs(p.get_x()) < 0.2)  # bottom of block 0's slots
    assert top < above, f"block 10's label reaches y={top:.2f}, block 0 starts at y={above:.2f}"
