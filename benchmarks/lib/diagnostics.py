"""What a study's runs show beside its registered test, never part of it: the mechanism diagnostics per arm
(`study mechanism`: runs that learned, step time against a baseline arm, the PRM's and the actor's training
diagnostics) and the table of the runs so far (`study table`: each metric by step, per run and per arm)."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

from benchmarks.lib.analysis import learned, primary_pairs, require_every_run
from benchmarks.lib.runs import lab_module, metric_by_step, run_file

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


def runs_table(plan_path: Path) -> list[dict]:
    """For each run of the plan at `plan_path` that has its file: arm, seed, exit code, commit, start, minutes from
    launch to the last logged step, and by validated step (rounded to 3 decimals) each metric of the task module's
    `METRICS`, or the greedy validation accuracy (`val_accuracy`) for chain_task's own task."""
    plan = json.loads(plan_path.read_text())
    lab = lab_module(plan["task"])
    names = list(lab.METRICS) if lab is not None else [None]
    rows = []
    for entry in plan["runs"]:
        path = run_file(plan_path, entry)
        if not path.exists():
            continue
        record = json.loads(path.read_text())
        wall = record.get("wall_s") or {}
        rows.append(
            {
                "arm": record["arm"],
                "seed": record["seed"],
                "returncode": record["returncode"],
                "commit": record.get("commit"),
                "started": record.get("started"),
                "minutes": round(max(wall.values()) / 60, 1) if wall else None,
                "by_step": {
                    name or "val_accuracy": {
                        step: round(value, 3)
                        for step, value in sorted(metric_by_step(record, name, plan["task"]).items())
                    }
                    for name in names
                },
            }
        )
    return rows


def arm_means(rows: list[dict]) -> dict[str, dict]:
    """Per arm of `runs_table`'s rows: the number of runs that exited 0, and each metric's mean over those runs at
    each step that all of them validated."""
    by_arm: dict[str, list[dict]] = {}
    for row in rows:
        if row["returncode"] == 0:
            by_arm.setdefault(row["arm"], []).append(row)
    means = {}
    for arm, runs in by_arm.items():
        metrics = {}
        for name in runs[0]["by_step"]:
            steps = set.intersection(*(set(run["by_step"][name]) for run in runs))
            metrics[name] = {
                step: statistics.fmean(run["by_step"][name][step] for run in runs) for step in sorted(steps)
            }
        means[arm] = {"n": len(runs), "by_step": metrics}
    return means


def print_table(plan_path: Path, out: Path) -> None:
    """`runs_table` and `arm_means` written to `out` and printed, one line per metric: its value at each step."""
    rows = runs_table(plan_path)
    arms = arm_means(rows)
    out.write_text(json.dumps({"plan": str(plan_path), "runs": rows, "arms": arms}, indent=1) + "\n")

    def by_step(metrics: dict[str, dict]) -> None:
        for name, values in metrics.items():
            print(f"  {name:>22}: " + "  ".join(f"{step}: {value:.3f}" for step, value in values.items()))

    for row in rows:
        print(f"{row['arm']} seed {row['seed']} (exit {row['returncode']}, {row['minutes']} min)")
        by_step(row["by_step"])
    for arm, stats in arms.items():
        print(f"{arm}: mean of {stats['n']} runs")
        by_step(stats["by_step"])
