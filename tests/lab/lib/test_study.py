"""benchmarks/lib/study.py and the analysis it runs: runs in the plan's order, resumable; one analysis, only once
every run is in."""

import hashlib
import json
from pathlib import Path

import pytest

from benchmarks.lib import analysis, diagnostics, evidence, runs, study
from verl_prime_lora.demo.learning_run import LearningRun

PLAN = {
    "task": {"min_ops": 5, "max_ops": 7, "steps": 8, "test_freq": 2, "overrides": ["data.max_response_length=96"]},
    "endpoint_steps": [4, 6, 8],
    "primary": ["prime_grpo_ungated", "grpo"],
    "runs": [
        {"arm": "grpo", "seed": 1},
        {"arm": "prime_grpo_ungated", "seed": 1},
        {"arm": "prime_grpo_ungated", "seed": 2},
        {"arm": "grpo", "seed": 2},
        {"arm": "grpo", "seed": 3},
        {"arm": "prime_grpo_ungated", "seed": 3},
    ],
}


def fake_run(arm: str, seed: int, base: float, returncode: int = 0) -> LearningRun:
    run = LearningRun(name=arm, returncode=returncode, log=None)
    key = "val-core/prime_lora/chain_arithmetic/acc/mean@1"
    for step in (0, 2, 4, 6, 8):
        run.steps[step] = {key: base + 0.01 * step + 0.001 * seed}
        run.wall[step] = 10.0 * step
    return run


@pytest.fixture
def calls(monkeypatch):
    """The (arm, seed) of each run started, with `run_learning` and the warm start faked."""
    started = []

    def run_learning(arm, assets, workdir, steps, test_freq, overrides, seed, estimator, env):
        started.append((arm, seed))
        assert env == study.RUN_ENV  # the lab's modules importable in the run's processes
        assert (steps, test_freq, overrides) == (8, 2, ["data.max_response_length=96"])
        assert estimator == study.ARMS[arm]
        failed = (arm, seed) == ("grpo", 3)
        return fake_run(arm, seed, 0.4 if arm == "grpo" else 0.5, returncode=1 if failed else 0)

    monkeypatch.setattr(study, "run_learning", run_learning)
    monkeypatch.setattr(study.warm_start, "write_warm_assets", lambda out, **kwargs: {"out": out, **kwargs})
    return started


@pytest.fixture
def plan_path(tmp_path):
    path = tmp_path / "study" / "plan.json"
    path.parent.mkdir()
    path.write_text(json.dumps(PLAN))
    return path


def test_runs_follow_the_plans_order_and_are_not_run_twice(plan_path, calls, tmp_path):
    done = runs.run_file(plan_path, {"arm": "grpo", "seed": 2})
    done.parent.mkdir()
    done.write_text(json.dumps({"already": "done"}))
    assert study.run_all(plan_path, tmp_path / "work") == 0
    expected = [(e["arm"], e["seed"]) for e in PLAN["runs"] if (e["arm"], e["seed"]) != ("grpo", 2)]
    assert calls == expected
    record = json.loads(runs.run_file(plan_path, {"arm": "prime_grpo_ungated", "seed": 3}).read_text())
    assert record["order"] == 5 and record["val_accuracy"]["8"] == pytest.approx(0.583)


def test_the_analysis_waits_for_every_run(plan_path):
    with pytest.raises(SystemExit, match="6 planned runs have no result"):
        analysis.analyse(plan_path)


def test_the_analysis_tests_the_primary_pair_on_the_endpoint(plan_path, calls, tmp_path):
    study.run_all(plan_path, tmp_path / "work")
    result = analysis.analyse(plan_path)
    grpo = {seed: 0.4 + 0.06 + 0.001 * seed for seed in (1, 2)}  # mean of steps 4, 6, 8; seed 3 failed
    prime = {seed: 0.5 + 0.06 + 0.001 * seed for seed in (1, 2, 3)}
    assert result["arms"]["grpo"]["by_seed"] == pytest.approx(grpo)
    assert result["arms"]["prime_grpo_ungated"]["by_seed"] == pytest.approx(prime)
    assert result["failed_runs"] == [{"arm": "grpo", "seed": 3, "returncode": 1}]
    a, b = list(prime.values()), list(grpo.values())
    assert result["primary"]["welch_ci95"] == pytest.approx(evidence.welch_ci95(a, b))
    assert result["primary"]["permutation_p"] == pytest.approx(evidence.permutation_p(a, b))
    assert json.loads((plan_path.parent / "analysis.json").read_text())["primary"]["difference"] == (
        "prime_grpo_ungated - grpo"
    )


def test_a_reused_run_is_read_from_its_study_and_never_started(plan_path, calls, tmp_path):
    """A plan may reuse an earlier study's runs (`from`), and test further pairs (`secondary`)."""
    earlier = plan_path.parent.parent / "earlier" / "runs"
    earlier.mkdir(parents=True)
    plan = json.loads(plan_path.read_text())
    reused = [e for e in plan["runs"] if e["arm"] == "prime_grpo_ungated"]
    for entry in reused:
        record = {"returncode": 0, "val_accuracy": {str(s): 0.7 for s in (4, 6, 8)}}
        (earlier / f"seed{entry['seed']}.json").write_text(json.dumps(record))
        entry["from"] = f"../earlier/runs/seed{entry['seed']}.json"
    plan["runs"] += [{"arm": "prime_grpo_shuffled", "seed": seed} for seed in (1, 2)]
    plan["secondary"] = [["prime_grpo_shuffled", "grpo"]]
    plan_path.write_text(json.dumps(plan))
    study.run_all(plan_path, tmp_path / "work")
    assert [call for call in calls if call[0] == "prime_grpo_ungated"] == []
    assert ("prime_grpo_shuffled", 2) in calls
    result = analysis.analyse(plan_path)
    assert result["arms"]["prime_grpo_ungated"]["by_seed"] == pytest.approx({1: 0.7, 2: 0.7, 3: 0.7})
    shuffled = [0.5 + 0.06 + 0.001 * seed for seed in (1, 2)]
    grpo = [0.4 + 0.06 + 0.001 * seed for seed in (1, 2)]
    assert result["secondary"] == [
        {
            "difference": "prime_grpo_shuffled - grpo",
            "welch_ci95": pytest.approx(evidence.welch_ci95(shuffled, grpo)),
            "permutation_p": pytest.approx(evidence.permutation_p(shuffled, grpo)),
        }
    ]


def test_a_plan_names_its_arms_and_recipes_and_runs_two_at_once(plan_path, monkeypatch, tmp_path):
    """A plan's own `arms` and `task.recipes` reach every run; `jobs=2` still starts each planned run once; each
    run file records the commit and start time it ran with."""
    plan = json.loads(plan_path.read_text())
    plan["task"]["recipes"] = ["prime_lora_colocated", "cpu"]
    plan["arms"] = {"grpo": ["a=1"], "prime_grpo_ungated": ["b=2"]}
    plan_path.write_text(json.dumps(plan))
    seen = []

    def run_learning(arm, assets, workdir, steps, test_freq, overrides, seed, estimator, env, recipes):
        seen.append((arm, seed, tuple(estimator), recipes))
        return fake_run(arm, seed, 0.4)

    monkeypatch.setattr(study, "run_learning", run_learning)
    monkeypatch.setattr(study.warm_start, "write_warm_assets", lambda out, **kwargs: {})
    assert study.run_all(plan_path, tmp_path / "work", jobs=2) == 0
    expected = {
        (e["arm"], e["seed"], ("a=1",) if e["arm"] == "grpo" else ("b=2",), ("prime_lora_colocated", "cpu"))
        for e in PLAN["runs"]
    }
    assert sorted(seen) == sorted(expected) and len(seen) == len(PLAN["runs"])
    record = json.loads(runs.run_file(plan_path, PLAN["runs"][0]).read_text())
    assert len(record["commit"].removesuffix("+dirty")) == 40 and record["started"].startswith("20")


@pytest.mark.parametrize(
    ("val", "returncode", "off"),
    [
        ({"0": 0.30, "4": 0.50, "8": 0.29}, 0, True),
        ({"0": 0.30, "4": 0.10, "8": 0.30}, 0, False),  # level at the last step is not off
        ({"4": 0.10, "8": 0.05}, 0, None),  # no step-0 evaluation
        ({"0": 0.30, "8": 0.10}, 1, None),  # a failed run is not judged
    ],
)
def test_a_run_went_off_when_its_last_validation_is_below_its_first(val, returncode, off):
    assert analysis.went_off({"val_accuracy": val, "returncode": returncode}) is off


def test_the_analysis_counts_the_runs_that_went_off(plan_path, monkeypatch, tmp_path):
    def run_learning(arm, assets, workdir, steps, test_freq, overrides, seed, estimator, env):
        run = fake_run(arm, seed, 0.4)
        if (arm, seed) == ("prime_grpo_ungated", 2):
            run.steps[8] = {next(iter(run.steps[0])): 0.1}
        return run

    monkeypatch.setattr(study, "run_learning", run_learning)
    monkeypatch.setattr(study.warm_start, "write_warm_assets", lambda out, **kwargs: {})
    study.run_all(plan_path, tmp_path / "work")
    arms = analysis.analyse(plan_path)["arms"]
    assert arms["prime_grpo_ungated"]["went_off"] == [2] and arms["grpo"]["went_off"] == []


def test_mechanism_counts_learned_runs_and_averages_the_diagnostics(plan_path, capsys):
    """`mechanism` on hand-made run files: runs that learned, step time by median and by total against the
    baseline, and per-arm means over steps 1 to the last of the diagnostics a run logged; a failed run is kept out."""
    plan = json.loads(plan_path.read_text())
    plan["task"]["steps"] = 3
    plan["endpoint_steps"] = [2, 3]
    plan["runs"] = [{"arm": arm, "seed": seed} for arm in ("grpo", "prime") for seed in (1, 2, 3)]
    plan["primary"] = ["prime", "grpo"]
    plan_path.write_text(json.dumps(plan))

    def write(arm, seed, val, step_s, metrics=None, returncode=0):
        steps = {str(s): {"timing_s/step": step_s[s - 1], **(metrics or {})} for s in (1, 2, 3)}
        if arm == "prime":  # steps 1-3 of the PRM's ranking: 0.4, 0.5, 0.6 plus the seed's offset
            for s in (1, 2, 3):
                steps[str(s)]["prm/dpo_acc_before_mixed"] = 0.3 + 0.1 * s + 0.01 * seed
        record = {"arm": arm, "seed": seed, "returncode": returncode, "val_accuracy": val, "steps": steps}
        path = runs.run_file(plan_path, {"arm": arm, "seed": seed})
        path.parent.mkdir(exist_ok=True)
        path.write_text(json.dumps(record))

    write("grpo", 1, {"0": 0.1, "2": 0.2, "3": 0.1}, [30, 10, 10], {"actor/grad_norm": 1.0})
    write("grpo", 2, {"0": 0.1, "2": 0.1, "3": 0.1}, [30, 10, 10], {"actor/grad_norm": 1.0})
    write("grpo", 3, {"0": 0.1, "2": 0.9, "3": 0.9}, [1, 1, 1], returncode=1)  # failed: kept out
    write("prime", 1, {"0": 0.1, "2": 0.16, "3": 0.2}, [40, 12, 14], {"actor/grad_norm": 2.0})
    write("prime", 2, {"0": 0.1, "2": 0.15, "3": 0.15}, [40, 14, 16], {"actor/grad_norm": 3.0})  # 0.15 is not above
    write("prime", 3, {"0": 0.3, "2": 0.2}, [40, 16, 18], {"actor/grad_norm": 4.0})  # learned at step 2

    result = diagnostics.mechanism(plan_path, learned_above=0.15)
    grpo, prime = result["arms"]["grpo"], result["arms"]["prime"]
    assert result["baseline"] == "grpo" and result["steps"] == [1, 3]
    assert result["failed_runs"] == [{"arm": "grpo", "seed": 3, "returncode": 1}]
    assert (grpo["n"], grpo["learned"]) == (2, 1) and (prime["n"], prime["learned"]) == (3, 2)
    # median over steps 2-3 per run (13, 15, 17), median over runs; total over steps 1-3, mean over runs
    assert prime["step_s"]["median"] == pytest.approx(15) and prime["step_s"]["run_medians_range"] == [13, 17]
    assert prime["step_s"]["total_mean"] == pytest.approx((66 + 70 + 74) / 3)
    assert grpo["step_s"]["median"] == pytest.approx(10) and grpo["step_s"]["total_mean"] == pytest.approx(50)
    assert prime["step_s"]["vs_baseline"] == pytest.approx({"by_median": 1.5, "by_total": 70 / 50})
    assert "vs_baseline" not in grpo["step_s"]
    assert prime["metrics"]["actor/grad_norm"] == pytest.approx({"mean": 3.0, "runs_range": [2.0, 4.0]})
    assert grpo["metrics"]["actor/grad_norm"]["mean"] == pytest.approx(1.0)
    ranking = prime["metrics"]["prm/dpo_acc_before_mixed"]
    assert ranking["mean"] == pytest.approx(0.52) and ranking["runs_range"] == pytest.approx([0.51, 0.53])
    assert "prm/dpo_acc_before_mixed" not in grpo["metrics"]  # an arm without a PRM logs none

    diagnostics.print_mechanism(result)
    out = capsys.readouterr().out
    assert "prime: 3 runs; learned (a validation above 0.15 at steps [2, 3]): 2 of 3" in out
    assert "vs grpo: 1.50x by median, 1.40x by total" in out


def test_mechanism_waits_for_every_run(plan_path):
    with pytest.raises(SystemExit, match="6 planned runs have no result"):
        diagnostics.mechanism(plan_path)


@pytest.mark.parametrize(
    ("val", "is_learned", "is_unstable"),
    [
        ({"0": 0.075, "4": 0.16, "6": 0.20, "8": 0.21}, True, False),
        ({"0": 0.075, "4": 0.15, "6": 0.15, "8": 0.15}, False, False),  # 0.15 is not above 0.15
        ({"0": 0.075, "2": 0.20, "4": 0.15, "8": 0.3}, True, True),  # 0.05 below the best before it
        ({"0": 0.075, "2": 0.20, "4": 0.15, "8": 0.12}, False, True),  # learned only at step 2: not an endpoint
        ({"0": 0.10, "2": 0.06, "4": 0.07}, False, False),  # 0.04 below: not unstable
    ],
)
def test_a_run_learned_above_a_bar_and_was_unstable_when_it_fell_from_its_best(val, is_learned, is_unstable):
    record = {"val_accuracy": val, "returncode": 0}
    assert analysis.learned(record, [4, 6, 8], 0.15) is is_learned
    assert analysis.unstable(record, 0.05) is is_unstable


@pytest.mark.parametrize(
    ("table", "p"),
    [
        # scipy.stats.fisher_exact([[a, n_a - a], [b, n_b - b]]).pvalue, two-sided
        ((10, 10, 3, 10), 0.0030959752321981426),
        ((3, 15, 3, 15), 1.0),
        ((0, 15, 5, 15), 0.04214559386973179),
        ((15, 15, 0, 15), 1.28934500757877e-08),
    ],
)
def test_fishers_exact_test_matches_scipys(table, p):
    assert evidence.fisher_exact_p(*table) == pytest.approx(p, rel=1e-9)


def test_the_analysis_counts_learned_and_unstable_runs_with_fishers_test(plan_path, monkeypatch, tmp_path):
    """A plan's registered `learned_above` and `instability_drop`: the seeds that met each criterion per arm, and for
    every tested pair both arms' counts and Fisher's exact p."""
    plan = json.loads(plan_path.read_text())
    plan.update(learned_above=0.5, instability_drop=0.05)
    plan_path.write_text(json.dumps(plan))

    def run_learning(arm, assets, workdir, steps, test_freq, overrides, seed, estimator, env):
        run = fake_run(arm, seed, 0.45 if arm == "prime_grpo_ungated" else 0.3)  # 0.45 + 0.01·step: above 0.5
        if (arm, seed) == ("grpo", 1):
            run.steps[6] = {next(iter(run.steps[0])): 0.2}  # 0.14 below its best before: unstable
        return run

    monkeypatch.setattr(study, "run_learning", run_learning)
    monkeypatch.setattr(study.warm_start, "write_warm_assets", lambda out, **kwargs: {})
    study.run_all(plan_path, tmp_path / "work")
    result = analysis.analyse(plan_path)
    assert result["arms"]["prime_grpo_ungated"]["learned"] == [1, 2, 3] and result["arms"]["grpo"]["learned"] == []
    assert result["arms"]["grpo"]["unstable"] == [1] and result["arms"]["prime_grpo_ungated"]["unstable"] == []
    assert result["primary"]["learned"] == {"counts": ["3/3", "0/3"], "fisher_p": pytest.approx(0.1)}
    assert result["primary"]["unstable"] == {"counts": ["0/3", "1/3"], "fisher_p": pytest.approx(1.0)}
    assert "learned 3/3 vs 0/3, Fisher p = 0.100" in analysis.pair_line(result["primary"])


def test_each_run_records_its_own_checkout_and_commit_and_waits_while_paused(plan_path, calls, tmp_path, monkeypatch):
    """The commit is read when each run starts (a checkout that moves between runs is seen), with the checkout's
    path and the digest of the warm start's weights; no run starts while the pause file exists."""
    commits = iter(f"{i:040d}" for i in range(100))
    monkeypatch.setattr(study, "source_commit", lambda: next(commits))
    pause = tmp_path / "pause"
    pause.touch()
    waited = []

    def sleep(seconds):
        waited.append(seconds)
        pause.unlink()

    monkeypatch.setattr(study.time, "sleep", sleep)
    model = tmp_path / "model"
    model.mkdir()
    (model / "model.safetensors").write_bytes(b"weights")
    monkeypatch.setattr(study.warm_start, "write_warm_assets", lambda out, **kwargs: {"model": model})
    study.run_all(plan_path, tmp_path / "work", pause_file=pause)
    assert len(waited) == 1 and len(calls) == len(PLAN["runs"])
    records = [json.loads(runs.run_file(plan_path, entry).read_text()) for entry in PLAN["runs"]]
    assert [record["commit"] for record in records] == [f"{i:040d}" for i in range(len(PLAN["runs"]))]
    assert {record["checkout"] for record in records} == {str(study.REPO)}
    assert {record["warm_start"] for record in records} == {hashlib.sha256(b"weights").hexdigest()[:16]}


RECORDED_PLANS = sorted((Path(study.__file__).parents[1] / "studies").rglob("plan.json"))


def test_every_recorded_plan_is_found():
    assert len(RECORDED_PLANS) >= 9  # a glob that finds nothing would pass every case below


@pytest.mark.parametrize("plan_path", RECORDED_PLANS, ids=lambda p: str(p.parent.relative_to(p.parents[2])))
def test_every_recorded_plan_still_resolves(plan_path):
    """Every module a registered plan names (its task `"module"`, each arm's `pkg://` reward and process-rewards
    functions, by their `.path=`/`.name=` overrides) loads as veRL loads it, and every reused run file exists: the
    plans keep running and analysing after the lab's moves."""
    from verl.utils.import_utils import load_extern_object

    plan = json.loads(plan_path.read_text())
    lab = runs.lab_module(plan["task"])
    arms = plan.get("arms", study.ARMS if lab is None else lab.ARMS)
    for entry in plan["runs"]:
        if "from" in entry:
            assert runs.run_file(plan_path, entry).is_file(), entry
            continue
        overrides = dict(o.split("=", 1) for o in [*plan["task"].get("overrides", []), *arms[entry["arm"]]] if "=" in o)
        for key, path in overrides.items():
            if key.endswith(".path") and path.startswith("pkg://"):
                name = overrides[key.removesuffix(".path") + ".name"]
                assert callable(load_extern_object(path, name)), (entry["arm"], path, name)
