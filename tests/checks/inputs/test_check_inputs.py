"""Input checks before Ray starts (`verl_prime_lora.checks.inputs.check_inputs`): correct configs (the e2e tests',
the examples', the demo's) pass, and veRL's `validate_config` runs them in the driver (`plugin.patches`), for PRIME
runs only, before Ray: a plain veRL run meets none of them, and `main_ppo` stops with the key and the path."""

import pytest
from input_configs import GRPO, PARTIAL_CREDIT_REWARD, PRIME_LABEL_REWARD, REWARD_FN, config, write_parquet
from main_ppo_driver import main_ppo_stopped_before_ray

import verl_prime_lora.plugin.patches  # noqa: F401 - the driver-side hook under test (also loaded at `import verl`)
from verl_prime_lora.checks.inputs import InputCheckError, check_inputs

# --------------------------------------------------------------------------------------------------
# correct configs pass (the e2e tests', the examples', the demo's)
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "recipe, overrides",
    [
        ("prime_lora_colocated,cpu", []),  # examples/run_cpu_smoke.sh: the project's reward (math-verify)
        ("prime_lora_colocated,cpu", [f"reward.custom_reward_function.path={PRIME_LABEL_REWARD}"]),  # test_prime_e2e
        (  # test_prime_e2e `split`: two fake GPUs, the standalone rollout on the second
            "prime_lora,cpu",
            ["ray_kwargs.ray_init.num_gpus=2", "actor_rollout_ref.rollout.checkpoint_engine.backend=cpu_zmq"],
        ),
        ("prime_lora_colocated,prompt_filter,cpu", []),  # the demo (learning_run.DEMO_RECIPES)
        (  # plain GRPO, a reward that returns a float
            "cpu",
            [
                "algorithm.adv_estimator=grpo",
                f"reward.custom_reward_function.path={PARTIAL_CREDIT_REWARD}",
                "reward.custom_reward_function.name=compute_score",
            ],
        ),
    ],
)
def test_correct_configs_pass(assets, recipe, overrides):
    check_inputs(config(assets, *overrides, recipe=recipe))


def test_chain_task_data_passes_the_reward_dry_run(assets, tmp_path):
    """The demo's data (verl_prime_lora.demo.chain_task) with the recipe's reward: the dry run's answer is right."""
    from verl_prime_lora.demo import chain_task

    chains = chain_task.make_splits(0, {"sft_eval": 1, "test": 2, "train": 3})
    paths = {}
    for split in ("train", "test"):
        rows = [chain_task.make_row(chain, i, split) for i, chain in enumerate(chains[split])]
        paths[split] = write_parquet(tmp_path / f"{split}.parquet", rows)
    check_inputs(config(assets, f"data.train_files={paths['train']}", f"data.val_files={paths['test']}"))


# --------------------------------------------------------------------------------------------------
# the hook: veRL's validate_config in the driver
# --------------------------------------------------------------------------------------------------


def test_verl_validate_config_runs_the_input_checks(assets, tmp_path):
    import verl.utils.config as verl_config

    missing = tmp_path / "nope.parquet"
    with pytest.raises(InputCheckError, match=r"^data\.train_files: "):
        cfg = config(assets, f"data.train_files={missing}")
        verl_config.validate_config(cfg, use_reference_policy=False, use_critic=False)


def test_a_plain_verl_run_meets_no_prime_check_in_the_driver(assets, tmp_path):
    """With the plugin installed, a run with neither a PRIME trainer nor a PRIME estimator passes veRL's
    validate_config exactly as without it: no PRIME config check, no input check, no reward dry run. The
    config below fails all three (a missing data file, a reward function that does not exist, n=1)."""
    import verl.utils.config as verl_config

    cfg = config(
        assets,
        *GRPO,
        f"data.train_files={tmp_path / 'nope.parquet'}",
        f"{REWARD_FN}={tmp_path / 'no_reward.py'}",
        "actor_rollout_ref.rollout.n=1",
    )
    verl_alone = verl_config.validate_config.__wrapped__
    verl_alone(cfg, use_reference_policy=False, use_critic=False)
    verl_config.validate_config(cfg, use_reference_policy=False, use_critic=False)
    # the same config as a PRIME run is refused before Ray
    with pytest.raises(ValueError, match=r"^actor_rollout_ref\.rollout\.n: "):
        prime = config(assets, f"{REWARD_FN}={tmp_path / 'no_reward.py'}", "actor_rollout_ref.rollout.n=1")
        verl_config.validate_config(prime, use_reference_policy=False, use_critic=False)


def test_main_ppo_fails_before_ray_on_an_empty_model_folder(assets, tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    stderr = main_ppo_stopped_before_ray(
        tmp_path,
        "+recipe=[prime_lora_colocated,cpu]",
        f"data.train_files={assets['train']}",
        f"data.val_files={assets['test']}",
        f"actor_rollout_ref.model.path={empty}",
    )
    expected = f"InputCheckError: actor_rollout_ref.model.path: {empty} holds no config.json"
    assert expected in stderr, stderr[-3000:]
