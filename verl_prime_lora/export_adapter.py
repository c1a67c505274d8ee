"""Export the LoRA adapter of a veRL checkpoint as a PEFT folder (and, on request, merged weights).

    python -m verl_prime_lora.export_adapter CKPT/global_step_N --out exported/global_step_N [--merged]

veRL's trainer saves FSDP shards (``actor/model_world_size_W_rank_R.pt``), not a PEFT folder. veRL's
own merger (`verl.model_merger`, FSDP backend) gathers the shards and splits them into the base
weights and a ``lora_adapter/`` folder; this command runs it and leaves

* ``OUT/adapter``: ``adapter_config.json`` + ``adapter_model.safetensors``, usable as the seed
  documents it — ``PeftModel.from_pretrained(base, OUT/adapter).merge_and_unload()``;
* ``OUT/merged`` (with ``--merged``): the base model with the adapter merged in, plus the tokenizer
  (the merge uses ``--base_model`` in its own precision when given, else the merger's bf16 weights).

The merger records only r, alpha and the task type. ``lora_dropout`` comes from ``--lora_dropout``,
else from the checkpoint's ``lora_train_meta.json`` (this plugin records it there, see
verl_prime_lora/verl_patches.py); ``base_model_name_or_path`` from ``--base_model``. Dropout matters
only to continue training.
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
from pathlib import Path


def _actor_dir(checkpoint: Path) -> Path:
    """``global_step_N/actor`` (or the actor folder itself); errors name what is missing."""
    actor = checkpoint / "actor" if (checkpoint / "actor").is_dir() else checkpoint
    if not any(actor.glob("model_world_size_*_rank_0.pt")):
        raise FileNotFoundError(f"{actor}: no model_world_size_*_rank_0.pt — not a veRL FSDP actor checkpoint")
    return actor


def export(checkpoint: str | Path, out: str | Path, merged: bool = False, lora_dropout: float | None = None,
           base_model: str | None = None) -> dict[str, Path]:
    """Write ``out/adapter`` (and ``out/merged``); returns their paths."""
    from verl.model_merger.base_model_merger import ModelMergerConfig
    from verl.model_merger.fsdp_model_merger import FSDPModelMerger

    actor, out = _actor_dir(Path(checkpoint)), Path(out)
    paths = {"adapter": out / "adapter"}
    with tempfile.TemporaryDirectory() as scratch:
        config = ModelMergerConfig(operation="merge", backend="fsdp", local_dir=str(actor), target_dir=scratch,
                                   hf_model_config_path=str(actor / "huggingface"))
        FSDPModelMerger(config).merge_and_save()
        lora = Path(scratch) / "lora_adapter"
        if not lora.is_dir():
            raise ValueError(f"{actor}: the checkpoint holds no LoRA weights (was actor_rollout_ref.model.lora_rank 0?)")
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
            # The base as given (its own precision) when known; else the merger's bf16 copy.
            _merge(base_model or scratch, paths["adapter"], paths["merged"])
    return paths


def _merge(base_dir: str, adapter: Path, target: Path) -> None:
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    base = AutoModelForCausalLM.from_pretrained(base_dir, torch_dtype="auto")
    PeftModel.from_pretrained(base, adapter).merge_and_unload().save_pretrained(target)
    AutoTokenizer.from_pretrained(base_dir).save_pretrained(target)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkpoint", help="veRL checkpoint folder global_step_N (or its actor/ folder)")
    parser.add_argument("--out", required=True, help="output folder (adapter/, merged/)")
    parser.add_argument("--merged", action="store_true", help="also write the base model with the adapter merged")
    parser.add_argument("--lora_dropout", type=float, default=None, help="dropout to record in adapter_config (default: the checkpoint's lora_train_meta.json)")
    parser.add_argument("--base_model", default=None, help="record this base model path/name in adapter_config")
    args = parser.parse_args(argv)
    for name, path in export(args.checkpoint, args.out, args.merged, args.lora_dropout, args.base_model).items():
        print(f"{name}: {path}")


if __name__ == "__main__":
    main()
