"""Where one local hub keeps its things, and its names: the one place that knows the hub's layout.

A hub lives in one folder, ``HUB_DIR`` (``make hub HUB_DIR=...``, default ``/srv/paged-kv-hub``)::

    HUB_DIR/               0755 root   every account passes through it (to the exchange and the runtime)
      state/               0700 root   the hub's database, cookie secret, log, the accounts it made
      exchange/            0777        nbgrader's exchange root (nbgrader itself sets 0777 when it releases)
      runtime/                         the Python every single-user server and kernel runs (hub.runtime)
      jupyter/student/     0755        Jupyter settings of a student server (hub.roles)
      jupyter/instructor/  0755        Jupyter settings of the instructor's server

The instructor's course folder is ``~INSTRUCTOR/paged-kv-course``: inside a home that only its owner
opens (0700), under the instructor server's root folder as Formgrader requires.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import List

REPO = Path(__file__).resolve().parents[1]
COURSE_ID = "paged-kv"
COURSE_FOLDER = "paged-kv-course"
DEFAULT_PREFIX = "pkv-"
# Only for the local demo on one machine: every account `make hub` makes gets it. A real course keeps
# its own accounts and passwords (PAM) or lets students choose theirs (NativeAuthenticator); see docs/instructors.md.
DEMO_PASSWORD = "demo-only-not-a-real-password"
MAX_STUDENTS = 200
_NAME = re.compile(r"^[a-z][a-z0-9-]{0,15}$")


@dataclass(frozen=True)
class Layout:
    """The paths and account names of the hub in ``root`` whose accounts start with ``prefix``."""

    root: Path
    prefix: str = DEFAULT_PREFIX

    def __post_init__(self):
        if not Path(self.root).is_absolute():
            raise ValueError(f"HUB_DIR must be an absolute path, got {str(self.root)!r}")
        if Path(self.root).resolve() in (Path("/"), Path("/home"), Path("/tmp"), Path("/srv"), Path("/root")):
            raise ValueError(
                f"HUB_DIR must be a folder of its own (it is removed by `make hub-clean`), not {self.root}"
            )
        if not re.fullmatch(r"[a-z][a-z0-9]{0,5}-", self.prefix):
            raise ValueError(f"account prefix must be 1-6 lowercase letters or digits and a dash, got {self.prefix!r}")
        object.__setattr__(self, "root", Path(self.root))

    state = property(lambda self: self.root / "state")
    exchange = property(lambda self: self.root / "exchange")
    runtime = property(lambda self: self.root / "runtime")
    jupyter = property(lambda self: self.root / "jupyter")
    accounts_file = property(lambda self: self.state / "accounts.txt")
    log_file = property(lambda self: self.state / "jupyterhub.log")
    instructor = property(lambda self: f"{self.prefix}instructor")

    def students(self, count: int) -> List[str]:
        """The names of ``count`` students, ``<prefix>student1`` and on."""
        if not isinstance(count, int) or isinstance(count, bool) or not 1 <= count <= MAX_STUDENTS:
            raise ValueError(f"STUDENTS must be a whole number from 1 to {MAX_STUDENTS}, got {count!r}")
        names = [f"{self.prefix}student{i}" for i in range(1, count + 1)]
        for name in names:
            check_account_name(name)
        return names

    def role_config(self, role: str) -> Path:
        """The folder put first on ``JUPYTER_CONFIG_PATH`` of a ``student`` or ``instructor`` server."""
        if role not in ("student", "instructor"):
            raise ValueError(f"role must be 'student' or 'instructor', not {role!r}")
        return self.jupyter / role

    def course_root(self, instructor_home: Path) -> Path:
        """The instructor's course folder (nbgrader's ``CourseDirectory.root`` on this hub)."""
        return Path(instructor_home) / COURSE_FOLDER


def check_account_name(name: str) -> str:
    """``name`` if it is a safe local account name (lowercase, starts with a letter, 16 characters at most)."""
    if not isinstance(name, str) or not _NAME.match(name):
        raise ValueError(f"not a safe account name: {name!r} (lowercase letters, digits, '-', 16 at most)")
    return name
