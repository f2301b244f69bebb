"""Instructor side of the course, one folder per job:

- ``handout/``, ``collect/``, ``grade/``, ``feedback/``, ``exchange/``: the instructor's verbs (``make handout``,
  ``make collect``, ``make grade`` and ``make gradebook``, the feedback and insight pages, the hub's exchange);
- ``platforms/``: the same grading on Gradescope and PrairieLearn; ``proof/``: the simulated class (never shipped);
- ``box/``: isolation only: where a student's notebook runs (the sandbox, seccomp, per-kernel limits, the trust
  check, the undertaker);
- ``verdict/``: how a score is decided outside the student's kernel (cells, channel, provenance, kernel builds);
- ``agent/``: the only grading code inside the box (answers the verdict's requests with plain data);
- ``labs/``: one folder per graded lab (its declaration, its checks, its catalogue and tests; see its
  ``__init__``); ``tests/`` proves the rest; ``nbgrader_config.py`` names the folders.
"""

import sys

# jsonschema, which nbformat imports, builds rfc3987_syntax's IRI grammar as it is imported: about a second in
# every grading process (one Gradescope upload is one process), for the "iri" format that no notebook or
# results schema uses. jsonschema treats the module as optional: without it, it only stops checking "iri".
sys.modules.setdefault("rfc3987_syntax", None)  # type: ignore[assignment]
