"""Read a veRL FSDP checkpoint folder (`global_step_N/actor`, `global_step_N/prm`) back as one state dict.

veRL's FSDP2 engine saves one `model_world_size_W_rank_R.pt` per rank, each parameter a DTensor sharded
on dim 0 (`Shard(0)`) in rank order. `full_state` puts the shards back together as plain tensors in the
dtype they were saved in (the PRM's fp32 master weights stay fp32), which a model of the checkpoint's
`huggingface/config.json` (PEFT-wrapped for a LoRA actor) loads strictly.
"""

from __future__ import annotations

from pathlib import Path

import torch


def world_size(folder: Path, what: str = "model") -> int:
    """W of the folder's `{what}_world_size_W_rank_0.pt`; errors name the folder."""
    found = sorted(Path(folder).glob(f"{what}_world_size_*_rank_0.pt"))
    if not found:
        raise FileNotFoundError(f"{folder}: no {what}_world_size_*_rank_0.pt (not a veRL FSDP checkpoint folder)")
    return int(found[0].name.split("_world_size_")[1].split("_rank_")[0])


def _full(tensors: list):
    """One parameter from every rank's shard."""
    first = tensors[0]
    if not hasattr(first, "to_local"):
        return first
    if len(tensors) == 1:
        return first.full_tensor()
    if not all(placement.is_shard(0) for placement in first.placements):
        raise ValueError(f"expected Shard(0) placements, got {first.placements}")
    return torch.cat([tensor.to_local() for tensor in tensors], dim=0)


def full_state(folder: Path, what: str = "model") -> dict[str, torch.Tensor]:
    """The whole `{what}` state of a checkpoint folder, every rank's shard joined, as plain CPU tensors."""
    folder = Path(folder)
    ranks = world_size(folder, what)
    shards = [
        torch.load(folder / f"{what}_world_size_{ranks}_rank_{rank}.pt", map_location="cpu", weights_only=False)
        for rank in range(ranks)
    ]
    return {name: _full([shard[name] for shard in shards]) for name in shards[0]}


def load_model(folder: Path, lora: dict | None = None):
    """The model of a checkpoint folder, built from its `huggingface/config.json` (wrapped in a PEFT adapter
    of `lora` = LoraConfig's arguments for a LoRA checkpoint), loaded strictly, in eval mode."""
    from transformers import AutoConfig, AutoModelForCausalLM

    folder = Path(folder)
    model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(folder / "huggingface"))
    if lora is not None:
        from peft import LoraConfig, get_peft_model

        model = get_peft_model(model, LoraConfig(**lora))
    model.load_state_dict(full_state(folder), strict=True)
    return model.eval()
