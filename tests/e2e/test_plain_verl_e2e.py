"""A run that is not PRIME is veRL's own with the plugin installed: one step of veRL's GRPO with a LoRA actor on
the CPU preset alone (`+recipe=cpu`, the platform, no PRIME recipe), through the real `main_ppo`.

The product's promise, end to end (tests/plugin/test_prime_run_scope.py pins each patch target by identity in one
process of each kind): the run trains and saves; it logs no PRIME metric, not even the reward guard's
`reward/failed_*` (a patch); no PRIME check or warning reaches its log; and its actor checkpoint is veRL's own,
without the `lora_dropout` that the plugin's checkpoint patch records in a PRIME run (`test_prime_e2e`'s `first`).
"""

import json
from pathlib import Path

import pytest

from verl_prime_lora.cpu.launch import run_main_ppo

pytestmark = [pytest.mark.e2e, pytest.mark.xdist_group("plain_verl")]

TEST_REWARD = Path(__file__).with_name("prime_label_reward.py")


@pytest.fixture(scope="module")
def plain(tmp_path_factory, tiny_assets):
    out = tmp_path_factory.mktemp("plain_verl")
    metrics, log, ckpt = out / "metrics.jsonl", out / "main_ppo.log", out / "ckpt"
    args = [
        "+recipe=cpu",
        "algorithm.adv_estimator=grpo",
        "actor_rollout_ref.rollout.n=2",
        "actor_rollout_ref.model.lora_rank=8",
        "actor_rollout_ref.model.lora_alpha=16",
        "actor_rollout_ref.model.target_modules=all-linear",
        f"reward.custom_reward_function.path={TEST_REWARD}",
        f"data.train_files={tiny_assets['train']}",
        f"data.val_files={tiny_assets['test']}",
        f"actor_rollout_ref.model.path={tiny_assets['model']}",
        "trainer.total_training_steps=1",
        "trainer.save_freq=1",
        "trainer.logger=[console,file]",
        f"trainer.default_local_dir={ckpt}",
    ]
    rc = run_main_ppo(args, log, timeout_s=900, env={"VERL_FILE_LOGGER_PATH": str(metrics)})
    text = log.read_text(errors="replace")
    assert rc == 0, text[-4000:]
    rows = [json.loads(line) for line in metrics.read_text().splitlines() if line.strip()]
    return {"steps": [row.get("data", row) for row in rows], "log": text, "ckpt": ckpt}


def test_a_plain_grpo_run_trains_and_saves_as_verl_alone_does(plain):
    (step,) = [step for step in plain["steps"] if "timing_s/step" in step]
    assert step["actor/grad_norm"] > 0
    assert (plain["ckpt"] / "latest_checkpointed_iteration.txt").read_text().strip() == "1"


def test_a_plain_run_logs_nothing_of_prime(plain):
    keys = {key for step in plain["steps"] for key in step}
    assert not [key for key in keys if key.startswith(("prm/", "prime/", "reward/failed", "reward/timed_out"))]
    assert "PRIME:" not in plain["log"] and "verl-prime-lora: LoRA dropout" not in plain["log"]


def test_a_plain_runs_checkpoint_is_verls_own(plain):
    meta = json.loads((plain["ckpt"] / "global_step_1" / "actor" / "lora_train_meta.json").read_text())
    assert meta["r"] == 8 and "lora_dropout" not in meta
    assert not (plain["ckpt"] / "global_step_1" / "prm").exists()
