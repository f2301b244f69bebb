"""Several outputs from one prompt on shared blocks: parallel sampling and beam search.

Both run a prompt's prefill once, then fork: each branch is a ``Sequence`` whose block table lists
the blocks it shares with its siblings (``ForkingBlockManager``), and the runner performs the
copy-on-write copies before each decode step. ``ForkStats`` records, after every step, the blocks the
branches hold together against the blocks they would hold as independent requests.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, List, Optional, Sequence as SequenceType, Tuple

import torch

from paged_kv.cache.checks import check_instance, check_int, check_positive_int
from paged_kv.cache.forking import FORKING_METHODS, ForkingBlockManager, is_forking_manager_class
from paged_kv.cache.prefix_cache import Sequence
from paged_kv.engine.cache_ops import copy_blocks as _copy_blocks
from paged_kv.engine.model import TinyLlama
from paged_kv.engine.runner import ModelRunner
from paged_kv.engine.sampling import sample_next


@dataclass
class ForkStats:
    """Per decode step: blocks held by all branches together (``shared``) and by independent copies."""

    block_size: int
    shared: List[int] = field(default_factory=list)
    independent: List[int] = field(default_factory=list)
    copies: int = 0
    choices: List[List[Tuple[int, int]]] = field(default_factory=list)  # beam search: (parent, token) per step

    def record(self, manager: ForkingBlockManager, branches: SequenceType[Sequence]) -> None:
        self.shared.append(manager.num_blocks - manager.num_free_blocks)
        self.independent.append(sum(s.num_blocks for s in branches))

    @property
    def saving(self) -> float:
        """Fraction of the independent branches' blocks that sharing saved, over all steps."""
        total = sum(self.independent)
        return 1 - sum(self.shared) / total if total else 0.0


def advance_beams(
    manager: ForkingBlockManager, beams: SequenceType[Sequence], choices: SequenceType[Tuple[int, int]]
) -> List[Sequence]:
    """One beam-search step on shared blocks: new beam ``i`` is ``beams[b] + [token]`` for
    ``choices[i] == (b, token)``; returns the new beams in the order of ``choices``.

    Forks come first, while every parent still ends at the step's old token: a beam chosen ``k`` times
    continues itself once and is forked ``k - 1`` times. Then every beam no choice names is freed
    (``deallocate``), before any block is taken, so the step needs the pool's free blocks only for what
    the surviving beams write. Last, each new beam appends its token and calls ``may_append``. The
    arguments are checked before anything changes; an OOM in ``may_append`` propagates.
    """
    if not is_forking_manager_class(type(manager)):
        raise TypeError(
            f"manager must be a BlockManager with {', '.join(FORKING_METHODS)} (a ForkingBlockManager), "
            f"got {type(manager).__name__}"
        )
    beams = list(beams)
    for seq in beams:
        check_instance("beam", seq, Sequence)
    if len({id(s) for s in beams}) != len(beams):
        raise ValueError("beams lists one Sequence twice")
    choices = [tuple(c) for c in choices]
    if not choices:
        raise ValueError("choices is empty: a beam step keeps at least one beam")
    for choice in choices:
        if len(choice) != 2:
            raise ValueError(f"each choice is (beam index, token id), got {choice!r}")
        check_int("beam index", choice[0], minimum=0)
        check_int("token id", choice[1], minimum=0)
        if choice[0] >= len(beams):
            raise ValueError(f"choice {choice!r} names beam {choice[0]}, but there are {len(beams)} beams")
    continued = set()
    new_beams = []
    for b, _ in choices:
        new_beams.append(beams[b] if b not in continued else manager.fork(beams[b]))
        continued.add(b)
    for b, seq in enumerate(beams):
        if b not in continued:
            manager.deallocate(seq)
    for seq, (_, token) in zip(new_beams, choices):
        seq.append_token(token)
        manager.may_append(seq)
    return new_beams


class _Branches:
    """A manager, a runner and the live branches of one prompt: prefill, fork, decode, free."""

    def __init__(
        self,
        model: TinyLlama,
        prompt_ids: SequenceType[int],
        max_tokens: int,
        block_size: int,
        num_blocks: Optional[int],
        branches: int,
        manager_class: type = ForkingBlockManager,
        copy_blocks: Callable = _copy_blocks,
    ):
        if not isinstance(model, TinyLlama):
            raise TypeError(f"model must be a TinyLlama, got {type(model).__name__}")
        if not is_forking_manager_class(manager_class):
            raise TypeError(
                f"manager_class must be a BlockManager class with {', '.join(FORKING_METHODS)} (a "
                f"ForkingBlockManager), got {manager_class!r}"
            )
        if not callable(copy_blocks):
            raise TypeError(
                f"copy_blocks must be callable like paged_kv.engine.cache_ops.copy_blocks, got "
                f"{type(copy_blocks).__name__}"
            )
        self.block_size = check_positive_int("block_size", block_size)
        check_positive_int("max_tokens", max_tokens)
        prompt = [check_int("token id", t, minimum=0) for t in prompt_ids]
        if not prompt:
            raise ValueError("the prompt must hold at least one token")
        if len(prompt) + max_tokens > model.config.max_model_len:
            raise ValueError(
                f"prompt ({len(prompt)}) + max_tokens ({max_tokens}) exceeds max_model_len {model.config.max_model_len}"
            )
        # Enough for every branch to hold its own copy of everything: sharing can only use less.
        need = branches * math.ceil((len(prompt) + max_tokens) / block_size) + branches
        self.num_blocks = check_positive_int("num_blocks", num_blocks) if num_blocks is not None else need
        self.manager = manager_class(self.num_blocks, block_size)
        self.runner = ModelRunner(model, self.num_blocks, block_size, copy_blocks=copy_blocks)
        self.stats = ForkStats(block_size)
        self.prompt = prompt

    def prefill(self) -> Tuple[Sequence, torch.Tensor]:
        seq = Sequence(self.prompt, self.block_size)
        cached = self.manager.can_allocate(seq)
        if cached < 0:
            raise RuntimeError(f"OOM: the prompt needs {seq.num_blocks} blocks, the pool has {self.num_blocks}")
        self.manager.allocate(seq, cached)
        seq.num_scheduled_tokens = len(seq) - seq.num_cached_tokens
        logits = self.runner.run([seq], is_prefill=True)
        self._computed([seq])
        return seq, logits[0]

    def decode(self, branches: List[Sequence], tokens: Optional[List[int]]) -> torch.Tensor:
        """Append ``tokens[i]`` to ``branches[i]`` (``None``: already appended, ``may_append`` done), copy
        what is shared, run one step: logits ``[B, vocab]``."""
        for i, seq in enumerate(branches):
            if tokens is not None:
                seq.append_token(tokens[i])
                self.manager.may_append(seq)
            seq.num_scheduled_tokens = 1
        copies = self.manager.take_copies()
        self.stats.copies += len(copies)
        logits = self.runner.run(branches, is_prefill=False, copies=copies)
        self._computed(branches)
        self.stats.record(self.manager, branches)
        return logits

    def _computed(self, seqs: SequenceType[Sequence]) -> None:
        for seq in seqs:
            self.manager.hash_blocks(seq)
            seq.num_cached_tokens += seq.num_scheduled_tokens
            seq.num_scheduled_tokens = 0


@torch.inference_mode()
def parallel_sample(
    model: TinyLlama,
    prompt_ids: SequenceType[int],
    n: int,
    max_tokens: int,
    *,
    temperature: float = 1.0,
    seed: int = 0,
    block_size: int = 16,
    num_blocks: Optional[int] = None,
    manager_class: type = ForkingBlockManager,
    copy_blocks: Callable = _copy_blocks,
) -> Tuple[List[List[int]], ForkStats]:
    """``n`` sampled continuations of one prompt (branch ``i`` sampled with seed ``seed + i``), sharing
    the prompt's blocks: ``(outputs, stats)``. The first token of every branch comes from the prompt's
    logits, so the prefill runs once. ``manager_class`` and ``copy_blocks`` replace the package's
    (lab 08 runs its own through here)."""
    n = check_positive_int("n", n)
    run = _Branches(model, prompt_ids, max_tokens, block_size, num_blocks, n, manager_class, copy_blocks)
    gens = [torch.Generator().manual_seed(seed + i) for i in range(n)]
    parent, logits = run.prefill()
    branches = [parent] + [run.manager.fork(parent) for _ in range(n - 1)]
    outputs: List[List[int]] = [[] for _ in range(n)]
    last = [logits] * n
    for step in range(max_tokens):
        tokens = [sample_next(last[i], temperature, gens[i] if temperature else None) for i in range(n)]
        for out, token in zip(outputs, tokens):
            out.append(token)
        if step + 1 < max_tokens:
            last = list(run.decode(branches, tokens))
    for seq in branches:
        run.manager.deallocate(seq)
    return outputs, run.stats


@torch.inference_mode()
def beam_search(
    model: TinyLlama,
    prompt_ids: SequenceType[int],
    width: int,
    max_tokens: int,
    *,
    block_size: int = 16,
    num_blocks: Optional[int] = None,
    manager_class: type = ForkingBlockManager,
    copy_blocks: Callable = _copy_blocks,
    advance: Callable = advance_beams,
    on_step: Optional[Callable] = None,
) -> Tuple[List[Tuple[List[int], float]], ForkStats]:
    """Beam search of ``width`` beams for ``max_tokens`` tokens (no end token, no length penalty): the
    beams as ``(tokens, summed log-probability)``, best first, and the memory ``stats``.

    Each step keeps the ``width`` best (beam, next token) pairs and moves the beams with ``advance``
    (``advance_beams``: fork the beams chosen again, free those not chosen, append). ``stats.choices``
    records every step's ``(parent beam, token)`` pairs: the beam tree. ``manager_class``,
    ``copy_blocks`` and ``advance`` replace the package's (lab 08 runs its own through here).
    ``on_step(step, manager, beams)``, if given, sees every step right after ``advance`` (the step's
    copies still pending): for pictures.
    """
    width = check_positive_int("width", width)
    if on_step is not None and not callable(on_step):
        raise TypeError(f"on_step must be callable or None, got {type(on_step).__name__}")
    if not callable(advance):
        raise TypeError(f"advance must be callable like advance_beams, got {type(advance).__name__}")
    run = _Branches(model, prompt_ids, max_tokens, block_size, num_blocks, width, manager_class, copy_blocks)
    parent, logits = run.prefill()
    beams = [(parent, [], 0.0)]  # (sequence, generated tokens, score)
    step_logits = logits[None]
    for step in range(max_tokens):
        logprobs = torch.log_softmax(step_logits.float(), dim=-1)
        candidates = []
        for b, (_, _, score) in enumerate(beams):
            top = torch.topk(logprobs[b], min(width, logprobs.shape[-1]))
            candidates += [(score + float(v), b, int(t)) for v, t in zip(top.values, top.indices)]
        candidates.sort(key=lambda c: (-c[0], c[1], c[2]))  # ties: the earlier beam, the smaller id
        chosen = candidates[:width]
        choices = [(b, token) for _, b, token in chosen]
        run.stats.choices.append(choices)
        seqs = advance(run.manager, [s for s, _, _ in beams], choices)
        if len(seqs) != len(chosen):
            raise ValueError(f"advance returned {len(seqs)} beams for {len(chosen)} choices")
        beams = [(seq, beams[b][1] + [token], score) for seq, (score, b, token) in zip(seqs, chosen)]
        if on_step is not None:
            on_step(step, run.manager, [s for s, _, _ in beams])
        if step + 1 < max_tokens:
            step_logits = run.decode([s for s, _, _ in beams], None)
    result = sorted(((tokens, score) for _, tokens, score in beams), key=lambda r: -r[1])
    for seq, _, _ in beams:
        run.manager.deallocate(seq)
    run.manager.take_copies()  # the last step's copies: nothing runs after it
    return result, run.stats
