"""Pictures of a block pool and its block tables (matplotlib; no pyplot state, safe in widgets).

Every function returns a ``matplotlib.figure.Figure``: a notebook shows it when it is the last
expression of a cell (or through ``IPython.display.display``), and ``fig.savefig(path)`` writes a PNG.
"""
from __future__ import annotations

from typing import Dict, Iterable, List, Mapping, Optional, Sequence as SequenceType

from matplotlib.figure import Figure
from matplotlib.patches import Patch, Rectangle

FREE_COLOR = "#e6e6e6"
CACHED_FREE_COLOR = "#c9e4f2"
SHARED_EDGE = "#000000"
PALETTE = ["#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3", "#937860",
           "#da8bc3", "#8c8c8c", "#ccb974", "#64b5cd"]


def _color(i: int) -> str:
    return PALETTE[i % len(PALETTE)]


def draw_pool(num_blocks: int, block_tables: Mapping[str, SequenceType[int]], *, block_size: int,
              seq_lens: Optional[Mapping[str, int]] = None, ref_counts: Optional[SequenceType[int]] = None,
              cached_free: Iterable[int] = (), title: Optional[str] = None, ncols: Optional[int] = None) -> Figure:
    """Draw the physical pool (top) and each request's block table (bottom).

    ``block_tables`` maps a request name to its physical block ids in logical order. Blocks held by
    more than one table are drawn with a thick black edge and ``xN`` (their ref count); the filled part
    of each request's last block shows its tokens, the pale part its tail waste. ``cached_free``: free
    blocks that still hold a reusable hash (prefix cache).
    """
    if not isinstance(num_blocks, int) or isinstance(num_blocks, bool) or num_blocks < 1:
        raise ValueError(f"num_blocks must be a positive int, got {num_blocks!r}")
    if not isinstance(block_size, int) or isinstance(block_size, bool) or block_size < 1:
        raise ValueError(f"block_size must be a positive int, got {block_size!r}")
    names = list(block_tables)
    seq_lens = dict(seq_lens or {})
    owners: Dict[int, List[int]] = {}
    for r, name in enumerate(names):
        for block_id in block_tables[name]:
            if not 0 <= block_id < num_blocks:
                raise ValueError(f"block table {name!r} holds block {block_id}, outside 0..{num_blocks - 1}")
            owners.setdefault(block_id, []).append(r)
    counts = list(ref_counts) if ref_counts is not None else [len(owners.get(b, [])) for b in range(num_blocks)]
    fill: Dict[int, float] = {}  # block id -> fraction of its slots holding tokens (last blocks only)
    for name in names:
        table = list(block_tables[name])
        if table and name in seq_lens:
            used_in_last = seq_lens[name] - (len(table) - 1) * block_size
            fill[table[-1]] = max(0.0, min(1.0, used_in_last / block_size))
    cached_free = set(cached_free)

    ncols = ncols or min(num_blocks, 16)
    pool_rows = -(-num_blocks // ncols)
    table_cols = max([len(block_tables[n]) for n in names] + [1])
    fig = Figure(figsize=(max(6.0, 0.55 * max(ncols, table_cols) + 2.5), 1.2 + 0.55 * (pool_rows + len(names)) + 0.8))
    ax_pool, ax_tab = fig.subplots(2, 1, gridspec_kw={"height_ratios": [max(pool_rows, 1), max(len(names), 1)]})

    for block_id in range(num_blocks):
        x, y = block_id % ncols, -(block_id // ncols)
        holders = owners.get(block_id, [])
        color = _color(holders[0]) if holders else (CACHED_FREE_COLOR if block_id in cached_free else FREE_COLOR)
        shared = counts[block_id] > 1
        ax_pool.add_patch(Rectangle((x, y), 0.92, 0.92, facecolor=color, alpha=0.35 if holders else 1.0,
                                    edgecolor=SHARED_EDGE if shared else "#777777", linewidth=2.5 if shared else 0.8))
        if holders:
            frac = fill.get(block_id, 1.0)
            ax_pool.add_patch(Rectangle((x, y), 0.92 * frac, 0.92, facecolor=color, linewidth=0))
        label = f"{block_id}" + (f"\nx{counts[block_id]}" if shared else "")
        ax_pool.text(x + 0.46, y + 0.46, label, ha="center", va="center", fontsize=8)
    ax_pool.set_xlim(-0.1, ncols + 0.1)
    ax_pool.set_ylim(-pool_rows + 0.9, 1.0)
    ax_pool.set_aspect("equal")
    ax_pool.axis("off")
    ax_pool.set_title(title or "Physical KV block pool", fontsize=11)
    legend = [Patch(facecolor=FREE_COLOR, edgecolor="#777777", label="free"),
              Patch(facecolor="#ffffff", edgecolor=SHARED_EDGE, linewidth=2.5, label="shared (xN = ref count)"),
              Patch(facecolor=_color(0), alpha=0.35, label="tail waste (pale part)")]
    if cached_free:
        legend.insert(1, Patch(facecolor=CACHED_FREE_COLOR, label="free, hash still cached"))
    ax_pool.legend(handles=legend, loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8, frameon=False)

    for r, name in enumerate(names):
        table = list(block_tables[name])
        y = -r
        length = f", {seq_lens[name]} tok" if name in seq_lens else ""
        ax_tab.text(-0.2, y + 0.46, f"{name}{length}", ha="right", va="center", fontsize=9)
        for i, block_id in enumerate(table):
            frac = fill.get(block_id, 1.0) if i == len(table) - 1 else 1.0
            ax_tab.add_patch(Rectangle((i, y), 0.92, 0.92, facecolor=_color(r), alpha=0.35, edgecolor="#777777"))
            ax_tab.add_patch(Rectangle((i, y), 0.92 * frac, 0.92, facecolor=_color(r), linewidth=0))
            ax_tab.text(i + 0.46, y + 0.46, str(block_id), ha="center", va="center", fontsize=8, color="white")
        if not table:
            ax_tab.text(0, y + 0.46, "(no blocks)", va="center", fontsize=8, color="#777777")
    ax_tab.set_xlim(-0.1, table_cols + 0.1)
    ax_tab.set_ylim(-max(len(names), 1) + 0.9, 1.0)
    ax_tab.set_aspect("equal")
    ax_tab.set_xticks([i + 0.46 for i in range(table_cols)], [str(i) for i in range(table_cols)], fontsize=8)
    ax_tab.tick_params(length=0)
    for side in ("top", "right", "left", "bottom"):
        ax_tab.spines[side].set_visible(False)
    ax_tab.set_yticks([])
    ax_tab.set_xlabel("logical block index (cell text = physical block id)", fontsize=9)
    ax_tab.set_title("Block tables", fontsize=10)
    fig.subplots_adjust(left=0.22, right=0.78, hspace=0.35)
    return fig


def draw_kv_manager(manager, requests: Iterable, title: Optional[str] = None) -> Figure:
    """``draw_pool`` for a ``KVCacheManager`` and the ``Request`` objects it serves."""
    requests = list(requests)
    return draw_pool(manager.num_blocks, {f"req {r.request_id}": r.block_table for r in requests},
                     block_size=manager.block_size, seq_lens={f"req {r.request_id}": r.seq_len for r in requests},
                     title=title)


def draw_block_manager(manager, seqs: Iterable, title: Optional[str] = None) -> Figure:
    """``draw_pool`` for a ``BlockManager``: shows ref counts and free blocks whose hash survives."""
    seqs = list(seqs)
    cached_free = [b for b in manager.free_block_ids if manager.blocks[b].hash != -1]
    return draw_pool(manager.num_blocks, {f"seq {s.seq_id}": s.block_table for s in seqs},
                     block_size=manager.block_size, seq_lens={f"seq {s.seq_id}": len(s) for s in seqs},
                     ref_counts=manager.ref_counts(), cached_free=cached_free, title=title)
