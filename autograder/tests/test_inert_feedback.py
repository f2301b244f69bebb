"""Feedback is inert (issue 25): the Grading notes are text, the preprocessor turns what a student controls
into text before nbconvert renders it, the last pass keeps only an allow-list, and the scan finds live markup.

Everything here runs in process in about two seconds: the real pipeline's proof is the red team's
``puts live markup in its feedback`` student in every lab of the class simulation."""

from __future__ import annotations

import base64
import json
import re

import nbformat
import pytest
from nbconvert.filters import markdown2html
from traitlets.config import Config

from autograder.verdict.scoring import NOTES_CELL_ID, add_notes
from autograder.feedback.inert import live_markup
from autograder.feedback.inert_cells import InertCells, html_to_text, inert_output
from autograder.feedback.inert_html import InertHTMLExporter, inert_body, inert_css, inert_page
from autograder.verdict.plain_text import markdown_text, note_lines

PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"\x00" * 16).decode()
QUOTED = "your cell #3, line 1: `x = eval(\"'`<img src=x onerror=alert(1)>` <script>alert(2)</script>'\")`: uses eval"
COURSE_MARKDOWN = (
    "## Blocks\n\n| block | owner |\n| --- | --- |\n| 0 | `a` |\n\n<details><summary>Hint</summary>\n\n"
    "Use `ceil`.\n\n</details>"
)
STUDENT_MARKDOWN = (
    "# mine <script>alert('s')</script>\n<img src=x onerror=alert(1)> "
    "[go](javascript:alert(2)) <iframe src=//e></iframe> <form action=x><input></form>\n$x$ `a`"
)


def _text_of(html: str) -> str:
    """What a reader sees: tags dropped, character references decoded."""
    import html as html_lib

    return html_lib.unescape(re.sub(r"<[^>]+>", "", html))


# ---- the Grading notes --------------------------------------------------------------------------------
def test_a_quoted_line_with_a_backtick_and_a_tag_renders_as_exactly_its_text():
    rendered = markdown2html(markdown_text(QUOTED))
    assert "<img" not in rendered and "<script" not in rendered and "<code" not in rendered
    assert _text_of(rendered).strip() == QUOTED


def test_the_notes_keep_their_list_and_nothing_else_is_markup():
    rendered = markdown2html(note_lines(["While grading:", f"- {QUOTED}", "- *not emphasis* [not](a link)"]))
    assert rendered.count("<li>") == 2 and "<em>" not in rendered and "<a " not in rendered
    assert QUOTED in _text_of(rendered) and "*not emphasis* [not](a link)" in _text_of(rendered)


def test_add_notes_writes_the_graders_quotes_as_text():
    nb = nbformat.v4.new_notebook()
    add_notes(nb, ["No points:", f"- {QUOTED}"])
    cell = nb.cells[0]
    assert cell.id == NOTES_CELL_ID and cell.source.startswith("## Grading notes\n")
    assert not any(c in cell.source.split("\n", 1)[1] for c in "<>`$")
    assert QUOTED in _text_of(markdown2html(cell.source))


def test_a_note_that_is_not_text_is_refused():
    with pytest.raises(TypeError, match="str"):
        note_lines(["fine", 3])


# ---- the last pass: an allow-list sanitiser -------------------------------------------------------------
@pytest.mark.parametrize(
    "live",
    [
        "<script>alert(1)</script>",
        "<SCRIPT SRC=//e/x.js></SCRIPT>",
        "<img src=x onerror=alert(1)>",
        "<b onmouseover=alert(1)>b</b>",
        '<a href="javascript:alert(1)">a</a>',
        '<a href="java&#x09;script:alert(1)">a</a>',
        '<a href=" JaVaScRiPt:alert(1)">a</a>',
        '<a href="vbscript:msgbox(1)">a</a>',
        '<a href="data:text/html,<script>alert(1)</script>">a</a>',
        "<iframe src=//e></iframe>",
        '<iframe srcdoc="<script>alert(1)</script>"></iframe>',
        "<object data=x.swf></object>",
        "<embed src=x.swf>",
        "<form action=//e><button formaction=javascript:alert(1)>go</button></form>",
        '<base href="javascript:/">',
        '<meta http-equiv="refresh" content="0;url=javascript:alert(1)">',
        "<svg onload=alert(1)><script>1</script></svg>",
        "<math><mtext><script>alert(1)</script></mtext></math>",
        '<link rel=stylesheet href="//e/x.css">',
        '<div style="width: expression(alert(1))">e</div>',
        '<div style="background: url(//e/track.png)">e</div>',
        '<img src="data:image/svg+xml;base64,PHN2ZyBvbmxvYWQ9YWxlcnQoMSk+">',
        "<img src=//e/track.png>",
        "<noscript><p title=\"</noscript><img src=x onerror=alert(1)>\"></noscript>",
        "<style>@import url(//e/x.css); body{background:url(//e/t.png)}</style>",
    ],
)
def test_the_sanitiser_leaves_nothing_live(live):
    assert live_markup(live), f"the scan misses {live!r}"
    assert live_markup(inert_body(live)) == []
    assert live_markup(inert_page(f"<html><head><title>t</title></head><body>{live}</body></html>")) == []


def test_text_tables_code_details_links_and_raster_images_survive():
    fragment = (
        f'<p>a <b>b</b> <code>c</code></p><table><tr><th>h</th><td colspan="2">d</td></tr></table>'
        f'<details><summary>s</summary>x</details><a href="https://docs.vllm.ai">v</a> <a href="#top">t</a>'
        f'<img src="data:image/png;base64,{PNG}" width="40"><img src="data:image/jpeg;base64,{PNG}">'
        f'<pre><span class="kn" style="color: rgb(0, 128, 0)">import</span></pre>'
    )
    clean = inert_body(fragment)
    for kept in (
        "<b>b</b>",
        "<code>c</code>",
        "<th>h</th>",
        'colspan="2"',
        "<summary>s</summary>",
        'href="https://docs.vllm.ai"',
        'href="#top"',
        f"data:image/png;base64,{PNG}",
        'width="40"',
        "data:image/jpeg;base64",
        'class="kn"',
        "color:rgb(0, 128, 0)",
    ):
        assert kept in clean, f"{kept!r} lost: {clean}"


def test_a_page_keeps_its_style_sheets_but_no_import_and_no_load():
    css = (
        "p { color: red; background: url(//e/t.png) } q { background: url(data:image/png;base64,AA==) }"
        "@import url(//e/x.css); @media print { s { color: blue; background-image: url(http://e/x) } }"
    )
    page = inert_page(f"<html><head><title>Lab &amp; 02</title><style>{css}</style></head><body>x</body></html>")
    style = page.split("<style>", 1)[1].split("</style>", 1)[0]
    assert "color: red" in style and "data:image/png" in style and "color: blue" in style
    assert "//e" not in style and "@import" not in style
    assert "<title>Lab &amp; 02</title>" in page and "<body>\nx\n</body>" in page
    assert 'http-equiv="Content-Security-Policy"' in page and "default-src 'none'" in page
    assert live_markup(page) == []


def test_a_style_sheet_can_never_end_its_style_element():
    assert "<" not in inert_css('r { content: "</style><script>alert(1)</script>" }')
    assert inert_css('r { content: "</style>" }') == 'r { content: "\\3c /style>" }'


def test_styles_and_the_title_come_only_from_the_pages_head():
    page = inert_page(
        "<html><head><title>a</title></head><body><style>b{color:red}</style><title>forged</title>x</body></html>"
    )
    assert "color:red" not in page and "color: red" not in page and "forged" not in page


def test_the_sanitiser_refuses_what_is_not_text():
    for call in (inert_body, inert_page, inert_css, live_markup):
        with pytest.raises(TypeError):
            call(b"<p>bytes</p>")


# ---- the preprocessor: what a student controls becomes text -------------------------------------------
def _lab(tmp_path) -> str:
    source = nbformat.v4.new_notebook()
    source.cells = [nbformat.v4.new_markdown_cell(COURSE_MARKDOWN)]
    (tmp_path / "02-lab").mkdir(exist_ok=True)
    nbformat.write(source, tmp_path / "02-lab" / "lab.ipynb")
    return str(tmp_path)


def _render(nb, source_dir: str, template: str = "classic") -> str:
    c = Config()
    c.HTMLExporter.template_name = template
    c.HTMLExporter.preprocessors = ["autograder.feedback.inert_cells.InertCells"]
    c.InertCells.source_dir = source_dir
    html, _ = InertHTMLExporter(config=c).from_notebook_node(
        nb, resources={"nbgrader": {"assignment": "02-lab", "notebook": "lab"}}
    )
    return html


def _graded(outputs) -> nbformat.NotebookNode:
    nb = nbformat.v4.new_notebook()
    nb.metadata["widgets"] = {"application/vnd.jupyter.widget-state+json": {"state": {"x": "<script>1</script>"}}}
    code = nbformat.v4.new_code_cell("show()", execution_count=3)
    code.outputs = [nbformat.from_dict(o) for o in outputs]
    nb.cells = [nbformat.v4.new_markdown_cell(COURSE_MARKDOWN), nbformat.v4.new_markdown_cell(STUDENT_MARKDOWN), code]
    return nb


STUDENT_OUTPUTS = [
    {
        "output_type": "display_data",
        "metadata": {},
        "data": {
            "text/html": "<script>alert('repr')</script><b onmouseover=alert(1)>shiny</b>",
            "text/plain": "<Shiny>",
        },
    },
    {"output_type": "display_data", "metadata": {}, "data": {"text/html": "<table><tr><td>7</td></tr></table>"}},
    {
        "output_type": "display_data",
        "metadata": {},
        "data": {"image/svg+xml": "<svg onload=alert(1)><script>alert(2)</script></svg>"},
    },
    {"output_type": "display_data", "metadata": {}, "data": {"application/javascript": "alert('js')"}},
    {"output_type": "display_data", "metadata": {}, "data": {"text/markdown": "[md](javascript:alert(1))"}},
    {
        "output_type": "display_data",
        "metadata": {},
        "data": {"application/vnd.jupyter.widget-view+json": {"model_id": "x"}, "text/plain": "HTML(value='')"},
    },
    {
        "output_type": "display_data",
        "data": {"image/png": PNG, "text/plain": "<Figure>"},
        "metadata": {"image/png": {"width": 40, "height": "1 onerror=alert(1)"}},
    },
    {
        "output_type": "display_data",
        "metadata": {"image/png": {"width": "1 onerror=alert(1)"}},
        "data": {"image/png": PNG + '" onerror="alert(1)', "text/plain": "a forged image"},
    },
    {"output_type": "stream", "name": "stdout", "text": "<script>alert('printed')</script>\n"},
    {
        "output_type": "error",
        "ename": "ValueError",
        "evalue": "<img src=x onerror=alert(1)>",
        "traceback": ["<b>tb</b>"],
    },
]


@pytest.mark.parametrize("template", ["classic", "lab"])
def test_a_students_markdown_and_outputs_reach_the_page_as_text_only(tmp_path, template):
    html = _render(_graded(STUDENT_OUTPUTS), _lab(tmp_path), template)
    assert live_markup(html) == []
    shown = _text_of(html)
    for text in (
        "<script>alert('s')</script>",
        "[go](javascript:alert(2))",
        "<Shiny>",
        "7",
        "<script>alert('printed')</script>",
        "<img src=x onerror=alert(1)>",
        "[md](javascript:alert(1))",
        "a forged image",
        "not shown in the feedback",
    ):
        assert text in shown, f"{text!r} is not shown as text"
    assert "<b>shiny</b>" not in html and "<script" not in html and "require.js" not in html
    assert f"data:image/png;base64,{PNG}" in html and 'width="40"' in html
    assert html.count(f"data:image/png;base64,{PNG}") == 1  # the forged one is gone


@pytest.mark.parametrize("template", ["classic", "lab"])
def test_the_courses_own_markdown_still_renders_as_markdown(tmp_path, template):
    html = _render(_graded([]), _lab(tmp_path), template)
    assert "<table>" in html and "<details>" in html and "<summary>Hint</summary>" in html
    assert "<code>ceil</code>" in html and "<th>block</th>" in html


def test_without_the_labs_source_every_markdown_cell_is_text(tmp_path):
    html = _render(_graded([]), str(tmp_path / "missing"))
    assert "<table>" not in html and "| block | owner |" in _text_of(html)


def test_the_grading_notes_render_as_markdown_and_a_forged_notes_cell_does_not(tmp_path):
    nb = nbformat.v4.new_notebook()
    add_notes(nb, ["While grading:", f"- {QUOTED}"])
    html = _render(nb, _lab(tmp_path))
    assert "<h2" in html and "<li>" in html and QUOTED in _text_of(html) and live_markup(html) == []
    forged = nbformat.v4.new_markdown_cell("## Grading notes\n\n<script>alert(1)</script> **10/10**")
    forged.id = NOTES_CELL_ID
    html = _render(nbformat.v4.new_notebook(cells=[forged]), _lab(tmp_path))
    assert "<strong>10/10</strong>" not in html and "<script>alert(1)</script>" in _text_of(html)
    assert live_markup(html) == []


def test_raw_cells_metadata_ids_and_counts_are_made_plain(tmp_path):
    nb = nbformat.v4.new_notebook()
    raw = nbformat.v4.new_raw_cell("<script>alert('raw')</script>")
    raw.metadata = {"raw_mimetype": "text/html", "tags": ['x"><script>alert(1)</script>']}
    code = nbformat.v4.new_code_cell("1")
    code.metadata = {"nbgrader": {"grade": True, "grade_id": 'x" onmouseover="alert(1)', "points": 1}, "tags": ["<b>"]}
    code["execution_count"] = "<script>"
    code.id = 'bad id"'
    nb.cells = [raw, code]
    processed, _ = InertCells(source_dir=str(tmp_path)).preprocess(nb, {})
    assert processed.cells[0].cell_type == "markdown" and "<script>" not in processed.cells[0].source
    assert processed.cells[1].metadata == {} and processed.cells[1].execution_count is None
    assert processed.cells[1].id == "cell-1" and "widgets" not in processed.metadata
    assert live_markup(_render(nb, str(tmp_path))) == []


def test_wellformed_nbgrader_metadata_is_kept_for_the_gradebook():
    cell = nbformat.v4.new_code_cell("check()")
    cell.metadata = {
        "nbgrader": {
            "grade": True,
            "grade_id": "lab02-visible",
            "points": 2,
            "locked": True,
            "schema_version": 3,
            "solution": False,
        },
        "editable": False,
    }
    processed, _ = InertCells().preprocess(nbformat.v4.new_notebook(cells=[cell]), {})
    assert processed.cells[0].metadata == {"nbgrader": cell.metadata["nbgrader"]}


def test_an_html_output_becomes_the_text_it_shows():
    assert (
        html_to_text("<table><tr><td>a</td><td>b</td></tr></table><script>alert(1)</script><style>p{}</style>")
        == "a\tb"
    )
    made = inert_output(
        {"output_type": "execute_result", "execution_count": 4, "metadata": {}, "data": {"text/latex": "$x^2$"}}
    )
    assert made == {
        "output_type": "execute_result",
        "execution_count": 4,
        "metadata": {},
        "data": {"text/plain": "$x^2$"},
    }
    assert inert_output({"output_type": "update_display_data", "data": {}}) is None
    assert json.dumps(inert_output({"output_type": "display_data", "metadata": {}, "data": {}}))
