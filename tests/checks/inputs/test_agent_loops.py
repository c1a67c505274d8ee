"""Input checks before Ray starts (verl_prime_lora.checks.inputs), `agent_loops`: every agent loop a PRIME run
can use returns one output per session."""

import shutil
from pathlib import Path

import pytest
from input_configs import E2E, GRPO, config, esc, fails, tiny_row, write_parquet
from main_ppo_driver import main_ppo_stopped_before_ray

from verl_prime_lora.checks.inputs import check_inputs

# --------------------------------------------------------------------------------------------------
# agent loops: one output per session for the PRIME trainers
# --------------------------------------------------------------------------------------------------

AGENT_KEY = "actor_rollout_ref.rollout.agent"
LOOPS = "turn_per_output_agent_loop"  # tests/e2e/turn_per_output_agent_loop.py


def write_agent_loops(path: Path, **targets: str) -> Path:
    path.write_text("".join(f"- name: {name}\n  _target_: {LOOPS}.{cls}\n" for name, cls in targets.items()))
    return path


@pytest.fixture
def loops_importable(monkeypatch):
    monkeypatch.syspath_prepend(str(E2E))


@pytest.mark.parametrize("cls", ["OutputPerTurnAgentLoop", "OptionalOutputsAgentLoop"])
def test_agent_loop_with_an_output_per_turn_is_refused(assets, tmp_path, loops_importable, cls):
    loops = write_agent_loops(tmp_path / "loops.yaml", per_turn=cls)
    cfg = config(assets, f"{AGENT_KEY}.agent_loop_config_path={loops}", f"{AGENT_KEY}.default_agent_loop=per_turn")
    message = fails(cfg, rf"{AGENT_KEY}\.agent_loop_config_path: agent loop 'per_turn' \({LOOPS}\.{cls}, used by ")
    assert "trainer.v1.trainer_mode=prime_sync takes one output per session" in message
    assert f"used by {AGENT_KEY}.default_agent_loop" in message


def test_agent_loop_named_by_a_data_row(assets, tmp_path, loops_importable):
    """A loop that only the data's agent_name column selects is found there, and the file is named."""
    loops = write_agent_loops(tmp_path / "loops.yaml", per_turn="OutputPerTurnAgentLoop", whole="WholeSessionAgentLoop")
    train = write_parquet(
        tmp_path / "train.parquet", [tiny_row(agent_name="single_turn_agent"), tiny_row(agent_name="per_turn")]
    )
    cfg = config(assets, f"{AGENT_KEY}.agent_loop_config_path={loops}", f"data.train_files={train}")
    fails(cfg, rf".*'per_turn' .*used by the agent_name column of {esc(train)} \(data\.train_files\)")


def test_loops_with_one_output_pass(assets, tmp_path, loops_importable):
    loops = write_agent_loops(tmp_path / "loops.yaml", whole="WholeSessionAgentLoop")
    check_inputs(config(assets, f"{AGENT_KEY}.agent_loop_config_path={loops}", f"{AGENT_KEY}.default_agent_loop=whole"))
    check_inputs(config(assets, f"{AGENT_KEY}.default_agent_loop=tool_agent"))


def test_agent_loops_are_only_checked_for_prime_trainers(assets, tmp_path, loops_importable):
    """veRL's own trainers score multi-output sessions themselves (compute_advantage_for_multi_trajectories)."""
    loops = write_agent_loops(tmp_path / "loops.yaml", per_turn="OutputPerTurnAgentLoop")
    check_inputs(
        config(assets, *GRPO, f"{AGENT_KEY}.agent_loop_config_path={loops}", f"{AGENT_KEY}.default_agent_loop=per_turn")
    )


def test_agent_loop_that_does_not_import(assets, tmp_path, loops_importable):
    loops = write_agent_loops(tmp_path / "loops.yaml", gone="NoSuchLoop")
    cfg = config(assets, f"{AGENT_KEY}.agent_loop_config_path={loops}")
    fails(cfg, rf"{AGENT_KEY}\.agent_loop_config_path: agent loop 'gone': cannot import {LOOPS}\.NoSuchLoop")


def test_agent_loop_config_that_is_not_a_list(assets, tmp_path):
    bad = tmp_path / "loops.yaml"
    bad.write_text("name: x\n")
    fails(
        config(assets, f"{AGENT_KEY}.agent_loop_config_path={bad}"),
        rf"{AGENT_KEY}\.agent_loop_config_path: {esc(bad)} is not",
    )


def test_main_ppo_refuses_an_output_per_turn_loop_before_ray(assets, tmp_path):
    loops = write_agent_loops(tmp_path / "loops.yaml", per_turn="OutputPerTurnAgentLoop")
    shutil.copy(E2E / f"{LOOPS}.py", tmp_path)  # importable from main_ppo's working directory
    stderr = main_ppo_stopped_before_ray(
        tmp_path,
        "+recipe=[prime_lora_colocated,cpu]",
        f"data.train_files={assets['train']}",
        f"data.val_files={assets['test']}",
        f"actor_rollout_ref.model.path={assets['model']}",
        f"{AGENT_KEY}.agent_loop_config_path={loops}",
        f"{AGENT_KEY}.default_agent_loop=per_turn",
    )
    assert f"InputCheckError: {AGENT_KEY}.agent_loop_config_path: agent loop 'per_turn'" in stderr, stderr[-3000:]
