"""benchmarks/step_time_vs_trl.py: per-repeat medians after step 1, the ratios and their median (runs replaced)."""

import json

import pytest


def test_ratios_are_of_medians_after_the_first_step_per_repeat(monkeypatch, tmp_path):
    from benchmarks.perf import step_time_vs_trl as bench

    monkeypatch.setattr(bench.warm_start, "write_warm_assets", lambda out, seed: {"model": out})
    trl = iter([[9.0, 1.0, 2.0, 3.0], [9.0, 2.0, 2.0, 2.0], [9.0, 4.0, 4.0, 4.0]])
    monkeypatch.setattr(bench, "trl_step_seconds", lambda assets, steps, out, trl_path: next(trl))
    step = {
        "grpo": [30.0, 6.0, 4.0, 5.0],
        "prime_grpo": [40.0, 6.0, 6.0, 6.0],
        "prime_grpo_after": [40.0, 5.5, 5.5, 5.5],
    }
    runs = []

    def project(estimator, assets, steps, out):
        runs.append(out.name)
        timings = {"timing_s/step": step[estimator], "timing_s/gen": [9.0, 3.0, 2.0, 1.0], "timing_s/testing": [4.0]}
        return timings, [f"[launch] start-up of {out.name}"]

    monkeypatch.setattr(bench, "project_timings", project)
    assert bench.main(["--steps", "4", "--repeats", "3", "--out", str(tmp_path), "--trl-path", str(tmp_path)]) == 0
    report = json.loads((tmp_path / "step_time_vs_trl.json").read_text())
    first = report["repeats"][0]
    assert first["median_step_after_step_1"] == {
        "trl_grpo": 2.0,
        "grpo": 5.0,
        "prime_grpo": 6.0,
        "prime_grpo_after": 5.5,
    }
    assert first["phases"]["grpo"] == {"timing_s/step": 5.0, "timing_s/gen": 2.0}  # one-off phases left out
    assert [r["ratios"]["grpo / trl_grpo"] for r in report["repeats"]] == pytest.approx([2.5, 2.5, 1.25])
    assert report["median_ratios"] == pytest.approx(
        {"grpo / trl_grpo": 2.5, "prime_grpo / grpo": 1.2, "prime_grpo_after / grpo": 1.1}
    )
    assert first["start_up"]["prime_grpo"] == ["[launch] start-up of prime_grpo_0"]
    assert runs == [f"{name}_{repeat}" for repeat in range(3) for name in ("grpo", "prime_grpo", "prime_grpo_after")]


def test_both_sides_read_the_demo_setting():
    from benchmarks.perf import step_time_vs_trl as bench

    assert bench.setting("data.train_batch_size") == "16" and bench.setting("actor_rollout_ref.rollout.n") == "8"
    assert bench.setting("data.max_response_length") == "64"
    assert "prompt_filter" not in bench.RECIPES  # the same prompts every step on both sides
    # PRIME's own cost: the recipe's one PRM pass per step, not the demo's three; each run names a demo estimator
    assert bench.PROJECT_RUNS["prime_grpo"] == ("prime_grpo", ["prime.prm.epochs=1"])
    assert bench.PROJECT_RUNS["prime_grpo_after"][1] == ["prime.prm.epochs=1", "prime.prm.update=after"]
    assert all(estimator in bench.ESTIMATORS for estimator, _ in bench.PROJECT_RUNS.values())
