"""The insight report's rendering: its two plots (PNG) and its inert page, from the data that
``autograder.feedback.insight.build`` returns (analysis there, pictures and HTML here). Everything from
students is escaped; links are plain relative hrefs; no script."""

from __future__ import annotations

import base64
import html
import io
from typing import Dict, List, Optional
from urllib.parse import quote

from autograder.verdict.events import EventKind


def _png(figure) -> bytes:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=110, bbox_inches="tight")
    return buffer.getvalue()


def plots(data: dict) -> Dict[str, bytes]:
    """``{file name: PNG}``: the score histogram (graded students only) and the pass rate of each graded cell."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = {}
    totals = list(data["scores"]["totals"].values())
    figure, axes = plt.subplots(figsize=(7, 3.2))
    top = max(data["max_score"], 1.0)
    bins = [b / 2 for b in range(0, int(top * 2) + 2)]
    axes.hist(totals, bins=bins, color="#4c72b0", edgecolor="white", align="left")
    if data["scores"]["median"] is not None:
        axes.axvline(
            data["scores"]["median"], color="#dd8452", linestyle="--", label=f"median {data['scores']['median']:g}"
        )
        axes.legend()
    axes.set(
        title=f"{data['lab']}: total scores ({data.get('graded', data['students'])} students graded)",
        xlabel="score (points)",
        ylabel="students",
        xlim=(-0.5, top + 0.5),
    )
    out["insight_scores.png"] = _png(figure)
    plt.close(figure)
    cells = data["cells"]
    figure, axes = plt.subplots(figsize=(7, 0.35 * len(cells) + 1.2))
    names = [c["grade_id"] for c in cells][::-1]
    rates = [100 * (c["pass_rate"] or 0) for c in cells][::-1]
    colors = ["#8c8c8c" if not c["hidden"] else "#4c72b0" for c in cells][::-1]
    axes.barh(names, rates, color=colors)
    axes.set(
        title="Graded cells: students with full points (blue: hidden tests, grey: visible)",
        xlabel="students with full points (%)",
        xlim=(0, 100),
    )
    for y, rate in enumerate(rates):
        axes.text(min(rate + 1, 92), y, f"{rate:.0f}%", va="center", fontsize=8)
    out["insight_pass_rates.png"] = _png(figure)
    plt.close(figure)
    return out


def _ids(who: List[str], most: int = 30, names: Optional[Dict[str, str]] = None) -> str:
    """Students as the instructor reads them: each id, with their name as written where it is known."""
    names = names or {}
    shown = [f"{s} ({names[s]})" if names.get(s) else s for s in who[:most]]
    return html.escape(", ".join(shown) + (f" and {len(who) - most} more" if len(who) > most else ""))


def _not_graded(data: dict) -> List[str]:
    """Students with no grade, first: those whose grading was refused (nothing ran: no score, never a 0) and
    those whose grading failed; none of them counts in the numbers below."""
    e = html.escape
    names = data.get("names", {})
    out = []
    refused, failed = data.get("refused") or {}, data.get("failed") or {}
    if refused:
        why = sorted(set(refused.values()))
        out.append(
            f"<h2>Not graded: grading was refused ({len(refused)})</h2><p>The grading box could not be trusted on the "
            "grading machine, so nothing of these notebooks ran: they have <b>no score</b> (not 0) and take no part "
            "in the numbers below. Fix the isolation (<code>python -m autograder.box.sandbox --probe</code> says "
            "what is wrong) and run <code>make grade</code> again. Why: "
            f"{e('; '.join(why[:3]))}.</p><p>{_ids(sorted(refused), 200, names)}</p>"
        )
    if failed:
        out.append(
            f"<h2>Not graded: grading failed ({len(failed)})</h2><p>No score; see each "
            f"<code>error-&lt;student&gt;.log</code> and grade them again: {_ids(sorted(failed), 200, names)}</p>"
        )
    return out


def _student_table(data: dict) -> List[str]:
    """Students x graded cells (points, or a dash), with each student's name as written and late flag, the students
    not graded first; each student linked to their feedback page (a relative link from ``reports/<lab>/`` to
    ``feedback/<student>/<lab>/``, where ``make grade`` writes it)."""
    e = html.escape
    cells = [c["grade_id"] for c in data["cells"]]
    names, late = data.get("names", {}), set(data.get("late", []))
    out = [
        "<h2>Every student</h2><table><tr><th>student</th><th>name</th><th>late</th><th>total</th>"
        + "".join(f"<th><code>{e(c)}</code></th>" for c in cells)
        + "</tr>"
    ]
    unscored = [(s, "refused") for s in sorted(data.get("refused") or {})]
    unscored += [(s, "failed") for s in sorted(data.get("failed") or {})]
    for student, status in unscored + [(s, "") for s in sorted(data.get("table", {}))]:
        href = "../../feedback/" + "/".join(
            quote(part, safe="") for part in (student, data["lab"], f"{data.get('notebook', '')}.html")
        )
        row = data.get("table", {}).get(student, {})
        total = status or format(data["scores"]["totals"].get(student, 0), "g")
        marks = "".join("<td>-</td>" if row.get(c) is None else f"<td>{row[c]:g}</td>" for c in cells)
        out.append(
            f'<tr><td><a href="{e(href)}">{e(student)}</a></td><td>{e(names.get(student, ""))}</td>'
            f"<td>{'late' if student in late else ''}</td><td>{e(total)}</td>{marks}</tr>"
        )
    return out + ["</table>"]


#: The sections of "Whom to look at" (``insight.WHOM``'s groups, then the repairs), as the page titles them.
WHOM_TITLES = {
    "findings": "provenance findings and similarity",
    "limits": "limits hit",
    "grading": "what grading itself did",
    "repairs": "repairs",
}


def _kind_line(kind: str, who: List[str], names: Dict[str, str]) -> str:
    """One kind of "Whom to look at": its code, what it means (an event kind's text), how many and who."""
    e = html.escape
    meaning = EventKind(kind).text if kind in EventKind._value2member_map_ else ""
    return f"<li><b>{e(kind)}</b>{': ' + e(meaning) if meaning else ''} ({len(who)}): {_ids(who, 30, names)}</li>"


def page(data: dict, images: Dict[str, bytes]) -> str:
    """The report as an inert page (every value escaped; images as ``data:`` URLs; no script)."""
    e = html.escape
    s = data["scores"]
    graded = data.get("graded", data["students"])
    unscored = data["students"] - graded
    parts = [
        f"<h1>What the class got wrong: {e(data['lab'])}</h1>",
        *_not_graded(data),
        f"<p>{graded} students graded"
        + (f" ({unscored} more not graded, above)" if unscored else "")
        + f"; maximum {data['max_score']:g} points. Median "
        f"{'-' if s['median'] is None else format(s['median'], 'g')}; {s['zero']} at 0, {s['full']} at full "
        f"marks, {s['between']} in between.</p>",
    ]
    for name, alt in (
        ("insight_scores.png", "histogram of total scores"),
        ("insight_pass_rates.png", "pass rate of each graded cell"),
    ):
        if name in images:
            parts.append(
                f'<p><img alt="{alt}" src="data:image/png;base64,{base64.b64encode(images[name]).decode()}"></p>'
            )
    parts.append(
        "<h2>Graded cells</h2><table><tr><th>cell</th><th>section</th><th>points</th><th>full points</th></tr>"
    )
    for c in data["cells"]:
        rate = "-" if c["pass_rate"] is None else f"{100 * c['pass_rate']:.0f}% ({c['full']}/{c['students']})"
        parts.append(
            f"<tr><td><code>{e(c['grade_id'])}</code></td><td>{e(c['section'])}</td>"
            f"<td>{c['points']:g}</td><td>{rate}</td></tr>"
        )
    parts.append("</table><h2>Misconceptions: one row per failure pattern, most students first</h2>")
    if not data["misconceptions"]:
        parts.append("<p>No check failed.</p>")
    else:
        parts.append(
            "<p>Each hint as the students read it; hints that the very same students got are one row. "
            "Also in <code>misconceptions.csv</code>.</p>"
            "<table><tr><th>students</th><th>hints the checks gave</th><th>cells</th><th>taught in</th>"
            "<th>who</th></tr>"
        )
        for m in data["misconceptions"]:
            hints = "<br>".join(e(h) for h in m["hints"])
            cells_shown = " ".join(f"<code>{e(c)}</code>" for c in m["cells"])
            parts.append(
                f"<tr><td>{m['count']}</td><td>{hints}</td><td>{cells_shown}</td>"
                f"<td>{e(m['section'])}</td><td>{_ids(m['students'], 30, data.get('names'))}</td></tr>"
            )
        parts.append("</table>")
    if data.get("unreadable"):
        parts.append(
            f"<p><b>File could not be read: ask them to resubmit</b> ({len(data['unreadable'])}): "
            f"{_ids(data['unreadable'], 30, data.get('names'))}. Graded as the untouched lab, they are left out of the rows above.</p>"
        )
    if data.get("resubmitted"):
        parts.append(f"<p><b>Submitted several times</b> ({len(data['resubmitted'])}): the latest was graded.</p><ul>")
        for student, seen in data["resubmitted"].items():
            earlier = "; ".join(str(d) for d in seen["superseded"])
            parts.append(f"<li>{_ids([student])}: graded {e(str(seen['graded']))}; {e(earlier)}</li>")
        parts.append("</ul>")
    parts += _student_table(data)
    parts.append("<h2>Whom to look at</h2>")
    names = data.get("names", {})
    anything = False
    for group, title in WHOM_TITLES.items():
        kinds = data["flagged"].get(group, {})
        if kinds:
            anything = True
            parts.append(f"<h3>{e(title)}</h3><ul>")
            parts += [_kind_line(kind, who, names) for kind, who in sorted(kinds.items())]
            parts.append("</ul>")
    similar = data.get("similar") or {}
    if similar.get("pairs"):
        anything = True
        parts.append(
            f"<h3>students whose code is near-identical to each other ({len(similar['pairs'])} pair{'s' * (len(similar['pairs']) > 1)})</h3>"
            f"<p>Their own code in the TODO cells (the starter's text left out; comments, spacing and names "
            f"ignored) at least {100 * similar['threshold']:.0f}% alike, and more alike to each other than to the "
            "solution. A reason to look at both notebooks, not a verdict. For the instructor only: no student's "
            "page says it.</p><ul>"
        )
        parts += [
            f"<li>{e(p['students'][0])} and {e(p['students'][1])}: {100 * p['similarity']:.0f}%</li>"
            for p in similar["pairs"][:100]
        ]
        parts.append(
            "</ul>"
            + (f"<p>and {len(similar['pairs']) - 100} more pairs (insight.json)</p>" * (len(similar["pairs"]) > 100))
        )
    if similar.get("stopped_early"):
        parts.append("<p>Similarity: the comparisons stopped at their cap; pairs after it are not listed.</p>")
    if similar.get("not_compared"):
        parts.append(
            f"<p>Not compared for similarity (over {similar['compared']} students): {_ids(similar['not_compared'])}</p>"
        )
    if not anything:
        parts.append("<p>No finding, limit or repair.</p>")
    h = data["health"]
    parts.append(
        "<h2>Grading health</h2><ul>"
        f"<li>seconds per student: median {h['seconds_median']}, max {h['seconds_max']}</li>"
        f"<li>kernels restarted: {h['kernels_restarted']}; spare kernels used: {h['spare_kernels']}</li>"
        f"<li>box level: {e(', '.join(h['isolation']) or 'unknown')}</li>"
        f"<li>gradings that failed (see error-*.log): {_ids(h['failed_gradings']) or 'none'}</li>"
        f"<li>in the gradebook without an events file: {_ids(h['not_graded']) or 'none'}</li>"
        f"<li>where the class's grading time went: "
        f"{e('; '.join(f'{k} {v:g} s' for k, v in h.get('phases', {}).items())) or 'not recorded'}</li>"
    )
    slow = h.get("slowest", [])
    parts.append(
        "<li>slow outliers (over twice the median and 20 s over it): "
        + (
            ", ".join(
                f"{e(o['student'])} {o['seconds']:g} s (most in {e(o['phase'])}: {o['phase_seconds']:g} s)"
                for o in slow
            )
            or "none"
        )
        + "</li></ul>"
    )
    style = (
        "body{font-family:sans-serif;max-width:70em;margin:1em auto;padding:0 1em}"
        "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:3px 6px;text-align:left;"
        "vertical-align:top}img{max-width:100%}"
    )
    body = "\n".join(parts)
    from autograder.feedback.inert_html import inert_page

    return inert_page(
        f"<!DOCTYPE html><html><head><title>Insight: {e(data['lab'])}</title>"
        f"<style>{style}</style></head><body>{body}</body></html>"
    )


def across_page(data: dict) -> str:
    """The cross-lab view as an inert page: students failing in several labs (points lost in each lab), then each
    misconception's count of students per lab; the labs without grading data named."""
    from autograder.feedback.inert_html import inert_page

    e = html.escape
    labs = data["labs"]
    heads = "".join(f"<th>{e(lab)}<br>(of {data['max_score'][lab]:g})</th>" for lab in labs)
    parts = [
        "<h1>The class across labs</h1>",
        f"<p>Labs with grading data: {e(', '.join(labs)) or 'none'}.</p>",
    ]
    if data["skipped"]:
        parts.append(f"<p>No grading data, skipped: {e(', '.join(data['skipped']))}.</p>")
    share = f"{100 * data['failing_below']:.0f}%"
    parts.append(f"<h2>Students failing in several labs (under {share} of a lab's points)</h2>")
    if not data["students"]:
        parts.append("<p>None.</p>")
    else:
        parts.append(f"<table><tr><th>student</th><th>name</th><th>failing in</th>{heads}</tr>")
        for r in data["students"]:
            cells = "".join(
                "<td>-</td>"
                if lab not in r["lost"]
                else f"<td>-{r['lost'][lab]:g}" + (" (file unreadable)" if lab in r["unreadable"] else "") + "</td>"
                for lab in labs
            )
            parts.append(
                f"<tr><td>{e(r['student'])}</td><td>{e(r['name'])}</td><td>{len(r['failing'])}</td>{cells}</tr>"
            )
        parts.append("</table><p>Each lab's column: the points lost there.</p>")
    parts.append("<h2>Misconceptions across labs: students per lab</h2>")
    if not data["misconceptions"]:
        parts.append("<p>No check failed.</p>")
    else:
        parts.append(f"<table><tr><th>hint, as read</th>{heads}</tr>")
        for m in data["misconceptions"]:
            counts = "".join(f"<td>{m['counts'].get(lab, '')}</td>" for lab in labs)
            parts.append(f"<tr><td>{e(m['hint'])}</td>{counts}</tr>")
        parts.append("</table>")
    parts.append("<p>Also in <code>across.csv</code>.</p>")
    style = (
        "body{font-family:sans-serif;max-width:70em;margin:1em auto;padding:0 1em}"
        "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:3px 6px;text-align:left;"
        "vertical-align:top}"
    )
    return inert_page(
        f"<!DOCTYPE html><html><head><title>Insight across labs</title><style>{style}</style></head>"
        f"<body>{chr(10).join(parts)}</body></html>"
    )
