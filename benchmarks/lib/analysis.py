"""A registered study's one analysis (`study analyse`): each run's endpoint, each arm's mean with its 95 % t
interval, the registered criteria (went off, learned, unstable), the primary pairs (difference with its 95 % Welch
interval, two-sided permutation p, Holm's or Bonferroni's adjustment over several), the secondary pairs and metrics,
and the guard. The plan's keys are described in `study`'s docstring."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks.lib.evidence import fisher_exact_p, mean_ci95, permutation_p, welch_ci95
from benchmarks.lib.runs import metric_by_step, run_file


def compare(by_arm: dict[str, dict[int, float]], first: str, second: str, counts: dict | None = None) -> dict:
    """The pair's difference of mean endpoints (Welch interval, permutation p); with `counts` ({criterion:
    {arm: seeds that met it}}), each criterion's share in both arms and Fisher's exact p."""
    a, b = list(by_arm[first].values()), list(by_arm[second].values())
    result = {
        "difference": f"{first} - {second}",
        "welch_ci95": welch_ci95(a, b),
        "permutation_p": permutation_p(a, b),
    }
    for criterion, seeds in (counts or {}).items():
        hits_a, hits_b = len(seeds.get(first, [])), len(seeds.get(second, []))
        result[criterion] = {
            "counts": [f"{hits_a}/{len(a)}", f"{hits_b}/{len(b)}"],
            "fisher_p": fisher_exact_p(hits_a, len(a), hits_b, len(b)),
        }
    return result


def adjusted(p_values: list[float], method: str) -> list[float]:
    """Family-wise adjusted p's, in the given order: `bonferroni` min(1, k·p); `holm` the step-down
    max over j ≤ rank of min(1, (k − j)·p_(j)) with p_(0) ≤ p_(1) ≤ ... (reject where adjusted p ≤ α)."""
    k = len(p_values)
    if method == "bonferroni":
        return [min(1.0, k * p) for p in p_values]
    if method != "holm":
        raise ValueError(f"unknown multiplicity adjustment {method!r}")
    result, running = [0.0] * k, 0.0
    for rank, index in enumerate(sorted(range(k), key=lambda i: p_values[i])):
        running = max(running, min(1.0, (k - rank) * p_values[index]))
        result[index] = running
    return result


def primary_pairs(plan: dict) -> list[list[str]]:
    """The plan's primary pairs: one `[first, second]`, or a list of them."""
    primary = plan["primary"]
    return [primary] if isinstance(primary[0], str) else primary


def went_off(record: dict) -> bool | None:
    """Did a run end below where it started (greedy validation at its last evaluation < at step 0)? None when it
    has no step-0 evaluation or no later one."""
    val = validations(record)
    if record["returncode"] != 0 or 0 not in val or len(val) < 2:
        return None
    return val[max(val)] < val[0]


def validations(record: dict) -> dict[int, float]:
    """A run's greedy validation accuracy by step."""
    return {int(step): value for step, value in record["val_accuracy"].items()}


def learned(record: dict, steps: list[int], above: float) -> bool:
    """Did a run's greedy validation exceed `above` at one of `steps`?"""
    val = validations(record)
    return any(val.get(step, -1.0) > above for step in steps)


def unstable(record: dict, drop: float) -> bool:
    """Did one of a run's evaluations fall at least `drop` below the best evaluation before it (step 0 included)?
    (Compared to 1e-9: accuracies are multiples of 1/n.)"""
    val = validations(record)
    best = None
    for step in sorted(val):
        if best is not None and val[step] <= best - drop + 1e-9:
            return True
        best = val[step] if best is None else max(best, val[step])
    return False


def endpoint(record: dict, steps: list[int], metric: str | None = None, task: dict | None = None) -> float | None:
    """The mean of a run's validation accuracies (or of `metric`, see `metric_by_step`) at `steps`; None when it
    failed or missed one of them."""
    if record["returncode"] != 0:
        return None
    val = metric_by_step(record, metric, task or {})
    if any(step not in val for step in steps):
        return None
    return sum(val[step] for step in steps) / len(steps)


def require_every_run(plan_path: Path, plan: dict) -> None:
    missing = [e for e in plan["runs"] if not run_file(plan_path, e).exists()]
    if missing:
        raise SystemExit(f"{len(missing)} planned runs have no result yet (first: {missing[0]}); run them first.")


def endpoints_by_arm(plan_path: Path, plan: dict, metric: str | None) -> tuple[dict[str, dict[int, float]], list]:
    """Each arm's endpoint by seed (of `metric`, None: accuracy), and the runs that failed (no endpoint)."""
    steps = [int(step) for step in plan["endpoint_steps"]]
    by_arm: dict[str, dict[int, float]] = {}
    failed = []
    for entry in plan["runs"]:
        record = json.loads(run_file(plan_path, entry).read_text())
        value = endpoint(record, steps, metric, plan["task"])
        if value is None:
            failed.append({"arm": entry["arm"], "seed": entry["seed"], "returncode": record["returncode"]})
        else:
            by_arm.setdefault(entry["arm"], {})[int(entry["seed"])] = value
    return by_arm, failed


def criteria_by_arm(plan_path: Path, plan: dict, by_arm: dict[str, dict[int, float]]) -> dict[str, dict[str, list]]:
    """The seeds, per arm, of the runs with an endpoint that met each registered criterion: `learned` (the plan's
    `learned_above`) and `unstable` (its `instability_drop`)."""
    steps = [int(step) for step in plan["endpoint_steps"]]
    tests = {}
    if "learned_above" in plan:
        tests["learned"] = lambda record: learned(record, steps, float(plan["learned_above"]))
    if "instability_drop" in plan:
        tests["unstable"] = lambda record: unstable(record, float(plan["instability_drop"]))
    counts: dict[str, dict[str, list]] = {name: {} for name in tests}
    for entry in plan["runs"]:
        arm, seed = entry["arm"], int(entry["seed"])
        if seed not in by_arm.get(arm, {}):
            continue
        record = json.loads(run_file(plan_path, entry).read_text())
        for name, test in tests.items():
            if test(record):
                counts[name].setdefault(arm, []).append(seed)
    return counts


def guarded_by_arm(plan_path: Path, plan: dict) -> dict[str, list[int]]:
    """The seeds, per arm, of the runs the plan's `guard` names: a run whose `guard["metric"]` (a metric of the
    plan's task, `metric_by_step`) fell below `guard["below"]` at one of the endpoint steps (for the planted task: a
    run that stopped writing the planted step, and so could "fix" it by leaving it out). Empty without a guard."""
    guard = plan.get("guard")
    if not guard:
        return {}
    steps = [int(step) for step in plan["endpoint_steps"]]
    seeds: dict[str, list[int]] = {}
    for entry in plan["runs"]:
        record = json.loads(run_file(plan_path, entry).read_text())
        values = metric_by_step(record, guard["metric"], plan["task"])
        if any(step in values and values[step] < float(guard["below"]) for step in steps):
            seeds.setdefault(entry["arm"], []).append(int(entry["seed"]))
    return seeds


def describe(plan: dict, metric: str | None) -> str:
    """What the endpoint of `metric` (None: accuracy) is, in words."""
    steps = [int(step) for step in plan["endpoint_steps"]]
    return f"mean {'greedy validation accuracy' if metric is None else metric} at steps {steps}"


def primary_tests(plan: dict, by_arm: dict[str, dict[int, float]], pairs: list[list[str]], counts=None) -> list[dict]:
    """`compare` for each primary pair, with the plan's `multiplicity` adjustment when it has one."""
    tests = [compare(by_arm, *pair, counts=counts) for pair in pairs]
    if "multiplicity" in plan:
        for test, p in zip(tests, adjusted([t["permutation_p"] for t in tests], plan["multiplicity"])):
            test[f"{plan['multiplicity']}_p"] = p
    return tests


def analyse(plan_path: Path) -> dict:
    plan = json.loads(plan_path.read_text())
    require_every_run(plan_path, plan)
    metric = plan.get("endpoint_metric")
    by_arm, failed = endpoints_by_arm(plan_path, plan, metric)
    off: dict[str, list[int]] = {}
    for entry in plan["runs"]:
        if went_off(json.loads(run_file(plan_path, entry).read_text())):
            off.setdefault(entry["arm"], []).append(int(entry["seed"]))
    arms = {
        arm: {"n": len(v), "mean_ci95": mean_ci95(list(v.values())), "by_seed": v, "went_off": off.get(arm, [])}
        for arm, v in by_arm.items()
    }
    counts = criteria_by_arm(plan_path, plan, by_arm)
    for criterion, seeds in counts.items():
        for arm, stats in arms.items():
            stats[criterion] = seeds.get(arm, [])
    pairs = primary_pairs(plan)
    tests = primary_tests(plan, by_arm, pairs, counts)
    result = {
        "endpoint": describe(plan, metric),
        "arms": arms,
        "failed_runs": failed,
        "primary": tests[0] if isinstance(plan["primary"][0], str) else tests,
    }
    guarded = guarded_by_arm(plan_path, plan)
    if "guard" in plan:
        for arm, stats in arms.items():
            stats["guarded"] = guarded.get(arm, [])
        kept = {
            arm: {s: v for s, v in by_seed.items() if s not in guarded.get(arm, [])} for arm, by_seed in by_arm.items()
        }
        result["guard"] = {**plan["guard"], "steps": plan["endpoint_steps"], "runs": guarded}
        result["primary_without_guarded"] = primary_tests(plan, kept, pairs)
    if plan.get("secondary"):
        result["secondary"] = [compare(by_arm, *pair, counts=counts) for pair in plan["secondary"]]
    if plan.get("secondary_metrics"):
        result["secondary_metrics"] = {}
        for name in plan["secondary_metrics"]:
            values, _ = endpoints_by_arm(plan_path, plan, name)
            result["secondary_metrics"][name] = {
                "endpoint": describe(plan, name),
                "arms": {arm: {"n": len(v), "mean_ci95": mean_ci95(list(v.values()))} for arm, v in values.items()},
                "pairs": [compare(values, *pair) for pair in [*pairs, *plan.get("secondary", [])]],
            }
    (plan_path.parent / "analysis.json").write_text(json.dumps(result, indent=1) + "\n")
    return result


def pair_line(pair: dict) -> str:
    """`first - second: diff [low, high] (Welch), p = ...` with any adjusted p."""
    diff, low, high = pair["welch_ci95"]
    extra = "".join(f", {key} = {value:.3f}" for key, value in pair.items() if key in ("holm_p", "bonferroni_p"))
    for criterion in ("learned", "unstable"):
        if criterion in pair:
            first, second = pair[criterion]["counts"]
            extra += f"; {criterion} {first} vs {second}, Fisher p = {pair[criterion]['fisher_p']:.3f}"
    return (
        f"{pair['difference']}: {diff:+.3f} [{low:+.3f}, {high:+.3f}] (Welch), p = {pair['permutation_p']:.3f}{extra}"
    )
