"""Helpers of the end-to-end tests: what to read back from a real `main_ppo` run on CPU.

Metrics come from veRL's `file` logger (one JSON line per step), not from parsing the console.
"""

import json
import os
import signal
import threading
import time
from pathlib import Path

import pandas as pd
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from verl_prime_lora.tools import fsdp_shards

LORA_RANK, LORA_ALPHA = 8, 16  # the e2e runs' actor adapter (target_modules=all-linear)


def load_actor(step_dir: Path, lora: bool, world_size: int = 1):
    """The actor of a checkpoint written by `world_size` ranks as an HF model (PEFT-wrapped for LoRA), loaded
    strictly."""
    actor_dir = step_dir / "actor"
    assert fsdp_shards.world_size(actor_dir) == world_size
    adapter = {"r": LORA_RANK, "lora_alpha": LORA_ALPHA, "target_modules": "all-linear"} if lora else None
    return fsdp_shards.load_model(actor_dir, lora=adapter).float()


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


TEST_RUN_ENV = "PRIME_E2E_RUN"  # set in a test run's environment: every process of the run carries it


def pids_of(run: str, command_part: str) -> list[int]:
    """Live processes of the test run `run` (`TEST_RUN_ENV`) whose command line contains `command_part`."""
    needle = f"{TEST_RUN_ENV}={run}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ, cmdline = (entry / "environ").read_bytes(), (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if needle in environ.split(b"\0") and command_part.encode() in cmdline:
            found.append(int(entry.name))
    return found


def left_after(run: str, ended_at: float, within_s: float = 15.0) -> list[int]:
    """The processes of `run` still alive `within_s` seconds after its driver ended (`ended_at`, time.time()): the
    launcher's watcher (`verl_prime_lora.run_processes`) ends what the driver leaves within a few seconds."""
    while (left := pids_of(run, "")) and time.time() - ended_at < within_s:
        time.sleep(0.5)
    return left


def steps_logged(metrics_path: Path) -> int:
    if not metrics_path.exists():
        return 0
    lines = [json.loads(line) for line in metrics_path.read_text().splitlines() if line.strip()]
    return sum("timing_s/step" in line.get("data", line) for line in lines)


def kill_after_steps(run: str, metrics_path: Path, steps: int, command_part: str, delay_s: float = 2.0) -> dict:
    """In the background: once `steps` steps are logged, SIGKILL the run's processes matching `command_part`.
    Returns a record the test reads (`killed_at`: time.time() of the kill, `pids`)."""
    record: dict = {}

    def watch():
        deadline = time.time() + 1200
        while time.time() < deadline and steps_logged(metrics_path) < steps:
            time.sleep(0.5)
        time.sleep(delay_s)  # into the next step
        record["pids"] = pids_of(run, command_part)
        record["killed_at"] = time.time()
        for pid in record["pids"]:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    threading.Thread(target=watch, daemon=True).start()
    return record


def validation_answers(folder: Path, step: int) -> dict[str, str]:
    """Prompt -> answer of veRL's validation at `step`, from the dump of `trainer.validation_data_dir` (text with the
    special tokens left out, as veRL decodes it)."""
    rows = [json.loads(line) for line in (folder / f"{step}.jsonl").read_text().splitlines() if line.strip()]
    return {row["input"]: row["output"] for row in rows}


def assert_rollouts_sampled_by_the_actor(step: dict) -> None:
    """vLLM sampled the step's rollouts from the weights the actor scored them with: rollout (vLLM) and actor (FSDP)
    log-probs agree, the measure of `assert_trained_weights_reached_vllm`, for a step whose rollouts no update
    separates from the actor. Left apart only by bf16 rounding they agree closely (Pearson above 0.98, k3 KL below
    0.05 in the rehearsal); a tensor of vLLM's model left at random weights makes it sample far from the actor."""
    assert step["training/rollout_actor_probs_pearson_corr"] > 0.9, step["training/rollout_actor_probs_pearson_corr"]
    assert step["rollout_corr/k3_kl"] < 0.2, step["rollout_corr/k3_kl"]
