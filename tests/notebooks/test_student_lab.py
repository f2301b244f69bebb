"""`make lab` takes a port and JupyterLab options, and gives students a JupyterLab without nbgrader's
instructor tools (Formgrader, Create Assignment, course and assignment lists) but with Validate."""

import json
import os
import re
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from test_lab_server import fetch_when_up, jupyterlab_on_course

ROOT = Path(__file__).resolve().parents[2]
STUDENT_CONFIG = ROOT / "student-lab"
INSTRUCTOR_TOOLS = {
    "@jupyter/nbgrader:menu",
    "@jupyter/nbgrader:formgrader",
    "@jupyter/nbgrader:create-assignment",
    "@jupyter/nbgrader:course-list",
    "@jupyter/nbgrader:assignment-list",
}


def make_dry_run(*args):
    """``make -n lab ARGS`` (prints the commands, runs none), also when called from inside ``make test``."""
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    result = subprocess.run(
        ["make", "--no-print-directory", "-n", "lab", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    return result.returncode, result.stdout + result.stderr


def test_make_lab_passes_the_port_and_jupyterlab_options():
    code, out = make_dry_run("PORT=8899", "LAB_ARGS=--no-browser --ip=127.0.0.1")
    assert code == 0, out
    command = next(line for line in out.splitlines() if "jupyter lab" in line)
    assert "jupyter lab --notebook-dir=course" in command
    assert "--port=8899" in command and command.endswith("--no-browser --ip=127.0.0.1")


def test_make_lab_hides_instructor_tools_from_students_only():
    code, student = make_dry_run()
    assert code == 0 and f'JUPYTER_CONFIG_PATH="{STUDENT_CONFIG}' in student
    code, instructor = make_dry_run("ROLE=instructor")
    assert code == 0 and "JUPYTER_CONFIG_PATH" not in instructor
    code, wrong = make_dry_run("ROLE=teacher")
    assert code != 0 and "ROLE must be student or instructor" in wrong


def test_student_config_disables_exactly_the_instructor_plugins_that_nbgrader_ships():
    disabled = json.loads((STUDENT_CONFIG / "labconfig" / "page_config.json").read_text())["disabledExtensions"]
    assert set(disabled) == INSTRUCTOR_TOOLS and all(disabled.values())
    bundles = Path(sys.prefix, "share", "jupyter", "labextensions", "@jupyter", "nbgrader")
    if not bundles.is_dir():
        pytest.skip("nbgrader's JupyterLab extension is not installed in this environment")
    shipped = set()
    for script in bundles.rglob("*.js"):
        shipped |= set(re.findall(r"@jupyter/nbgrader:[a-z-]+", script.read_text(errors="replace")))
    assert INSTRUCTOR_TOOLS <= shipped, f"plugin ids changed: nbgrader ships {sorted(shipped)}"
    assert "@jupyter/nbgrader:validate-assignment" in shipped - INSTRUCTOR_TOOLS


def test_the_students_jupyterlab_page_disables_them(tmp_path):
    with jupyterlab_on_course(tmp_path, JUPYTER_CONFIG_PATH=str(STUDENT_CONFIG)) as url:
        page = fetch_when_up(f"{url}/lab").decode()
    config = json.loads(
        re.search(r'<script id="jupyter-config-data" type="application/json">(.*?)</script>', page, re.S).group(1)
    )
    assert INSTRUCTOR_TOOLS <= set(config["disabledExtensions"])
    assert "@jupyter/nbgrader:validate-assignment" not in config["disabledExtensions"]


def test_the_students_server_has_no_formgrader_and_prints_no_nbgrader_config_warning(tmp_path):
    """Formgrader's server side is off for students (it needs a course's nbgrader_config.py: without one it
    printed "No nbgrader_config.py file found" twice at every `make lab`), and so is the course list's."""
    assert json.loads((STUDENT_CONFIG / "jupyter_server_config.json").read_text())["ServerApp"][
        "jpserver_extensions"
    ] == {
        "nbgrader.server_extensions.formgrader": False,
        "nbgrader.server_extensions.course_list": False,
        # Validate's routes, served with the message first (test_validate_message.py)
        "nbgrader.server_extensions.validate_assignment": False,
        "paged_kv.lab.validate_message": True,
    }
    with jupyterlab_on_course(tmp_path, JUPYTER_CONFIG_PATH=str(STUDENT_CONFIG)) as url:
        fetch_when_up(f"{url}/lab")
        with pytest.raises(urllib.error.HTTPError) as missing:
            urllib.request.urlopen(f"{url}/formgrader", timeout=10)
    log = (tmp_path / "jupyterlab.log").read_text()
    assert missing.value.code == 404
    assert "paged_kv.lab.validate_message | extension was successfully loaded" in log, log[-2000:]
    assert "No nbgrader_config.py" not in log, log[-2000:]
