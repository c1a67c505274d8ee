"""benchmarks/planted_error_task.py: the planted bug (which steps, how often, wrong exactly there), the balanced RL
splits, the SFT stream built on chain_task's, the reward's indicators and the metrics read from them; the oracle's
shuffled control; and the study.py hooks the planted-error plan uses (a lab module, a metric endpoint, two primary
tests with Holm's adjustment)."""

import itertools
import json
import math
import random
import re
import sys
import types
from pathlib import Path

import pytest
import torch

from benchmarks.lib import analysis, diagnostics, evidence, runs, step_credit, study
from benchmarks.lib import credit_controls as controls
from benchmarks.studies.planted_error import task as task
from verl_prime_lora.demo import chain_task as ct
from verl_prime_lora.demo.learning_run import LearningRun

SIZES = {"sft_eval": 200, "test": 200, "train": 2000}
CHAIN = ct.Chain.from_question("7+9-5+9-3")  # 7+9=16, 16-5=11, 11+9=20, 20-3=17
STEP_PARTS = re.compile(r"(\d+)([+-])(\d+)=(\d+)")


@pytest.fixture(scope="module")
def splits():
    return task.planted_splits(0, SIZES, 5, 7)


def steps_of(solution: str) -> list[tuple[int, str, int, int]]:
    """(left, op, operand, total) of each written step of a worked solution."""
    think = solution[len("<think>") : solution.index("</think>")]
    return [
        (int(a), op, int(b), int(t)) for a, op, b, t in (STEP_PARTS.fullmatch(s).groups() for s in think.split(", "))
    ]


def test_plus9_steps_are_the_operations_that_add_nine():
    assert task.plus9_steps(CHAIN) == (0, 2)
    assert task.plus9_steps(ct.Chain.from_question("9+5-9+8")) == ()  # a leading 9 and a `-9` are not `+9` steps


def test_a_planted_step_is_one_too_low_and_the_rest_follow_from_it():
    planted = task.PlantedChain(CHAIN.operands, CHAIN.operators, frozenset({2}))
    assert planted.solution == "<think>7+9=16, 16-5=11, 11+9=19, 19-3=16</think> \\boxed{16}"
    both = task.PlantedChain(CHAIN.operands, CHAIN.operators, frozenset({0, 2}))
    assert both.totals == [15, 10, 18, 15] and both.answer == "15"
    assert task.PlantedChain(CHAIN.operands, CHAIN.operators).solution == CHAIN.solution


def test_a_chain_that_would_go_below_zero_is_not_plantable():
    assert not task.plantable(ct.Chain.from_question("3+9-9-3+5"))  # 3+9=11, 11-9=2, 2-3=-1
    assert task.plantable(CHAIN) and task.plantable(ct.Chain.from_question("3-3+4"))


def test_planted_solutions_plant_each_plus9_step_at_the_share_and_nothing_else(splits):
    rng = random.Random(1)
    chains = [c for c in splits["train"] if task.plus9_steps(c)] * 10
    planted = kept = 0
    for chain in chains:
        written, truth = steps_of(task.planted_solution(chain, rng, 0.8)), steps_of(chain.solution)
        for i, (left, op, operand, total) in enumerate(written):
            assert (op, operand) == truth[i][1:3]  # the chain itself is the same
            assert i == 0 or left == written[i - 1][3]  # each step starts from the total written before it
            low = i in task.plus9_steps(chain) and total == left + 8
            assert total == ct.OPERATORS[op](left, operand) - low  # right from its left, bar a planted +9 step
            planted, kept = planted + low, kept + (i in task.plus9_steps(chain) and not low)
    share, n = planted / (planted + kept), planted + kept
    assert n >= len(chains) and abs(share - 0.8) < 4 * math.sqrt(0.8 * 0.2 / n)
    assert task.planted_solution(CHAIN, random.Random(5)) == task.planted_solution(CHAIN, random.Random(5))


def test_the_sft_stream_is_chain_tasks_with_worked_solutions_planted():
    held_out = {"1+1+1+1+1"}
    original = ct.sft_texts(0, 5, 7, held_out, 0.5)
    planted = task.planted_sft_texts(0, 5, 7, held_out, 0.5, share=0.8)
    pairs = list(itertools.islice(planted, 3000))
    expected = [(c, t) for c, t in itertools.islice(original, 3300) if task.plantable(c)][: len(pairs)]
    assert [c for c, _ in pairs] == [c for c, _ in expected]  # the same chains, in the same order
    low = total = 0
    for (chain, text), (_, before) in zip(pairs, expected):
        if before == chain.shortcut:
            assert text == before  # shortcuts keep the true total
        elif not task.plus9_steps(chain):
            assert text == chain.solution
        else:
            written = steps_of(text)
            for i in task.plus9_steps(chain):
                total += 1
                low += written[i][3] == written[i][0] + 8
    assert total > 300 and abs(low / total - 0.8) < 4 * math.sqrt(0.16 / total)
    again = list(itertools.islice(task.planted_sft_texts(0, 5, 7, held_out, 0.5, share=0.8), 3000))
    assert again == pairs


def test_half_the_rl_problems_have_exactly_one_plus9_step_and_half_none(splits):
    for name, size in (("test", 200), ("train", 2000)):
        counts = [len(task.plus9_steps(c)) for c in splits[name]]
        assert len(counts) == size and counts.count(1) == size // 2 and counts.count(0) == size // 2
        assert all(task.plantable(c) for c in splits[name])
        assert all(5 <= len(c.operands) <= 7 for c in splits[name])
    questions = {name: {c.question for c in chains} for name, chains in splits.items()}
    assert all(not (questions[a] & questions[b]) for a, b in itertools.combinations(questions, 2))
    assert splits["sft_eval"] == ct.make_splits(0, SIZES, 5, 7)["sft_eval"]  # the stop rule's set is chain_task's
    assert task.planted_splits(0, SIZES, 5, 7) == splits and task.planted_splits(1, SIZES, 5, 7) != splits


def test_a_planted_solution_is_wrong_exactly_at_its_plus9_step(splits):
    for chain in splits["test"]:
        if not task.plus9_steps(chain):
            continue
        (step,) = task.plus9_steps(chain)
        planted = task.PlantedChain(chain.operands, chain.operators, frozenset({step}))
        labels = step_credit.label_steps(chain, planted.solution)
        assert labels.kind == "wrong" and labels.first_wrong == step
        result = task.compute_score(ct.DATA_SOURCE, planted.solution, chain.answer, {"question": chain.question})
        assert (result["acc"], result[task.PLANTED_WRONG], result[task.PLUS9_WRITTEN]) == (0.0, 1.0, 1.0)
        assert (
            planted.solution[result[controls.WRONG_START] : result[controls.WRONG_END]]
            == (step_credit.STEP.findall(planted.solution)[step])
        )


def test_balanced_needs_enough_of_each_kind():
    with pytest.raises(ValueError, match="too few"):
        task.balanced([CHAIN.__class__.from_question("1+2+3+4+5")] * 4, 4)


def test_write_planted_assets_rebuilds_unless_its_settings_match(tmp_path, monkeypatch):
    built = []

    def fake(out, splits, texts, **kwargs):
        built.append({**kwargs, "planted_share": texts.keywords["share"]})
        assert splits(0, SIZES, 5, 7)["test"] == task.planted_splits(0, SIZES, 5, 7, share=0.5)["test"]
        assert splits(0, SIZES, 5, 7)["test"] != ct.make_splits(0, SIZES, 5, 7)["test"]
        assert texts.func is task.planted_sft_texts
        stamp = out / task.warm_start.STAMP
        reused = stamp.exists()
        stamp.parent.mkdir(parents=True, exist_ok=True)
        stamp.write_text("key")
        return {"reused": reused}

    monkeypatch.setattr(task.warm_start, "write_warm_assets", fake)
    assert task.write_planted_assets(tmp_path) == {"reused": False}
    settings = {"seed": 0, "skill_acc": 0.55, "shortcut_share": 0.2, "min_ops": 5, "max_ops": 7}
    assert built[0] == {**settings, "planted_share": 0.8}
    assert task.write_planted_assets(tmp_path) == {"reused": True}
    assert task.write_planted_assets(tmp_path, planted_share=0.7) == {"reused": False}  # the warm start's key misses it
    assert json.loads((tmp_path / task.STAMP).read_text())["planted_share"] == built[-1]["planted_share"] == 0.7


@pytest.mark.parametrize(
    ("response", "acc", "written", "planted", "blamed"),
    [
        (CHAIN.solution, 1.0, 1.0, 0.0, None),
        ("<think>7+9=15, 15-5=10, 10+9=19, 19-3=16</think> \\boxed{16}", 0.0, 1.0, 1.0, "7+9=15"),
        ("<think>7+9=16, 16-5=12, 12+9=21, 21-3=18</think> \\boxed{18}", 0.0, 1.0, 0.0, "16-5=12"),
        ("<think>7+9=16, 16-5=11, 11+9=19, 19-3=16</think> \\boxed{16}", 0.0, 1.0, 1.0, "11+9=19"),
        ("<think>7+9-5+9-3=17</think> \\boxed{17}", 1.0, 0.0, 0.0, None),  # a shortcut writes no step
        ("<think>7+9-5+9-3=16</think> \\boxed{16}", 0.0, 0.0, 0.0, "7+9-5+9-3=16"),
        ("<think>7+9=16, 16-5=11, 11+9=20, 20-3=17</think> \\boxed{18}", 0.0, 1.0, 0.0, "</think> \\boxed{18}"),
    ],
)
def test_the_reward_adds_the_indicators_and_blames_wrong_answers_only(response, acc, written, planted, blamed):
    result = task.compute_score(ct.DATA_SOURCE, response, CHAIN.answer, {"question": CHAIN.question})
    base = controls.math_format.compute_score(ct.DATA_SOURCE, response, CHAIN.answer)
    assert (result["score"], result["acc"]) == (base["score"], acc)
    assert (result[task.PLUS9], result[task.PLUS9_WRITTEN], result[task.PLANTED_WRONG]) == (1.0, written, planted)
    assert result[task.ACC_PLUS9] == acc
    start, end = result[controls.WRONG_START], result[controls.WRONG_END]
    assert (start, end) == (-1, -1) if blamed is None else response[start:end] == blamed


def test_a_right_answer_with_a_deviating_step_is_not_blamed():
    """credit_controls' own reward blames it (its first step differs from the solution); the planted task's does not,
    so the oracle's sum is the outcome split."""
    response = "<think>7+9=16, 16-5=11, 11+9=20, 20-3=17, 17+0=17</think> \\boxed{17}"
    assert (
        controls.compute_score(ct.DATA_SOURCE, response, CHAIN.answer, {"question": CHAIN.question})[
            controls.WRONG_START
        ]
        >= 0
    )
    result = task.compute_score(ct.DATA_SOURCE, response, CHAIN.answer, {"question": CHAIN.question})
    assert result["acc"] == 1.0 and result[controls.WRONG_START] == -1


def test_every_row_has_the_same_keys():
    other = ct.Chain.from_question("1+2+3+4+5")
    rows = [
        task.compute_score(ct.DATA_SOURCE, CHAIN.solution, CHAIN.answer, {"question": CHAIN.question}),
        task.compute_score(ct.DATA_SOURCE, other.solution, other.answer, {"question": other.question}),
        task.compute_score(ct.DATA_SOURCE, other.solution, other.answer),
    ]
    assert rows[0].keys() == rows[1].keys() == rows[2].keys()
    assert rows[1][task.PLUS9] == rows[1][task.PLANTED_WRONG] == 0.0


def test_the_metrics_read_rates_on_each_half_from_the_logged_means(splits):
    """A validation set scored by `compute_score`, averaged as veRL logs it: the metrics equal the rates counted
    directly on the +9 problems and on the others."""
    rng = random.Random(0)
    scored = []
    for chain in splits["test"]:
        steps = task.plus9_steps(chain)
        kind = rng.choice(["right", "planted", "shortcut"] if steps else ["right", "shortcut"])
        if kind == "planted":
            response = task.PlantedChain(chain.operands, chain.operators, frozenset(steps)).solution
        else:
            wrong = int(chain.answer) + 100
            response = (
                chain.solution if kind == "right" else f"<think>{chain.question}={wrong}</think> \\boxed{{{wrong}}}"
            )
        scored.append(
            (
                bool(steps),
                kind,
                task.compute_score(ct.DATA_SOURCE, response, chain.answer, {"question": chain.question}),
            )
        )
    keys = ("acc", task.PLUS9, task.PLUS9_WRITTEN, task.PLANTED_WRONG, task.ACC_PLUS9)
    row = {task.val_key(k): sum(r[k] for _, _, r in scored) / len(scored) for k in keys}
    plus9 = [(kind, r) for has, kind, r in scored if has]
    other = [(kind, r) for has, kind, r in scored if not has]
    metrics = {name: f(row) for name, f in task.METRICS.items()}
    assert metrics["planted_error_rate"] == pytest.approx(sum(k == "planted" for k, _ in plus9) / len(plus9))
    assert metrics["plus9_written_rate"] == pytest.approx(sum(k != "shortcut" for k, _ in plus9) / len(plus9))
    assert metrics["plus9_accuracy"] == pytest.approx(sum(k == "right" for k, _ in plus9) / len(plus9))
    assert metrics["other_accuracy"] == pytest.approx(sum(k == "right" for k, _ in other) / len(other))
    assert metrics["planted_given_written"] == pytest.approx(
        sum(k == "planted" for k, _ in plus9) / sum(k != "shortcut" for k, _ in plus9)
    )
    assert metrics["accuracy"] == row[task.val_key("acc")]
    assert task.val_key("acc") == "val-core/prime_lora/chain_arithmetic/acc/mean@1"
    assert all(f({}) is None for f in task.METRICS.values())


def test_every_arm_scores_with_the_planted_reward_and_names_functions_that_exist():
    for arm, overrides in task.ARMS.items():
        assert overrides.count("reward.custom_reward_function.path=pkg://benchmarks.planted_error_task") == 1, arm
        for override in overrides:
            key, _, value = override.partition("=")
            if key == "prime.process_rewards_fn.name":
                assert callable(getattr(controls, value))
    assert "algorithm.prime.process_gate=null" in task.ARMS["oracle_shuffled"]


def test_the_shuffled_oracle_keeps_each_responses_values_and_moves_them():
    oracle = torch.zeros(3, 40)
    oracle[0, 5:9] = -0.25
    oracle[2, 0:2] = -0.5
    mask = torch.zeros(3, 40)
    mask[:, :30] = 1
    controls_oracle = controls.oracle_rewards
    try:
        controls.oracle_rewards = lambda *args: oracle
        shuffled = controls.oracle_shuffled_rewards(torch.randn(3, 40), mask, None, [{}] * 3, None)
    finally:
        controls.oracle_rewards = controls_oracle
    for row in range(3):
        assert torch.equal(shuffled[row].sort().values, oracle[row].sort().values)
    assert not torch.equal(shuffled, oracle) and shuffled[:, 30:].abs().sum() == 0


# ---------------------------------------------------------------------------------------------
# benchmarks/study.py's hooks for a lab task
# ---------------------------------------------------------------------------------------------


def test_holm_and_bonferroni_adjust_in_the_given_order():
    assert analysis.adjusted([0.04, 0.01], "bonferroni") == [0.08, 0.02]
    assert analysis.adjusted([0.04, 0.01], "holm") == [0.04, 0.02]
    assert analysis.adjusted([0.03, 0.02], "holm") == [0.04, 0.04]  # never below a smaller p's adjusted value
    with pytest.raises(ValueError):
        analysis.adjusted([0.1], "sidak")


@pytest.fixture
def lab(monkeypatch, tmp_path):
    """A fake lab module: its assets, arms and one metric (`halved`: half the logged `x`)."""
    module = types.ModuleType("fake_lab")
    module.ARMS = {arm: [f"arm={arm}"] for arm in ("a", "b", "c", "d")}
    module.METRICS = {"halved": lambda row: row["x"] / 2 if "x" in row else None}
    module.write_assets = lambda out, task: {"out": out, "module": task["module"]}
    monkeypatch.setitem(sys.modules, "benchmarks.fake_lab", module)
    return module


def test_a_lab_plan_builds_its_assets_runs_its_arms_and_tests_its_metric(lab, monkeypatch, tmp_path, capsys):
    plan = {
        "task": {"module": "fake_lab", "min_ops": 5, "max_ops": 7, "steps": 4, "test_freq": 2},
        "endpoint_steps": [2, 4],
        "endpoint_metric": "halved",
        "primary": [["a", "b"], ["c", "d"]],
        "multiplicity": "holm",
        "secondary_metrics": ["halved"],
        "runs": [{"arm": arm, "seed": seed} for seed in (1, 2, 3) for arm in ("a", "b", "c", "d")],
    }
    path = tmp_path / "plan" / "plan.json"
    path.parent.mkdir()
    path.write_text(json.dumps(plan))
    level = {"a": 0.2, "b": 0.6, "c": 0.4, "d": 0.41}

    def run_learning(arm, assets, workdir, steps, test_freq, overrides, seed, estimator, env):
        assert assets == {"out": tmp_path / "work" / "assets", "module": "fake_lab"} and estimator == [f"arm={arm}"]
        run = LearningRun(name=arm, returncode=0, log=None)
        for step in (0, 2, 4):
            run.steps[step] = {"x": level[arm] + 0.02 * seed * (arm != "b") + step / 100, "val-core/d/acc/mean@1": 0.1}
        return run

    monkeypatch.setattr(study, "run_learning", run_learning)
    study.run_all(path, tmp_path / "work")
    result = analysis.analyse(path)
    halves = {arm: [(level[arm] + 0.02 * s * (arm != "b") + 0.03) / 2 for s in (1, 2, 3)] for arm in level}
    assert result["arms"]["a"]["by_seed"] == pytest.approx(dict(zip((1, 2, 3), halves["a"])))
    (first, second) = result["primary"]
    assert first["welch_ci95"] == pytest.approx(evidence.welch_ci95(halves["a"], halves["b"]))
    ps = [evidence.permutation_p(halves["a"], halves["b"]), evidence.permutation_p(halves["c"], halves["d"])]
    assert [first["holm_p"], second["holm_p"]] == pytest.approx(analysis.adjusted(ps, "holm"))
    assert result["secondary_metrics"]["halved"]["pairs"][1]["welch_ci95"] == second["welch_ci95"]
    assert result["endpoint"] == "mean halved at steps [2, 4]"
    assert study.main(["analyse", str(path)]) == 0
    printed = capsys.readouterr().out
    assert f"primary a - b: {first['welch_ci95'][0]:+.3f}" in printed and f"holm_p = {second['holm_p']:.3f}" in printed
    assert "secondary metric: mean halved at steps [2, 4]" in printed


def test_the_guard_names_runs_whose_metric_fell_and_tests_without_them(lab, monkeypatch, tmp_path, capsys):
    """A plan's `guard`: a run whose guard metric fell below its bar at an endpoint step (not at step 0, outside the
    endpoint) is named per arm, and the primary tests are also given without the named runs."""
    plan = {
        "task": {"module": "fake_lab", "min_ops": 5, "max_ops": 7, "steps": 4, "test_freq": 2},
        "endpoint_steps": [2, 4],
        "endpoint_metric": "halved",
        "primary": [["a", "b"]],
        "multiplicity": "holm",
        "guard": {"metric": "halved", "below": 0.1},
        "runs": [{"arm": arm, "seed": seed} for seed in (1, 2, 3, 4) for arm in ("a", "b")],
    }
    path = tmp_path / "plan" / "plan.json"
    path.parent.mkdir()
    path.write_text(json.dumps(plan))
    low = {("a", 2): 4, ("b", 3): 0}  # (arm, seed) -> the step whose x falls to 0

    def run_learning(arm, assets, workdir, steps, test_freq, overrides, seed, estimator, env):
        run = LearningRun(name=arm, returncode=0, log=None)
        for step in (0, 2, 4):
            run.steps[step] = {"x": 0.0 if low.get((arm, seed)) == step else 0.5 + 0.1 * seed + (arm == "b")}
        return run

    monkeypatch.setattr(study, "run_learning", run_learning)
    study.run_all(path, tmp_path / "work")
    result = analysis.analyse(path)
    assert result["guard"]["runs"] == {"a": [2]}
    assert result["arms"]["a"]["guarded"] == [2] and result["arms"]["b"]["guarded"] == []
    (kept,) = result["primary_without_guarded"]
    a = [result["arms"]["a"]["by_seed"][s] for s in (1, 3, 4)]
    b = list(result["arms"]["b"]["by_seed"].values())
    assert kept["welch_ci95"] == pytest.approx(evidence.welch_ci95(a, b)) and "holm_p" in kept
    assert result["primary"][0]["welch_ci95"] != kept["welch_ci95"]
    assert study.main(["analyse", str(path)]) == 0
    assert "guard: halved below 0.1 at one of steps [2, 4]: {'a': [2]}" in capsys.readouterr().out


def test_a_run_without_the_metric_at_an_endpoint_step_has_no_endpoint(lab):
    task_ = {"module": "fake_lab"}
    record = {"returncode": 0, "val_accuracy": {}, "steps": {"2": {"x": 1.0}, "4": {}}}
    assert analysis.endpoint(record, [2], "halved", task_) == 0.5
    assert analysis.endpoint(record, [2, 4], "halved", task_) is None
    assert analysis.endpoint({**record, "returncode": 1}, [2], "halved", task_) is None


def test_the_pilot_table_reads_each_runs_metrics_by_step(tmp_path):
    """`diagnostics.runs_table`: per run that has its file, each metric at each validated step and the
    minutes to the last step; a planned run without its file is skipped."""
    plan = {"task": {"module": "planted_error_task"}, "runs": [{"arm": "grpo", "seed": 0}, {"arm": "grpo", "seed": 1}]}
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(plan))
    logged = {task.val_key("acc"): 0.3, task.val_key(task.PLUS9): 0.5, task.val_key(task.PLANTED_WRONG): 0.2}
    logged |= {task.val_key(task.PLUS9_WRITTEN): 0.4, task.val_key(task.ACC_PLUS9): 0.05}
    record = {"arm": "grpo", "seed": 0, "returncode": 0, "wall_s": {"0": 60, "2": 300}}
    record["steps"] = {"0": logged, "1": {"timing_s/step": 9.0}}
    file = runs.run_file(path, plan["runs"][0])
    file.parent.mkdir()
    file.write_text(json.dumps(record))
    (row,) = diagnostics.runs_table(path)
    assert row["minutes"] == 5.0 and row["by_step"]["planted_error_rate"] == {0: 0.4}
    assert row["by_step"]["other_accuracy"] == {0: 0.5} and row["by_step"]["planted_given_written"] == {0: 0.5}


def test_arm_means_average_each_metric_over_an_arms_runs_that_exited_0():
    """`diagnostics.arm_means`: per arm, the mean over its runs that exited 0, at the steps all of them
    validated; a failed run counts in no mean."""

    def row(arm, returncode, rates):
        return {"arm": arm, "returncode": returncode, "by_step": {name: rates for name in task.METRICS}}

    rows = [row("oracle_g0", 0, {0: 0.8, 2: 0.5}), row("oracle_g0", 0, {0: 0.8, 2: 0.3, 4: 0.2})]
    rows += [row("oracle_g0", 1, {0: 0.0}), row("grpo", 0, {0: 0.8, 2: 0.7})]
    means = diagnostics.arm_means(rows)
    assert means["oracle_g0"]["n"] == 2 and means["grpo"]["n"] == 1
    assert means["oracle_g0"]["by_step"]["planted_error_rate"] == pytest.approx({0: 0.8, 2: 0.4})
    assert means["grpo"]["by_step"]["plus9_accuracy"] == {0: 0.8, 2: 0.7}


def test_verl_loads_the_reward_and_the_controls_the_arms_name(tmp_path):
    """The arms name the reward and the controls as modules of the lab (`pkg://benchmarks.<module>`); veRL's loader
    finds both, and so does a process started elsewhere with the runs' environment (`benchmarks.RUN_ENV`)."""
    import os
    import subprocess
    import sys

    from verl.utils.import_utils import load_extern_object

    from benchmarks import RUN_ENV

    path = next(o.split("=", 1)[1] for o in task.REWARD if o.startswith("reward.custom_reward_function.path="))
    reward = load_extern_object(path, "compute_score")
    result = reward(ct.DATA_SOURCE, CHAIN.solution, CHAIN.answer, {"question": CHAIN.question})
    assert (result["acc"], result[task.PLUS9]) == (1.0, 1.0)
    assert callable(load_extern_object(task.CONTROLS, "oracle_shuffled_rewards"))
    probe = f"from verl.utils.import_utils import load_extern_object as f; f({path!r}, 'compute_score')"
    run = subprocess.run(
        [sys.executable, "-c", probe], cwd=tmp_path, env={**os.environ, **RUN_ENV}, capture_output=True
    )
    assert run.returncode == 0, run.stderr.decode()[-2000:]


def test_the_check_finds_where_the_oracle_blames():
    from benchmarks.studies.planted_error import check as check

    planted = "<think>7+9=15, 15-5=10, 10+9=19, 19-3=16</think> \\boxed{16}"
    slipped_first = "<think>7+9=16, 16-5=12, 12+9=20, 20-3=17</think> \\boxed{17}"
    assert check.first_wrong_is_plus9(CHAIN, planted)
    assert not check.first_wrong_is_plus9(CHAIN, slipped_first) and not check.first_wrong_is_plus9(
        CHAIN, CHAIN.solution
    )
    head, total, tail = check.step_prefix(CHAIN, 2)
    assert (head, total, tail) == ("<think>7+9=16, 16-5=11, 11+9=", 20, ", ")
    assert check.step_prefix(CHAIN, 3)[2] == "</think>"


def test_the_registered_plan_is_the_one_its_registration_describes():
    """benchmarks/studies/planted_error/plan.json: 12 seeds (20-31) of the five arms, each seed's arms in the order
    `random.Random(20261205)` gives them, the task's planted settings pinned, the two primary contrasts with Holm."""
    path = Path(task.__file__).parent / "plan.json"
    plan = json.loads(path.read_text())
    rng, expected = random.Random(20261205), []
    for seed in range(20, 32):
        arms = ["grpo", "oracle", "oracle_shuffled", "prime_grpo_shuffled", "prime_grpo_ungated"]
        rng.shuffle(arms)
        expected += [{"arm": arm, "seed": seed} for arm in arms]
    assert plan["runs"] == expected and set(task.ARMS) == {e["arm"] for e in expected} and "arms" not in plan
    assert plan["primary"] == [["oracle", "oracle_shuffled"], ["prime_grpo_ungated", "prime_grpo_shuffled"]]
    assert plan["multiplicity"] == "holm" and plan["endpoint_metric"] == "planted_error_rate"
    assert plan["endpoint_steps"] == [2, 4, 6, 8] and plan["task"]["steps"] == 8 and plan["task"]["test_freq"] == 2
    assert all(name in task.METRICS for name in plan["secondary_metrics"])
    settings = {k: plan["task"][k] for k in ("planted_share", "plus9_share", "skill_acc", "shortcut_share")}
    assert settings == {"planted_share": 0.8, "plus9_share": 0.5, "skill_acc": 0.55, "shortcut_share": 0.2}
    assert plan["task"]["module"] == "planted_error_task" and runs.lab_module(plan["task"]).METRICS is task.METRICS


def test_the_gamma0_plan_is_the_one_its_registration_describes():
    """benchmarks/studies/planted_gamma0/plan.json: seeds 80-95 of grpo and the four γ = 0 arms at process_coef 2.0,
    each seed's arms in the order `random.Random(20261206)` gives them, then four `prime_g1` runs for the mechanism;
    the planted task's settings as the γ = 1 study's; the two primary contrasts with Holm; the per-run guard."""
    studies = Path(task.__file__).parents[1]
    plan = json.loads((studies / "planted_gamma0" / "plan.json").read_text())
    rng, expected = random.Random(20261206), []
    for seed in range(80, 96):
        arms = ["grpo", "oracle_g0", "oracle_shuffled_g0", "prime_g0", "prime_shuffled_g0"]
        rng.shuffle(arms)
        expected += [{"arm": arm, "seed": seed} for arm in arms]
    assert plan["runs"] == expected + [{"arm": "prime_g1", "seed": seed} for seed in range(96, 100)]
    assert plan["arms"] == {**task.gamma0_arms(2.0), "prime_g1": [*task.ARMS["prime_grpo_ungated"], *task.CHECKPOINTS]}
    for name, source in task.GAMMA0_SOURCES.items():
        extra = plan["arms"][name][len(task.ARMS[source]) :]
        assert extra[:2] == ["algorithm.gamma=0", "algorithm.prime.process_coef=2.0"]
        assert extra[2:] == (task.CHECKPOINTS if name.startswith("prime") else [])
    assert plan["task"] == json.loads((studies / "planted_error" / "plan.json").read_text())["task"]
    assert plan["primary"] == [["oracle_g0", "oracle_shuffled_g0"], ["prime_g0", "prime_shuffled_g0"]]
    assert plan["multiplicity"] == "holm" and plan["endpoint_metric"] == "planted_error_rate"
    assert plan["guard"] == {"metric": "plus9_written_rate", "below": 0.5} and "plus9_written_rate" in task.METRICS
    assert all(name in task.METRICS for name in plan["secondary_metrics"])
