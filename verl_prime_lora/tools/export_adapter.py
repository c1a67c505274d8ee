"""Export the LoRA adapter of a veRL checkpoint as a PEFT folder (and, on request, merged weights).

    python -m verl_prime_lora.tools.export_adapter CKPT/global_step_N --out exported/global_step_N [--merged]

veRL's trainer saves FSDP shards (``actor/model_world_size_W_rank_R.pt``), not a PEFT folder. veRL's
own merger (`verl.model_merger`, FSDP backend) gathers the shards and splits them into the base
weights and a ``lora_adapter/`` folder; this command runs it and leaves

* ``OUT/adapter``: ``adapter_config.json`` + ``adapter_model.safetensors``, usable as the seed
  documents it — ``PeftModel.from_pretrained(base, OUT/adapter).merge_and_unload()``;
* ``OUT/merged`` (with ``--merged``): the base model with the adapter merged in, plus the tokenizer.

The merge is computed and written in the base's dtype unless ``--dtype`` says otherwise: ``--base_model``'s
own (its config.json ``dtype``/``torch_dtype``, else its weights'), or without it the actor's (the
checkpoint's ``huggingface/config.json``, else its shards'). A float32 base must stay float32: bf16 keeps
8 significant bits, so a LoRA update below ~2e-3 of the weight it changes would round away. Without
``--base_model`` the base weights come from veRL's merger, which stores them in bf16, so the merged
float32 model is the bf16-rounded base plus the update (added in float32); pass ``--base_model`` for the
exact base.

The merger records only r, alpha and the task type. ``lora_dropout`` comes from ``--lora_dropout``,
else from the checkpoint's ``lora_train_meta.json`` (this plugin records it there, see
verl_prime_lora/integration/patches.py); ``base_model_name_or_path`` from ``--base_model``. Dropout matters
only to continue training.
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import tempfile
from pathlib import Path

logger = logging.getLogger(__name__)

DTYPES = ("float32", "bfloat16", "float16")


def _actor_dir(checkpoint: Path) -> Path:
    """``global_step_N/actor`` (or the actor folder itself); errors name what is missing."""
    actor = checkpoint / "actor" if (checkpoint / "actor").is_dir() else checkpoint
    if not any(actor.glob("model_world_size_*_rank_0.pt")):
        raise FileNotFoundError(f"{actor}: no model_world_size_*_rank_0.pt — not a veRL FSDP actor checkpoint")
    return actor


def _checkpoint_dtype(actor: Path) -> str:
    """The actor's weight dtype: ``dtype`` (``torch_dtype`` before transformers 5) in its
    ``huggingface/config.json``, else that of the first floating-point tensor of the rank-0 shard."""
    import torch

    config = json.loads((actor / "huggingface" / "config.json").read_text())
    name = config.get("dtype") or config.get("torch_dtype")
    if name:
        return str(name)
    shard = next(actor.glob("model_world_size_*_rank_0.pt"))
    state = torch.load(shard, map_location="cpu", mmap=True, weights_only=False)
    return str(next(t.dtype for t in state.values() if torch.is_floating_point(t))).removeprefix("torch.")


def export(
    checkpoint: str | Path,
    out: str | Path,
    merged: bool = False,
    lora_dropout: float | None = None,
    base_model: str | None = None,
    dtype: str | None = None,
) -> dict[str, Path]:
    """Write ``out/adapter`` (and ``out/merged``, in ``dtype``; default: the base's, see the module docstring).

    Returns their paths."""
    if dtype is not None and dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {DTYPES}, got {dtype!r}")
    from verl.model_merger.base_model_merger import ModelMergerConfig
    from verl.model_merger.fsdp_model_merger import FSDPModelMerger

    actor, out = _actor_dir(Path(checkpoint)), Path(out)
    paths = {"adapter": out / "adapter"}
    with tempfile.TemporaryDirectory() as scratch:
        config = ModelMergerConfig(
            operation="merge",
            backend="fsdp",
            local_dir=str(actor),
            target_dir=scratch,
            hf_model_config_path=str(actor / "huggingface"),
        )
        FSDPModelMerger(config).merge_and_save()
        lora = Path(scratch) / "lora_adapter"
        if not lora.is_dir():
            raise ValueError(
                f"{actor}: the checkpoint holds no LoRA weights (was actor_rollout_ref.model.lora_rank 0?)"
            )
        shutil.rmtree(paths["adapter"], ignore_errors=True)
        shutil.copytree(lora, paths["adapter"])
        adapter_config_path = paths["adapter"] / "adapter_config.json"
        adapter_config = json.loads(adapter_config_path.read_text())
        meta_path = actor / "lora_train_meta.json"
        if lora_dropout is None and meta_path.is_file():
            lora_dropout = json.loads(meta_path.read_text()).get("lora_dropout")
        if lora_dropout is not None:
            adapter_config["lora_dropout"] = lora_dropout
        adapter_config["base_model_name_or_path"] = base_model or adapter_config.get("base_model_name_or_path")
        adapter_config_path.write_text(json.dumps(adapter_config, indent=2))
        if merged:
            paths["merged"] = out / "merged"
            if base_model is None:
                # the merger's copy of the base is bf16 whatever the actor's dtype: name the actor's instead
                dtype = dtype or _checkpoint_dtype(actor)
                logger.info(
                    "merged: base weights from veRL's bf16 copy, merged and written in %s "
                    "(--base_model gives the exact base)",
                    dtype,
                )
            _merge(base_model or scratch, paths["adapter"], paths["merged"], dtype or "auto")
    return paths


def _merge(base_dir: str, adapter: Path, target: Path, dtype: str) -> None:
    """Load the base in ``dtype`` ("auto": its own), merge the adapter in that dtype, save model and tokenizer."""
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    base = AutoModelForCausalLM.from_pretrained(base_dir, dtype=dtype if dtype == "auto" else getattr(torch, dtype))
    PeftModel.from_pretrained(base, adapter).merge_and_unload().save_pretrained(target)
    AutoTokenizer.from_pretrained(base_dir).save_pretrained(target)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkpoint", help="veRL checkpoint folder global_step_N (or its actor/ folder)")
    parser.add_argument("--out", required=True, help="output folder (adapter/, merged/)")
    parser.add_argument(
        "--merged",
        action="store_true",
        help="also write the base model with the adapter merged, in the base's dtype (see --dtype)",
    )
    parser.add_argument(
        "--lora_dropout",
        type=float,
        default=None,
        help="dropout to record in adapter_config (default: the checkpoint's lora_train_meta.json)",
    )
    parser.add_argument(
        "--base_model",
        default=None,
        help="record this base model path/name in adapter_config; --merged merges into it (exact "
        "weights) instead of veRL's bf16 copy of the base",
    )
    parser.add_argument(
        "--dtype",
        choices=DTYPES,
        default=None,
        help="dtype of the --merged weights (default: the base's — --base_model's config/weights, "
        "else the checkpoint's huggingface/config.json or shards; bfloat16 would round away "
        "a LoRA update below its resolution)",
    )
    args = parser.parse_args(argv)
    paths = export(args.checkpoint, args.out, args.merged, args.lora_dropout, args.base_model, args.dtype)
    for name, path in paths.items():
        print(f"{name}: {path}")


if __name__ == "__main__":
    main()
