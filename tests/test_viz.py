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
