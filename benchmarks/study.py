"""A pre-registered comparison of learning arms: its runs in the registered order, then its one analysis.

The plan (a JSON file committed with its pre-registration, before any run) fixes the task, the arms, the run
order and the endpoint:

    {"task": {"min_ops": 5, "max_ops": 7, "steps": 8, "test_freq": 2, "overrides": ["data.max_response_length=96"],
              "recipes": ["prime_lora_colocated", "cpu"]},   # optional: the +recipe=[...] list (default: the demo's)
     "arms": {"grpo": ["algorithm.adv_estimator=grpo", ...]},  # optional: each arm's overrides (default: learning.ARMS)
     "endpoint_steps": [4, 6, 8],          # the endpoint: mean greedy validation accuracy over these evaluations
     "primary": ["prime_grpo_ungated", "grpo"],   # the one test: first arm minus second
     "secondary": [["prime_grpo_ungated", "prime_grpo_shuffled"]],   # optional: further pairs, reported as such
     "runs": [{"arm": "grpo", "seed": 3}, {"arm": "prime_grpo_ungated", "seed": 3}, ...]}

A run entry with `"from": "<path relative to the plan>"` is an earlier study's run reused as it is (named in the
pre-registration); `run` never starts it and `analyse` reads it from there.

A plan for a lab task other than chain_task's names its module in `task` (`"module": "planted_error_task"`, a file of
`benchmarks/`). The module supplies `write_assets(out, task)` (the warm start and data, instead of
`warm_start.write_warm_assets`), `ARMS` (the arms' overrides when the plan has no `arms`) and `METRICS` (name ->
function of one logged step's metrics). Such a plan may then set, besides the keys above:

     "endpoint_metric": "planted_error_rate",   # the endpoint: mean over `endpoint_steps` of this metric, not accuracy
     "primary": [["oracle", "oracle_shuffled"], ["prime_grpo_ungated", "prime_grpo_shuffled"]],  # several tests
     "multiplicity": "holm",               # their permutation p's adjusted by Holm's step-down (or "bonferroni")
     "secondary_metrics": ["plus9_accuracy", "accuracy"],  # each arm's endpoint and every pair's test on these too
     "guard": {"metric": "plus9_written_rate", "below": 0.5}   # runs where it fell below at an endpoint step are
                                                           # named, and the primary tests also run without them

A plan may also register, for every arm and for every tested pair:

     "learned_above": 0.15,     # a run learned: a validation above this at one of the endpoint steps (Fisher's test)
     "instability_drop": 0.05   # a run was unstable: an evaluation this far below the best one before it

    python -m benchmarks.study run PLAN [--work DIR] [--jobs N] [--pause-file F]   # every run not yet in, in order
    python -m benchmarks.study analyse PLAN              # once every run is in: the test, written and printed

`run` writes each finished run to `runs/<arm>_seed<seed>.json` beside the plan (its validation per step, its
wall clock, its exit code, and the checkout, commit and start time of that run, read when it starts) and can be
stopped and restarted: a run already written is not run again. `--jobs 2` keeps two runs going at once, started
in the plan's order. `--pause-file F`: while F exists no further run starts (the one going finishes), so that the
machine can be freed between runs. The warm start and checkpoints go to `--work` (default
`benchmarks/out/<plan folder name>`).
`analyse` refuses to run before every planned run has its file, and writes `analysis.json`: each run's
endpoint, each arm's mean with its 95 % t interval and its count of runs that went off (greedy validation at
the last step below that at step 0), and for the primary pair the difference with its 95 % Welch interval and a
two-sided permutation p (`evidence`). A run that failed (exit code ≠ 0, or an endpoint
evaluation missing) is reported and kept out, never rerun by hand.

    python -m benchmarks.study mechanism PLAN [--learned-above X] [--baseline ARM]

`mechanism` (not part of any registered test; also only once every run is in) prints, per arm, over the runs that
exited 0: how many learned (a validation above X at one of the endpoint steps), the step time (the median over runs
of each run's median `timing_s/step` over steps 2 to the last, and the mean over runs of its total over steps 1 to
the last, each also as a ratio to the baseline arm's, by default the primary pair's second), and the mean over runs
of each run's mean over steps 1 to the last of the training diagnostics in `MECHANISM_METRICS` a run logged, with
the range of the runs' means.
"""

from __future__ import annotations

import argparse
import datetime
import importlib
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from benchmarks import REPO, RUN_ENV
from benchmarks.evidence import fisher_exact_p, mean_ci95, permutation_p, welch_ci95
from benchmarks.learning import ARMS
from verl_prime_lora.demo import warm_start
from verl_prime_lora.demo.learning_run import run_learning


def run_file(plan_path: Path, entry: dict) -> Path:
    """Where the result of the plan's run `entry` is (or goes)."""
    if "from" in entry:
        return plan_path.parent / entry["from"]
    return plan_path.parent / "runs" / f"{entry['arm']}_seed{int(entry['seed'])}.json"


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


def lab_module(task: dict):
    """The lab task's module `task["module"]` (a file of `benchmarks/`), or None for chain_task's own task."""
    return importlib.import_module(f"benchmarks.{task['module']}") if "module" in task else None


def metric_by_step(record: dict, metric: str | None, task: dict) -> dict[int, float]:
    """A run's value of `metric` (a name in the task module's `METRICS`) at each step that logged it; None: its
    greedy validation accuracy (`val_accuracy`)."""
    if metric is None:
        return {int(step): value for step, value in record["val_accuracy"].items()}
    function = lab_module(task).METRICS[metric]
    values = {int(step): function(row) for step, row in record.get("steps", {}).items()}
    return {step: value for step, value in values.items() if value is not None}


def measured(command: str, measure: Callable[[], dict]) -> dict:
    """`measure()`'s result after what made it: `command`, the commit (`source_commit`), the UTC start, the seconds."""
    started = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    clock = time.perf_counter()
    result = measure()
    seconds = round(time.perf_counter() - clock, 1)
    return {"command": command, "commit": source_commit(), "started": started, "seconds": seconds, **result}


def source_commit() -> str:
    """The commit the runs come from (`+dirty` when the checkout has uncommitted changes)."""

    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True).stdout.strip()

    return git("rev-parse", "HEAD") + ("+dirty" if git("status", "--porcelain", "--untracked-files=no") else "")


def wait_while(pause_file: Path | None, poll_s: float = 10.0) -> None:
    """Block while `pause_file` exists (None: never)."""
    announced = False
    while pause_file is not None and pause_file.exists():
        if not announced:
            print(f"-- paused while {pause_file} exists", flush=True)
            announced = True
        time.sleep(poll_s)


def run_all(plan_path: Path, work: Path, jobs: int = 1, pause_file: Path | None = None) -> int:
    plan = json.loads(plan_path.read_text())
    task = plan["task"]
    lab = lab_module(task)
    arms = plan.get("arms", ARMS if lab is None else lab.ARMS)
    recipes = {"recipes": tuple(task["recipes"])} if "recipes" in task else {}
    if lab is None:
        assets = warm_start.write_warm_assets(work / "assets", seed=0, min_ops=task["min_ops"], max_ops=task["max_ops"])
    else:
        assets = lab.write_assets(work / "assets", task)

    def one(index: int, entry: dict) -> None:
        arm, seed = entry["arm"], int(entry["seed"])
        wait_while(pause_file)
        commit = source_commit()
        print(f"== run {index + 1}/{len(plan['runs'])}: {arm}, seed {seed} ({commit[:12]})", flush=True)
        started = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
        run = run_learning(
            arm,
            assets,
            work / f"{arm}_seed{seed}",
            task["steps"],
            task["test_freq"],
            overrides=list(task.get("overrides", [])),
            seed=seed,
            estimator=arms[arm],
            env=RUN_ENV,
            **recipes,
        )
        path = run_file(plan_path, entry)
        path.parent.mkdir(parents=True, exist_ok=True)
        record = {
            "arm": arm,
            "seed": seed,
            "order": index,
            "checkout": str(REPO),
            "commit": commit,
            "started": started,
            "returncode": run.returncode,
            "val_accuracy": dict(run.val_accuracy()),
            "wall_s": run.wall,
            "steps": run.steps,
        }
        path.write_text(json.dumps(record, indent=1) + "\n")

    todo = [(i, e) for i, e in enumerate(plan["runs"]) if "from" not in e and not run_file(plan_path, e).exists()]
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        for future in [pool.submit(one, index, entry) for index, entry in todo]:
            future.result()
    return 0


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


MECHANISM_METRICS = (
    "prm/dpo_acc_before_mixed",  # the PRM's ranking of the step's responses before it trains on them (½: chance)
    "prm/process_group_std/mean",  # σ_g(z), mean over groups
    "prm/process_groups_on",  # share of groups whose σ_g(z) reaches the std threshold
    "prm/process_gate",  # the gate's weight w
    "prm/advantage/process_abs_mean",  # mean |A| per token of the process part that reached the actor
    "prm/advantage/outcome_abs_mean",  # and of the outcome part
    "actor/grad_norm",
)


def mechanism(
    plan_path: Path, learned_above: float | None = None, baseline: str | None = None, metrics=MECHANISM_METRICS
) -> dict:
    """Per arm, over the plan's runs that exited 0: runs that learned, step time, training diagnostics (see the
    module's docstring). Means over a run's steps 1 to the plan's last step."""
    plan = json.loads(plan_path.read_text())
    require_every_run(plan_path, plan)
    last = int(plan["task"]["steps"])
    endpoint_steps = [int(step) for step in plan["endpoint_steps"]]
    baseline = baseline or primary_pairs(plan)[0][1]
    by_arm: dict[str, list[dict]] = {}
    failed = []
    for entry in plan["runs"]:
        record = json.loads(run_file(plan_path, entry).read_text())
        if record["returncode"] != 0:
            failed.append({"arm": entry["arm"], "seed": entry["seed"], "returncode": record["returncode"]})
        else:
            by_arm.setdefault(entry["arm"], []).append(record)

    def per_step(record: dict, key: str, first: int) -> list[float]:
        rows = record.get("steps", {})
        return [rows[str(s)][key] for s in range(first, last + 1) if key in rows.get(str(s), {})]

    arms = {}
    for arm, records in by_arm.items():
        stats: dict = {"n": len(records)}
        if learned_above is not None:
            stats["learned"] = sum(learned(r, endpoint_steps, learned_above) for r in records)
        medians = [statistics.median(v) for r in records if (v := per_step(r, "timing_s/step", 2))]
        totals = [sum(v) for r in records if (v := per_step(r, "timing_s/step", 1))]
        if medians:
            stats["step_s"] = {
                "median": statistics.median(medians),
                "run_medians_range": [min(medians), max(medians)],
                "total_mean": statistics.mean(totals),
            }
        means = {}
        for key in metrics:
            run_means = [statistics.mean(v) for r in records if (v := per_step(r, key, 1))]
            if run_means:
                means[key] = {"mean": statistics.mean(run_means), "runs_range": [min(run_means), max(run_means)]}
        stats["metrics"] = means
        arms[arm] = stats
    base = arms.get(baseline, {}).get("step_s")
    for arm, stats in arms.items():
        if base and "step_s" in stats and arm != baseline:
            stats["step_s"]["vs_baseline"] = {
                "by_median": stats["step_s"]["median"] / base["median"],
                "by_total": stats["step_s"]["total_mean"] / base["total_mean"],
            }
    return {
        "learned": None if learned_above is None else f"a validation above {learned_above} at steps {endpoint_steps}",
        "steps": [1, last],
        "baseline": baseline,
        "arms": arms,
        "failed_runs": failed,
    }


def print_mechanism(result: dict) -> None:
    first, last = result["steps"]
    for arm, stats in result["arms"].items():
        line = f"{arm}: {stats['n']} runs"
        if result["learned"] is not None:
            line += f"; learned ({result['learned']}): {stats['learned']} of {stats['n']}"
        print(line)
        if "step_s" in stats:
            step = stats["step_s"]
            low, high = step["run_medians_range"]
            line = (
                f"  s/step: median {step['median']:.2f} (runs {low:.1f}-{high:.1f}, steps {first + 1}-{last}), "
                f"total {step['total_mean']:.1f} s (steps {first}-{last}, mean over runs)"
            )
            if "vs_baseline" in step:
                ratio = step["vs_baseline"]
                line += (
                    f"; vs {result['baseline']}: {ratio['by_median']:.2f}x by median, {ratio['by_total']:.2f}x by total"
                )
            print(line)
        for key, value in stats["metrics"].items():
            low, high = value["runs_range"]
            print(f"  {key}: {value['mean']:.3f} (runs {low:.3f}-{high:.3f}; steps {first}-{last})")
    if result["failed_runs"]:
        print(f"failed runs, kept out: {result['failed_runs']}")


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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=["run", "analyse", "mechanism"])
    parser.add_argument("plan", type=Path)
    parser.add_argument("--work", type=Path, help="warm start and checkpoints (default benchmarks/out/<plan folder>)")
    parser.add_argument("--jobs", type=int, default=1, help="runs at once (each a main_ppo of its own)")
    parser.add_argument("--learned-above", type=float, help="mechanism: count runs with a validation above this")
    parser.add_argument("--baseline", help="mechanism: the arm step times are compared with (default: primary's 2nd)")
    parser.add_argument("--pause-file", type=Path, help="run: no run starts while this file exists")
    args = parser.parse_args(argv)
    plan = args.plan.resolve()
    if args.action == "run":
        work = (args.work or Path("benchmarks/out") / plan.parent.name).resolve()
        return run_all(plan, work, args.jobs, args.pause_file)
    if args.action == "mechanism":
        print_mechanism(mechanism(plan, args.learned_above, args.baseline))
        return 0
    result = analyse(plan)
    for arm, stats in result["arms"].items():
        mean, low, high = stats["mean_ci95"]
        line = f"{arm:>22}: {mean:.3f} [{low:.3f}, {high:.3f}] over {stats['n']} seeds"
        for criterion in ("learned", "unstable"):
            if criterion in stats:
                line += f"; {criterion}: {len(stats[criterion])} (seeds {stats[criterion]})"
        if "learned" not in stats:
            line += f"; went off: {len(stats['went_off'])} (seeds {stats['went_off']})"
        print(line)
    primary = result["primary"] if isinstance(result["primary"], list) else [result["primary"]]
    print(f"endpoint: {result['endpoint']}")
    for label, pair in [("primary", p) for p in primary] + [("secondary", p) for p in result.get("secondary", [])]:
        print(f"{label} {pair_line(pair)}")
    if "guard" in result:
        guard = result["guard"]
        print(f"guard: {guard['metric']} below {guard['below']} at one of steps {guard['steps']}: {guard['runs']}")
        for pair in result["primary_without_guarded"]:
            print(f"primary without guarded runs {pair_line(pair)}")
    for name, block in result.get("secondary_metrics", {}).items():
        print(f"secondary metric: {block['endpoint']}")
        for arm, stats in block["arms"].items():
            mean, low, high = stats["mean_ci95"]
            print(f"{arm:>22}: {mean:.3f} [{low:.3f}, {high:.3f}] over {stats['n']} seeds")
        for pair in block["pairs"]:
            print(f"  {pair_line(pair)}")
    if result["failed_runs"]:
        print(f"failed runs, kept out: {result['failed_runs']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
