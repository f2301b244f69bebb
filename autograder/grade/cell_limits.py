"""How the grader reads and explains the limits a cell ran into (time, memory, output, a kernel that died): the
messages a cell shows (in the notebook's ``language``: ``autograder.verdict.student_text``), and the cap on an
error's size. ``HardenedExecute`` applies the limits."""

from __future__ import annotations

from typing import Any, Dict, Optional

from autograder.verdict.scoring import MAX_ERROR_TEXT, cap, error_output, note_output
from autograder.verdict.student_text import N_, for_student

NOT_RUN_DEMO = N_(
    "Not run by the autograder: this cell comes after the last test and only shows what "
    "you built. Run it in your own notebook to see it.\n"
)


def not_run_demo(language: str = "en") -> str:
    """What a cell that only shows what was built says instead of running (``NOT_RUN_DEMO``), in ``language``."""
    return for_student(NOT_RUN_DEMO, language)


MAX_TRACEBACK = 20_000  # characters of an error's traceback kept

# Signs, in an error's name and message, that a cell (or a grader's request) went over the memory limit.
MEMORY_SIGNS = (
    "MemoryError",
    "can't allocate memory",
    "DefaultCPUAllocator",
    "std::bad_alloc",
    "Cannot allocate memory",
)


def budget_spent(budget: int, language: str = "en"):
    """What a cell shows when the notebook's time (``budget`` seconds) was spent before it ran."""
    return error_output(
        "TimeBudgetExceeded",
        for_student(
            f"Not run: this notebook used up its grading time ({budget} s in all), "
            "so this cell scores 0. A cell above ran too long: see its 'Time limit' "
            "message.",
            language,
        ),
    )


def time_limit_error(limit: int, language: str = "en") -> Dict[str, Any]:
    """nbclient's ``error_on_timeout`` for a cell allowed ``limit`` seconds (interrupted, it stopped)."""
    error = {
        "ename": "TimeLimitExceeded",
        "evalue": for_student(
            f"Time limit: this cell ran for more than {limit} s and was stopped, so it scores 0. Look for "
            "a loop that never ends (a condition that never changes, a list that never shrinks).",
            language,
        ),
        "traceback": [],
    }
    error["traceback"] = [f"\x1b[0;31mTimeLimitExceeded\x1b[0m: {error['evalue']}"]
    return error


def did_not_stop(limit: int, language: str = "en"):
    """What a cell shows when it ran past ``limit`` seconds and did not stop when interrupted."""
    return error_output(
        "TimeLimitExceeded",
        for_student(
            f"Time limit: this cell ran for more than {limit} s and did not stop when "
            "interrupted, so its kernel was stopped and this cell scores 0. The cells below ran in a fresh "
            "kernel.",
            language,
        ),
    )


def output_cut(max_bytes: int, language: str = "en"):
    """The note on a cell whose output went past ``max_bytes`` and was cut."""
    return note_output(for_student(f"output cut after {max_bytes} bytes", language))


def over_memory(memory_mb: int, language: str = "en"):
    return note_output(
        for_student(
            f"Memory limit: the grading kernel may use at most {memory_mb} MiB, and this cell asked for more.",
            language,
        )
    )


def exit_called(language: str = "en"):
    return note_output(
        for_student("This cell called sys.exit() (or exit()/quit()): graded code must return normally.", language)
    )


def process_killed(ram_mb: int, language: str = "en"):
    """A process of the notebook was stopped by the memory limit of the kernel and its children (``ram_mb``)."""
    return note_output(
        for_student(
            f"Memory limit: a process of this notebook was stopped while this cell ran, because the kernel and "
            f"the processes it starts may use at most {ram_mb} MiB together.",
            language,
        )
    )


def death_message(status: Optional[int], out_of_memory: bool, ram_mb: int, language: str = "en") -> str:
    """Why the kernel died while a cell ran (``status``: its exit status; ``out_of_memory``: its cgroup killed it)."""
    if out_of_memory:
        return for_student(
            f"The kernel was stopped while running this cell: with the processes it started it used more "
            f"than {ram_mb} MiB of memory, so this cell scores 0. The cells below ran in a "
            "fresh kernel, after the cells above them that are not tests were run again.",
            language,
        )
    if status is not None and status > 128:
        signal = status - 128
        if status == 137:
            how = for_student(f"exit status {status}, killed by signal {signal} (perhaps out of memory)", language)
        else:
            how = for_student(f"exit status {status}, killed by signal {signal}", language)
    else:
        how = for_student(f"exit status {status}", language)
    return for_student(
        f"The kernel stopped while running this cell ({how}), so this cell scores 0. "
        "Graded code must not call os._exit() or kill its own process. The cells below ran in a fresh "
        "kernel, after the cells above them that are not tests were run again.",
        language,
    )


def cap_error(content: Dict[str, Any]) -> None:
    """Cap an error message's name, value and traceback in place (an error can be megabytes)."""
    content["evalue"] = cap(str(content.get("evalue", "")), MAX_ERROR_TEXT)
    content["ename"] = cap(str(content.get("ename", "")), 200)
    kept, total = [], 0
    for line in content.get("traceback", []) or []:
        line = cap(str(line), MAX_ERROR_TEXT)
        total += len(line)
        if total > MAX_TRACEBACK:
            kept.append("... (traceback cut)")
            break
        kept.append(line)
    content["traceback"] = kept
