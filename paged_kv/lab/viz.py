"""Pictures of a block pool and its block tables (matplotlib; no pyplot state, safe in widgets): the pool and
the tables (``draw_pool`` and the managers' ``draw_kv_manager``, ``draw_block_manager``), a reconstruction from the
pool (``draw_reconstruction``), hash chains (``draw_hash_chains``) and what a paged kernel reads
(``draw_kernel_reads``). The memory and usage charts are ``paged_kv.lab.usage_plots`` (imported here too, as the
notebooks do); the figure, its colours and its font, ``paged_kv.lab.figure``.

Every function returns a ``CourseFigure``; every text a student reads in it is in the notebook's language.
"""

from __future__ import annotations

from typing import Dict, Iterable, List, Mapping, Optional, Sequence as SequenceType

from matplotlib.patches import Patch, Rectangle

from paged_kv.cache.prefix_cache import NO_HASH
from paged_kv.lab.figure import (  # noqa: F401 (CourseFigure, _color: imported from here by other modules)
    CACHED_FREE_COLOR,
    FREE_COLOR,
    SHARED_EDGE,
    TAIL_HATCH,
    CourseFigure,
    _color,
    families,
)
from paged_kv.lab.i18n import _
from paged_kv.lab.usage_plots import (  # noqa: F401 (the notebooks import the charts from here)
    plot_fragmentation,
    plot_kv_memory,
    plot_kv_usage,
    plot_prefix_sweep,
    plot_prefix_workload,
)


CELL = 0.92  # a block's drawn width and height in draw_pool (one unit per block, with a gap)


def _label(ax, x: float, y: float, text: str, **kwargs) -> None:
    """A block id: dark text on a small white pill, readable on a full block, a pale tail or a free cell."""
    ax.text(
        x,
        y,
        text,
        ha="center",
        va="center",
        color="#111111",
        bbox=dict(boxstyle="round,pad=0.2", facecolor="white", edgecolor="#555555", linewidth=0.5),
        **kwargs,
    )


def label_x(x: float, fill: float) -> float:
    """Where a block's id goes: the middle of the wider of its two parts (filled slots, empty tail), so
    the label never straddles the edge between them; a full or empty block is labelled in its middle."""
    if fill <= 0.0 or fill >= 1.0:
        return x + CELL / 2
    return x + CELL * fill / 2 if fill >= 0.5 else x + CELL * (1 + fill) / 2


def draw_pool(
    num_blocks: int,
    block_tables: Mapping[str, SequenceType[int]],
    *,
    block_size: int,
    seq_lens: Optional[Mapping[str, int]] = None,
    ref_counts: Optional[SequenceType[int]] = None,
    cached_free: Iterable[int] = (),
    title: Optional[str] = None,
    ncols: Optional[int] = None,
) -> CourseFigure:
    """Draw the physical pool (top) and each request's block table (bottom).

    ``block_tables`` maps a request name to its physical block ids in logical order. Blocks held by
    more than one table are drawn with a thick black edge and ``xN`` (their ref count), and in the pool
    with one stripe per holder's colour; the filled part
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
    width = max(ncols, table_cols)  # both panels share one x scale, so a pool cell = a table cell
    fig = CourseFigure(figsize=(0.5 * width + 4.5, 0.5 * (pool_rows + max(len(names), 1)) + 2.2))
    ax_pool, ax_tab = fig.subplots(2, 1, gridspec_kw={"height_ratios": [pool_rows + 0.6, max(len(names), 1) + 0.9]})

    for block_id in range(num_blocks):
        x, y = block_id % ncols, -(block_id // ncols)
        holders = owners.get(block_id, [])
        color = _color(holders[0]) if holders else (CACHED_FREE_COLOR if block_id in cached_free else FREE_COLOR)
        shared = counts[block_id] > 1
        if holders:  # a tail not yet filled: hatched in the holder's colour (no pale fill, which "free,
            # hash still cached" uses)
            ax_pool.add_patch(
                Rectangle((x, y), 0.92, 0.92, facecolor="#ffffff", edgecolor=color, hatch=TAIL_HATCH, linewidth=0)
            )
        ax_pool.add_patch(
            Rectangle(
                (x, y),
                0.92,
                0.92,
                facecolor=color,
                fill=not holders,
                edgecolor=SHARED_EDGE if shared else "#777777",
                linewidth=2.5 if shared else 0.8,
            )
        )
        if len(holders) > 1:  # one stripe per holder's colour: whose block it is shows at a glance
            stripe = 0.92 / len(holders)
            for k, r in enumerate(holders):
                ax_pool.add_patch(Rectangle((x + k * stripe, y), stripe, 0.92, facecolor=_color(r), linewidth=0))
            ax_pool.add_patch(Rectangle((x, y), 0.92, 0.92, fill=False, edgecolor=SHARED_EDGE, linewidth=2.5))
        elif holders:
            frac = fill.get(block_id, 1.0)
            ax_pool.add_patch(Rectangle((x, y), 0.92 * frac, 0.92, facecolor=color, linewidth=0))
        label = f"{block_id}" + (f"\nx{counts[block_id]}" if shared else "")
        frac = fill.get(block_id, 1.0) if len(holders) == 1 else 1.0
        _label(ax_pool, label_x(x, frac), y + 0.46, label, fontsize=9, fontweight="bold" if shared else "normal")
    ax_pool.set_xlim(-0.1, width + 0.1)
    ax_pool.set_ylim(-pool_rows + 0.9, 1.0)
    ax_pool.set_aspect("equal")
    ax_pool.axis("off")
    ax_pool.set_title(_(title) if title else _("Physical KV block pool"), fontsize=11)
    # The legend names only what this picture shows: no "shared" entry when nothing is shared.
    legend = [Patch(facecolor=FREE_COLOR, edgecolor="#777777", label=_("free"))]
    if cached_free:
        legend.append(Patch(facecolor=CACHED_FREE_COLOR, label=_("free, hash still cached")))
    if any(c > 1 for c in counts):
        legend.append(
            Patch(facecolor="#ffffff", edgecolor=SHARED_EDGE, linewidth=2.5, label=_("shared (xN = ref count)"))
        )
    if any(f < 1.0 for f in fill.values()):
        legend.append(
            Patch(
                facecolor="#ffffff",
                edgecolor="#555555",
                hatch=TAIL_HATCH,
                label=_("tail (hatched): reserved, not yet filled"),
            )
        )
    ax_pool.legend(handles=legend, loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8, frameon=False)

    for r, name in enumerate(names):
        table = list(block_tables[name])
        y = -r
        tokens = seq_lens.get(name)
        length = _(f", {tokens} tok") if name in seq_lens else ""
        ax_tab.text(-0.2, y + 0.46, f"{name}{length}", ha="right", va="center", fontsize=9)
        for i, block_id in enumerate(table):
            frac = fill.get(block_id, 1.0) if i == len(table) - 1 else 1.0
            shared = counts[block_id] > 1
            ax_tab.add_patch(
                Rectangle((i, y), 0.92, 0.92, facecolor="#ffffff", edgecolor=_color(r), hatch=TAIL_HATCH, linewidth=0)
            )
            ax_tab.add_patch(Rectangle((i, y), 0.92, 0.92, fill=False, edgecolor="#777777"))
            ax_tab.add_patch(Rectangle((i, y), 0.92 * frac, 0.92, facecolor=_color(r), linewidth=0))
            if shared:  # the same physical block sits in several tables: thick black frame, as in the pool
                ax_tab.add_patch(Rectangle((i, y), 0.92, 0.92, fill=False, edgecolor=SHARED_EDGE, linewidth=2.5))
            _label(
                ax_tab, label_x(i, frac), y + 0.46, str(block_id), fontsize=9, fontweight="bold" if shared else "normal"
            )
        if not table:
            ax_tab.text(0, y + 0.46, _("(no blocks)"), va="center", fontsize=8, color="#777777")
    ax_tab.set_xlim(-0.1, width + 0.1)
    ax_tab.set_ylim(-max(len(names), 1) + 0.9, 1.0)
    ax_tab.set_aspect("equal")
    ax_tab.set_xticks([i + 0.46 for i in range(table_cols)], [str(i) for i in range(table_cols)], fontsize=8)
    ax_tab.tick_params(length=0)
    for side in ("top", "right", "left", "bottom"):
        ax_tab.spines[side].set_visible(False)
    ax_tab.set_yticks([])
    ax_tab.set_xlabel(_("logical block index (cell text = physical block id)"), fontsize=9)
    ax_tab.set_title(_("Block tables"), fontsize=10)
    fig.subplots_adjust(left=0.16, right=0.80, hspace=0.45)
    return fig


def draw_kv_manager(manager, requests: Iterable, title: Optional[str] = None) -> CourseFigure:
    """``draw_pool`` for a ``KVCacheManager`` and the ``Request`` objects it serves."""
    requests = list(requests)
    return draw_pool(
        manager.num_blocks,
        {f"req {r.request_id}": r.block_table for r in requests},
        block_size=manager.block_size,
        seq_lens={f"req {r.request_id}": r.seq_len for r in requests},
        title=title,
    )


def draw_block_manager(
    manager, seqs: Iterable, title: Optional[str] = None, labels: Optional[SequenceType[str]] = None
) -> CourseFigure:
    """``draw_pool`` for a ``BlockManager``: shows ref counts and free blocks whose hash survives.

    Each sequence is named by ``labels`` (one per sequence), by default ``seq 0``, ``seq 1``... in the order
    given: a demo's own small numbers, not the global ``seq_id`` counter (which may be in the thousands)."""
    seqs = list(seqs)
    names = [f"seq {i}" for i in range(len(seqs))] if labels is None else [str(name) for name in labels]
    if len(names) != len(seqs) or len(set(names)) != len(names):
        raise ValueError(f"labels must name each of the {len(seqs)} sequences once, got {list(names)!r}")
    cached_free = [b for b in manager.free_block_ids if manager.blocks[b].hash != NO_HASH]
    return draw_pool(
        manager.num_blocks,
        {name: s.block_table for name, s in zip(names, seqs)},
        block_size=manager.block_size,
        seq_lens={name: len(s) for name, s in zip(names, seqs)},
        ref_counts=manager.ref_counts(),
        cached_free=cached_free,
        title=title,
    )


STALE_COLOR = "#f4f4f4"


def draw_reconstruction(manager, req, rebuilt=None, title: Optional[str] = None) -> CourseFigure:
    """Pool slots coloured by physical block (left) next to the logical sequence rebuilt from them (right).

    Slots past ``req.seq_len`` in the request's last block hold stale values from an earlier
    request: they are drawn hatched, not as data. Each token of ``rebuilt`` (``[seq_len, head_dim]``)
    is coloured by the physical slot whose value it carries, so a wrong read order shows as colours in
    the wrong place and a stale slot read by mistake shows hatched. With ``rebuilt=None`` only the
    pool and the table are drawn.
    """
    import torch

    cache = manager.physical_kv_cache
    num_blocks, block_size = cache.shape[0], cache.shape[1]
    table = list(req.block_table)
    order = {block_id: i for i, block_id in enumerate(table)}
    used_in_last = req.seq_len - (len(table) - 1) * block_size if table else 0
    stale = {(table[-1], s) for s in range(max(0, used_in_last), block_size)} if table else set()

    fig = CourseFigure(figsize=(10, 0.45 * num_blocks + 2.1))
    ax_pool, ax_seq = fig.subplots(1, 2, gridspec_kw={"width_ratios": [block_size + 3, 4]})
    for b in range(num_blocks):
        for s in range(block_size):
            if (b, s) in stale:
                ax_pool.add_patch(
                    Rectangle((s, -b), 0.9, 0.9, facecolor=STALE_COLOR, edgecolor=_color(b), hatch="///", linewidth=0.8)
                )
            else:
                ax_pool.add_patch(
                    Rectangle(
                        (s, -b),
                        0.9,
                        0.9,
                        facecolor=_color(b) if b in order else FREE_COLOR,
                        edgecolor="#777777",
                        linewidth=0.5,
                    )
                )
        label = _("block") + f" {b}" + (_(f"  <- logical {order[b]}") if b in order else "")
        ax_pool.text(block_size + 0.2, -b + 0.45, label, va="center", fontsize=8)
    ax_pool.set_xlim(-0.2, block_size + 3)
    ax_pool.set_ylim(-num_blocks + 0.8, 1.2)
    ax_pool.axis("off")
    ax_pool.set_title(_("physical pool (slots), table order on the right"), fontsize=10)
    handles = [Patch(facecolor=FREE_COLOR, edgecolor="#777777", label=_("not this request's"))]
    if stale:
        handles.append(
            Patch(
                facecolor=STALE_COLOR,
                edgecolor="#777777",
                hatch="///",
                label=_(f"stale: past seq_len={req.seq_len}, not data"),
            )
        )
    ax_pool.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.45, 0.0), ncol=2, fontsize=8, frameon=False)
    if rebuilt is not None:
        slots = {(b, s): cache[b, s].reshape(-1) for b in range(num_blocks) for s in range(block_size)}
        for pos in range(rebuilt.shape[0]):
            row = rebuilt[pos].reshape(-1)
            source = next((key for key, value in slots.items() if torch.equal(row, value)), None)
            y = -pos * 0.5
            if source is None:
                ax_seq.add_patch(Rectangle((0, y), 1.6, 0.45, facecolor="#ffffff", edgecolor="#777777", linewidth=0.5))
                text = _(f"token {pos} (?)")
            elif source in stale:
                ax_seq.add_patch(
                    Rectangle(
                        (0, y),
                        1.6,
                        0.45,
                        facecolor=STALE_COLOR,
                        edgecolor=_color(source[0]),
                        hatch="///",
                        linewidth=0.8,
                    )
                )
                text = _(f"token {pos} (block {source[0]}, STALE)")
            else:
                ax_seq.add_patch(
                    Rectangle((0, y), 1.6, 0.45, facecolor=_color(source[0]), edgecolor="#777777", linewidth=0.5)
                )
                text = _(f"token {pos} (block {source[0]})")
            ax_seq.text(1.8, y + 0.22, text, va="center", fontsize=7)
        ax_seq.set_ylim(-rebuilt.shape[0] * 0.5, 0.7)
    ax_seq.set_xlim(0, 4)
    ax_seq.axis("off")
    ax_seq.set_title(
        _("rebuilt logical sequence") if rebuilt is not None else _("(no rebuilt sequence given)"),
        fontsize=10,
        color="#111111" if rebuilt is not None else "#999999",
    )
    if title:
        fig.suptitle(_(title))
    return fig


def draw_hash_chains(rows: SequenceType[tuple], title: Optional[str] = None) -> CourseFigure:
    """Prompts cut into blocks, each block named two ways: by its content alone and by the chain.

    ``rows``: ``(label, blocks, content_hashes, chain_hashes)`` per prompt, ``blocks`` a list of short
    strings (the block's tokens). Blocks with the same chained hash share a colour (safe to share);
    a block whose content hash matches another's while its chain differs gets a red dashed frame: a
    content-only cache would hand it KV computed after a different prefix.
    """
    rows = list(rows)
    chain_colour: Dict[int, str] = {}
    for *_unused, chains in rows:
        for h in chains:
            chain_colour.setdefault(h, _color(len(chain_colour)))
    seen: Dict[int, set] = {}
    for *_unused, contents, chains in rows:
        for c, h in zip(contents, chains):
            seen.setdefault(c, set()).add(h)
    width = max(len(row[1]) for row in rows)
    fig = CourseFigure(figsize=(3.1 * width + 2.2, 1.25 * len(rows) + 0.9))
    ax = fig.subplots()
    for r, (label, blocks, contents, chains) in enumerate(rows):
        y = -1.25 * r
        ax.text(-0.15, y + 0.45, label, ha="right", va="center", fontsize=9)
        for i, (text, c, h) in enumerate(zip(blocks, contents, chains)):
            x = 3.1 * i
            wrong = len(seen[c]) > 1
            ax.add_patch(Rectangle((x, y), 2.9, 0.9, facecolor=chain_colour[h], alpha=0.3, linewidth=0))
            ax.add_patch(
                Rectangle(
                    (x, y),
                    2.9,
                    0.9,
                    fill=False,
                    edgecolor="#c0392b" if wrong else "#555555",
                    linewidth=2.5 if wrong else 0.8,
                    linestyle="--" if wrong else "-",
                )
            )
            ax.text(x + 1.45, y + 0.62, text, ha="center", va="center", fontsize=8)
            ax.text(
                x + 1.45,
                y + 0.22,
                _(f"content {c % 16**6:06x} | chain {h % 16**6:06x}"),
                ha="center",
                va="center",
                fontsize=7,
                family=families("monospace"),
            )
            if i:
                ax.annotate("", (x, y + 0.45), (x - 0.2, y + 0.45), arrowprops={"arrowstyle": "->", "color": "#555555"})
    ax.set_xlim(-0.2, 3.1 * width)
    ax.set_ylim(-1.25 * len(rows) + 0.2, 1.1)
    ax.axis("off")
    default = _("Same colour = same chained hash (shareable); red dashes = content hash lies")
    ax.set_title(_(title) if title else default, fontsize=10)
    return fig


def pool_columns(num_blocks: int, one_row_up_to: int = 12, most: int = 10) -> int:
    """Blocks per row of the kernel-reads picture: one row for a small pool, else rows of equal length
    (at most ``most`` blocks each), so that no block is left alone on a last row."""
    if num_blocks <= one_row_up_to:
        return num_blocks
    rows = -(-num_blocks // most)
    return -(-num_blocks // rows)


def draw_kernel_reads(
    block_tables,
    seq_lens,
    *,
    block_size: int,
    num_blocks: int,
    tokens_per_split: Optional[int] = None,
    highlight: Optional[int] = None,
    title: Optional[str] = None,
) -> CourseFigure:
    """Which memory a paged decode kernel reads: pool slots (top) and block-table entries (bottom).

    ``block_tables`` is a list of rows (or an int tensor ``[num_seqs, max_blocks]``) and ``seq_lens``
    the sequences' lengths. A slot is coloured by the sequence whose program reads it; slots past a
    sequence's length in its last block are hatched (loaded under a mask, never used); blocks no
    table lists stay grey; table entries past a sequence's last block are padding and are never read.
    ``tokens_per_split`` draws the token ranges of split-KV programs; ``highlight`` keeps one sequence
    and labels its blocks with their logical index (``block 5 = #2``: the sequence's third block).
    """
    rows = [list(map(int, row)) for row in (block_tables.tolist() if hasattr(block_tables, "tolist") else block_tables)]
    lens = [int(n) for n in (seq_lens.tolist() if hasattr(seq_lens, "tolist") else seq_lens)]
    if len(rows) != len(lens) or not rows:
        raise ValueError(f"need one block-table row per sequence, got {len(rows)} rows and {len(lens)} lengths")
    for name, value in (("block_size", block_size), ("num_blocks", num_blocks)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"{name} must be a positive int, got {value!r}")
    reads: Dict[tuple, int] = {}  # (block, slot) -> sequence reading it
    masked: Dict[tuple, int] = {}  # tail slots loaded under a mask
    logical: Dict[int, int] = {}  # block -> its logical index in the highlighted sequence
    for s, (row, n) in enumerate(zip(rows, lens)):
        used = -(-n // block_size)
        if not 1 <= n <= len(row) * block_size:
            raise ValueError(f"sequence {s}: length {n} does not fit its {len(row)} table entries of {block_size}")
        for i, block in enumerate(row[:used]):
            if not 0 <= block < num_blocks:
                raise ValueError(f"sequence {s}: table entry {i} = {block} is outside the pool 0..{num_blocks - 1}")
            if highlight is not None and s != highlight:
                continue
            if highlight is not None:
                logical[block] = i
            for slot in range(block_size):
                (reads if i * block_size + slot < n else masked)[(block, slot)] = s
    ncols = pool_columns(num_blocks)
    pool_rows = -(-num_blocks // ncols)
    pitch = 1.4  # row to row: a block's height, its "block N" label, and a gap
    cell = 1.0 / block_size
    table_cols = max(len(r) for r in rows)
    fig = CourseFigure(figsize=(max(ncols, table_cols) * 1.1 + 3.5, pitch * pool_rows + 0.55 * len(rows) + 2.0))
    ax_pool, ax_tab = fig.subplots(
        2, 1, gridspec_kw={"height_ratios": [pool_rows * pitch + 0.3, 0.55 * len(rows) + 0.9]}
    )
    for block in range(num_blocks):
        x0, y0 = (block % ncols) * 1.1, -(block // ncols) * pitch
        for slot in range(block_size):
            key = (block, slot)
            if key in reads:
                face, hatch = _color(reads[key]), None
            elif key in masked:
                face, hatch = "#ffffff", "////"
            else:
                face, hatch = FREE_COLOR, None
            ax_pool.add_patch(
                Rectangle(
                    (x0 + slot * cell, y0),
                    cell * 0.95,
                    0.9,
                    facecolor=face,
                    hatch=hatch,
                    edgecolor=_color(masked[key]) if key in masked else "#999999",
                    linewidth=0.4,
                )
            )
        order = f" = #{logical[block]}" if block in logical else ""
        ax_pool.text(x0 + 0.5, y0 + 0.95, _("block") + f" {block}{order}", ha="center", va="bottom", fontsize=7)
    ax_pool.set_xlim(-0.1, ncols * 1.1)
    ax_pool.set_ylim(-(pool_rows - 1) * pitch - 0.1, 1.25)
    ax_pool.set_aspect("equal")
    ax_pool.axis("off")
    default = _("What the kernel reads: pool slots (one cell per token slot)")
    ax_pool.set_title(_(title) if title else default, fontsize=10)
    legend = [
        Patch(facecolor=_color(s), label=_(f"seq {s}: read by its program(s)"))
        for s in range(len(rows))
        if highlight is None or s == highlight
    ]
    legend += [
        Patch(facecolor="#ffffff", hatch="////", edgecolor="#777777", label=_("tail slot: masked, never used")),
        Patch(facecolor=FREE_COLOR, edgecolor="#999999", label=_("not read")),
    ]
    ax_pool.legend(handles=legend, loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8, frameon=False)

    for s, (row, n) in enumerate(zip(rows, lens)):
        used = -(-n // block_size)
        y = -s * 0.55
        ax_tab.text(-0.15, y + 0.22, _(f"seq {s}, {n} tok"), ha="right", va="center", fontsize=8)
        for i, block in enumerate(row):
            live = i < used and (highlight is None or s == highlight)
            ax_tab.add_patch(
                Rectangle(
                    (i * 1.1, y),
                    1.0,
                    0.45,
                    facecolor=_color(s) if live else "#ffffff",
                    edgecolor="#777777",
                    linewidth=0.6,
                    alpha=1.0 if live else 0.9,
                )
            )
            label = str(block) if i < used else _("pad") + f" ({block})"
            ax_tab.text(
                i * 1.1 + 0.5,
                y + 0.22,
                label,
                ha="center",
                va="center",
                fontsize=7,
                color="white" if live else "#999999",
            )
        if tokens_per_split:
            for start in range(tokens_per_split, n, tokens_per_split):
                x = start / block_size * 1.1 - 0.05
                ax_tab.plot([x, x], [y - 0.04, y + 0.49], color="#222222", linewidth=1.6, linestyle="--")
    ax_tab.set_xlim(-0.1, max(ncols, table_cols) * 1.1)
    ax_tab.set_ylim(-(len(rows) - 1) * 0.55 - 0.1, 0.6)
    ax_tab.axis("off")
    if tokens_per_split:
        tables_title = _(
            f"Block tables (entry = physical block id; 'pad' entries are never read; dashed lines: split-KV "
            f"boundaries every {tokens_per_split} tokens)"
        )
    else:
        tables_title = _("Block tables (entry = physical block id; 'pad' entries are never read)")
    ax_tab.set_title(tables_title, fontsize=9)
    fig.subplots_adjust(left=0.14, right=0.74, hspace=0.3)
    return fig
