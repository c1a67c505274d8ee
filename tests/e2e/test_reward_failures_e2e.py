"""Reward failures in a real PRIME run on CPU (`+recipe=[prime_lora_colocated,cpu]`, the tiny model) with
a reward function that raises on about half of the rollouts (half_failing_reward.py).

1. `stopped`: the recipe's default `prime.max_failed_rollout_ratio=0.0` — main_ppo exits non-zero at
   step 1 with the knob, the counts and the reward's own error message, and no step is logged.
2. `kept`: `prime.max_failed_rollout_ratio=1.0` — the run completes; every step counts its failed
   rollouts, none is dropped, every group keeps its rollout.n rollouts, the PRM metrics stay finite.

In both, the reward's error reaches the log once per reward-loop worker, not once per rollout, and
veRL's per-rollout "Error in _run_prompt" tracebacks are gone.
Two runs of ~2-3 minutes each on 2 cores; on a shared machine wrap pytest in `flock`.
"""

import json
import math
from pathlib import Path

import pytest

from verl_prime_lora.cpu.launch import run_main_ppo

pytestmark = pytest.mark.e2e

REWARD = Path(__file__).with_name("half_failing_reward.py")
ERROR_TEXT = "half_failing_reward: cannot score"
N = 2
STEPS = 2
REWARD_WORKERS = 1  # recipe/cpu.yaml: reward.num_workers
TIMEOUT_S = 1200


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
    records = [json.loads(line) for line in metrics.read_text().splitlines() if line.strip()] if metrics.exists() else []
    steps = [record.get("data", record) for record in records]
    return {"rc": rc, "log": log.read_text(errors="replace"), "steps": [s for s in steps if "timing_s/step" in s]}


def _error_lines(log: str) -> int:
    return sum(ERROR_TEXT in line for line in log.splitlines())


@pytest.fixture(scope="module")
def stopped(tmp_path_factory, tiny_assets):
    return _run(tmp_path_factory.mktemp("stopped"), tiny_assets, "stopped")


@pytest.fixture(scope="module")
def kept(tmp_path_factory, tiny_assets):
    return _run(tmp_path_factory.mktemp("kept"), tiny_assets, "kept", "prime.max_failed_rollout_ratio=1.0")


def test_default_stops_at_the_first_step_with_the_reward_error(stopped):
    assert stopped["rc"] != 0, stopped["log"][-4000:]
    log = stopped["log"]
    assert "prime.max_failed_rollout_ratio: step 1 lost" in log, log[-4000:]
    assert f"first error: ValueError: {ERROR_TEXT}" in log
    assert not stopped["steps"]
    assert "Error in _run_prompt" not in log


def test_keep_trains_every_rollout_and_counts_the_failed_ones(kept):
    assert kept["rc"] == 0, kept["log"][-4000:]
    steps = kept["steps"]
    assert len(steps) == STEPS
    assert sum(step["reward/failed_total"] for step in steps) > 0
    for step in steps:
        assert step["prime/dropped_rollouts_total"] == 0
        assert step["prime/group_size_min"] == N
        assert 0 <= step["reward/failed_ratio"] == step["prime/failed_rollout_ratio"] <= 1
        for key in ("prm/ce_loss", "prm/classification_acc", "prm/dpo_acc", "prm/update_loss"):
            assert math.isfinite(step[key]), (key, step[key])
    assert "Error in _run_prompt" not in kept["log"]


def test_the_reward_error_is_logged_once_per_worker(kept):
    # the first failure of each reward-loop worker: its log line, and in its traceback the `raise` line and
    # the exception's line; before the guard, veRL logged a traceback for every failed rollout
    assert 1 <= _error_lines(kept["log"]) <= 3 * REWARD_WORKERS, _error_lines(kept["log"])
