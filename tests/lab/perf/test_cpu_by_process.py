"""benchmarks/cpu_by_process.py: CPU per step by process, from two readings of the run's processes."""

import pytest


def test_per_step_is_the_difference_over_the_steps_between_largest_first():
    from benchmarks.perf import cpu_by_process as bench

    before = {"ray::WorkerDict": 10.0, "VLLM::Worker": 5.0, "ray::IDLE": 1.0}
    after = {"ray::WorkerDict": 16.0, "VLLM::Worker": 14.0, "ray::IDLE": 1.0, "ray::Late": 3.0}
    rates = bench.per_step(before, after, steps=3)
    assert rates == pytest.approx({"VLLM::Worker": 3.0, "ray::WorkerDict": 2.0, "ray::Late": 1.0, "ray::IDLE": 0.0})
    assert list(rates) == ["VLLM::Worker", "ray::WorkerDict", "ray::Late", "ray::IDLE"]


def test_the_run_is_the_benchmark_setting_and_the_step_window_is_checked(tmp_path):
    from benchmarks.perf import cpu_by_process as bench

    assert "prompt_filter" not in bench.RECIPES and "grpo" in bench.PROJECT_RUNS
    with pytest.raises(SystemExit):
        bench.main(["--steps", "5", "--from-step", "4", "--to-step", "4", "--out", str(tmp_path)])
