"""Pictures of lab 08: forked block tables with their copy-on-write copies, a beam tree, the savings.

Forked tables are drawn from a manager (``draw_forks``) or from written-out tables (``draw_fork_tables``,
for pictures a notebook shows before the student's manager exists).

Every function returns a ``CourseFigure`` (see ``paged_kv.lab.viz``): it renders as a PNG in JupyterLab,
Colab and static viewers, with no pyplot state.
"""

from __future__ import annotations

import operator
from typing import List, Mapping, Optional, Sequence as SequenceType, Tuple

from matplotlib.patches import FancyArrowPatch

from paged_kv.lab.figure import CourseFigure, _color
from paged_kv.lab.i18n import N_, _
from paged_kv.lab.viz import CELL, draw_block_manager, draw_pool


def draw_forks(
    manager,
    seqs: SequenceType,
    labels: Optional[SequenceType[str]] = None,
    copies: SequenceType[Tuple[int, int]] = (),
    title: Optional[str] = None,
) -> CourseFigure:
    """``draw_block_manager`` plus one red arrow per copy-on-write copy ``(src, dst)`` in the pool."""
    copies = _checked_copies(manager.num_blocks, copies)
    return _draw_copies(draw_block_manager(manager, seqs, title=title, labels=labels), manager.num_blocks, copies)


def draw_fork_tables(
    num_blocks: int,
    block_tables: Mapping[str, SequenceType[int]],
    *,
    block_size: int,
    seq_lens: Optional[Mapping[str, int]] = None,
    copies: SequenceType[Tuple[int, int]] = (),
    title: Optional[str] = None,
) -> CourseFigure:
    """``draw_forks`` from plain data, with no manager: each branch's block table (and length), the copies.

    A block's reference count is drawn as the number of tables that list it, which is what fork and
    copy-on-write keep it at; so a picture written out by hand (a given cell before the lab's TODOs
    exist) shows what a manager in that state would (free blocks are drawn plain: no prefix-cache hash).
    Raises ``ValueError`` for a block or a copy outside ``0..num_blocks - 1`` (see ``draw_pool`` for the
    other arguments)."""
    figure = draw_pool(num_blocks, block_tables, block_size=block_size, seq_lens=seq_lens, title=title)
    return _draw_copies(figure, num_blocks, _checked_copies(num_blocks, copies))


def _checked_copies(num_blocks: int, copies: SequenceType[Tuple[int, int]]) -> List[Tuple[int, int]]:
    """``copies`` as ``(src, dst)`` pairs of block ids of the pool; ``ValueError`` for anything else."""
    checked = []
    for pair in copies:
        try:
            src, dst = (operator.index(b) for b in pair)
        except (TypeError, ValueError):
            raise ValueError(f"each copy is a (source, destination) pair of block ids, got {pair!r}") from None
        if not (0 <= src < num_blocks and 0 <= dst < num_blocks):
            raise ValueError(f"copy {(src, dst)} names a block outside 0..{num_blocks - 1}")
        checked.append((src, dst))
    return checked


def _draw_copies(fig: CourseFigure, num_blocks: int, copies: List[Tuple[int, int]]) -> CourseFigure:
    """One red arrow per copy on the pool panel that ``draw_pool`` drew (its default layout)."""
    ax_pool = fig.axes[0]
    ncols = min(num_blocks, 16)  # draw_pool's default layout
    for src, dst in copies:
        (x0, y0), (x1, y1) = [(b % ncols + CELL / 2, -(b // ncols) + CELL / 2) for b in (src, dst)]
        bend = 0.5 if y0 == y1 else 0.2
        ax_pool.add_patch(
            FancyArrowPatch(
                (x0, y0 + 0.3),
                (x1, y1 + 0.3),
                connectionstyle=f"arc3,rad=-{bend}",
                arrowstyle="-|>",
                mutation_scale=14,
                color="#c0392b",
                linewidth=2,
            )
        )
    if copies:
        ax_pool.text(0, 1.35, _("red arrow: copy on write (source -> fresh block)"), fontsize=8, color="#c0392b")
        ax_pool.set_ylim(ax_pool.get_ylim()[0], 1.8)
    return fig


def plot_beam_tree(
    choices: SequenceType[SequenceType[Tuple[int, int]]], token_text=None, title: Optional[str] = None
) -> CourseFigure:
    """The beam tree: column ``t`` holds the beams after step ``t + 1``, each linked to its parent.

    ``choices[t]`` lists ``(parent beam, token)`` of step ``t`` (``ForkStats.choices``). A parent with
    several children was forked; a beam with no child was freed (drawn grey). ``token_text(token)``
    labels the nodes (default: the token id).
    """
    steps = [list(step) for step in choices]
    if not steps:
        raise ValueError("choices is empty: run at least one beam step")
    label = token_text or str
    height = max(len(step) for step in steps)
    fig = CourseFigure(figsize=(min(1.05 * len(steps) + 2.0, 16), 0.55 * height + 1.6))
    ax = fig.subplots()
    ax.plot([-1], [0], "o", color="#333333", markersize=9)
    ax.text(-1, 0.35, _("prompt"), ha="center", fontsize=8)
    for t, step in enumerate(steps):
        parents_next = {b for b, _ in steps[t + 1]} if t + 1 < len(steps) else set(range(len(step)))
        for i, (b, token) in enumerate(step):
            py = -b if t > 0 else 0
            alive = i in parents_next
            color = _color(i) if alive else "#bbbbbb"
            ax.plot([t - 1, t], [py, -i], "-", color=color, linewidth=2 if alive else 1, zorder=1)
            ax.plot([t], [-i], "o", color=color, markersize=8, zorder=2)
            ax.text(t, -i + 0.28, label(token), ha="center", fontsize=7, color="#111111" if alive else "#888888")
    ax.set_xlim(-1.5, len(steps) - 0.5)
    ax.set_ylim(-height + 0.4, 0.8)
    ax.set_yticks([-i for i in range(height)], [_("beam") + f" {i}" for i in range(height)], fontsize=8)
    ax.set_xticks(range(len(steps)), [str(t + 1) for t in range(len(steps))], fontsize=8)
    ax.set_xlabel(_("decode step (grey: a beam that was pruned, its blocks freed)"))
    ax.set_title(_(title) if title else _("Beam tree: several children of one node are forks"), fontsize=11)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    fig.subplots_adjust(left=0.12, right=0.98, bottom=0.22)
    return fig


def plot_fork_memory(
    runs: Mapping[str, Tuple[List[int], List[int]]], block_size: int, title: Optional[str] = None
) -> CourseFigure:
    """Blocks held per decode step, with sharing (solid) and as independent requests (dashed).

    ``runs`` maps a label to ``(shared, independent)``, as ``ForkStats.shared`` / ``.independent``."""
    fig = CourseFigure(figsize=(8.4, 4.2))
    ax = fig.subplots()
    drawn: List[Tuple[List[int], object, List[str]]] = []  # equal independent lines are drawn once
    for i, (name, (shared, independent)) in enumerate(runs.items()):
        steps = range(1, len(shared) + 1)
        same = next((d for d in drawn if d[0] == list(independent)), None)
        if same is None:
            (line,) = ax.plot(steps, independent, "--", color=_color(i), linewidth=1.5)
            drawn.append((list(independent), line, [name]))
        else:
            same[2].append(name)  # (translated when it labels the line)
        name = _(name)
        ax.plot(steps, shared, "-", color=_color(i), linewidth=2.2, label=_(f"{name}: forked, shared blocks"))
    for _independent, line, names in drawn:
        if len(names) > 1:
            both = _(" and ").join(_(n) for n in names)
            line.set_label(_(f"independent requests, {both}"))
        else:
            name = _(names[0])
            line.set_label(_(f"{name}: independent requests"))
    ax.set_xlabel(_("decode step"))
    ax.set_ylabel(_(f"KV blocks held (block size {block_size})"))
    ax.set_title(_(title) if title else _("Memory held: forks against independent copies"), fontsize=11)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, frameon=False, loc="upper left")
    return fig


def plot_fork_savings(
    ours: Mapping[str, Mapping[int, float]],
    paper: Mapping[str, Mapping[int, float]],
    ours_label: str,
    paper_label: str,
    title: Optional[str] = None,
) -> CourseFigure:
    """Memory saved by sharing (percent of the blocks independent requests would hold), two panels.

    ``ours`` and ``paper`` map ``"parallel sampling"`` / ``"beam search"`` to ``{n or width: fraction}``;
    the x axis is the union of their keys, a missing value draws no bar."""
    fig = CourseFigure(figsize=(10.5, 4.2))
    axes = fig.subplots(1, 2, sharey=True)
    for ax, kind in zip(axes, (N_("parallel sampling"), N_("beam search"))):
        sizes = sorted(set(ours.get(kind, {})) | set(paper.get(kind, {})))
        for k, (values, name, color) in enumerate(
            ((ours.get(kind, {}), ours_label, _color(0)), (paper.get(kind, {}), paper_label, _color(1)))
        ):
            xs = [i + (k - 0.5) * 0.38 for i, n in enumerate(sizes) if n in values]
            ys = [100 * values[n] for n in sizes if n in values]
            bars = ax.bar(xs, ys, width=0.36, color=color, label=_(name))
            ax.bar_label(bars, fmt="%.1f", fontsize=7, padding=1)
        ax.set_xticks(range(len(sizes)), [str(n) for n in sizes])
        ax.set_xlabel(_("number of outputs n") if kind == "parallel sampling" else _("beam width"))
        ax.set_title(_(kind), fontsize=10)
        ax.grid(axis="y", alpha=0.3)
    axes[0].set_ylabel(_("memory saved by sharing (%)"))
    axes[0].legend(fontsize=8, frameon=False, loc="upper left")
    fig.suptitle(_(title) if title else _("KV blocks saved by forking instead of independent requests"), fontsize=11)
    fig.subplots_adjust(top=0.84, bottom=0.16, wspace=0.08)
    return fig
