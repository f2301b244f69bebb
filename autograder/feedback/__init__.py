"""The feedback verb: what a student and an instructor read after grading, made inert (inert, inert_cells,
inert_html), hidden tests left out (hide_hidden), and the class's insight report (insight, insight_page)."""
