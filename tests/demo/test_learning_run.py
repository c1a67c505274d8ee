"""The learning run's command line and progress line, without starting main_ppo."""

import inspect

import pytest

from verl_prime_lora.demo import learning_run
from verl_prime_lora.demo.learning_run import DEMO_RECIPES, LearningRun, progress_line, run_learning

ASSETS = {"train": "train.parquet", "test": "test.parquet", "model": "model"}


@pytest.fixture
def launched(monkeypatch):
    calls = []

    def fake_run_main_ppo(args, log, timeout_s, env=None):
        calls.append(args)
        return 0

    monkeypatch.setattr(learning_run, "run_main_ppo", fake_run_main_ppo)
    return calls


def test_the_demo_trains_with_the_prompt_filter_before_the_cpu_preset(launched, tmp_path):
    run_learning("prime_grpo", ASSETS, tmp_path, steps=1, test_freq=-1, echo=None)
    assert DEMO_RECIPES == ("prime_lora_colocated", "prompt_filter", "cpu")
    assert launched[0][0] == "+recipe=[prime_lora_colocated,prompt_filter,cpu]"
    assert "prime.prm.epochs=3" in launched[0]


def test_recipes_replace_the_recipe_list_only(launched, tmp_path):
    run_learning("prime_grpo", ASSETS, tmp_path, 1, -1, echo=None, recipes=("prime_lora_colocated", "cpu"))
    run_learning("prime_grpo", ASSETS, tmp_path, 1, -1, echo=None)
    without, default = launched
    assert without[0] == "+recipe=[prime_lora_colocated,cpu]"
    assert without[1:] == default[1:]
    assert not any(arg.startswith("+recipe") for arg in default[1:])


def test_progress_line_shows_the_share_of_prompts_kept(tmp_path):
    run = LearningRun(name="prime_grpo", returncode=0, log=tmp_path / "log")
    run.steps[3] = {"training/prompt_filter/kept_ratio": 0.625, "prm/label_mean": 0.5, "timing_s/step": 12.0}
    assert progress_line(run, 3, 10) == "step   3/10 | kept 0.62 | batch acc 0.50 | s/step 12.00"
    run.steps[4] = {"prm/label_mean": 0.5}  # no filter: no `kept`
    assert progress_line(run, 4, 10) == "step   4/10 | batch acc 0.50"


def test_progress_lines_are_flushed_as_they_come(monkeypatch):
    flushed = []
    monkeypatch.setattr("builtins.print", lambda *args, **kwargs: flushed.append(kwargs.get("flush")))
    learning_run.print_now("step 1/1")
    assert flushed == [True]
    assert inspect.signature(run_learning).parameters["echo"].default is learning_run.print_now
