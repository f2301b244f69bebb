"""A small Llama-architecture transformer (RMSNorm, RoPE, grouped-query attention, SwiGLU).

Tokens travel flat: ``forward(input_ids [N], positions [N], kv)`` with ``N`` tokens of any number
of sequences side by side. The model never stores keys and values itself: each attention layer
hands its new ``q, k, v`` to ``kv.attend(layer, q, k, v)``, and the object ``kv`` decides where K/V
live and what each query may see (a paged cache, a contiguous cache, or nothing at all: see
``paged_kv.engine.kv_context``). That is why one set of weights can be served three ways and compared.

``load_tiny_model()`` returns the model this project trained on CPython's documentation text
(``tools/train_tiny_model.py``; weights in ``paged_kv/engine/data/``).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any, Dict, Optional, Protocol, Union

import torch
import torch.nn.functional as F
from torch import nn

WEIGHTS_FILE = Path(__file__).resolve().parent / "data" / "tiny_llama_pydoc.pt"
WEIGHTS_FORMAT = "paged-kv-course/tiny-llama/1"


@dataclass(frozen=True)
class ModelConfig:
    """Shape of the model. ``max_model_len``: the longest sequence (prompt + output) it serves."""

    vocab_size: int = 256
    hidden_size: int = 128
    num_layers: int = 4
    num_q_heads: int = 4
    num_kv_heads: int = 2
    head_dim: int = 32
    intermediate_size: int = 384
    max_model_len: int = 256
    rope_theta: float = 10000.0
    rms_norm_eps: float = 1e-5

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if f.type in ("int", int):
                if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                    raise ValueError(f"ModelConfig.{f.name} must be a positive int, got {value!r}")
            elif isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
                raise ValueError(f"ModelConfig.{f.name} must be a positive number, got {value!r}")
        if self.num_q_heads % self.num_kv_heads:
            raise ValueError(f"num_q_heads={self.num_q_heads} must be a multiple of num_kv_heads={self.num_kv_heads}")
        if self.head_dim % 2:
            raise ValueError(f"head_dim={self.head_dim} must be even (RoPE rotates pairs of dimensions)")

    @classmethod
    def from_dict(cls, values: Dict[str, Any]) -> "ModelConfig":
        known = {f.name for f in fields(cls)}
        unknown = set(values) - known
        if unknown:
            raise ValueError(f"unknown ModelConfig field(s) {sorted(unknown)}; known: {sorted(known)}")
        return cls(**values)

    def to_dict(self) -> Dict[str, Any]:
        return asdict(self)


class KVContext(Protocol):
    """Where keys and values live: ``attend`` stores this step's K/V and returns attention output.

    ``q [N, num_q_heads, head_dim]``, ``k``/``v [N, num_kv_heads, head_dim]`` (RoPE already applied)
    -> ``[N, num_q_heads, head_dim]``.
    """

    def attend(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor: ...


class RMSNorm(nn.Module):
    def __init__(self, size: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(size))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x32 = x.float()
        x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return (x32 * self.weight.float()).to(x.dtype)


def rope_cos_sin(positions: torch.Tensor, head_dim: int, theta: float) -> tuple:
    """``cos, sin`` of shape ``[N, 1, head_dim]`` for integer ``positions [N]`` (half-split layout)."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, device=positions.device, dtype=torch.float32) / head_dim))
    angles = positions.to(torch.float32)[:, None] * inv_freq[None, :]  # [N, D/2]
    angles = torch.cat([angles, angles], dim=-1)[:, None, :]  # [N, 1, D]
    return angles.cos(), angles.sin()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate each pair ``(x[i], x[i + D/2])`` of ``x [N, heads, D]`` by its position's angle."""
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return (x.float() * cos + rotated.float() * sin).to(x.dtype)


class Attention(nn.Module):
    def __init__(self, config: ModelConfig, layer: int):
        super().__init__()
        self.layer = layer
        self.config = config
        c = config
        self.q_proj = nn.Linear(c.hidden_size, c.num_q_heads * c.head_dim, bias=False)
        self.k_proj = nn.Linear(c.hidden_size, c.num_kv_heads * c.head_dim, bias=False)
        self.v_proj = nn.Linear(c.hidden_size, c.num_kv_heads * c.head_dim, bias=False)
        self.o_proj = nn.Linear(c.num_q_heads * c.head_dim, c.hidden_size, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, kv: KVContext) -> torch.Tensor:
        c = self.config
        n = x.shape[0]
        q = apply_rope(self.q_proj(x).view(n, c.num_q_heads, c.head_dim), cos, sin)
        k = apply_rope(self.k_proj(x).view(n, c.num_kv_heads, c.head_dim), cos, sin)
        v = self.v_proj(x).view(n, c.num_kv_heads, c.head_dim)
        out = kv.attend(self.layer, q, k, v)
        return self.o_proj(out.reshape(n, c.num_q_heads * c.head_dim))


class SwiGLU(nn.Module):
    def __init__(self, config: ModelConfig):
        super().__init__()
        self.gate_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.up_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.down_proj = nn.Linear(config.intermediate_size, config.hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    def __init__(self, config: ModelConfig, layer: int):
        super().__init__()
        self.input_norm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.attn = Attention(config, layer)
        self.post_attn_norm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.mlp = SwiGLU(config)

    def forward(self, x, cos, sin, kv: KVContext):
        x = x + self.attn(self.input_norm(x), cos, sin, kv)
        return x + self.mlp(self.post_attn_norm(x))


class TinyLlama(nn.Module):
    """Embedding, ``num_layers`` decoder layers, final RMSNorm, untied LM head."""

    def __init__(self, config: ModelConfig):
        super().__init__()
        if not isinstance(config, ModelConfig):
            raise TypeError(f"config must be a ModelConfig, got {type(config).__name__}")
        self.config = config
        self.embed = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(config, i) for i in range(config.num_layers))
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, kv: KVContext) -> torch.Tensor:
        """Hidden states ``[N, hidden_size]`` of flat tokens ``input_ids [N]`` at ``positions [N]``."""
        self._check_inputs(input_ids, positions)
        cos, sin = rope_cos_sin(positions, self.config.head_dim, self.config.rope_theta)
        x = self.embed(input_ids)
        for layer in self.layers:
            x = layer(x, cos, sin, kv)
        return self.norm(x)

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Next-token scores ``[..., vocab_size]`` in float32."""
        return self.lm_head(hidden).float()

    def _check_inputs(self, input_ids, positions) -> None:
        for name, t in (("input_ids", input_ids), ("positions", positions)):
            if not isinstance(t, torch.Tensor) or t.dim() != 1 or t.dtype not in (torch.int32, torch.int64):
                raise TypeError(
                    f"{name} must be a 1-D int tensor, got "
                    f"{getattr(t, 'dtype', type(t).__name__)} of shape {tuple(getattr(t, 'shape', ()))}"
                )
        if input_ids.shape != positions.shape or input_ids.numel() == 0:
            raise ValueError(
                f"input_ids {tuple(input_ids.shape)} and positions {tuple(positions.shape)} "
                "must have one (non-zero) length"
            )
        if int(input_ids.min()) < 0 or int(input_ids.max()) >= self.config.vocab_size:
            raise ValueError(f"token ids must lie in 0..{self.config.vocab_size - 1}")
        if int(positions.min()) < 0 or int(positions.max()) >= self.config.max_model_len:
            raise ValueError(
                f"positions must lie in 0..{self.config.max_model_len - 1} (max_model_len), "
                f"got {int(positions.min())}..{int(positions.max())}"
            )

    @property
    def kv_bytes_per_token(self) -> int:
        """Bytes of K and V one token takes across all layers, in the model's dtype."""
        c = self.config
        return 2 * c.num_layers * c.num_kv_heads * c.head_dim * self.embed.weight.element_size()


def init_weights(model: TinyLlama, seed: int) -> None:
    """Seeded initialisation: normal(0, 0.02), output projections scaled by ``1/sqrt(2 * num_layers)``."""
    gen = torch.Generator().manual_seed(seed)
    std = 0.02
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.fill_(1.0)
            else:
                scale = (
                    std / math.sqrt(2 * model.config.num_layers)
                    if name.endswith(("o_proj.weight", "down_proj.weight"))
                    else std
                )
                p.copy_(torch.randn(p.shape, generator=gen) * scale)


def load_tiny_model(
    path: Union[str, Path, None] = None,
    dtype: torch.dtype = torch.float32,
    device: Optional[Union[str, torch.device]] = None,
) -> TinyLlama:
    """The model trained by ``tools/train_tiny_model.py``, in eval mode (weights stored in float16)."""
    checkpoint = read_checkpoint(path)
    model = TinyLlama(ModelConfig.from_dict(checkpoint["config"]))
    model.load_state_dict({k: v.to(torch.float32) for k, v in checkpoint["state_dict"].items()})
    return model.to(dtype=dtype, device=device).eval().requires_grad_(False)


def read_checkpoint(path: Union[str, Path, None] = None) -> Dict[str, Any]:
    """The weights file as a dict: ``config``, ``state_dict``, ``train``, ``corpus``, ``metrics``, ``sample``."""
    path = Path(path) if path is not None else WEIGHTS_FILE
    if not path.is_file():
        raise FileNotFoundError(f"no weights at {path}; run `python tools/train_tiny_model.py` to train them")
    checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    if not isinstance(checkpoint, dict) or checkpoint.get("format") != WEIGHTS_FORMAT:
        raise ValueError(f"{path} is not a {WEIGHTS_FORMAT} file")
    return checkpoint
