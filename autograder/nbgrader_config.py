"""nbgrader configuration: the only file that knows the course's folder names.

Use from anywhere with ``--NbGrader.config_file=autograder/nbgrader_config.py`` (``--config`` is
ignored by nbgrader), or run nbgrader from inside ``autograder/``. ``PAGED_KV_COURSE_ROOT`` points
the whole course at another root (the tests use it to regenerate and grade in a scratch folder).
"""
import os
from pathlib import Path

c = get_config()  # noqa: F821  (provided by nbgrader when it loads this file)

REPO = Path(__file__).resolve().parents[1]
ROOT = Path(os.environ.get("PAGED_KV_COURSE_ROOT", REPO))
WORK = ROOT / "autograder" / "work"
WORK.mkdir(parents=True, exist_ok=True)  # sqlite cannot create the folder of its database

c.CourseDirectory.root = str(ROOT)
c.CourseDirectory.source_directory = "solutions"
c.CourseDirectory.release_directory = "course"
c.CourseDirectory.submitted_directory = "autograder/work/submitted"
c.CourseDirectory.autograded_directory = "autograder/work/autograded"
c.CourseDirectory.feedback_directory = "autograder/work/feedback"
c.CourseDirectory.ignore = [".ipynb_checkpoints", "*.pyc", "__pycache__", ".DS_Store"]
c.CourseDirectory.db_url = f"sqlite:///{WORK / 'gradebook.db'}"

# The grading kernel runs inside autograded/<student>/<lab>/: give it the repository on its path so that
# hidden tests can import autograder.graders (otherwise every student silently scores 0).
_path = [str(REPO)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
os.environ["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(_path))
os.environ.setdefault("MPLBACKEND", "Agg")

c.Execute.kernel_name = "python3"
c.Execute.timeout = 120           # seconds per cell; an endless loop scores 0 instead of hanging
c.ClearSolutions.code_stub = {"python": "# YOUR CODE HERE\nraise NotImplementedError()"}
