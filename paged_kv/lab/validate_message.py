"""nbgrader's Validate button, with the message first: a failed test cell is named by its first line, not
printed whole above the short message that says what went wrong.

nbgrader's server extension answers the Validate button with each failed cell's whole source (a test cell of
30 lines) and then its error. This server extension serves the same routes (``/assignments/validate`` and
``/nbgrader_version``, as ``nbgrader.server_extensions.validate_assignment`` does) with one change: a failed
cell's ``source`` becomes its first line (the cell's title comment, "# Visible tests, part 2: ..."), so the
dialog shows the title and right below it the course's one-block message (``paged_kv.lab.feedback``).
``student-lab/jupyter_server_config.json`` and the hub's student servers enable it in place of nbgrader's.
"""

from __future__ import annotations

from typing import Any, Dict

SOURCE_LINES = 1  # of a failed cell's source, how many lines the dialog shows


def shorten(result: Dict[str, Any]) -> Dict[str, Any]:
    """nbgrader's validation ``result`` (``{"success": ..., "value": {...}}``) with each failed cell's source cut
    to its first ``SOURCE_LINES`` non-empty line(s); anything else is left as it is."""
    value = result.get("value") if isinstance(result, dict) else None
    if not (result.get("success") and isinstance(value, dict)):
        return result
    for cell in value.get("failed", []) or []:
        if isinstance(cell, dict) and isinstance(cell.get("source"), str):
            lines = [line for line in cell["source"].splitlines() if line.strip()]
            title = lines[:SOURCE_LINES]
            cell["source"] = "\n".join(title) + ("\n..." if len(lines) > SOURCE_LINES else "")
    return result


def _handlers():
    from nbgrader.server_extensions.validate_assignment import handlers

    class MessageFirstHandler(handlers.ValidateAssignmentHandler):
        def validate_notebook(self, path):
            return shorten(super().validate_notebook(path))

    return [
        (pattern, MessageFirstHandler if handler is handlers.ValidateAssignmentHandler else handler)
        for pattern, handler in handlers.default_handlers
    ]


def _load_jupyter_server_extension(serverapp) -> None:
    """Register the routes of nbgrader's validate extension, with ``MessageFirstHandler`` for validation."""
    from jupyter_server.utils import url_path_join

    webapp = serverapp.web_app
    webapp.settings["root_dir"] = serverapp.root_dir
    base_url = webapp.settings["base_url"]
    webapp.add_handlers(".*$", [(url_path_join(base_url, pattern), handler) for pattern, handler in _handlers()])
