"""nbgrader configuration: the only file that knows the course's folder names.

Use from anywhere with ``--NbGrader.config_file=autograder/nbgrader_config.py`` (``--config`` is
ignored by nbgrader), or run nbgrader from inside ``autograder/``. ``PAGED_KV_COURSE_ROOT`` points
the whole course at another root (the tests use it to regenerate and grade in a scratch folder).
"""

import os
import sys
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
c.CourseDirectory.ignore = [
    ".ipynb_checkpoints",
    "*.pyc",
    "__pycache__",
    ".DS_Store",
    "*.po",
]  # *.po: translations (tools/translations.py)
# Several graders write at once (`make grade` runs one per core): wait for the lock instead of failing.
c.CourseDirectory.db_url = f"sqlite:///{WORK / 'gradebook.db'}?timeout=120"

# The grading kernel runs inside autograded/<student>/<lab>/: give it the repository on its path so that
# hidden tests can import the labs' checks (autograder.labs) (otherwise every student silently scores 0).
_path = [str(REPO)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
os.environ["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(_path))
os.environ.setdefault("MPLBACKEND", "Agg")

if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

# Hardened grading (autograder/grade/hardened.py, autograder/box/sandbox.py): per-cell and per-notebook time
# budgets, a kernel with no network, a memory limit and a read-only view of the system, recovery
# from dead kernels. Override per lab with c.HardenedExecute.lab_limits = {"06-...": {...}}.
c.Autograde.autograde_preprocessors = [
    "autograder.grade.hardened.HardenedExecute",
    "nbgrader.preprocessors.IgnorePattern",
    "nbconvert.preprocessors.ClearMetadataPreprocessor",
    "nbgrader.preprocessors.LimitOutput",
    "nbgrader.preprocessors.SaveAutoGrades",
    "nbgrader.preprocessors.AssignLatePenalties",
    "nbgrader.preprocessors.CheckCellMetadata",
]
c.HardenedExecute.kernel_name = "python3"
c.HardenedExecute.cell_timeout = int(os.environ.get("PAGED_KV_CELL_TIMEOUT", 30))
c.HardenedExecute.notebook_timeout = int(os.environ.get("PAGED_KV_NOTEBOOK_TIMEOUT", 120))
# Two memory limits (autograder/box/limits.py): memory_mb is the address space of each process of the kernel
# (RLIMIT_AS, at every box level), ram_mb the memory the kernel and its children use together (a cgroup, where
# there is one). Their one default is in limits.py (MEMORY_MB, RAM_MB); PAGED_KV_MEMORY_MB and PAGED_KV_RAM_MB
# override it for a run, and both can be set per lab in lab_limits below.
for _name, _variable in (("memory_mb", "PAGED_KV_MEMORY_MB"), ("ram_mb", "PAGED_KV_RAM_MB")):
    if os.environ.get(_variable):
        setattr(c.HardenedExecute, _name, int(os.environ[_variable]))
c.HardenedExecute.isolation = os.environ.get("PAGED_KV_ISOLATION", "auto")
# PAGED_KV_FINDINGS_COST=0: provenance findings are reported but cost no points (the red team's proof that
# delegation earns nothing by construction, whatever the findings say).
c.HardenedExecute.findings_cost_points = os.environ.get("PAGED_KV_FINDINGS_COST", "1") != "0"
# Lab 06 maps sparse pool files past 2**32 elements (20 GiB of address space each, no disk or RAM) for
# its int64 case: more address space and file size. On a CPU its kernels run in Triton's interpreter: an
# honest notebook takes 25-50 s alone on 2 cores, so on a busy machine it gets twice the notebook budget.
c.HardenedExecute.lab_limits = {
    "06-triton-paged-attention": {
        "memory_mb": 131072,
        "file_mb": 65536,
        "notebook_timeout": 2 * c.HardenedExecute.notebook_timeout,
    }
}
# The box imports only its own library, copied into its private folder (autograder/box/kernel_lib.py): the
# lab's EDITION of the course package (built by autograder.editions: the lab's TODOs and every later lab's are
# stubs) and the channel's agent. Nothing of the repository is on its path or bound in it (its Python
# environment aside, when that lives in the repository): not its paged_kv/ (the reference), the graders,
# their tests, the verdict code or the solutions.
c.HardenedExecute.readable_paths = []
c.HardenedExecute.private_roots = [str(REPO)]
# What no grading kernel may read, checked before grading from inside a box started as a kernel's
# (autograder/box/trust.py): where bubblewrap cannot run, only file permissions keep these closed, and grading
# is refused when they do not (PAGED_KV_ALLOW_UNISOLATED=1 grades anyway, never as root).
c.HardenedExecute.trusted_paths = [
    str(p)
    for p in dict.fromkeys(
        [
            ROOT / "solutions",
            REPO / "solutions",
            REPO / "paged_kv",
            REPO / "autograder",
            REPO / ".git",
            ROOT / ".git",
            WORK,
        ]
    )
]
c.HardenedExecute.allow_unisolated = os.environ.get("PAGED_KV_ALLOW_UNISOLATED", "") == "1"
c.HardenedExecute.source_dir = str(ROOT / "solutions")
c.HardenedExecute.events_dir = str(WORK / "events")
# What a grading kernel must not see: solutions, their history, the gradebook and everyone's work.
c.HardenedExecute.hidden_paths = [
    str(p)
    for p in dict.fromkeys(
        [ROOT / "solutions", REPO / "solutions", REPO / ".git", ROOT / ".git", WORK, REPO / "autograder" / "work"]
    )
]
# nbgrader's restoring of locked cells keeps each as the student was handed it: a translated release's prose and
# setup cell, a class's setup cell (autograder/grade/handed_out_cells.py); test cells are always the gradebook's.
c.Autograde.sanitize_preprocessors = [
    "nbgrader.preprocessors.ClearOutput",
    "nbgrader.preprocessors.DeduplicateIds",
    "nbgrader.preprocessors.OverwriteKernelspec",
    "autograder.grade.handed_out_cells.KeepHandedOutCells",
    "nbgrader.preprocessors.CheckCellMetadata",
]
c.KeepHandedOutCells.release_dir = str(ROOT / "course")
c.Execute.kernel_name = "python3"
c.Execute.timeout = 120  # plain nbgrader Execute (not used by autograde with this config)
# Test cells missing from a submission come back from the gradebook (autograder/collect/repair.py does more).
c.OverwriteCells.add_missing_cells = True  # KeepHandedOutCells is one: it reads OverwriteCells' settings
# Feedback never shows the hidden tests' code (nbgrader issue 917).
c.GenerateFeedback.preprocessors = [
    "nbgrader.preprocessors.GetGrades",
    "nbconvert.preprocessors.CSSHTMLHeaderPreprocessor",
    "autograder.feedback.hide_hidden.HideHiddenTests",
]
# Feedback is inert (docs/design.md, threat model): what a student's markdown and outputs hold is rendered as text
# (InertCells, before any HTML is made; HTMLExporter's own list, so Formgrader's submission view gets it too),
# and every feedback page is rebuilt by an allow-list sanitiser (InertHTMLExporter: no script, handler,
# frame, form or URL but data: images and links).
c.HTMLExporter.preprocessors = ["autograder.feedback.inert_cells.InertCells"]
c.InertCells.source_dir = str(ROOT / "solutions")
c.InertCells.release_dir = str(ROOT / "course")  # a translated release's prose is the course's too
c.GenerateFeedback.exporter_class = "autograder.feedback.inert_html.InertHTMLExporter"
c.ClearSolutions.code_stub = {"python": "# YOUR CODE HERE\nraise NotImplementedError()"}
