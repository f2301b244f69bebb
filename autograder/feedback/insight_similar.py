"""Students whose own TODO code is near-identical to each other: ``similar_students`` (instructor-only: it is in
the insight report and nowhere a student reads).

A student's answer is the lab's TODO answer cells (``answer_cell_ids``) as tokens that ignore what a copy changes
cheaply (``answer_tokens``: comments, spacing, names), less the released starter's text (``own_tokens``); two
students are a pair when their own code is at least ``SIMILAR_THRESHOLD`` alike and more alike to each other than
either is to the solution (two natural answers to a six-line TODO are not a pair).
"""

from __future__ import annotations

import difflib
import io
import json
import keyword
import re
import tokenize
from pathlib import Path
from typing import Any, Dict, List, Optional

from autograder.course import notebook as nbread


SIMILAR_THRESHOLD = 0.95  # two students' own code at least this alike (difflib ratio of normalised tokens)
SIMILAR_MAX_STUDENTS = 400  # compared pairwise (a class of 300 is about 45,000 cheap comparisons); the rest named
SIMILAR_MIN_TOKENS = 8  # fewer tokens of one's own than this is too little code to call two students alike
SIMILAR_MAX_RATIOS = 20_000  # full difflib comparisons at most (the cheap bounds leave far fewer in a real class)
_SHINGLE = 4


def answer_tokens(text: str) -> List[str]:
    """Python text as tokens that ignore what a copy changes cheaply: comments, blank lines and spacing dropped,
    strings made ``S``, every identifier made ``x`` (an attribute's name kept: it is the API's); text that does
    not tokenize falls back to its words."""
    out: List[str] = []
    previous = ""
    try:
        for token in tokenize.generate_tokens(io.StringIO(text).readline):
            kind, value = token.type, token.string
            if kind in (tokenize.COMMENT, tokenize.NL, tokenize.ENDMARKER) or (kind == tokenize.NEWLINE):
                if kind == tokenize.NEWLINE:
                    out.append(";")
                continue
            name = tokenize.tok_name.get(kind, "")
            if name in ("STRING", "FSTRING_START", "FSTRING_MIDDLE", "FSTRING_END"):  # an f-string's text too
                out += ["S"] if name in ("STRING", "FSTRING_START") else []
                previous = value
                continue
            if kind == tokenize.NAME and not keyword.iskeyword(value) and previous != ".":
                value = "x"
            elif kind == tokenize.INDENT:
                value = "{"
            elif kind == tokenize.DEDENT:
                value = "}"
            out.append(value)
            previous = token.string
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return text.split()
    return out


def own_tokens(tokens: List[str], starter: List[str]) -> List[str]:
    """The tokens a student wrote: what is not part of the released starter's text (its given lines, docstrings)."""
    matcher = difflib.SequenceMatcher(None, starter, tokens, autojunk=False)
    return [t for tag, _, _, j1, j2 in matcher.get_opcodes() if tag in ("insert", "replace") for t in tokens[j1:j2]]


def answer_cell_ids(lab: str, notebook: dict) -> List[str]:
    """The grade ids of the lab's TODO answer cells: solution cells that define one of the lab's TODOs (every
    ungraded solution cell when the lab declares none)."""
    from autograder.labs import BY_ID

    lab_declared = BY_ID.get(lab)
    names = (
        {s.qualname.rsplit(".", 1)[-1] for part in lab_declared.parts for s in part.todos} if lab_declared else set()
    )
    out = []
    for cell in notebook.get("cells", []):
        meta = nbread.nbgrader(cell)
        if not meta.get("solution") or meta.get("grade") or not nbread.grade_id(cell):
            continue
        text = nbread.cell_text(cell)
        if not names or any(re.search(rf"\bdef\s+{re.escape(n)}\s*\(", text) for n in names):
            out.append(nbread.grade_id(cell))
    return out


def _answer_text(path: Path, ids: List[str]) -> Optional[str]:
    try:
        notebook = json.loads(path.read_text(encoding="utf-8"))
        cells = {nbread.grade_id(c): nbread.cell_text(c) for c in notebook.get("cells", []) if isinstance(c, dict)}
    except (OSError, ValueError, AttributeError):
        return None
    return "\n".join(cells.get(i, "") for i in ids)


def _ratio(a: List[str], b: List[str]) -> float:
    return difflib.SequenceMatcher(None, a, b, autojunk=False).ratio()


def similar_students(
    lab: str, work: Path, source: Path, students: List[str], release: Optional[Path] = None
) -> Dict[str, Any]:
    """Pairs of students of ``lab`` whose TODO answers are near-identical to each other: their own code (the
    answer cells as ``answer_tokens``, the released starter's text taken out) at least ``SIMILAR_THRESHOLD`` alike,
    and more alike to each other than either is to the solution (two natural answers to a six-line TODO are not a
    pair). A student whose code equals the starter or the solution is never paired. Instructor-only: it is in
    the insight report and nowhere a student reads."""
    from autograder.course.layout import RELEASE_DIR

    solution = json.loads(source.read_text(encoding="utf-8"))
    ids = answer_cell_ids(lab, solution)
    release = release or RELEASE_DIR / source.parent.name / source.name
    starter = answer_tokens(_answer_text(release, ids) or "") if release.exists() else []
    reference = own_tokens(answer_tokens(_answer_text(source, ids) or ""), starter)
    out: Dict[str, Any] = {
        "threshold": SIMILAR_THRESHOLD,
        "pairs": [],
        "compared": 0,
        "not_compared": [],
        "stopped_early": False,
    }
    if not ids:
        return out
    code: Dict[str, List[str]] = {}
    for student in students:
        text = _answer_text(work / "submitted" / student / lab / source.name, ids)
        mine = own_tokens(answer_tokens(text), starter) if text is not None else []
        if len(mine) >= SIMILAR_MIN_TOKENS and mine != reference:
            code[student] = mine
    names = sorted(code)
    out["not_compared"] = names[SIMILAR_MAX_STUDENTS:]
    names = names[:SIMILAR_MAX_STUDENTS]
    out["compared"] = len(names)
    shingles = {
        s: {tuple(code[s][i : i + _SHINGLE]) for i in range(max(1, len(code[s]) - _SHINGLE + 1))} for s in names
    }
    to_solution: Dict[str, float] = {}
    budget = SIMILAR_MAX_RATIOS
    for n, a in enumerate(names):
        for b in names[n + 1 :]:
            common = len(shingles[a] & shingles[b])
            if common < 0.7 * max(len(shingles[a]), len(shingles[b])):
                continue  # cheap bound: far apart in their 4-token runs
            matcher = difflib.SequenceMatcher(None, code[a], code[b], autojunk=False)
            if matcher.quick_ratio() < SIMILAR_THRESHOLD:
                continue
            budget -= 1
            if budget < 0:
                out["stopped_early"] = True
                break
            ratio = matcher.ratio()
            if ratio < SIMILAR_THRESHOLD:
                continue
            for who in (a, b):
                if who not in to_solution:
                    to_solution[who] = _ratio(code[who], reference) if reference else 0.0
            if ratio > max(to_solution[a], to_solution[b]):
                out["pairs"].append({"students": [a, b], "similarity": round(ratio, 3)})
        if out["stopped_early"]:
            break
    out["pairs"].sort(key=lambda p: (-p["similarity"], p["students"]))
    return out
