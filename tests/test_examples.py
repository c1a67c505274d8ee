"""The example scripts: valid bash, and every seed override they pass composes with the recipe they
select (a misspelt key would otherwise only fail on a GPU machine, minutes into start-up)."""

import subprocess
from pathlib import Path

import pytest
from test_recipe_config import compose_ppo

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def seed_overrides(*arrays):
    script = f'source "{EXAMPLES}/seed_overrides.sh"; printf "%s\\n" ' + " ".join(f'"${{{a}[@]}}"' for a in arrays)
    out = subprocess.run(["bash", "-c", script], check=True, capture_output=True, text=True, env={"HOME": "/home/u"})
    return out.stdout.splitlines()


@pytest.mark.parametrize("script", sorted(p.name for p in EXAMPLES.glob("*.sh")))
def test_scripts_are_valid_bash(script):
    subprocess.run(["bash", "-n", str(EXAMPLES / script)], check=True)


@pytest.mark.parametrize("recipe", ["prime_lora", "prime_lora_colocated"])
def test_seed_overrides_compose(recipe):
    cfg = compose_ppo(f"+recipe={recipe}", *seed_overrides("SEED_ARGS", "PRM_ARGS"))
    assert cfg.actor_rollout_ref.model.lora.dropout == 0.05
    assert cfg.reward.custom_reward_function.path == "pkg://verl_prime_lora.reward"
    assert cfg.prime.prm.micro_batch_size_per_gpu == 2
    assert cfg.data.train_files == "/home/u/data/open_rs/train.parquet"


def test_baseline_overrides_compose_without_prm():
    cfg = compose_ppo("+recipe=prime_lora", *seed_overrides("SEED_ARGS"), "algorithm.adv_estimator=grpo",
                      "trainer.v1.trainer_mode=separate_async")
    assert (cfg.algorithm.adv_estimator, cfg.trainer.v1.trainer_mode) == ("grpo", "separate_async")
