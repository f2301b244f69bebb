"""A small serving engine in the shape of nano-vllm's ``LLMEngine``: schedule, run, sample, repeat.

One ``step()``:

1. the scheduler picks a batch (a prefill batch or a decode batch; see ``paged_kv.engine.scheduler``);
2. the model runner computes the scheduled tokens through the paged KV cache and returns the logits
   of each sequence's last position;
3. for every scheduled sequence: ``hash_blocks`` registers the blocks this step filled, only now that
   their K/V exist (registering at allocation breaks once a scheduler chunks a prompt and admits another
   request beside an unfinished chunk: that request could hit a block only a later chunk computes; lab 09's
   ``EagerRegistrationBlockManager`` shows it. nano-vllm registered at allocation until f64d821 without that
   hazard, as its scheduler never let a request join a step beside an unfinished chunk); the computed tokens
   become cached, one token is sampled and appended; a request with ``max_tokens`` outputs finishes and gives
   its blocks back.

Requests arriving together are served with continuous batching: a finished request's blocks are
handed to the next waiting one on the following step. ``step_log`` and each ``RequestState`` keep
what the course plots: tokens computed, prefix hits, blocks in use, TTFT and TPOT.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Sequence as SequenceType, Union

import torch

from paged_kv.kernels.attention import paged_decode_attention_ref
from paged_kv.cache.checks import ceil_div, check_instance, check_positive_int
from paged_kv.engine.kv_context import DecodeAttention
from paged_kv.engine.model import TinyLlama
from paged_kv.cache.prefix_cache import BlockManager, Sequence
from paged_kv.engine.runner import ModelRunner
from paged_kv.engine.sampling import SamplingParams, sample_next
from paged_kv.engine.scheduler import Scheduler, SchedulerBase
from paged_kv.engine import tokenizer


@dataclass
class RequestState:
    """One request's life: its ``Sequence``, its outputs and its timestamps (seconds, engine clock)."""

    request_id: int
    seq: Sequence
    params: SamplingParams
    prompt_len: int
    arrival_time: float
    generator: Optional[torch.Generator] = None
    output_ids: List[int] = field(default_factory=list)
    first_token_time: Optional[float] = None
    finish_time: Optional[float] = None
    token_times: List[float] = field(default_factory=list)  # when each output token existed (engine clock)
    num_preemptions: int = 0
    prompt_tokens_from_cache: Optional[int] = None

    @property
    def finished(self) -> bool:
        return self.finish_time is not None

    @property
    def text(self) -> str:
        return tokenizer.decode(self.output_ids)

    @property
    def ttft(self) -> Optional[float]:
        """Time to first token: arrival to the first sampled token."""
        return None if self.first_token_time is None else self.first_token_time - self.arrival_time

    @property
    def tpot(self) -> Optional[float]:
        """Time per output token after the first: ``(finish - first) / (outputs - 1)``."""
        if self.finish_time is None or len(self.output_ids) < 2:
            return None
        return (self.finish_time - self.first_token_time) / (len(self.output_ids) - 1)

    @property
    def itl(self) -> List[float]:
        """Inter-token latencies: the gap before each output token after the first (a preemption shows as
        one long gap, which the average ``tpot`` spreads over every token)."""
        return [b - a for a, b in zip(self.token_times, self.token_times[1:])]


@dataclass(frozen=True)
class StepRecord:
    """What one engine step did. ``cached_tokens``: prompt tokens that prefix-cache hits spared.

    ``kv_slots_filled``: token slots of the pool holding computed K/V of running sequences (a shared
    block counts once); ``kv_slots_reserved``: slots the scheduler holds for them (allocated blocks,
    or whole reservations for ``MaxReservationScheduler``), both after the step.
    """

    index: int
    is_prefill: bool
    num_seqs: int
    computed_tokens: int
    cached_tokens: int
    preempted: int
    blocks_in_use: int
    kv_slots_filled: int
    kv_slots_reserved: int
    num_running: int
    num_waiting: int
    end_time: float
    decode_tokens: int = 0  # of computed_tokens: one per sequence that generates (lab 09's bars)
    token_budget: int = 0  # the scheduler's max_num_batched_tokens
    sampled: int = 0  # sequences that got a token (a chunk short of the end gets none)


SchedulerFactory = Callable[..., SchedulerBase]


class LLMEngine:
    """Serves ``model`` from a pool of ``num_blocks`` KV blocks of ``block_size`` tokens.

    ``scheduler``: a ``SchedulerBase`` subclass (or a factory) called as
    ``scheduler(block_manager, max_num_seqs=..., max_num_batched_tokens=...)``; its ``block_manager_class``
    (``BlockManager`` unless it says otherwise) is the pool's manager. A scheduler without
    ``chunked_prefill`` computes a prompt in one step, so its budget must hold ``max_model_len`` tokens; a
    chunking one (lab 09's ``ChunkedScheduler``) takes any budget.
    ``decode_attention``: the paged decode kernel (torch reference by default; the Triton kernel of
    lab 06 has the same signature). ``clock``: seconds, for TTFT/TPOT.
    """

    def __init__(
        self,
        model: TinyLlama,
        num_blocks: int,
        block_size: int = 16,
        *,
        max_num_seqs: int = 16,
        max_num_batched_tokens: Optional[int] = None,
        scheduler: SchedulerFactory = Scheduler,
        decode_attention: DecodeAttention = paged_decode_attention_ref,
        clock: Callable[[], float] = time.perf_counter,
    ):
        check_instance("model", model, TinyLlama)
        self.model = model
        self.max_model_len = model.config.max_model_len
        if max_num_batched_tokens is None:
            max_num_batched_tokens = 4 * self.max_model_len
        chunked = bool(getattr(scheduler, "chunked_prefill", False))
        if check_positive_int("max_num_batched_tokens", max_num_batched_tokens) < self.max_model_len and not chunked:
            raise ValueError(
                f"max_num_batched_tokens={max_num_batched_tokens} must be at least max_model_len="
                f"{self.max_model_len}: a preempted sequence is recomputed in one prefill"
            )
        manager_class = getattr(scheduler, "block_manager_class", BlockManager)
        if not (isinstance(manager_class, type) and issubclass(manager_class, BlockManager)):
            raise TypeError(f"scheduler.block_manager_class must be a BlockManager subclass, got {manager_class!r}")
        self.block_manager = manager_class(num_blocks, block_size)
        self.scheduler = scheduler(
            self.block_manager, max_num_seqs=max_num_seqs, max_num_batched_tokens=max_num_batched_tokens
        )
        if not isinstance(self.scheduler, SchedulerBase):
            raise TypeError(f"scheduler must build a SchedulerBase, got {type(self.scheduler).__name__}")
        self.runner = ModelRunner(model, num_blocks, block_size, decode_attention)
        self.clock = clock
        self.requests: Dict[int, RequestState] = {}
        self._by_seq: Dict[int, RequestState] = {}
        self.step_log: List[StepRecord] = []

    @property
    def block_size(self) -> int:
        return self.block_manager.block_size

    # -- requests ---------------------------------------------------------------------------------
    def add_request(self, prompt: Union[str, SequenceType[int]], params: SamplingParams = SamplingParams()) -> int:
        """Queue a request (text or token ids); return its id. Refuses one that could never be served."""
        seq = self._new_sequence(prompt, params)
        self.scheduler.add(seq)
        state = RequestState(len(self.requests), seq, params, len(seq), self.clock(), params.generator())
        self.requests[state.request_id] = state
        self._by_seq[seq.seq_id] = state
        return state.request_id

    def _new_sequence(self, prompt, params: SamplingParams) -> Sequence:
        check_instance("params", params, SamplingParams)
        if isinstance(prompt, (bytes, bytearray)) or not isinstance(prompt, (str, list, tuple)):
            raise TypeError(f"prompt must be a str or a list of ints, got {type(prompt).__name__}")
        ids = tokenizer.encode(prompt) if isinstance(prompt, str) else list(prompt)
        seq = Sequence(ids, self.block_size)  # checks: non-empty, non-negative ints
        if max(ids) >= self.model.config.vocab_size:
            raise ValueError(f"token ids must be < vocab_size={self.model.config.vocab_size}, got {max(ids)}")
        longest = len(ids) + params.max_tokens - 1  # the last sampled token is never fed back
        if longest > self.max_model_len:
            raise ValueError(
                f"prompt of {len(ids)} tokens + max_tokens={params.max_tokens} needs {longest} positions "
                f"but the model serves at most max_model_len={self.max_model_len}; shorten one of them"
            )
        if ceil_div(longest, self.block_size) > self.block_manager.num_blocks:
            raise ValueError(
                f"prompt of {len(ids)} tokens + max_tokens={params.max_tokens} needs "
                f"{ceil_div(longest, self.block_size)} blocks of {self.block_size} but the pool has only "
                f"{self.block_manager.num_blocks}: it could never finish, even alone"
            )
        return seq

    def has_unfinished(self) -> bool:
        return not self.scheduler.is_finished()

    # -- the loop -------------------------------------------------------------------------------------
    def step(self) -> List[RequestState]:
        """Schedule, compute, sample once; return the requests that finished in this step."""
        if self.scheduler.is_finished():
            raise RuntimeError("nothing to do: every request has finished; add_request first")
        was_running = {id(s) for s in self.scheduler.running}
        seqs, is_prefill = self.scheduler.schedule()
        if not isinstance(seqs, list) or not seqs:
            raise RuntimeError(
                f"the scheduler returned {seqs!r} while {len(self.scheduler.waiting)} sequence(s) wait "
                f"and {len(self.scheduler.running)} run: an empty step would loop forever"
            )
        self._check_step_kind(seqs, is_prefill)
        preempted = [s for s in self.scheduler.waiting if id(s) in was_running]
        for seq in preempted:
            self._by_seq[seq.seq_id].num_preemptions += 1
        states = [self._by_seq[s.seq_id] for s in seqs]
        admitted = [s for s in seqs if id(s) not in was_running]  # their computed tokens so far are prefix hits
        cached = sum(s.num_cached_tokens for s in admitted)
        for seq in admitted:
            state = self._by_seq[seq.seq_id]
            if state.prompt_tokens_from_cache is None:
                state.prompt_tokens_from_cache = seq.num_cached_tokens
        computed = sum(s.num_scheduled_tokens for s in seqs)
        decode_tokens = sum(
            1
            for s in seqs
            if s.num_scheduled_tokens == 1 and s.num_cached_tokens + 1 == len(s) and len(s) > s.num_prompt_tokens
        )
        # a chunk that stops short of the sequence's end (lab 09) gives no token: its logits are not sampled
        complete = [s.num_cached_tokens + s.num_scheduled_tokens == len(s) for s in seqs]
        logits = self.runner.run(seqs, is_prefill)
        tokens = [
            sample_next(row, state.params.temperature, state.generator) if done else None
            for state, row, done in zip(states, logits, complete)
        ]
        now = self.clock()  # after sampling: reading each token back to the host waits for the device's work
        finished = []
        for seq, state, token in zip(seqs, states, tokens):
            self.block_manager.hash_blocks(seq)  # after the K/V exist, never before
            seq.num_cached_tokens += seq.num_scheduled_tokens
            seq.num_scheduled_tokens = 0
            if token is None:
                continue
            seq.append_token(token)
            state.output_ids.append(token)
            state.token_times.append(now)
            if state.first_token_time is None:
                state.first_token_time = now
            if len(state.output_ids) == state.params.max_tokens:
                self.scheduler.finish(seq)
                state.finish_time = now
                finished.append(state)
        self.step_log.append(
            StepRecord(
                index=len(self.step_log),
                is_prefill=is_prefill,
                num_seqs=len(seqs),
                computed_tokens=computed,
                cached_tokens=cached,
                preempted=len(preempted),
                blocks_in_use=self.block_manager.num_blocks - self.block_manager.num_free_blocks,
                kv_slots_filled=self._filled_slots(),
                kv_slots_reserved=self.scheduler.reserved_blocks() * self.block_size,
                num_running=len(self.scheduler.running),
                num_waiting=len(self.scheduler.waiting),
                end_time=now,
                decode_tokens=decode_tokens,
                token_budget=self.scheduler.max_num_batched_tokens,
                sampled=sum(complete),
            )
        )
        return finished

    @staticmethod
    def _check_step_kind(seqs: List[Sequence], is_prefill: bool) -> None:
        """The runner's decode path computes each sequence's one last token; anything else needs the prefill path."""
        if not isinstance(is_prefill, bool):
            raise TypeError(f"the scheduler returned is_prefill={is_prefill!r}; it must be a bool")
        if is_prefill:
            return
        for seq in seqs:
            count, cached = seq.num_scheduled_tokens, seq.num_cached_tokens
            if count != 1 or cached + 1 != len(seq):
                what = "a recomputation after preemption" if len(seq) > seq.num_prompt_tokens else "a prompt chunk"
                raise ValueError(
                    f"the scheduler returned is_prefill=False, but sequence {seq.seq_id} computes {count} token(s) "
                    f"after {cached} of its {len(seq)} ({what}): is_prefill must be True when any scheduled "
                    "sequence computes more than its one last token (a chunk, even of one token short of its end, "
                    "or a recomputation); False only for a step of decodes"
                )

    def _filled_slots(self) -> int:
        filled: Dict[int, int] = {}
        size = self.block_size
        for seq in self.scheduler.running:
            for i, block_id in enumerate(seq.block_table):
                tokens = min(size, seq.num_cached_tokens - i * size)
                if tokens <= 0:
                    break
                filled[block_id] = max(filled.get(block_id, 0), tokens)
        return sum(filled.values())

    def run(self, max_steps: Optional[int] = None) -> List[RequestState]:
        """Step until every request has finished (or ``max_steps``); return all requests in id order."""
        steps = 0
        while self.has_unfinished():
            if max_steps is not None and steps >= max_steps:
                raise RuntimeError(f"still unfinished after max_steps={max_steps}")
            self.step()
            steps += 1
        return [self.requests[i] for i in sorted(self.requests)]

    def generate(
        self,
        prompts: SequenceType[Union[str, SequenceType[int]]],
        params: Union[SamplingParams, SequenceType[SamplingParams]] = SamplingParams(),
    ) -> List[RequestState]:
        """Add every prompt (all arrive now), serve them all, return their states in prompt order."""
        if isinstance(prompts, str) or not isinstance(prompts, (list, tuple)) or not prompts:
            raise TypeError("prompts must be a non-empty list of strings or token-id lists")
        param_list = [params] * len(prompts) if isinstance(params, SamplingParams) else list(params)
        if len(param_list) != len(prompts):
            raise ValueError(f"got {len(prompts)} prompts but {len(param_list)} SamplingParams")
        for p, sp in zip(prompts, param_list):  # every request is checked before any is queued
            self._new_sequence(p, sp)
        ids = [self.add_request(p, sp) for p, sp in zip(prompts, param_list)]
        self.run()
        return [self.requests[i] for i in ids]
