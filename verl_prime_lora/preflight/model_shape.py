"""A model's shape, as its `config.json` describes it, and its parameter counts: what the memory model sizes.

* parameters (`param_count`): embeddings V·h, an untied lm_head V·h, per layer q h·(H·d) + k, v 2·h·(K·d)
  + o (H·d)·h (+ biases: Qwen2 q/k/v; `attention_bias`) + MLP 3·h·I + 2 RMSNorms 2·h (+ Qwen3's q/k norms
  2·d), final norm h. LoRA rank r adds r·(in + out) per targeted linear.

h, I, V, L, H, K, d: hidden, intermediate, vocab, layers, heads, KV heads, head dim.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


class PreflightConfigError(ValueError):
    """A config the preflight cannot estimate (or that main_ppo would refuse); the message names the key."""


DENSE_MODEL_TYPES = ("qwen2", "qwen3", "llama", "mistral")

# DeepSeek-R1-Distill-Qwen-1.5B's config.json, from its published dimensions (the seed's base model: actor, PRM
# and reference). The preflight's tests and `benchmarks/gpu_memory_check.py` size the seed run with it.
R1_DISTILL_QWEN_1_5B_CONFIG = {
    "architectures": ["Qwen2ForCausalLM"],
    "model_type": "qwen2",
    "vocab_size": 151936,
    "hidden_size": 1536,
    "intermediate_size": 8960,
    "num_hidden_layers": 28,
    "num_attention_heads": 12,
    "num_key_value_heads": 2,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "max_position_embeddings": 131072,
    "rms_norm_eps": 1e-6,
    "rope_theta": 10000,
    "hidden_act": "silu",
}
LINEARS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


@dataclass(frozen=True)
class ModelShape:
    """A dense decoder-only transformer (Qwen2/Qwen3/Llama/Mistral) as its `config.json` describes it."""

    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    tie_word_embeddings: bool = False
    qkv_bias: bool = False  # Qwen2: always; Llama/Qwen3: `attention_bias`
    o_bias: bool = False  # Llama/Qwen3: `attention_bias`
    mlp_bias: bool = False  # Llama: `mlp_bias`
    qk_norm: bool = False  # Qwen3: RMSNorm over head_dim on q and k
    max_position_embeddings: int | None = None
    model_type: str = "qwen2"

    @classmethod
    def from_hf_config(cls, cfg: dict[str, Any]) -> ModelShape:
        """From a `config.json` dict (after `override_config`); only dense Qwen2/Qwen3/Llama/Mistral."""
        model_type = str(cfg.get("model_type", ""))
        if model_type not in DENSE_MODEL_TYPES:
            raise PreflightConfigError(
                f"config.json: model_type {model_type!r} is not one the estimator covers "
                f"({', '.join(DENSE_MODEL_TYPES)}: dense decoder-only models)."
            )
        heads = int(cfg["num_attention_heads"])
        hidden = int(cfg["hidden_size"])
        attention_bias = bool(cfg.get("attention_bias", False))
        return cls(
            vocab_size=int(cfg["vocab_size"]),
            hidden_size=hidden,
            intermediate_size=int(cfg["intermediate_size"]),
            num_layers=int(cfg["num_hidden_layers"]),
            num_heads=heads,
            num_kv_heads=int(cfg.get("num_key_value_heads") or heads),
            head_dim=int(cfg.get("head_dim") or hidden // heads),
            tie_word_embeddings=bool(cfg.get("tie_word_embeddings", False)),
            qkv_bias=model_type == "qwen2" or attention_bias,
            o_bias=model_type != "qwen2" and attention_bias,
            mlp_bias=bool(cfg.get("mlp_bias", False)),
            qk_norm=model_type == "qwen3",
            max_position_embeddings=cfg.get("max_position_embeddings"),
            model_type=model_type,
        )

    @property
    def q_dim(self) -> int:
        return self.num_heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        return self.num_kv_heads * self.head_dim


def linear_shapes(shape: ModelShape) -> dict[str, tuple[int, int]]:
    """(in, out) features of each linear of one decoder layer."""
    h, i = shape.hidden_size, shape.intermediate_size
    return {
        "q_proj": (h, shape.q_dim),
        "k_proj": (h, shape.kv_dim),
        "v_proj": (h, shape.kv_dim),
        "o_proj": (shape.q_dim, h),
        "gate_proj": (h, i),
        "up_proj": (h, i),
        "down_proj": (i, h),
    }


def layer_param_count(shape: ModelShape) -> int:
    """One decoder layer: Σ in·out over its 7 linears + biases + 2·h (RMSNorms) + 2·head_dim (Qwen3 q/k norms).

    Biases: Qwen2 q/k/v (H·d + 2·K·d), `attention_bias` q/k/v/o, `mlp_bias` 2·I + h.
    """
    weights = sum(i * o for i, o in linear_shapes(shape).values())
    bias = 0
    if shape.qkv_bias:
        bias += shape.q_dim + 2 * shape.kv_dim
    if shape.o_bias:
        bias += shape.hidden_size
    if shape.mlp_bias:
        bias += 2 * shape.intermediate_size + shape.hidden_size
    norms = 2 * shape.hidden_size + (2 * shape.head_dim if shape.qk_norm else 0)
    return weights + bias + norms


def root_param_count(shape: ModelShape) -> int:
    """Outside the layers (FSDP's root unit): embeddings V·h, lm_head V·h unless tied, final norm h."""
    embed = shape.vocab_size * shape.hidden_size
    return embed * (1 if shape.tie_word_embeddings else 2) + shape.hidden_size


def param_count(shape: ModelShape) -> int:
    """P = V·h·(2, or 1 tied) + h + L·layer_param_count. DeepSeek-R1-Distill-Qwen-1.5B: 1,777,088,000."""
    return root_param_count(shape) + shape.num_layers * layer_param_count(shape)


def lora_targets(target_modules: Any) -> tuple[str, ...]:
    """veRL's `target_modules`: `all-linear` (PEFT: every linear but lm_head) or a list of module names."""
    if isinstance(target_modules, str):
        return LINEARS if target_modules == "all-linear" else tuple(m for m in LINEARS if m == target_modules)
    return tuple(m for m in LINEARS if m in set(target_modules or ()))


def lora_param_count(shape: ModelShape, rank: int, targets: tuple[str, ...]) -> int:
    """L · Σ_targeted linears r·(in + out) (A: in→r, B: r→out); 0 for rank 0."""
    if rank <= 0:
        return 0
    shapes = linear_shapes(shape)
    return shape.num_layers * sum(rank * (shapes[m][0] + shapes[m][1]) for m in targets)
