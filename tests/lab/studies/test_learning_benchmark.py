"""benchmarks/learning.py: the across-seeds table (means and 95 % intervals at equal steps and equal wall time)."""

import json

import pytest

from benchmarks.lib.evidence import mean_ci95
from verl_prime_lora.demo.learning_run import LAYOUTS, LearningRun

VAL = "val-core/chain_arithmetic/acc/mean@1"


@pytest.fixture(scope="module")
def bench():
    from benchmarks.studies.learning import run as learning

    return learning


def _run(name: str, accuracies: dict[int, float], seconds_per_step: float) -> LearningRun:
    run = LearningRun(name=name, returncode=0, log=None)
    for step, acc in accuracies.items():
        run.steps[step] = {VAL: acc}
        run.wall[step] = 60.0 + seconds_per_step * step
    return run


def test_seeds_are_pooled_by_step_and_by_grpo_s_clock(bench):
    grpo = [_run("grpo", {0: 0.1, 4: 0.3 + d}, 10.0) for d in (0.0, 0.02, 0.04)]
    slow = [_run("prime_grpo", {0: 0.1, 4: 0.5 + d}, 20.0) for d in (0.0, 0.02, 0.04)]
    seeds = bench.across_seeds({"grpo": dict(enumerate(grpo)), "prime_grpo": dict(enumerate(slow))})
    assert seeds["clock_s"] == {0: 60.0, 4: 100.0}
    assert seeds["labels"]["prime_grpo"]["at_step"][4] == pytest.approx(mean_ci95([0.5, 0.52, 0.54]))
    # at grpo's 100 s the slower runs have logged step 0 only (their step 4 comes at 140 s)
    assert seeds["labels"]["prime_grpo"]["at_time"][4] == pytest.approx((0.1, 0.1, 0.1))
    assert seeds["labels"]["grpo"]["at_time"][4] == pytest.approx(mean_ci95([0.3, 0.32, 0.34]))
    # paired by seed: every seed is 0.2 ahead, so the difference's interval has no width
    assert seeds["labels"]["prime_grpo"]["minus_grpo_at_step"][4] == pytest.approx((0.2, 0.2, 0.2))
    assert "minus_grpo_at_step" not in seeds["labels"]["grpo"]
    table = bench.seeds_table(seeds)
    assert "prime_grpo (3)" in table and "0.520 [" in table and "100 s" in table and "+0.200 [" in table


def test_a_run_that_never_validated_is_left_out_of_the_pool(bench):
    seeds = bench.across_seeds(
        {"grpo": {0: _run("grpo", {0: 0.1, 4: 0.3}, 10.0)}, "broken": {0: _run("broken", {}, 1.0)}}
    )
    assert "broken" not in seeds["labels"]


def test_the_split_layouts_run_the_seed_recipe_on_two_fake_gpus():
    recipes, overrides = LAYOUTS["split"]
    assert recipes[0] == "prime_lora" and recipes[-1] == "cpu"
    assert "ray_kwargs.ray_init.num_gpus=2" in overrides
    on_policy = LAYOUTS["split_on_policy"][1]
    assert "trainer.v1.separate_async.num_warmup_batches=0" in on_policy
    assert LAYOUTS["colocated"][0] == ("prime_lora_colocated", "prompt_filter", "cpu")


def _learning_json(path, runs: list[tuple[str, int, LearningRun]]):
    """A learning.json as `report` writes it (the fields `pool` reads)."""
    path.write_text(
        json.dumps(
            {
                "runs": [{"name": r.name, "steps": r.steps, "wall": r.wall} for _, _, r in runs],
                "summaries": [{"estimator": label, "seed": seed, "returncode": 0} for label, seed, _ in runs],
            }
        )
    )
    return path


def test_seeds_of_two_invocations_are_pooled_and_paired_by_seed(bench, tmp_path, capsys):
    def arm(label, seed, gain):
        return label, seed, _run(f"{label} (seed {seed})", {0: 0.1, 4: 0.3 + gain + 0.01 * seed}, 10.0)

    first = [
        arm(label, seed, gain) for seed in (0, 1, 2) for label, gain in (("grpo", 0), ("ungated", 0.1), ("gated", 0))
    ]
    later = [arm(label, seed, gain) for seed in (3, 4) for label, gain in (("grpo", 0), ("ungated", 0.1))]
    files = [_learning_json(tmp_path / "a.json", first), _learning_json(tmp_path / "b.json", later)]
    assert bench.pool(files, tmp_path / "pooled") == 0
    pooled = json.loads((tmp_path / "pooled" / "learning_pooled.json").read_text())
    assert pooled["seeds"] == {"grpo": [0, 1, 2, 3, 4], "ungated": [0, 1, 2, 3, 4], "gated": [0, 1, 2]}
    labels = pooled["across_seeds"]["labels"]
    assert labels["ungated"]["seeds"] == 5
    assert labels["ungated"]["minus_grpo_at_step"]["4"] == pytest.approx([0.1, 0.1, 0.1])  # every seed +0.1
    assert labels["gated"]["paired_seeds"] == 3  # seeds 0-2, the ones grpo ran too
    assert labels["gated"]["minus_grpo_at_step"]["4"] == pytest.approx([0.0, 0.0, 0.0])
    assert labels["gated"]["at_step"]["4"] == pytest.approx(list(mean_ci95([0.30, 0.31, 0.32])))
    assert (tmp_path / "pooled" / "learning_seeds.png").stat().st_size > 0
    assert "ungated (5)" in capsys.readouterr().out


def test_a_seed_pooled_twice_is_refused(bench, tmp_path):
    run = ("grpo", 0, _run("grpo", {0: 0.1, 4: 0.3}, 10.0))
    files = [_learning_json(tmp_path / "a.json", [run]), _learning_json(tmp_path / "b.json", [run])]
    with pytest.raises(SystemExit, match="grpo seed 0 is in an earlier file too"):
        bench.pool(files, tmp_path / "pooled")
