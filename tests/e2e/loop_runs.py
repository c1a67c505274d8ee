"""Helpers of the end-to-end tests: what to read back from a real `main_ppo` run on CPU.

Metrics come from veRL's `file` logger (one JSON line per step), not from parsing the console.
"""

from pathlib import Path

import pandas as pd
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from verl_prime_lora.tools import checkpoints

LORA_RANK, LORA_ALPHA = 8, 16  # the e2e runs' actor adapter (target_modules=all-linear)


def load_actor(step_dir: Path, lora: bool, world_size: int = 1):
    """The actor of a checkpoint written by `world_size` ranks as an HF model (PEFT-wrapped for LoRA), loaded
    strictly."""
    actor_dir = step_dir / "actor"
    assert checkpoints.world_size(actor_dir) == world_size
    adapter = {"r": LORA_RANK, "lora_alpha": LORA_ALPHA, "target_modules": "all-linear"} if lora else None
    return checkpoints.load_model(actor_dir, lora=adapter).float()


def policy_shift(assets: dict[str, Path], model) -> float:
    """Mean per-token KL(model || base) of the next-token distributions over the training prompts."""
    tokenizer = AutoTokenizer.from_pretrained(assets["model"])
    base = AutoModelForCausalLM.from_pretrained(assets["model"]).float().eval()
    prompts = pd.read_parquet(assets["train"])["prompt"][:8]
    texts = [tokenizer.apply_chat_template(list(p), tokenize=False, add_generation_prompt=True) for p in prompts]
    batch = tokenizer(texts, return_tensors="pt", padding=True)
    with torch.no_grad():
        log_p = torch.log_softmax(model(**batch).logits, -1)
        log_q = torch.log_softmax(base(**batch).logits, -1)
    kl = (log_p.exp() * (log_p - log_q)).sum(-1)
    return kl[batch["attention_mask"].bool()].mean().item()


def assert_trained_weights_reached_vllm(run: dict, assets: dict[str, Path], lora: bool, world_size: int = 1) -> None:
    """The weights of each update reached vLLM: rollout log-probs (vLLM) and actor log-probs (FSDP) agree at
    steps >= 2 although step 1's update alone moved the policy far from the base model. Had vLLM kept
    sampling the base policy they would disagree by about that move (a control run that dropped the
    adapter sync measured Pearson -0.01, KL 5.3; synced runs 0.95-1.0 and KL below 0.1). Needs the run's
    step-1 checkpoint and a large actor lr."""
    moved = policy_shift(assets, load_actor(run["ckpt"] / "global_step_1", lora=lora, world_size=world_size))
    assert moved > 0.05, f"one update barely moved the policy ({moved}); the check below would prove nothing"
    assert len(run["steps"]) >= 2
    for step in run["steps"][1:]:  # rollouts of step >= 2 were sampled after an update
        assert step["training/off_policy/trajectory_staleness/mean"] == 0, step
        assert step["training/rollout_actor_probs_pearson_corr"] > 0.8, step
        assert step["rollout_corr/k3_kl"] < moved / 5, f"rollout/actor KL {step['rollout_corr/k3_kl']} vs {moved}"
