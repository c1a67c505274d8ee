"""Export the LoRA adapter of a veRL checkpoint as a PEFT folder (and, on request, merged weights).

    python -m verl_prime_lora.tools.export_adapter CKPT/global_step_N --out exported/global_step_N [--merged]

veRL's trainer saves FSDP shards (``actor/model_world_size_W_rank_R.pt``), not a PEFT folder. This command joins
every rank's shard (`verl_prime_lora.tools.fsdp_shards.full_state`) and leaves

* ``OUT/adapter``: ``adapter_config.json`` + ``adapter_model.safetensors``, usable as the seed
  documents it — ``PeftModel.from_pretrained(base, OUT/adapter).merge_and_unload()``. The weights are written
  last, under a temporary name that is then renamed, so a folder holding both files is a finished export (what
  examples/eval_checkpoints.sh checks before it skips one);
* ``OUT/merged`` (with ``--merged``): the base model with the adapter merged in, plus the tokenizer.

The adapter keeps the checkpoint's precision (the actor's fp32 master weights): veRL's own merger
(`verl.model_merger`) writes LoRA weights in bf16, whose 8 significant bits move a trained adapter's logits
visibly (0.16 on the e2e test's tiny model). The merge is computed and written in the base's dtype unless
``--dtype`` says otherwise: ``--base_model``'s own (its config.json ``dtype``/``torch_dtype``, else its weights'),
or without it the actor's, whose base weights then come from the checkpoint itself. A float32 base must stay
float32: bf16 keeps 8 significant bits, so a LoRA update below ~2e-3 of the weight it changes would round away.

r and alpha come from the checkpoint's ``lora_train_meta.json`` (veRL writes them), the target modules from the
adapter's weights. ``lora_dropout`` comes from ``--lora_dropout``, else from ``lora_train_meta.json`` (this plugin
records it there, see verl_prime_lora/plugin/patches.py); ``base_model_name_or_path`` from ``--base_model``.
Dropout matters only to continue training.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
from pathlib import Path

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


def _lora_meta(actor: Path) -> dict:
    meta_path = actor / "lora_train_meta.json"
    if not meta_path.is_file():
        raise ValueError(
            f"{actor}: no lora_train_meta.json — the checkpoint holds no LoRA adapter "
            "(was actor_rollout_ref.model.lora_rank 0?)"
        )
    return json.loads(meta_path.read_text())


def adapter_state(state: dict) -> dict:
    """The LoRA tensors of a PEFT model's state dict under the names a saved PEFT adapter uses (no adapter name)."""
    return {
        name.replace(".default.weight", ".weight"): tensor.contiguous()
        for name, tensor in state.items()
        if ".lora_A.default." in name or ".lora_B.default." in name
    }


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
    from peft import LoraConfig
    from safetensors.torch import save_file

    from verl_prime_lora.tools import fsdp_shards

    actor, out = _actor_dir(Path(checkpoint)), Path(out)
    meta = _lora_meta(actor)
    lora = adapter_state(fsdp_shards.full_state(actor))
    if not lora:
        raise ValueError(f"{actor}: the checkpoint's shards hold no LoRA weights")
    paths = {"adapter": out / "adapter"}
    shutil.rmtree(paths["adapter"], ignore_errors=True)
    config = LoraConfig(
        r=int(meta["r"]),
        lora_alpha=meta["lora_alpha"],
        lora_dropout=float(lora_dropout if lora_dropout is not None else meta.get("lora_dropout", 0.0) or 0.0),
        target_modules=sorted({name.split(".lora_")[0].rsplit(".", 1)[-1] for name in lora}),
        task_type=meta.get("task_type", "CAUSAL_LM"),
        base_model_name_or_path=base_model,
    )
    config.save_pretrained(paths["adapter"])
    weights = paths["adapter"] / "adapter_model.safetensors"
    save_file(lora, weights.with_name(weights.name + ".tmp"), metadata={"format": "pt"})
    os.replace(weights.with_name(weights.name + ".tmp"), weights)  # last and whole: its presence marks the folder done
    if merged:
        paths["merged"] = out / "merged"
        base = base_model or str(actor / "huggingface")
        _merge(base, actor if base_model is None else None, paths["adapter"], paths["merged"], dtype or "auto")
    return paths


def _merge(base_dir: str, base_checkpoint: Path | None, adapter: Path, target: Path, dtype: str) -> None:
    """The base (``base_dir``'s weights, or with ``base_checkpoint`` the actor's own base weights from its shards) in
    ``dtype`` ("auto": its own) with the adapter merged in that dtype; saves model and tokenizer."""
    import torch
    from peft import PeftModel
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    if base_checkpoint is None:
        base = AutoModelForCausalLM.from_pretrained(base_dir, dtype=dtype if dtype == "auto" else getattr(torch, dtype))
    else:
        from verl_prime_lora.tools import fsdp_shards

        base = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(base_dir))
        weights = {
            name.removeprefix("base_model.model.").replace(".base_layer.", "."): tensor
            for name, tensor in fsdp_shards.full_state(base_checkpoint).items()
            if ".lora_" not in name
        }
        base.load_state_dict(weights, strict=True)
        if dtype == "auto":
            dtype = _checkpoint_dtype(base_checkpoint)
        base = base.to(getattr(torch, dtype))
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
        help="record this base model path/name in adapter_config; --merged merges into it instead of the "
        "checkpoint's own copy of the base",
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
