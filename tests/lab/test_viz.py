"""Pool pictures render to PNG for both managers, with shared blocks and tail waste."""

import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from paged_kv import BlockManager, KVCacheManager, Request, Sequence, prefill
from paged_kv.lab.viz import draw_block_manager, draw_kv_manager, draw_pool


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


def _legend_labels(fig):
    return [t.get_text() for ax in fig.axes if ax.get_legend() for t in ax.get_legend().get_texts()]


def test_pool_legend_names_shared_blocks_only_when_something_is_shared():
    manager = KVCacheManager(8, 4, 2)
    reqs = [Request(0, 6), Request(1, 4)]
    for req in reqs:
        manager.allocate_for_prefill(req)
    labels = _legend_labels(draw_kv_manager(manager, reqs))
    assert not any("shared" in label for label in labels), labels
    assert any("tail" in label for label in labels)
    shared = BlockManager(10, 2)
    a, b = Sequence([1, 2, 3, 4, 5], block_size=2), Sequence([1, 2, 3, 4, 6, 7], block_size=2)
    prefill(shared, a)
    prefill(shared, b)
    assert any("shared" in label for label in _legend_labels(draw_block_manager(shared, [a, b])))


def test_block_ids_sit_on_a_white_background_on_every_cell():
    manager = KVCacheManager(6, 4, 2)
    req = Request(0, 5)  # the second block is a pale, partly filled one
    manager.allocate_for_prefill(req)
    fig = draw_kv_manager(manager, [req])
    ids = [t for ax in fig.axes for t in ax.texts if t.get_text() in {"0", "1", "5"}]
    assert ids and all(t.get_bbox_patch() is not None and t.get_color() == "#111111" for t in ids)


def test_kv_memory_plot_stops_each_model_at_its_context_and_names_twin_lines():
    from paged_kv import MODEL_PRESETS, estimate_kv_cache_bytes
    from paged_kv.lab.viz import plot_kv_memory

    fig = plot_kv_memory(estimate_kv_cache_bytes, MODEL_PRESETS.values(), context_len=32768, highlight="Llama-2-7B")
    ax = fig.axes[0]
    solid = {line.get_label(): line for line in ax.get_lines() if not line.get_label().startswith("_")}
    llama2 = next(line for label, line in solid.items() if label.startswith("Llama-2-7B"))
    assert max(llama2.get_xdata()) == 4096, "Llama-2-7B's line must end at its 4,096-token context"
    mistral = next(label for label in solid if label.startswith("Mistral-7B-v0.3"))
    assert "same line as Llama-3.1-8B" in mistral
    star = [line for line in ax.get_lines() if line.get_marker() == "*"]
    assert star and star[0].get_xdata()[0] == 4096, "the star is clipped to the model's context"


def test_fragmentation_plot_shows_waste_and_bookkeeping():
    from paged_kv.lab.simulate import fragmentation_by_block_size, random_request_lengths
    from paged_kv.lab.viz import plot_fragmentation

    result = fragmentation_by_block_size(KVCacheManager, [1, 4, 16], random_request_lengths(8, seed=1))
    assert result["table_entries"][0] > result["table_entries"][1] > result["table_entries"][2]
    fig = plot_fragmentation(result)
    titles = [ax.get_title() for ax in fig.axes]
    assert any("Waste" in t for t in titles) and any("Bookkeeping" in t for t in titles)


def test_reconstruction_draws_the_stale_tail_as_stale_not_data():
    import torch

    from paged_kv.lab.viz import draw_reconstruction

    manager = KVCacheManager(4, 4, 1)
    manager.physical_kv_cache[:, :, 0] = torch.arange(16.0).reshape(4, 4)
    req = Request(0, 6)
    req.block_table = [2, 0]
    fig = draw_reconstruction(manager, req, manager.get_physical_cache(req))
    ax_pool, ax_seq = fig.axes
    hatched = [p for p in ax_pool.patches if p.get_hatch()]
    assert len(hatched) == 2, "slots 2 and 3 of block 0 are past seq_len=6"
    assert not any("STALE" in t.get_text() for t in ax_seq.texts)
    wrong = torch.cat([manager.physical_kv_cache[2], manager.physical_kv_cache[0]])  # forgot the truncation
    fig = draw_reconstruction(manager, req, wrong)
    assert sum("STALE" in t.get_text() for t in fig.axes[1].texts) == 2


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
    from paged_kv.lab.viz import draw_hash_chains

    rows = [("a", ["x y", "z w"], [1, 2], [10, 11]), ("b", ["q y", "z w"], [3, 2], [12, 13])]
    fig = draw_hash_chains(rows)
    frames = [p for p in fig.axes[0].patches if not p.get_fill() and p.get_linestyle() == "--"]
    assert len(frames) == 2  # block 1 of each prompt: same content hash, different chains


@pytest.mark.parametrize("seq_len", [3, 4, 5, 7, 12, 20, 21, 25])
def test_a_partly_filled_blocks_id_sits_inside_one_part_never_on_the_edge_between_them(seq_len):
    block_size = 8
    table = list(range(-(-seq_len // block_size)))
    fig = draw_pool(6, {"r": table}, block_size=block_size, seq_lens={"r": seq_len})
    fill = (seq_len - (len(table) - 1) * block_size) / block_size
    last = str(table[-1])
    renderer = FigureCanvasAgg(fig).get_renderer()
    fig.draw(renderer)  # places each label's white pill
    for ax, x0 in ((fig.axes[0], table[-1]), (fig.axes[1], len(table) - 1)):  # the pool, then the table
        (label,) = [t for t in ax.texts if t.get_text() == last]
        box = label.get_bbox_patch().get_window_extent(renderer).transformed(ax.transData.inverted())
        edge = x0 + 0.92 * fill  # where the filled slots end and the tail begins
        assert box.x0 >= x0 and box.x1 <= x0 + 0.92, (box, x0)
        assert box.x1 <= edge or box.x0 >= edge, f"the id straddles the fill edge at {edge:.2f}: {box}"


def test_block_manager_picture_names_sequences_by_their_place_in_the_demo():
    manager = BlockManager(8, 2)
    seqs = [Sequence([1, 2, 3], block_size=2) for _ in range(2)]
    for seq in seqs:
        prefill(manager, seq)
    texts = [t.get_text() for ax in draw_block_manager(manager, seqs).axes for t in ax.texts + ax.get_yticklabels()]
    assert any("seq 0" in t for t in texts) and any("seq 1" in t for t in texts)
    assert not any(f"seq {seqs[1].seq_id}" in t for t in texts if seqs[1].seq_id > 1)
    named = [
        t.get_text()
        for ax in draw_block_manager(manager, seqs, labels=["r0", "r1"]).axes
        for t in ax.texts + ax.get_yticklabels()
    ]
    assert any("r1" in t for t in named)
    with pytest.raises(ValueError, match="labels"):
        draw_block_manager(manager, seqs, labels=["only one"])
