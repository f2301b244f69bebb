"""The labs' widgets build, react to their controls, honour each model's context, and show every error
of the student's code inside the widget (a callback's exception would only reach Jupyter's log console)."""

import pytest

from paged_kv import KVCacheManager, MODEL_PRESETS, estimate_kv_cache_bytes
from paged_kv.lab.starters import KVCacheManagerWithoutDecode
from paged_kv.lab.widgets import decode_stepper, ledger_explorer


def controls(box):
    """(model, dtype, block, context) of a ledger explorer; (block, step, step4, reset) of a stepper."""
    first = box.children[0].children
    return first if len(first) == 4 else (*first, *box.children[1].children)


def test_ledger_explorer_redraws_with_the_given_ledger():
    calls = []

    def counting_ledger(*args):
        calls.append(args)
        return estimate_kv_cache_bytes(*args)

    box = ledger_explorer(counting_ledger)
    before = len(calls)
    model, *_ = controls(box)
    model.value = "Qwen2.5-7B"
    assert len(calls) > before
    assert any(args[2:5] == (28, 4, 128) for args in calls[before:]), "Qwen2.5-7B's shape was not used"


def test_ledger_explorer_reaches_300_tokens_and_reports_its_tail_waste(capsys):
    box = ledger_explorer(estimate_kv_cache_bytes)
    _, _, block, context = controls(box)
    block.value = 256
    context.value = 300
    assert context.value == 300
    out = capsys.readouterr().out
    assert "A 300-token request holds 2 block(s) of 256: 212 slot(s) of tail waste" in out


def test_ledger_explorer_clips_the_context_to_the_model(capsys):
    box = ledger_explorer(estimate_kv_cache_bytes)
    model, _, _, context = controls(box)
    context.value = 32768
    model.value = "Llama-2-7B"
    assert context.max == MODEL_PRESETS["Llama-2-7B"].max_context == 4096
    assert context.value == 4096
    assert "context up to 4,096 tokens" in capsys.readouterr().out
    model.value = "Llama-3.1-8B"
    assert context.max == 131072


def test_ledger_explorer_shows_a_broken_ledger_in_the_widget(capsys):
    def broken(*args):
        raise ZeroDivisionError("division by zero")

    ledger_explorer(broken)
    assert "Your estimate_kv_cache_bytes raised ZeroDivisionError: division by zero" in capsys.readouterr().out


def test_decode_stepper_runs_into_oom_and_reports_it(capsys):
    box = decode_stepper(KVCacheManager, pool_tokens=24, prompt_len=3, second_prompt=2)
    step = controls(box)[1]
    for _ in range(40):
        step.click()
    assert "OOM: req" in capsys.readouterr().out


def test_decode_stepper_with_the_todo_untouched_says_write_it_first(capsys):
    box = decode_stepper(KVCacheManagerWithoutDecode)
    assert "allocate_for_decode is not written yet" in capsys.readouterr().out
    controls(box)[1].click()
    out = capsys.readouterr().out
    assert "allocate_for_decode is not written yet" in out
    assert "OOM" not in out and "RuntimeError" not in out


class RaisesValueError(KVCacheManagerWithoutDecode):
    def allocate_for_decode(self, req):
        raise ValueError("seq_len went negative")


class LeaksABlock(KVCacheManagerWithoutDecode):
    def allocate_for_decode(self, req):
        self.free_blocks.pop()
        req.seq_len += 1


@pytest.mark.parametrize(
    "cls, shown",
    [
        (RaisesValueError, "Your allocate_for_decode raised ValueError: seq_len went negative"),
        (LeaksABlock, "neither free nor owned"),
    ],
)
def test_decode_stepper_shows_other_errors_in_the_widget(cls, shown, capsys):
    box = decode_stepper(cls)
    controls(box)[1].click()
    assert shown in capsys.readouterr().out


def test_decode_stepper_has_room_to_grow_at_block_size_one(capsys):
    box = decode_stepper(KVCacheManager)
    block, step = controls(box)[:2]
    block.value = 1
    capsys.readouterr()
    for _ in range(8):
        step.click()
    out = capsys.readouterr().out
    assert "OOM" not in out and "after 8 decode step(s)" not in out  # title is in the picture, not printed
    assert "free blocks: 28 of 48" in out


@pytest.mark.parametrize("bad", ["not a class", int])
def test_decode_stepper_rejects_a_non_manager(bad):
    with pytest.raises(TypeError):
        decode_stepper(bad)


def test_decode_stepper_rejects_a_pool_without_room():
    with pytest.raises(ValueError, match="pool_tokens"):
        decode_stepper(KVCacheManager, pool_tokens=12, prompt_len=5, second_prompt=7)


def test_ledger_explorer_rejects_a_non_function():
    with pytest.raises(TypeError):
        ledger_explorer(42)
