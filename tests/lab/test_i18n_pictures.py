"""The pictures in Chinese: every character the translations use has a glyph (the CJK font the package ships, or
matplotlib's DejaVu Sans), and each kind of picture renders in Chinese with its texts translated and no glyph
missing; English pictures keep matplotlib's fonts as they were."""

import gettext
import warnings

import matplotlib
import pytest
from fontTools.ttLib import TTFont
from matplotlib import font_manager

from paged_kv import BlockManager, KVCacheManager, MODEL_PRESETS, Request, Sequence, estimate_kv_cache_bytes, prefill
from paged_kv.lab import figure
from paged_kv.lab.i18n import catalog_path, speaking

FONT_LIMIT = 400_000  # bytes: the subset stays small (about 200 bytes a character)


def _cmap(path) -> set:
    return set(TTFont(str(path), fontNumber=0).getBestCmap())


def _dejavu() -> set:
    return _cmap(font_manager.findfont(font_manager.FontProperties(family="DejaVu Sans"), fallback_to_default=False))


def test_every_character_of_the_translations_has_a_glyph():
    with open(catalog_path("zh_CN"), "rb") as handle:
        texts = [v for k, v in gettext.GNUTranslations(handle)._catalog.items() if k]
    covered = _cmap(figure.FONT_FILE) | _dejavu()
    missing = sorted({c for text in texts for c in text if c.isprintable() and ord(c) not in covered})
    assert not missing, (
        f"characters of the translations with no glyph in {figure.FONT_FILE.name} nor DejaVu Sans: {''.join(missing)} "
        "(rebuild the font: python -m tools.cjk_font)"
    )


def test_the_shipped_font_is_a_small_renamed_subset_with_its_licence():
    size = figure.FONT_FILE.stat().st_size
    assert size < FONT_LIMIT, f"{figure.FONT_FILE.name} is {size:,} bytes"
    font = TTFont(str(figure.FONT_FILE))
    assert font["name"].getDebugName(1) == figure.FONT_FAMILY
    assert "Noto Sans CJK" not in (font["name"].getDebugName(4) or "")  # a Modified Version has its own name
    licence = (figure.FONT_FILE.parent / "OFL.txt").read_text()
    assert "SIL OPEN FONT LICENSE Version 1.1" in licence and "Copyright 2014-2021 Adobe" in licence


def _texts(fig) -> list:
    found = [fig._suptitle.get_text()] if fig._suptitle else []
    for ax in fig.axes:
        found += [ax.get_title(), ax.get_xlabel(), ax.get_ylabel()] + [t.get_text() for t in ax.texts]
        found += [t.get_text() for t in ax.get_xticklabels() + ax.get_yticklabels()]
        if ax.get_legend():
            found += [t.get_text() for t in ax.get_legend().get_texts()]
    for legend in fig.legends:
        found += [t.get_text() for t in legend.get_texts()]
    return [t for t in found if t]


def _kv_manager():
    manager = KVCacheManager(12, 4, 2)
    requests = [Request(i, n) for i, n in enumerate([5, 9, 2])]
    for req in requests:
        manager.allocate_for_prefill(req)
    return manager, requests


def _pool():
    from paged_kv.lab.viz import draw_kv_manager

    return draw_kv_manager(*_kv_manager(), title="8 blocks of 4 tokens after three prefills")


def _shared():
    from paged_kv.lab.fork_viz import draw_forks

    manager = BlockManager(10, 2)
    seqs = [Sequence([1, 2, 3, 4, 5], block_size=2), Sequence([1, 2, 3, 4, 6, 7], block_size=2)]
    for seq in seqs:
        prefill(manager, seq)
    return draw_forks(manager, seqs, copies=[(1, 5)], title="after each branch appended a token: one copy on write")


def _reconstruction():
    from paged_kv.lab.viz import draw_reconstruction

    manager = KVCacheManager(4, 4, 1)
    req = Request(0, 6)
    req.block_table = [2, 0]
    return draw_reconstruction(
        manager, req, manager.get_physical_cache(req), title="your reconstruction of blocks [4, 1, 3]"
    )


def _hash_chains():
    from paged_kv.lab.viz import draw_hash_chains

    return draw_hash_chains([("a", ["x y", "z w"], [1, 2], [10, 11]), ("b", ["q y", "z w"], [3, 2], [12, 13])])


def _kernel_reads():
    from paged_kv.lab.viz import draw_kernel_reads

    return draw_kernel_reads([[0, 1, 2], [3, 4, 0]], [10, 5], block_size=4, num_blocks=6, tokens_per_split=4)


def _kv_memory():
    from paged_kv.lab.viz import plot_kv_memory

    return plot_kv_memory(estimate_kv_cache_bytes, MODEL_PRESETS.values(), context_len=8192, highlight="Llama-3.1-8B")


def _fragmentation():
    from paged_kv.lab.simulate import fragmentation_by_block_size, random_request_lengths
    from paged_kv.lab.viz import plot_fragmentation

    result = fragmentation_by_block_size(KVCacheManager, [1, 4, 16], random_request_lengths(8, seed=1))
    return plot_fragmentation(result, title="64 random requests through your allocator: waste against bookkeeping")


def _beam_tree():
    from paged_kv.lab.fork_viz import plot_beam_tree

    return plot_beam_tree([[(0, 5), (0, 7)], [(1, 2), (0, 3)]], token_text=str)


def _fork_savings():
    from paged_kv.lab.fork_viz import plot_fork_savings
    from paged_kv.lab.fork_workload import PAPER_FIG15, PAPER_LABEL

    ours = {"parallel sampling": {2: 0.05}, "beam search": {2: 0.3}}
    return plot_fork_savings(ours, PAPER_FIG15, "this notebook (tiny model, one 54-token prompt)", PAPER_LABEL)


PICTURES = {
    "pool": (_pool, "三次预填充之后：8 个块，每块 4 个 token"),
    "copies": (_shared, "红色箭头：写时复制（源块 -> 新块）"),
    "reconstruction": (_reconstruction, "重建出的逻辑序列"),
    "hash chains": (_hash_chains, "同色 = 链式哈希相同（可共享）；红色虚线 = 内容哈希给出了错误答案"),
    "kernel reads": (_kernel_reads, "序列 1，5 个 token"),
    "kv memory": (_kv_memory, "单个请求的上下文长度（token，对数坐标）"),
    "fragmentation": (_fragmentation, "浪费：每个末尾块的尾部"),
    "beam tree": (_beam_tree, "解码步（灰色：被剪掉的 beam，其块已释放）"),
    "fork savings": (_fork_savings, "本 notebook（小模型，一个 54 token 的 prompt）"),
}


@pytest.mark.parametrize("name", sorted(PICTURES))
def test_a_picture_renders_in_chinese_with_every_glyph(name):
    draw, shown = PICTURES[name]
    with matplotlib.rc_context(), speaking("zh_CN"), warnings.catch_warnings():
        warnings.simplefilter("error")  # matplotlib warns "Glyph ... missing from font(s)" for a character it lacks
        fig = draw()
        png = fig._repr_png_()
        texts = _texts(fig)
    assert png.startswith(b"\x89PNG")
    assert shown in texts, texts


def test_an_english_picture_keeps_matplotlibs_fonts():
    # matplotlib's own default families (a Chinese picture drawn earlier in this process added the CJK font to the
    # global ones): drawing in English must leave them exactly as they are.
    with matplotlib.rc_context({"font.family": ["sans-serif"]}):
        fig = _pool()
        assert matplotlib.rcParams["font.family"] == ["sans-serif"]
    assert "Physical KV block pool" not in _texts(fig) and "8 blocks of 4 tokens after three prefills" in _texts(fig)
