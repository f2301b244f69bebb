"""A jupyter_server extension: a restrictive Content-Security-Policy on the pages that show a student's work.

A student's notebook is rendered to HTML twice on the hub: the feedback file (fetched from the Assignments
tab, opened through jupyter_server's ``files/``) and Formgrader's submission view (the instructor's
server). Both come from the same origin as the JupyterLab they are opened beside, so a script in them
would act with the reader's session. The feedback is made inert when it is written
(``autograder.feedback.inert_html``); this extension is the second wall, on exactly these responses
(JupyterLab's own pages keep jupyter_server's policy, since they need scripts):

- ``files/.../feedback/...`` (any file under a folder named ``feedback``: nbgrader's fetched feedback,
  the instructor's ``autograder/work/feedback``) and ``formgrader/submissions/<id>/<file>`` (the files of a
  submission, which a student chose): ``FEEDBACK_POLICY``, no script at all, no load but ``data:``
  images, and a sandbox (a unique origin: no cookies, no storage, no forms);
- ``formgrader/submissions/<id>/`` (the submission view): Formgrader's own page needs its scripts, so
  scripts may come only from Formgrader's static folder and, inline, only those of Formgrader's template
  above the notebook (their SHA-256 hashes, computed from the page as sent); a script or handler in the
  notebook part has no hash and does not run. ``connect-src 'self'`` lets the page save grades.

``policy_for`` decides (a pure function, tested alone); ``FeedbackPolicy`` is the tornado output
transform that sets the header; ``hub.roles`` writes this file into each role's Jupyter settings folder
and enables it there (``pkv_feedback_policy``), so it needs nothing but the standard library and tornado.
"""

from __future__ import annotations

import base64
import hashlib
import html
import re
from functools import partial
from typing import List, Optional
from urllib.parse import unquote

from tornado.web import OutputTransform

FEEDBACK_POLICY = (
    "default-src 'none'; img-src data:; style-src 'unsafe-inline'; form-action 'none'; "
    "base-uri 'none'; frame-ancestors 'self'; sandbox"
)
NAVIGATION = {"next", "prev", "next_incorrect", "prev_incorrect"}
NOTEBOOK_START = re.compile(rb"<div\b[^>]*\sid=[\"']?notebook[\"'\s>]", re.IGNORECASE)  # where the notebook starts
_INLINE_SCRIPT = re.compile(rb"<script\b([^>]*)>(.*?)</script\s*>", re.IGNORECASE | re.DOTALL)
_HANDLER = re.compile(rb"\son[a-z]+\s*=\s*\"([^\"]*)\"", re.IGNORECASE)


def _hash(text: bytes) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text).digest()).decode() + "'"


def formgrader_policy(host: str, base_url: str, page: Optional[bytes]) -> str:
    """The submission view's policy: scripts from ``host`` + ``base_url`` + ``formgrader/static/`` and the
    inline scripts and handlers of the page's part above ``<div id="notebook"`` (none when ``page`` is
    not the whole page, so a page sent in parts runs no inline script)."""
    hashes: List[str] = []
    start = NOTEBOOK_START.search(page) if page is not None else None
    if start is not None:
        chrome = page[: start.start()]
        for attributes, body in _INLINE_SCRIPT.findall(chrome):
            if b"src=" not in attributes.lower():
                hashes.append(_hash(body))
        handlers = {_hash(html.unescape(h.decode("utf-8", "replace")).encode()) for h in _HANDLER.findall(chrome)}
        if handlers:
            hashes += ["'unsafe-hashes'", *sorted(handlers)]
    static = f"{host}{base_url}formgrader/static/" if re.fullmatch(r"[A-Za-z0-9.-]+(:[0-9]+)?", host) else ""
    scripts = " ".join(s for s in [static, *dict.fromkeys(hashes)] if s) or "'none'"
    return (
        f"default-src 'none'; script-src {scripts}; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
        "font-src 'self'; connect-src 'self'; form-action 'none'; base-uri 'none'; frame-ancestors 'self'"
    )


def policy_for(path: str, base_url: str, host: str, page: Optional[bytes]) -> Optional[str]:
    """The policy for a response to ``path`` (the request's path, ``base_url`` the server's, both with
    slashes at the ends as jupyter_server has them), or None to leave the response as it is."""
    if not isinstance(path, str) or not isinstance(base_url, str) or not base_url.endswith("/"):
        raise ValueError(f"policy_for needs the request path and a base_url ending in '/', got {path!r}, {base_url!r}")
    if not path.startswith(base_url):
        return None
    parts = [p for p in unquote(path[len(base_url) :]).split("/")]
    if parts[:1] == ["files"] and "feedback" in parts[1:-1]:
        return FEEDBACK_POLICY
    if parts[:2] == ["formgrader", "submissions"] and len(parts) >= 3 and parts[2] not in ("", "components"):
        rest = [p for p in parts[3:] if p]
        if not rest:
            return formgrader_policy(host, base_url, page)
        if len(rest) == 1 and rest[0] in NAVIGATION:
            return None  # a redirect to the next submission
        return FEEDBACK_POLICY
    return None


class FeedbackPolicy(OutputTransform):
    """Sets ``policy_for``'s header on the first chunk of each response it applies to."""

    def __init__(self, request, base_url: str = "/"):
        super().__init__(request)
        self.request, self.base_url = request, base_url

    def transform_first_chunk(self, status_code, headers, chunk, finishing):
        page = chunk if finishing else None
        policy = policy_for(self.request.path, self.base_url, self.request.host, page)
        if policy is not None:
            headers["Content-Security-Policy"] = policy
        return status_code, headers, chunk


def _jupyter_server_extension_points():
    return [{"module": __name__}]


def _load_jupyter_server_extension(serverapp):
    """First among the transforms, so that it reads the page before any compression does."""
    serverapp.web_app.transforms.insert(0, partial(FeedbackPolicy, base_url=serverapp.base_url))
    serverapp.log.info(
        "pkv_feedback_policy: Content-Security-Policy on feedback files and Formgrader's submission views"
    )
