"""The labs' widgets build, react to their controls, and report OOM instead of crashing."""
import pytest

from paged_kv import KVCacheManager, estimate_kv_cache_bytes
from paged_kv.widgets import decode_stepper, ledger_explorer


def test_ledger_explorer_redraws_with_the_given_ledger():
    calls = []

    def counting_ledger(*args):
        calls.append(args)
        return estimate_kv_cache_bytes(*args)

    box = ledger_explorer(counting_ledger)
    before = len(calls)
    model = box.children[0].children[0]
    model.value = "Qwen2.5-7B"
    assert len(calls) > before
    assert any(args[2:5] == (28, 4, 128) for args in calls[before:]), "Qwen2.5-7B's shape was not used"


def test_decode_stepper_runs_into_oom_and_reports_it(capsys):
    box = decode_stepper(KVCacheManager, num_blocks=4, prompt_len=3, second_prompt=2)
    step = box.children[0].children[1]
    for _ in range(20):
        step.click()
    assert "OOM" in capsys.readouterr().out


@pytest.mark.parametrize("bad", ["not a class", int])
def test_decode_stepper_rejects_a_non_manager(bad):
    with pytest.raises(TypeError):
        decode_stepper(bad)


def test_ledger_explorer_rejects_a_non_function():
    with pytest.raises(TypeError):
        ledger_explorer(42)
