"""Reward failures in a real PRIME run on CPU (`+recipe=[prime_lora_colocated,cpu]`, the tiny model) with
a reward function that fails on a schedule (half_failing_reward.py): half of step 1's rollouts, then all.

One run with `prime.max_failed_rollout_ratio=0.6` and `prime.reward_timeout_s=5`:
* step 1 (4 of 8 rollouts failed, ratio 0.5: one raised, one never returned and timed out after 5 s, two
  returned a NaN score) is kept, instead of waiting for ever on the hung call: it counts its
  failed rollouts, none is dropped, every group keeps its rollout.n rollouts, and every loss, grad norm and
  advantage it logs is finite (veRL alone trains on a NaN reward: NaN pg_loss, grad_norm, advantages and
  prm/update_loss, with reward/failed_total 0);
* step 2 (every rollout failed) stops the run: main_ppo exits non-zero with the knob, the counts and the
  reward's own error message;
* the reward's error reaches the log once per reward-loop worker, not once per rollout, and veRL's
  per-rollout "Error in _run_prompt" tracebacks are gone.
About 2-3 minutes on 2 cores; on a shared machine wrap pytest in `flock`.
"""

import json
import math
from pathlib import Path

import pytest

from verl_prime_lora.cpu.launch import run_main_ppo

pytestmark = [pytest.mark.e2e, pytest.mark.xdist_group("reward_failures")]  # one run per xdist worker

REWARD = Path(__file__).with_name("half_failing_reward.py")
ERROR_TEXT = "half_failing_reward: cannot score"
N = 2
STEPS = 3  # the run stops at step 2
MAX_RATIO = 0.6
FIRST_STEP_ROLLOUTS = 8  # half_failing_reward.FIRST_STEP_ROLLOUTS: cpu.yaml's train_batch_size 4 x N
REWARD_WORKERS = 1  # recipe/cpu.yaml: reward.num_workers
TIMEOUT_S = 1200
REWARD_TIMEOUT_S = 5
FINITE_KEYS = (
    "actor/pg_loss",
    "actor/grad_norm",
    "critic/advantages/mean",
    "critic/score/mean",
    "prm/ce_loss",
    "prm/classification_acc",
    "prm/dpo_acc",
    "prm/update_loss",
    "prm/grad_norm",
    "prm/process_reward/token_mean",
)


def _run(workdir: Path, assets: dict, name: str, *overrides: str) -> dict:
    metrics = workdir / f"{name}.jsonl"
    log = workdir / f"{name}.log"
    args = [
        "+recipe=[prime_lora_colocated,cpu]",
        f"actor_rollout_ref.rollout.n={N}",
        "actor_rollout_ref.model.lora_rank=8",
        "actor_rollout_ref.model.lora_alpha=16",
        "actor_rollout_ref.model.target_modules=all-linear",
        f"reward.custom_reward_function.path={REWARD}",
        f"data.train_files={assets['train']}",
        f"data.val_files={assets['test']}",
        f"actor_rollout_ref.model.path={assets['model']}",
        f"trainer.total_training_steps={STEPS}",
        "trainer.save_freq=-1",
        "trainer.logger=[console,file]",
        "trainer.project_name=reward_failures_e2e",
        f"trainer.experiment_name={name}",
        f"trainer.default_local_dir={workdir / name}",
        *overrides,
    ]
    rc = run_main_ppo(args, log, timeout_s=TIMEOUT_S, env={"VERL_FILE_LOGGER_PATH": str(metrics)})
    records = (
        [json.loads(line) for line in metrics.read_text().splitlines() if line.strip()] if metrics.exists() else []
    )
    steps = [record.get("data", record) for record in records]
    return {"rc": rc, "log": log.read_text(errors="replace"), "steps": [s for s in steps if "timing_s/step" in s]}


def _error_lines(log: str) -> int:
    """Lines of the reward-loop workers' log that quote the reward's error (not the trainer's stop message)."""
    return sum(ERROR_TEXT in line and "max_failed_rollout_ratio: step" not in line for line in log.splitlines())


@pytest.fixture(scope="module")
def run(tmp_path_factory, tiny_assets):
    return _run(
        tmp_path_factory.mktemp("failures"),
        tiny_assets,
        "failures",
        f"prime.max_failed_rollout_ratio={MAX_RATIO}",
        f"prime.reward_timeout_s={REWARD_TIMEOUT_S}",
    )


def test_a_step_within_the_ratio_trains_every_rollout_and_counts_the_failed_ones(run):
    assert len(run["steps"]) == 1, run["log"][-4000:]
    step = run["steps"][0]
    assert step["reward/failed_total"] == FIRST_STEP_ROLLOUTS // 2
    assert step["reward/failed_ratio"] == step["prime/failed_rollout_ratio"] == 0.5
    assert step["reward/timed_out_total"] == 1  # the hung call, abandoned after prime.reward_timeout_s
    assert step["prime/dropped_rollouts_total"] == 0
    assert step["prime/group_size_min"] == N
    for key in FINITE_KEYS:
        assert math.isfinite(step[key]), (key, step[key])
    # the PRM still equals its reference: every response scores z = 0 exactly, failed rows or not, so every pair of
    # responses ties and the gate's running mean stays at ½
    assert step["prm/dpo_acc_before"] == 0.5 and step["prm/ranking_z_before"] == 0.0
    assert step["prm/dpo_acc_before_mixed_ema"] == 0.5


def test_a_step_above_the_ratio_stops_the_run_with_the_reward_error(run):
    assert run["rc"] != 0, run["log"][-4000:]
    log = run["log"]
    assert "prime.max_failed_rollout_ratio: step 2 lost" in log, log[-4000:]
    assert f"first error: ValueError: {ERROR_TEXT}" in log
    assert "Error in _run_prompt" not in log


def test_the_reward_error_is_logged_once_per_worker(run):
    # the first failure of each reward-loop worker: its log line, and in its traceback the `raise` line and
    # the exception's line; before the guard, veRL logged a traceback for every failed rollout
    assert 1 <= _error_lines(run["log"]) <= 3 * REWARD_WORKERS, _error_lines(run["log"])
