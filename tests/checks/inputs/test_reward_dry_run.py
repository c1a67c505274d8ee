"""Input checks before Ray starts (verl_prime_lora.checks.inputs), `reward_dry_run`: the reward function scores
the first train row, with the keys the run reads (the PRM's label, the prompt filter's accuracy); a failure names
the key, the function and the row."""

import pytest
from input_configs import (
    GRPO,
    PARTIAL_CREDIT_REWARD,
    REWARD_FN,
    config,
    esc,
    fails,
    tiny_row,
    write_parquet,
    write_reward,
)

from verl_prime_lora.checks.inputs import check_inputs

# --------------------------------------------------------------------------------------------------
# reward dry run
# --------------------------------------------------------------------------------------------------


def test_label_key_typo_fails_in_the_dry_run(assets):
    message = fails(config(assets, "prime.prm.label_key=accuracy"), r"^prime\.prm\.label_key: is 'accuracy'")
    assert "pkg://verl_prime_lora.rewards.math_format:compute_score" in message  # the reward function
    assert "'acc'" in message and "'format'" in message  # the keys it returned
    assert f"row 0 of {assets['train']}" in message


def test_label_key_of_a_float_reward(assets):
    """veRL records a plain number as `acc` only: `acc` works, anything else fails."""
    reward = f"reward.custom_reward_function.path={PARTIAL_CREDIT_REWARD}"
    check_inputs(config(assets, reward))
    message = fails(config(assets, reward, "prime.prm.label_key=correct"), r"^prime\.prm\.label_key: is 'correct'")
    assert "returned the number" in message


def test_label_key_is_only_required_by_prime_trainers(assets):
    check_inputs(config(assets, "prime.prm.label_key=accuracy", *GRPO))


def test_prompt_filter_accuracy_key(assets):
    recipe = "prime_lora_colocated,prompt_filter,cpu"
    cfg = config(assets, "trainer.v1.sampler.sampler_kwargs.accuracy_key=accuracy", recipe=recipe)
    fails(cfg, r"^trainer\.v1\.sampler\.sampler_kwargs\.accuracy_key: is 'accuracy'")


def test_reward_that_raises_names_the_row(assets, tmp_path):
    reward = write_reward(tmp_path / "reward.py", "    raise KeyError('solution')\n")
    message = fails(config(assets, f"{REWARD_FN}={reward}"), r"^reward\.custom_reward_function\.path: ")
    assert f"raised on row 0 of {assets['train']}" in message and "KeyError: 'solution'" in message


@pytest.mark.parametrize(
    "returned, problem",
    [
        ("float('nan')", "non-finite score nan"),
        ("float('inf')", "non-finite score inf"),
        ("float('-inf')", "non-finite score -inf"),
        ("'1.0'", "non-number score '1.0' (str)"),
        ("None", "non-number score None (NoneType)"),
    ],
)
def test_reward_that_returns_no_finite_number(assets, tmp_path, returned, problem):
    reward = write_reward(tmp_path / "reward.py", f"    return {returned}\n")
    message = fails(config(assets, f"{REWARD_FN}={reward}"), r"^reward\.custom_reward_function\.path: ")
    assert f"the reward function {reward}:compute_score returned a {problem} on row 0 of {assets['train']}" in message


def test_reward_dict_with_a_non_finite_score_or_label(assets, tmp_path):
    reward = write_reward(tmp_path / "reward.py", "    return {'score': float('nan'), 'acc': 1.0}\n")
    fails(
        config(assets, f"{REWARD_FN}={reward}"),
        r"^reward\.custom_reward_function\.path: .* returned a non-finite score nan",
    )
    reward = write_reward(tmp_path / "label.py", "    return {'score': 1.0, 'acc': float('inf')}\n")
    fails(
        config(assets, f"{REWARD_FN}={reward}"),
        r"^reward\.custom_reward_function\.path: .* returned a non-finite PRM label 'acc' inf on row 0",
    )


def test_reward_dict_needs_score(assets, tmp_path):
    reward = write_reward(tmp_path / "reward.py", "    return {'acc': 1.0}\n")
    fails(config(assets, f"{REWARD_FN}={reward}"), r"^reward\.custom_reward_function\.path: .*without 'score'")


def test_reward_file_missing(assets, tmp_path):
    missing = tmp_path / "no_reward.py"
    pattern = rf"^reward\.custom_reward_function\.path: cannot load 'compute_score' from {esc(missing)}"
    fails(config(assets, f"{REWARD_FN}={missing}"), pattern)


def test_default_reward_with_an_unknown_data_source(assets, tmp_path):
    path = write_parquet(tmp_path / "train.parquet", [tiny_row(data_source="my_data")])
    cfg = config(assets, f"data.train_files={path}", f"{REWARD_FN}=null", *GRPO)
    message = fails(cfg, r"^reward\.custom_reward_function\.path: the reward function veRL's default_compute_score")
    assert "NotImplementedError" in message and "my_data" in message and str(path) in message
