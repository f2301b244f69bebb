"""A seeded serving workload for lab 07: many users, each prompt = one of a few shared "system
prompts" + a short user part, and the numbers one reports about serving it.

The system prompts are written for this course in the style of the documentation the tiny model was
trained on, so its continuations look like documentation. Each is longer than several 16-token
blocks, so requests that share one can share those blocks through the prefix cache.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Dict, Iterable, List, Sequence, Tuple, Union

from paged_kv.cache.checks import check_int, check_positive_int
from paged_kv.engine.sampling import SamplingParams

SYSTEM_PROMPTS: Tuple[str, ...] = (
    'Loops\n*****\n\nA "while" loop repeats its body for as long as its condition stays true. ',
    'Exceptions\n**********\n\nWhen an operation fails, Python raises an exception object. ',
    'Functions\n*********\n\nA function definition binds a name to a new function object. ',
    'Classes\n*******\n\nA class definition creates a new type; its body runs only once. ',
)
USER_PARTS: Tuple[str, ...] = (
    "The ",
    "For example, ",
    "Note that the ",
    "If the ",
    "In this case ",
    "A ",
    "This ",
    "When the ",
    "Each ",
    "It ",
)


@dataclass(frozen=True)
class WorkloadRequest:
    prompt: str
    params: SamplingParams
    system_prompt: int


def shared_prefix_workload(
    num_requests: int = 48,
    seed: int = 0,
    min_tokens: int = 16,
    max_tokens: int = 64,
    system_prompts: Sequence[str] = SYSTEM_PROMPTS,
) -> List[WorkloadRequest]:
    """``num_requests`` greedy requests: a random system prompt, one or two user parts, and an output
    length uniform in ``[min_tokens, max_tokens]``."""
    num_requests = check_positive_int("num_requests", num_requests)
    min_tokens = check_positive_int("min_tokens", min_tokens)
    if check_positive_int("max_tokens", max_tokens) < min_tokens:
        raise ValueError(f"max_tokens={max_tokens} must be >= min_tokens={min_tokens}")
    if not system_prompts or not all(isinstance(p, str) and p for p in system_prompts):
        raise ValueError("system_prompts must be a non-empty list of non-empty strings")
    rng = random.Random(check_int("seed", seed))
    out = []
    for _ in range(num_requests):
        which = rng.randrange(len(system_prompts))
        user = "".join(rng.choice(USER_PARTS) for _ in range(rng.randint(1, 2)))
        out.append(
            WorkloadRequest(
                system_prompts[which] + user, SamplingParams(max_tokens=rng.randint(min_tokens, max_tokens)), which
            )
        )
    return out


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0-100) by linear interpolation between closest ranks."""
    data = sorted(float(v) for v in values)
    if not data:
        raise ValueError("percentile of an empty list")
    if not 0 <= q <= 100:
        raise ValueError(f"q must be in 0..100, got {q}")
    pos = (len(data) - 1) * q / 100
    low = int(pos)
    high = min(low + 1, len(data) - 1)
    return data[low] + (data[high] - data[low]) * (pos - low)


def serving_summary(engine, wall_seconds: float) -> Dict[str, float]:
    """Throughput, latency percentiles, prefix hits and concurrency of a finished ``LLMEngine`` run."""
    states = list(engine.requests.values())
    if not states or not all(s.finished for s in states):
        raise ValueError("serve every request to the end before summarising")
    if not wall_seconds > 0:
        raise ValueError(f"wall_seconds must be positive, got {wall_seconds}")
    outputs = sum(len(s.output_ids) for s in states)
    prompts = sum(s.prompt_len for s in states)
    ttft = [s.ttft for s in states]
    tpot = [s.tpot for s in states if s.tpot is not None]
    itl = [gap for s in states for gap in s.itl]
    log = engine.step_log
    reserved = sum(r.kv_slots_reserved for r in log)
    return {
        "requests": len(states),
        "output tokens": outputs,
        "wall seconds": wall_seconds,
        "output tokens/s": outputs / wall_seconds,
        "engine steps": len(log),
        "TTFT p50 (ms)": 1e3 * percentile(ttft, 50),
        "TTFT p90 (ms)": 1e3 * percentile(ttft, 90),
        "TPOT p50 (ms)": 1e3 * percentile(tpot, 50) if tpot else float("nan"),
        "TPOT p90 (ms)": 1e3 * percentile(tpot, 90) if tpot else float("nan"),
        "ITL p50 (ms)": 1e3 * percentile(itl, 50) if itl else float("nan"),
        "ITL p99 (ms)": 1e3 * percentile(itl, 99) if itl else float("nan"),
        "ITL max (ms)": 1e3 * max(itl) if itl else float("nan"),
        "prefix hit rate": sum(s.prompt_tokens_from_cache or 0 for s in states) / prompts,
        "KV slots holding tokens": (sum(r.kv_slots_filled for r in log) / reserved) if reserved else float("nan"),
        "tokens computed": sum(r.computed_tokens for r in log),
        "preemptions": sum(r.preempted for r in log),
        "max running": max(r.num_running for r in log),
        "mean running (decode steps)": _mean([r.num_seqs for r in log if not r.is_prefill]),
    }


def _mean(values: List[float]) -> float:
    return sum(values) / len(values) if values else float("nan")


# -- reading a run ----------------------------------------------------------------------------------
SHARES = ("prefix hit rate", "KV slots holding tokens")  # summary rows that are fractions of 1


def format_summary_value(name: str, value: Union[int, float]) -> str:
    """A ``serving_summary`` value as a person reads it: shares in percent, counts with thousands
    separators, times without scientific notation (``1,640`` rather than ``1.64e+03``)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name}: expected an int or a float, got {type(value).__name__}")
    if isinstance(value, int):
        return f"{value:,}"
    if value != value:  # NaN: nothing to measure (no decode step, no second token)
        return "n/a"
    if name in SHARES:
        return f"{100 * value:.1f}%"
    magnitude = abs(value)
    return f"{value:,.0f}" if magnitude >= 100 else f"{value:.1f}" if magnitude >= 10 else f"{value:.2f}"


def step_timeline(step_log: Iterable, per_line: int = 50) -> str:
    """The kinds of an engine's steps, ``P`` (prefill) or ``d`` (decode), in lines of ``per_line`` steps
    (groups of 10), each line starting with its first step's index, under a line that counts them."""
    per_line = check_positive_int("per_line", per_line)
    records = list(step_log)
    kinds = "".join("P" if r.is_prefill else "d" for r in records)
    preempted = [r.index for r in records if r.preempted]
    shown = ", ".join(map(str, preempted[:8])) + (", ..." if len(preempted) > 8 else "")
    lines = [
        f"{len(records)} engine steps: {kinds.count('P')} prefill (P), {kinds.count('d')} decode (d); "
        + (f"preemptions in steps {shown}" if preempted else "no preemption")
    ]
    width = len(str(max(len(records) - 1, 0)))
    for start in range(0, len(kinds), per_line):
        row = kinds[start : start + per_line]
        groups = " ".join(row[i : i + 10] for i in range(0, len(row), 10))
        lines.append(f"  step {start:>{width}}  {groups}")
    return "\n".join(lines)
