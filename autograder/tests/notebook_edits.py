"""Realistic bugs and correct variants as edits of a lab's solution notebook, for the class simulation.

``NOTEBOOK_EDITS[lab folder][label] = (text in one answer cell, replacement, checks that must fail)``;
``None`` for the checks marks a correct variant (full marks). The edit must match exactly one answer cell
exactly once. Each lab's own grader tests prove its whole catalogue against the checks directly; these
edits put a few of those bugs, one or more per TODO, through nbgrader as submitted notebooks.
"""

from __future__ import annotations

from autograder.labs.lab07_serve_it.tests import bugs as bugs_lab07
from autograder.labs.lab09_chunked_prefill.tests import bugs as bugs_lab09

_LOG2E = "1.4426950408889634"

NOTEBOOK_EDITS = {
    "05-prefix-cache": {
        "prefix fed big-endian": (
            'h.update(prefix.to_bytes(8, "little"))',
            'h.update(prefix.to_bytes(8, "big"))',
            {"check_hash_values"},
        ),
        "serves the last block from the cache": (
            "        for i in range(seq.num_blocks - 1):\n            token_ids = seq.block(i)",
            "        for i in range(seq.num_blocks):\n            token_ids = seq.block(i)",
            {"check_prefix_hits", "check_allocation_traces"},
        ),
        "frees the first block first": (
            "for block_id in reversed(seq.block_table):",
            "for block_id in seq.block_table:",
            {"check_release_and_reuse", "check_release_traces"},
        ),
        "restarts the chain at every step": (
            "h = self.blocks[seq.block_table[start - 1]].hash if start > 0 else -1",
            "h = -1",
            {"check_hash_blocks"},
        ),
        "variant: ids packed one by one with int.to_bytes": (
            "h.update(np.array(token_ids, dtype=np.int64).tobytes())",
            'h.update(b"".join(int(t).to_bytes(8, "little", signed=True) for t in token_ids))',
            None,
        ),
    },
    "08-fork-and-share": {
        "fork shares the parent's list": (
            "child.block_table = list(parent.block_table)",
            "child.block_table = parent.block_table",
            {"check_fork"},
        ),
        "copy on write keeps the old reference": (
            "            self.blocks[last].ref_count -= 1\n",
            "",
            {"check_copy_on_write", "check_append_oom"},
        ),
        "appends before freeing the pruned beams": (
            "    for b, seq in enumerate(beams):\n        if b not in continued:\n            manager.deallocate(seq)\n"
            "    for seq, (_, token) in zip(new_beams, choices):\n        seq.append_token(token)\n"
            "        manager.may_append(seq)\n",
            "    for seq, (_, token) in zip(new_beams, choices):\n        seq.append_token(token)\n"
            "        manager.may_append(seq)\n    for b, seq in enumerate(beams):\n        if b not in continued:\n"
            "            manager.deallocate(seq)\n",
            {"check_beam_traces"},
        ),
        "copies only K": (
            "    for cache in list(k_caches) + list(v_caches):",
            "    for cache in k_caches:",
            {"check_copy_blocks"},
        ),
        "variant: copies with index_copy_": (
            "        cache[dst] = cache[src]",
            "        cache.index_copy_(0, dst, cache.index_select(0, src))",
            None,
        ),
        # The lab's table offers can_append; it must work in every edition the lab is graded on (issue 37).
        "variant: asks the given can_append before taking a block": (
            "        if seq.num_blocks > len(seq.block_table):  # the newest token starts a block\n"
            "            if not self.free_block_ids:\n",
            "        if not self.can_append(seq):\n"
            "            raise RuntimeError(f\"OOM: sequence {seq.seq_id} needs a block and none is free\")\n"
            "        if seq.num_blocks > len(seq.block_table):  # the newest token starts a block\n"
            "            if not self.free_block_ids:\n",
            None,
        ),
    },
    "06-triton-paged-attention": {
        # (step 2's unmasked tail is caught through the pipeline by test_lab06_graders; the class gets step 5's bug)
        "fast kernel stores its padding rows": (
            "(acc / l[:, None]).to(out_ptr.dtype.element_ty), mask=row_ok[:, None])",
            "(acc / l[:, None]).to(out_ptr.dtype.element_ty))",
            # the build check's counted launch (fast_dots) runs the same kernel, so it sees the stray writes too
            {"check_step5_correct", "check_step5_fast_build"},
        ),
        "online softmax without max subtraction": (
            "        m_new = tl.maximum(m, tl.max(s, axis=0))\n        alpha = tl.exp(m - m_new)\n"
            "        p = tl.exp(s - m_new)\n",
            "        m_new = m\n        alpha = 1.0\n        p = tl.exp(s)\n",
            {"check_step3_online_softmax"},
        ),
        "query head used as KV head": (
            "table + i).to(tl.int64)\n        tokens = i * BLOCK_SIZE + slots\n        live = tokens < seq_len\n"
            "        offsets = block * stride_kb + slots[:, None] * stride_ks + kv_head * stride_kh",
            "table + i).to(tl.int64)\n        tokens = i * BLOCK_SIZE + slots\n        live = tokens < seq_len\n"
            "        offsets = block * stride_kb + slots[:, None] * stride_ks + (kv_head * GROUP) * stride_kh",
            {"check_step4_batch", "check_step4_poisoned_memory", "check_step4_int64_offsets"},
        ),
        "variant: exp2 in the online softmax": (
            "        alpha = tl.exp(m - m_new)\n        p = tl.exp(s - m_new)\n",
            f"        alpha = tl.exp2((m - m_new) * {_LOG2E})\n        p = tl.exp2((s - m_new) * {_LOG2E})\n",
            None,
        ),
    },
    # Lab 07's catalogue states the checks each edit must fail at least; these three fail exactly those.
    "07-serve-it": {
        label: bugs_lab07.EDITS[label]
        for label in (
            "preempts the oldest",
            "decode growth by hand, wrong for block size 1",
            "prefill and decode in the same step",
        )
    },
    # Lab 09's catalogue states exactly the checks each edit fails (its own tests prove it); through nbgrader these
    # fail the same checks: a wrong is_prefill, a victim re-admitted at once, the prefix cache never used.
    "09-chunked-prefill": {
        label: bugs_lab09.EDITS[label]
        for label in (
            "is_prefill only for chunks of more than one token",
            "admits in a step that preempted",
            "never uses the prefix cache",
        )
    },
}
