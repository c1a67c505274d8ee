"""Input check 2 of `checks.inputs`, before Ray starts: model folders.

`check_model_paths`: `actor_rollout_ref.model.path` and, for a PRIME trainer,
`prime.prm.model.path` hold a `config.json` and weights (`*.safetensors`, `pytorch_model*.bin`, or the
index of either); they (or the `tokenizer_path` next to them, when set) hold a tokenizer
(`tokenizer.json`, a vocabulary file, or a `tokenizer_config.json` with remote code); one message names
everything a folder lacks. Hub ids
(`org/name` that is not a local folder) and remote URLs are skipped: nothing is downloaded. For a PRIME
trainer the PRM tokenizer must then equal the policy's (`config_checks.check_prm_tokenizer`).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from verl_prime_lora.checks.inputs.errors import fail
from verl_prime_lora.config.run import is_prime_trainer
from verl_prime_lora.config.section import key_of
from verl_prime_lora.config.verl_view import VerlView

TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "vocab.txt", "spiece.model")
# What transformers' from_pretrained loads weights from (an index names the shards).
WEIGHT_PATTERNS = (
    "*.safetensors",
    "pytorch_model*.bin",
    "model.safetensors.index.json",
    "pytorch_model.bin.index.json",
)
_HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*(/[\w.-]+)?")


def local_path(value: Any) -> Path | None:
    """The local path `value` names, or None for a hub id or a remote URL (those are not checked)."""
    text = str(value)
    if "://" in text and not text.startswith("file://"):
        return None
    text = text.removeprefix("file://")
    path = Path(text).expanduser()
    if not path.exists() and _HUB_ID.fullmatch(text):
        return None
    return path


def _has_tokenizer(folder: Path) -> bool:
    if any((folder / name).is_file() for name in TOKENIZER_FILES) or any(folder.glob("*.tiktoken")):
        return True
    try:  # a tokenizer shipped as remote code
        return "auto_map" in json.loads((folder / "tokenizer_config.json").read_text())
    except (OSError, ValueError):
        return False


def _has_weights(folder: Path) -> bool:
    return any(any(folder.glob(pattern)) for pattern in WEIGHT_PATTERNS)


def _check_folder(key: str, value: Any, need_model: bool, need_tokenizer: bool) -> None:
    """`value` is a folder holding, with `need_model`, a config.json and weights, and with `need_tokenizer` a
    tokenizer; one message names all it lacks."""
    path = local_path(value)
    if path is None:
        return
    if not path.is_dir():
        fail(key, f"{value} is not a folder (it {'is a file' if path.exists() else 'does not exist'}).")
    no_config = need_model and not (path / "config.json").is_file()
    no_weights = need_model and not _has_weights(path)
    no_tokenizer = need_tokenizer and not _has_tokenizer(path)
    missing = [
        text
        for absent, text in (
            (no_config, "config.json"),
            (no_weights, f"weights (none of {', '.join(WEIGHT_PATTERNS)})"),
            (
                no_tokenizer,
                f"tokenizer (none of {', '.join(TOKENIZER_FILES)}, *.tiktoken, or a tokenizer_config.json "
                "with auto_map)",
            ),
        )
        if absent
    ]
    if not missing:
        return
    advice = []
    if no_config or no_weights:
        advice.append("a Hugging Face model folder holds what the model's save_pretrained writes")
    if no_tokenizer:
        advice.append("save the tokenizer next to the model or set the tokenizer_path")
    fail(key, f"{value} holds no {', no '.join(missing)}: {'; '.join(advice)}.")


def check_model_paths(view: VerlView) -> None:
    models = [view.model]
    if is_prime_trainer(view) and view.prm.node is not None:
        models.append(view.prm.model)
    seen: set[tuple[str, bool, bool]] = set()
    for model in models:
        tokenizer = model.tokenizer_path
        checks = [(key_of(model, "path"), model.path, True, tokenizer is None)]
        if tokenizer is not None:
            checks.append((key_of(model, "tokenizer_path"), tokenizer, False, True))
        for key, value, need_config, need_tokenizer in checks:
            if value is None or (str(value), need_config, need_tokenizer) in seen:
                continue
            seen.add((str(value), need_config, need_tokenizer))
            _check_folder(key, value, need_config, need_tokenizer)
