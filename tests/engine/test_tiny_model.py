"""The committed weights: they load, match the training script's config, are small, and still write
the sample they wrote when they were trained (through a full recompute and through the paged engine)."""

import importlib.util
from pathlib import Path

import pytest
import torch

from paged_kv.engine import tokenizer
from paged_kv.engine.llm_engine import LLMEngine
from paged_kv.engine.generate import generate_no_cache
from paged_kv.engine.model import WEIGHTS_FILE, ModelConfig, load_tiny_model, read_checkpoint
from paged_kv.engine.sampling import SamplingParams

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def train_script():
    spec = importlib.util.spec_from_file_location("train_tiny_model", ROOT / "tools" / "train_tiny_model.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def checkpoint():
    return read_checkpoint()


def test_weights_file_is_small_enough_to_commit():
    assert WEIGHTS_FILE.stat().st_size < 4 * 2**20


def test_training_script_config_and_settings_match_the_file(checkpoint, train_script):
    assert ModelConfig.from_dict(checkpoint["config"]) == train_script.CONFIG
    assert checkpoint["train"] == train_script.TRAIN
    assert checkpoint["sample"]["prompt"] == train_script.SAMPLE_PROMPT
    assert len(checkpoint["sample"]["completion_ids"]) == train_script.SAMPLE_TOKENS
    assert checkpoint["corpus"]["source"] == "pydoc_data.topics" and len(checkpoint["corpus"]["sha256"]) == 64


def test_the_model_learned_something(checkpoint):
    assert checkpoint["metrics"]["val_loss"] < 2.0, "held-out loss per byte; a uniform guess is ln(256) = 5.5"


def test_weights_load_in_float16_storage_and_run_in_float32(checkpoint):
    assert all(t.dtype == torch.float16 for t in checkpoint["state_dict"].values())
    model = load_tiny_model()
    assert model.embed.weight.dtype == torch.float32 and not model.training
    assert not any(p.requires_grad for p in model.parameters())


def test_stored_sample_is_reproduced_by_full_recompute_and_by_the_paged_engine(checkpoint):
    model = load_tiny_model()
    prompt = tokenizer.encode(checkpoint["sample"]["prompt"])
    expected = checkpoint["sample"]["completion_ids"]
    params = SamplingParams(max_tokens=len(expected))
    assert generate_no_cache(model, prompt, params) == expected
    engine = LLMEngine(model, num_blocks=16, block_size=16)
    assert engine.generate([prompt], params)[0].output_ids == expected


def test_a_missing_or_foreign_file_is_refused_clearly(tmp_path):
    with pytest.raises(FileNotFoundError, match="train_tiny_model"):
        read_checkpoint(tmp_path / "absent.pt")
    torch.save({"format": "something else"}, tmp_path / "other.pt")
    with pytest.raises(ValueError, match="is not a"):
        read_checkpoint(tmp_path / "other.pt")
