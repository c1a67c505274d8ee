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

    python -m benchmarks.lib.study run PLAN [--work DIR] [--jobs N] [--pause-file F]   # every run not yet in, in order
    python -m benchmarks.lib.study analyse PLAN              # once every run is in: the test, written and printed

`run` writes each finished run to `runs/<arm>_seed<seed>.json` beside the plan (its validation per step, its
wall clock, its exit code, the checkout, commit and start time of that run, read when it starts, and the digest
of the warm start's weights, `runs.weights_digest`) and can be
stopped and restarted: a run already written is not run again. `--jobs 2` keeps two runs going at once, started
in the plan's order. `--pause-file F`: while F exists no further run starts (the one going finishes), so that the
machine can be freed between runs. The warm start and checkpoints go to `--work` (default
`benchmarks/out/<plan folder name>`).
`analyse` refuses to run before every planned run has its file, and writes `analysis.json`: each run's
endpoint, each arm's mean with its 95 % t interval and its count of runs that went off (greedy validation at
the last step below that at step 0), and for the primary pair the difference with its 95 % Welch interval and a
two-sided permutation p (`evidence`). A run that failed (exit code ≠ 0, or an endpoint
evaluation missing) is reported and kept out, never rerun by hand.

    python -m benchmarks.lib.study mechanism PLAN [--learned-above X] [--baseline ARM]
    python -m benchmarks.lib.study table PLAN [--out FILE]   # the runs so far, each metric by step, and per arm

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
import json
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from benchmarks import REPO, RUN_ENV
from benchmarks.lib.analysis import analyse, pair_line
from benchmarks.lib.arms import ARMS
from benchmarks.lib.diagnostics import mechanism, print_mechanism, print_table
from benchmarks.lib.runs import lab_module, run_file, source_commit, weights_digest
from verl_prime_lora.demo import warm_start
from verl_prime_lora.demo.learning_run import run_learning


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
    digest = weights_digest(assets.get("model"))
    print(f"warm start {digest}", flush=True)

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
            "warm_start": digest,
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=["run", "analyse", "mechanism", "table"])
    parser.add_argument("plan", type=Path)
    parser.add_argument("--work", type=Path, help="warm start and checkpoints (default benchmarks/out/<plan folder>)")
    parser.add_argument("--jobs", type=int, default=1, help="runs at once (each a main_ppo of its own)")
    parser.add_argument("--learned-above", type=float, help="mechanism: count runs with a validation above this")
    parser.add_argument("--baseline", help="mechanism: the arm step times are compared with (default: primary's 2nd)")
    parser.add_argument("--pause-file", type=Path, help="run: no run starts while this file exists")
    parser.add_argument("--out", type=Path, help="table: the file to write")
    args = parser.parse_args(argv)
    plan = args.plan.resolve()
    if args.action == "run":
        work = (args.work or Path("benchmarks/out") / plan.parent.name).resolve()
        return run_all(plan, work, args.jobs, args.pause_file)
    if args.action == "table":
        print_table(plan, args.out or plan.parent / "runs_table.json")
        return 0
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
