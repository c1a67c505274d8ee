"""benchmarks/step_time_vs_trl.py: medians after step 1 and the two ratios it reports (runs replaced)."""

import json

import pytest
from benchmark_scripts import load_benchmark


def test_ratios_are_of_medians_after_the_first_step(monkeypatch, tmp_path):
    bench = load_benchmark("step_time_vs_trl")
    monkeypatch.setattr(bench.chain_task, "write_warm_assets", lambda out, seed: {"model": out})
    monkeypatch.setattr(bench, "trl_step_seconds", lambda assets, steps, out, trl_path: [9.0, 1.0, 2.0, 3.0])
    per_run = {"grpo": [30.0, 6.0, 4.0, 5.0], "grpo_filter": [30.0, 8.0], "prime_grpo_filter": [40.0, 10.0]}
    runs = []

    def project(estimator, recipes, assets, steps, out):
        runs.append((out.name, estimator, recipes))
        return per_run[out.name]

    monkeypatch.setattr(bench, "project_step_seconds", project)
    assert bench.main(["--steps", "4", "--out", str(tmp_path), "--trl-path", str(tmp_path)]) == 0
    report = json.loads((tmp_path / "step_time_vs_trl.json").read_text())
    assert report["median_after_step_1"] == {
        "trl_grpo": 2.0,
        "grpo": 5.0,
        "grpo_filter": 8.0,
        "prime_grpo_filter": 10.0,
    }
    assert report["ratios"] == pytest.approx({"grpo / trl_grpo": 2.5, "prime_grpo_filter / grpo_filter": 1.25})
    assert runs == [
        ("grpo", "grpo", ("prime_lora_colocated", "cpu")),
        ("grpo_filter", "grpo", ("prime_lora_colocated", "prompt_filter", "cpu")),
        ("prime_grpo_filter", "prime_grpo", ("prime_lora_colocated", "prompt_filter", "cpu")),
    ]


def test_both_sides_read_the_demo_setting():
    bench = load_benchmark("step_time_vs_trl")
    assert bench.setting("data.train_batch_size") == "16" and bench.setting("actor_rollout_ref.rollout.n") == "8"
    assert bench.setting("data.max_response_length") == "64"
