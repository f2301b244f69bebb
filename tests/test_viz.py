"""Pool pictures render to PNG for both managers, with shared blocks and tail waste."""
import pytest
from matplotlib.figure import Figure

from paged_kv import BlockManager, KVCacheManager, Request, Sequence, prefill
from paged_kv.viz import draw_block_manager, draw_kv_manager, draw_pool


def test_draw_kv_manager_saves_png(tmp_path):
    manager = KVCacheManager(12, 4, 2)
    reqs = [Request(i, n) for i, n in enumerate([5, 9, 2])]
    for req in reqs:
        manager.allocate_for_prefill(req)
    fig = draw_kv_manager(manager, reqs, title="three requests")
    assert isinstance(fig, Figure)
    path = tmp_path / "pool.png"
    fig.savefig(path)
    assert path.stat().st_size > 5000
    texts = [t.get_text() for ax in fig.axes for t in ax.texts]
    assert "req 1, 9 tok" in texts


def test_draw_block_manager_marks_shared_blocks(tmp_path):
    manager = BlockManager(10, 2)
    a, b = Sequence([1, 2, 3, 4, 5], block_size=2), Sequence([1, 2, 3, 4, 6, 7], block_size=2)
    prefill(manager, a)
    prefill(manager, b)
    fig = draw_block_manager(manager, [a, b])
    fig.savefig(tmp_path / "shared.png")
    texts = [t.get_text() for ax in fig.axes for t in ax.texts]
    assert any(text.endswith("x2") for text in texts), texts


def test_draw_pool_rejects_out_of_range_ids():
    with pytest.raises(ValueError, match="outside"):
        draw_pool(4, {"a": [0, 7]}, block_size=2)


def test_shared_blocks_show_one_stripe_per_holder_and_a_frame_in_every_table():
    from matplotlib.patches import Rectangle

    manager = BlockManager(8, 2)
    seqs = [Sequence([1, 2, 3, 4, 10 + i], block_size=2) for i in range(3)]
    for seq in seqs:
        prefill(manager, seq)
    fig = draw_block_manager(manager, seqs)
    pool, tables = fig.axes[0], fig.axes[1]
    stripes = [p for p in pool.patches if isinstance(p, Rectangle) and abs(p.get_width() - 0.92 / 3) < 1e-9]
    assert len(stripes) == 2 * 3  # blocks 0 and 1, three holders each
    frames = [p for p in tables.patches if not p.get_fill() and p.get_linewidth() == 2.5]
    assert len(frames) == 2 * 3


def test_hash_chain_picture_flags_a_content_hash_that_ignores_the_prefix():
    from paged_kv.viz import draw_hash_chains

    rows = [("a", ["x y", "z w"], [1, 2], [10, 11]), ("b", ["q y", "z w"], [3, 2], [12, 13])]
    fig = draw_hash_chains(rows)
    frames = [p for p in fig.axes[0].patches if not p.get_fill() and p.get_linestyle() == "--"]
    assert len(frames) == 2  # block 1 of each prompt: same content hash, different chains
