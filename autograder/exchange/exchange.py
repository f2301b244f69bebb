"""The grading path of a course on JupyterHub: nbgrader's exchange in, the same grading, feedback out.

``python -m autograder.exchange.exchange --exchange ROOT --course-id ID release [LAB ...] [--language zh_CN]``
releases labs (all by default) from ``course/`` (``course/zh_CN/``: the class's language) to the exchange, where
students fetch them from the Assignments tab.

``... grade LAB`` (``make hub-grade LAB=...``):

1. sets aside (into ``autograder/work/quarantine/LAB/``, listed in the output) every submission whose
   folder in ``inbound/`` is not owned by the student it names: the inbound folder is writable by every
   account, so anyone can drop a folder named after someone else (even a newer one, which nbgrader
   would collect instead of that student's own); the other students are graded as usual;
2. copies each student's latest submission into ``autograder/work/inbox/`` in ``nbgrader collect``'s
   layout, read as that student and never through a link (``autograder.exchange.inbound``, instead of
   ``nbgrader collect``, which follows links as root); each entry refused is noted for its student;
3. repairs each notebook and writes it to ``submitted/`` with ``autograder.collect.collect`` (the LMS
   path's own step), keeping the exchange's ``timestamp.txt`` and ``submission_secret.txt``;
4. grades with ``autograder.grade.grade`` (hardened autograde, feedback without hidden tests, export);
5. ``nbgrader release_feedback`` puts each student's feedback where only that student finds it (a
   student whose ``submission_secret.txt`` was refused or deleted is left out, with a warning: the
   feedback file's name is made from it).

Run it with ``PAGED_KV_COURSE_ROOT`` pointing at the course folder (``make hub-*`` do).
"""

from __future__ import annotations

import argparse
import errno
import os
import shutil
import sys
from pathlib import Path
from typing import Dict, List, Optional, Sequence

EXCHANGE_FILES = ("timestamp.txt", "submission_secret.txt")
INBOX = "autograder/work/inbox"
QUARANTINE = "autograder/work/quarantine"


class ExchangeError(RuntimeError):
    """An nbgrader exchange step failed; the message has nbgrader's own words."""


def _nbgrader(*args: str, exchange: Path, course_id: str) -> str:
    from autograder.grade.grade import nbgrader_cli
    from autograder.course.layout import ROOT

    done = nbgrader_cli(*args, f"--CourseDirectory.course_id={course_id}", f"--Exchange.root={exchange}", root=ROOT)
    if done.returncode != 0:
        raise ExchangeError(f"nbgrader {' '.join(args)} failed:\n{(done.stdout + done.stderr)[-3000:]}")
    return done.stdout + done.stderr


def _check(exchange: Path, course_id: str) -> None:
    if not Path(exchange).is_absolute():
        raise ValueError(f"the exchange must be an absolute path, got {exchange}")
    if not course_id or "/" in course_id or course_id.startswith("."):
        raise ValueError(f"not a course id: {course_id!r}")


def release(
    labs: Sequence[str], exchange: Path, course_id: str, open_lab: Optional[str] = None, language: str = "en"
) -> List[str]:
    """Release each of ``labs`` (replacing an earlier release); return them. ``open_lab`` (one of them: the lab
    in front of the class) is released without its practice close to the answers (``practice``). ``language``: the
    class's (``autograder.course.languages``): its release's notebooks take the English ones' place, under the same
    names (a class is taught in one language; grading accepts every language)."""
    from autograder.course.languages import check_language
    from autograder.course.layout import LABS

    check_language(language)
    _check(exchange, course_id)
    unknown = sorted(set(labs) - set(LABS))
    if unknown:
        raise ValueError(f"unknown labs {unknown}; the labs are {sorted(LABS)}")
    if open_lab is not None and open_lab not in labs:
        raise ValueError(f"the open lab {open_lab!r} is not among the labs released, {list(labs)}")
    for lab in labs:
        _nbgrader("release_assignment", lab, "--force", exchange=exchange, course_id=course_id)
        in_language(Path(exchange) / course_id / "outbound" / lab / LABS[lab], lab, language)
    if open_lab is not None:
        leave_out_near_answers(Path(exchange) / course_id / "outbound" / open_lab / LABS[open_lab])
    return list(labs)


def in_language(notebook: Path, lab: str, language: str) -> None:
    """Rewrite a released notebook in place as ``language``'s release has it (same file mode; English: unchanged)."""
    from autograder.course.languages import SOURCE, release_notebook
    from autograder.course.layout import RELEASE_DIR

    if language == SOURCE:
        return
    translated = release_notebook(RELEASE_DIR, lab, notebook.name, language)
    if not translated.is_file():
        raise ValueError(f"{translated} is missing: run `make release`")
    mode = notebook.stat().st_mode
    notebook.write_bytes(translated.read_bytes())
    os.chmod(notebook, mode & 0o7777)


def leave_out_near_answers(notebook: Path) -> None:
    """Rewrite a released notebook in place without its practice close to the answers (same file mode)."""
    from autograder.handout import practice

    mode = notebook.stat().st_mode
    notebook.write_bytes(practice.open_lab_notebook_bytes(notebook))
    os.chmod(notebook, mode & 0o7777)


def forged_submissions(exchange: Path, course_id: str, lab: str) -> Dict[str, str]:
    """``{inbound folder: its owner}`` for every ``<student>+<lab>+...`` folder not owned by ``<student>``
    (owners named as ``hub_uids.owners`` names them: the Kubernetes hub's registry, else /etc/passwd)."""
    from autograder.exchange.hub_uids import owners_of

    inbound = Path(exchange) / course_id / "inbound"
    names = owners_of(exchange, course_id)
    forged = {}
    for folder in sorted(inbound.glob(f"*+{lab}+*")) if inbound.is_dir() else []:
        claimed = folder.name.split("+", 1)[0]
        uid = folder.lstat().st_uid  # a link is owned by who made it, whatever it points at
        owner = names.name_of(uid) or f"uid {uid}"
        if owner != claimed:
            forged[folder.name] = owner
    return forged


def set_aside_forged(exchange: Path, course_id: str, lab: str, quarantine: Path) -> Dict[str, str]:
    """Move every forged submission of ``lab`` (see :func:`forged_submissions`) out of the exchange into
    ``quarantine``; return ``{folder name: its owner}``. Across file systems it is copied as its owner
    (``inbound.copy_as_owner``: never through a link, never as root)."""
    from autograder.exchange.inbound import copy_as_owner

    forged = forged_submissions(exchange, course_id, lab)
    if forged:
        quarantine.mkdir(parents=True, exist_ok=True)
    inbound = Path(exchange) / course_id / "inbound"
    for name in forged:
        try:
            os.rename(inbound / name, quarantine / name)
        except OSError as error:
            if error.errno != errno.EXDEV:
                raise
            copy_as_owner(inbound, name, quarantine / name)
    return forged


def collect_from_exchange(lab: str, exchange: Path, course_id: str) -> List[dict]:
    """Steps 1-3 of the module's docstring; the records of ``autograder.collect.collect``."""
    from autograder.collect.collect import print_refused, write_submissions
    from autograder.exchange.inbound import collect_inbound
    from autograder.course.layout import LABS, RELEASE_DIR, ROOT

    _check(exchange, course_id)
    if lab not in LABS:
        raise ValueError(f"unknown lab {lab!r}; the labs are {sorted(LABS)}")
    forged = set_aside_forged(exchange, course_id, lab, ROOT / QUARANTINE / lab)
    if forged:
        print(
            f"WARNING: {len(forged)} submission(s) in the exchange not owned by the student they name were set "
            f"aside in {ROOT / QUARANTINE / lab}, not graded: "
            + ", ".join(f"{name} (owner {owner})" for name, owner in forged.items()),
            file=sys.stderr,
        )
    inbox = ROOT / INBOX
    if inbox.exists():
        shutil.rmtree(inbox)
    submissions = collect_inbound(exchange, course_id, lab, inbox)
    records = write_submissions(lab, submissions, ROOT, RELEASE_DIR, LABS[lab], keep=EXCHANGE_FILES)
    print_refused(records)
    return records


def grade_from_exchange(lab: str, exchange: Path, course_id: str) -> dict:
    """Collect, grade and release feedback for ``lab``; the grading summary (``autograder.grade.grade``)."""
    from autograder.grade.grade import grade

    records = collect_from_exchange(lab, exchange, course_id)
    if not records:
        raise ExchangeError(f"no submissions of {lab} in {exchange}/{course_id}/inbound")
    summary = grade(lab, [r["student"] for r in records])
    unsigned = without_secret(lab, [r["student"] for r in records])
    if unsigned:
        from autograder.course.layout import ROOT

        print(
            f"WARNING: feedback not released to {', '.join(unsigned)}: their submission has no "
            "submission_secret.txt (refused or deleted), which names the feedback file; give them "
            f"{ROOT.resolve() / 'autograder' / 'work' / 'feedback'}/<student>/{lab}/ another way",
            file=sys.stderr,
        )
    _nbgrader(
        "release_feedback",
        lab,
        *([f"--CourseDirectory.student_id_exclude={','.join(unsigned)}"] if unsigned else []),
        exchange=exchange,
        course_id=course_id,
    )
    return summary


def without_secret(lab: str, students: Sequence[str]) -> List[str]:
    """The ``students`` whose submitted folder of ``lab`` has no ``submission_secret.txt``."""
    from autograder.course.layout import ROOT

    submitted = ROOT / "autograder" / "work" / "submitted"
    return [s for s in students if not (submitted / s / lab / "submission_secret.txt").is_file()]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--exchange", type=Path, required=True, help="nbgrader's Exchange.root")
    parser.add_argument("--course-id", required=True)
    commands = parser.add_subparsers(dest="command", required=True)
    releasing = commands.add_parser("release", help="release labs to the exchange")
    releasing.add_argument("labs", nargs="*")
    releasing.add_argument("--language", default="en", help="the class's language: en or zh_CN")
    releasing.add_argument(
        "--open-lab",
        help="the lab in front of the class: released without its practice close "
        "to the answers (autograder/handout/practice.py)",
    )
    commands.add_parser("grade", help="collect, grade, release feedback").add_argument("lab")
    args = parser.parse_args(argv)
    try:
        if args.command == "release":
            from autograder.course.layout import LABS

            done = release(args.labs or sorted(LABS), args.exchange, args.course_id, args.open_lab, args.language)
            print(f"released to {args.exchange}/{args.course_id}: {', '.join(done)}")
            return 0
        summary = grade_from_exchange(args.lab, args.exchange, args.course_id)
    except (ExchangeError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    print(f"{args.lab}: feedback released to the exchange for {len(summary['students'])} students")
    return 0 if all(row["ok"] for row in summary["students"]) else 1


if __name__ == "__main__":
    sys.exit(main())
