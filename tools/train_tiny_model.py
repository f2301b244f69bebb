"""Train the course's tiny Llama on CPython's own documentation text and write its weights file.

    .venv/bin/python tools/train_tiny_model.py            # the committed run: 82 minutes on 2 shared cores
    .venv/bin/python tools/train_tiny_model.py --steps 20 --out /tmp/t.pt   # a quick smoke run

The text is ``pydoc_data.topics`` (the help texts that ``help("if")`` prints), which every CPython
installation ships, so no download is needed. Tokens are UTF-8 bytes. Everything is seeded; the file
records the config, the training settings, a fingerprint of the text, the losses, and a greedy
sample that ``tests/engine/test_tiny_model.py`` regenerates from the stored weights.
"""

from __future__ import annotations

import argparse
import hashlib
import math
import platform
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from paged_kv.engine import tokenizer  # noqa: E402
from paged_kv.engine.generate import generate_no_cache  # noqa: E402
from paged_kv.engine.kv_context import NoCache  # noqa: E402
from paged_kv.engine.model import WEIGHTS_FILE, WEIGHTS_FORMAT, ModelConfig, TinyLlama, init_weights, load_tiny_model  # noqa: E402
from paged_kv.engine.sampling import SamplingParams  # noqa: E402

CONFIG = ModelConfig(
    vocab_size=256,
    hidden_size=128,
    num_layers=4,
    num_q_heads=4,
    num_kv_heads=2,
    head_dim=32,
    intermediate_size=384,
    max_model_len=256,
)
TRAIN = {
    "seed": 0,
    "steps": 1200,
    "batch_size": 24,
    "context": 256,  # = max_model_len: RoPE positions beyond it were never seen
    "lr": 3e-3,
    "min_lr": 3e-4,
    "warmup_steps": 100,
    "weight_decay": 0.1,
    "grad_clip": 1.0,
    "val_fraction": 0.05,  # the last 5% of the text, never trained on
    "val_batches": 20,
    "threads": 2,
}
SAMPLE_PROMPT = 'The "if" statement'
SAMPLE_TOKENS = 120


def corpus_text() -> str:
    """Every topic of ``pydoc_data.topics``, sorted by name, separated by blank lines."""
    from pydoc_data.topics import topics

    return "\n\n".join(topics[name] for name in sorted(topics))


def batches(data: torch.Tensor, batch_size: int, context: int, gen: torch.Generator):
    starts = torch.randint(0, len(data) - context - 1, (batch_size,), generator=gen)
    rows = torch.stack([data[s : s + context + 1] for s in starts.tolist()])
    return rows[:, :-1], rows[:, 1:]


def loss_on(model: TinyLlama, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    b, t = x.shape
    positions = torch.arange(t).repeat(b)
    hidden = model(x.reshape(-1), positions, NoCache([t] * b))
    return torch.nn.functional.cross_entropy(model.logits(hidden), y.reshape(-1))


def learning_rate(step: int, cfg: dict) -> float:
    if step < cfg["warmup_steps"]:
        return cfg["lr"] * (step + 1) / cfg["warmup_steps"]
    progress = (step - cfg["warmup_steps"]) / max(1, cfg["steps"] - cfg["warmup_steps"])
    return cfg["min_lr"] + 0.5 * (cfg["lr"] - cfg["min_lr"]) * (1 + math.cos(math.pi * progress))


def train(cfg: dict, out: Path) -> dict:
    torch.manual_seed(cfg["seed"])
    torch.set_num_threads(cfg["threads"])
    text = corpus_text()
    raw = text.encode("utf-8")
    data = torch.tensor(list(raw), dtype=torch.long)
    split = int(len(data) * (1 - cfg["val_fraction"]))
    train_data, val_data = data[:split], data[split:]
    model = TinyLlama(CONFIG)
    init_weights(model, cfg["seed"])
    decay = [p for n, p in model.named_parameters() if p.dim() == 2 and "embed" not in n]
    no_decay = [p for n, p in model.named_parameters() if not (p.dim() == 2 and "embed" not in n)]
    optimizer = torch.optim.AdamW(
        [{"params": decay, "weight_decay": cfg["weight_decay"]}, {"params": no_decay, "weight_decay": 0.0}],
        lr=cfg["lr"],
        betas=(0.9, 0.95),
    )
    gen = torch.Generator().manual_seed(cfg["seed"])
    started = time.perf_counter()
    recent = []
    for step in range(cfg["steps"]):
        for group in optimizer.param_groups:
            group["lr"] = learning_rate(step, cfg)
        x, y = batches(train_data, cfg["batch_size"], cfg["context"], gen)
        loss = loss_on(model, x, y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg["grad_clip"])
        optimizer.step()
        recent = (recent + [loss.item()])[-50:]
        if step % 100 == 0 or step == cfg["steps"] - 1:
            print(
                f"step {step:5d}  loss {sum(recent) / len(recent):.3f} nats/byte  "
                f"{time.perf_counter() - started:6.0f} s",
                flush=True,
            )
    train_seconds = time.perf_counter() - started
    model.eval()
    val_gen = torch.Generator().manual_seed(cfg["seed"] + 1)
    with torch.no_grad():
        val_loss = (
            sum(
                loss_on(model, *batches(val_data, cfg["batch_size"], cfg["context"], val_gen)).item()
                for _ in range(cfg["val_batches"])
            )
            / cfg["val_batches"]
        )
    checkpoint = {
        "format": WEIGHTS_FORMAT,
        "config": CONFIG.to_dict(),
        "train": dict(cfg),
        "corpus": {
            "source": "pydoc_data.topics",
            "python": platform.python_version(),
            "bytes": len(raw),
            "sha256": hashlib.sha256(raw).hexdigest(),
        },
        "metrics": {
            "train_loss_last50": sum(recent) / len(recent),
            "val_loss": val_loss,
            "train_seconds": round(train_seconds, 1),
            "torch": str(torch.__version__),
        },
        "state_dict": {k: v.detach().to(torch.float16).contiguous() for k, v in model.state_dict().items()},
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    torch.save(checkpoint, out)
    # The sample comes from the weights as stored (float16, computed in float32), like every user sees them.
    stored = load_tiny_model(out)
    completion = generate_no_cache(stored, tokenizer.encode(SAMPLE_PROMPT), SamplingParams(max_tokens=SAMPLE_TOKENS))
    checkpoint["sample"] = {"prompt": SAMPLE_PROMPT, "completion_ids": completion}
    torch.save(checkpoint, out)
    print(f"val loss {val_loss:.3f} nats/byte; {train_seconds:.0f} s; wrote {out} ({out.stat().st_size / 1e6:.2f} MB)")
    print(repr(SAMPLE_PROMPT + tokenizer.decode(completion)))
    return checkpoint


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--steps", type=int, default=TRAIN["steps"], help="optimizer steps (default: the committed run's)"
    )
    parser.add_argument("--out", type=Path, default=WEIGHTS_FILE, help="where to write the weights file")
    args = parser.parse_args()
    train(dict(TRAIN, steps=args.steps), args.out)


if __name__ == "__main__":
    main()
