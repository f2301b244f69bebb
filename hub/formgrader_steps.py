"""A jupyter_server extension for the instructor's server: Formgrader's buttons that release, collect, grade or
return work answer with the command that does it on the hub, and do nothing.

On the course hub those steps run as root through ``make hub-release`` and ``make hub-grade``: the exchange's
ownership checks, collection as each student's own uid, and the hardened autograde, where each grading kernel
runs as a uid of its own in a cgroup with its own limits. Formgrader's buttons would run nbgrader's plain
steps inside the instructor's server, as the instructor: ``Autograde`` would run a student's code with the
instructor's rights, next to the gradebook, with none of those limits. So this extension answers each of
these API calls (``STEPS``) with nbgrader's own failure shape, ``{"success": false, "error": ...}``, which
Formgrader shows in its error dialog, naming the command to run instead. Formgrader's views, the gradebook
and manual grading stay as they are.

``hub.roles`` writes this file into the instructor role's settings folder and enables it there
(``pkv_formgrader_steps``). nbgrader's formgrader extension loads first (extensions load in name order), so
this one moves its rules in front of Formgrader's.
"""

from __future__ import annotations

import json

from tornado import web

RELEASE = "make hub-release LAB=<lab>"
GRADE = "make hub-grade LAB=<lab>"
# Formgrader's API paths (nbgrader/server_extensions/formgrader/apihandlers.py) -> (the button, what does it here).
STEPS = {
    r"formgrader/api/assignment/([^/]+)/assign": ("Generate", RELEASE),
    r"formgrader/api/assignment/([^/]+)/release": ("Release", RELEASE),
    r"formgrader/api/assignment/([^/]+)/collect": ("Collect", GRADE),
    r"formgrader/api/submission/([^/]+)/([^/]+)/autograde": ("Autograde", GRADE),
    r"formgrader/api/assignment/([^/]+)/generate_feedback": ("Generate Feedback", GRADE),
    r"formgrader/api/assignment/([^/]+)/([^/]+)/generate_feedback": ("Generate Feedback", GRADE),
    r"formgrader/api/assignment/([^/]+)/release_feedback": ("Release Feedback", GRADE),
    r"formgrader/api/assignment/([^/]+)/([^/]+)/release_feedback": ("Release Feedback", GRADE),
}


def refusal(button: str, command: str, lab: str = "<lab>") -> dict:
    """What Formgrader gets back for ``button``: nbgrader's failure shape, with the command to run instead (in
    short lines: Formgrader shows the error in a ``<pre>``, which does not wrap)."""
    command = command.replace("<lab>", lab if lab and "/" not in lab else "<lab>")
    return {
        "success": False,
        "log": "",
        "error": "\n".join(
            [
                f"Formgrader's {button} is switched off on this course hub. Run, as root:",
                "",
                f"    {command}",
                "",
                "It releases or collects through the exchange's checks, and grades with the",
                "course's hardened autograde (each grading kernel a uid and cgroup of its own),",
                "which a button in the instructor's server, run as the instructor, cannot do.",
                "On Kubernetes: python -m autograder.exchange.exchange (deploy/README.md).",
            ]
        ),
    }


def _handler(button: str, command: str):
    from jupyter_server.base.handlers import JupyterHandler

    class Refused(JupyterHandler):  # as nbgrader's own API handlers (XSRF-checked, logged in)
        @web.authenticated
        def post(self, lab, *rest):
            # Formgrader's pages JSON.parse the answer themselves: a string, as nbgrader sends it (not as JSON,
            # which jQuery would parse first), and plain text rather than nbgrader's text/html.
            self.set_header("Content-Type", "text/plain; charset=UTF-8")
            self.finish(json.dumps(refusal(button, command, lab)))

    Refused.__name__ = f"Refused{button.replace(' ', '')}"
    return Refused


def _jupyter_server_extension_points():
    return [{"module": __name__}]


def _load_jupyter_server_extension(serverapp):
    from jupyter_server.utils import url_path_join

    webapp = serverapp.web_app
    rules = [
        (url_path_join(serverapp.base_url, path), _handler(button, command))
        for path, (button, command) in STEPS.items()
    ]
    before = list(webapp.default_router.rules)
    webapp.add_handlers(".*$", rules)
    # add_handlers puts the new host rule after nbgrader's; the first rule that matches a request wins.
    ours = [rule for rule in webapp.default_router.rules if not any(rule is old for old in before)]
    for rule in ours:
        webapp.default_router.rules.remove(rule)
    webapp.default_router.rules[:0] = ours
    serverapp.log.info(
        "pkv_formgrader_steps: Formgrader's %s answer with `%s` / `%s`",
        ", ".join(sorted({b for b, _ in STEPS.values()})),
        RELEASE,
        GRADE,
    )
