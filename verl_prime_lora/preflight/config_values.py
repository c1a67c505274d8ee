"""Reading a composed config: a key with its default, dtype names as bytes, a model's `config.json`,
tokens per micro-batch."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from verl_prime_lora.checks.config_checks import PRECISION_NAMES
from verl_prime_lora.preflight.errors import PreflightConfigError
from verl_prime_lora.preflight.model_shape import ModelShape

# Bytes per element under each of veRL's names of a dtype (config_checks.PRECISION_NAMES).
DTYPE_BYTES = {
    name: {"fp32": 4, "bf16": 2, "fp16": 2}[short] for short, names in PRECISION_NAMES.items() for name in names
}


def select(cfg: Any, key: str, default: Any = None) -> Any:
    """`cfg.<key>` (dotted); `default` when absent or null."""
    from omegaconf import OmegaConf

    value = OmegaConf.select(cfg, key, default=default)
    return default if value is None else value


def dtype_bytes(key: str, value: Any) -> int:
    """Bytes per element of the dtype `value` (set at `key`, named in the error)."""
    name = str(value).lower()
    if name not in DTYPE_BYTES:
        raise PreflightConfigError(f"{key}: dtype {value!r} unknown (fp32, bf16, fp16).")
    return DTYPE_BYTES[name]


_SHAPES: dict[tuple[str, str], ModelShape] = {}


def load_model_shape(model_key: str, cfg: Any) -> ModelShape:
    """`<model_key>.hf_config_path` or `.path`: a local folder's config.json, with `.override_config` applied."""
    from omegaconf import OmegaConf

    source = select(cfg, f"{model_key}.hf_config_path") or select(cfg, f"{model_key}.path")
    key = f"{model_key}.hf_config_path" if select(cfg, f"{model_key}.hf_config_path") else f"{model_key}.path"
    if not source:
        raise PreflightConfigError(f"{key}: not set; the preflight reads the model's config.json from a local folder.")
    override = select(cfg, f"{model_key}.override_config", {}) or {}
    override = OmegaConf.to_container(override, resolve=True) if not isinstance(override, dict) else override
    cache_key = (str(source), json.dumps(override, sort_keys=True, default=str))
    if cache_key in _SHAPES:
        return _SHAPES[cache_key]
    path = Path(str(source)).expanduser()
    config_json = path / "config.json" if path.is_dir() else path
    if not config_json.is_file():
        raise PreflightConfigError(
            f"{key}: {source} is not a local folder with a config.json (the preflight reads nothing remote; "
            "download the model, or only its config.json, to a folder first)."
        )
    hf = json.loads(config_json.read_text())
    hf.update({k: v for k, v in override.items() if not isinstance(v, dict)})
    shape = ModelShape.from_hf_config(hf)
    _SHAPES[cache_key] = shape
    return shape


def micro_batch_tokens(cfg: Any, use_dynamic: bool, micro_key: str, budget_key: str, seq_len: int, what: str) -> int:
    """Tokens per micro-batch: the token budget at `budget_key` with dynamic batch sizes, else
    `micro_key` responses × `seq_len`."""
    if use_dynamic:
        budget = select(cfg, budget_key)
        if not budget:
            raise PreflightConfigError(f"{budget_key}: not set, but {what} uses dynamic batch sizes.")
        return int(budget)
    micro = select(cfg, micro_key)
    if not micro:
        raise PreflightConfigError(f"{micro_key}: not set ({what} micro-batch, responses per GPU).")
    return int(micro) * seq_len
