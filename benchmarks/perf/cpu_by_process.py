"""Where a CPU run's processor time goes, by process, per training step.

    python -m benchmarks.perf.cpu_by_process [--estimator grpo] [--steps 10] [--from-step 3] [--to-step 9]

One `main_ppo` launch in the setting of `step_time_vs_trl.py` (the CPU demo's warm model and data, 16 prompts ×
8 samples, no prompt filter, no validation). The CPU seconds each of the run's processes has used
(`run_processes.run_processes`, the processes found by the run's marker) are read when step `--from-step`'s
metrics are logged and again at step `--to-step`'s; the difference over the steps between is each process
kind's CPU per step, beside the wall time per step. On a machine of two cores this says what a step is made
of: the model's own work (vLLM's worker, the training workers) against the per-request work of veRL's
rollout path (agent loop, HTTP server, reward worker, load balancer, TransferQueue). The launcher's start-up
lines (phases to the end of step 1, CPU by process by then) go into `cpu_by_process.json` too, with when each
kind of process started, in seconds after the driver (`run_processes.start_order`): the set-up as a timeline,
which shows which part waited for which.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
import uuid
from pathlib import Path

from benchmarks.perf.step_time_vs_trl import PROJECT_RUNS, RECIPES, launch_lines
from verl_prime_lora.demo import warm_start
from verl_prime_lora.demo.learning_run import ESTIMATORS, follow_metrics, run_learning
from verl_prime_lora.run_processes import RUN_MARKER, cpu_by_name, run_processes, start_order


def per_step(before: dict[str, float], after: dict[str, float], steps: int) -> dict[str, float]:
    """CPU seconds per step of each process kind between two readings, largest first (a kind that started
    between them counts from zero; one that ended is left out: its seconds are no longer readable)."""
    rates = {name: (seconds - before.get(name, 0.0)) / steps for name, seconds in after.items()}
    return dict(sorted(rates.items(), key=lambda item: -item[1]))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--estimator", choices=sorted(PROJECT_RUNS), default="grpo")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--from-step", type=int, default=3)
    parser.add_argument("--to-step", type=int, default=9)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/out/cpu_by_process"))
    args = parser.parse_args(argv)
    if not 1 <= args.from_step < args.to_step <= args.steps:
        parser.error("need 1 <= --from-step < --to-step <= --steps")
    out = args.out.resolve()
    assets = warm_start.write_warm_assets(out / "assets", seed=0)
    workdir = out / args.estimator
    done = threading.Event()
    run_id = uuid.uuid4().hex
    estimator, run_overrides = PROJECT_RUNS[args.estimator]
    overrides = ["trainer.val_before_train=false", *run_overrides]

    def launch():
        try:
            run_learning(
                args.estimator,
                assets,
                workdir,
                args.steps,
                -1,
                overrides,
                recipes=RECIPES,
                env={RUN_MARKER: run_id},
                echo=None,
                estimator=ESTIMATORS[estimator],
            )
        finally:
            done.set()

    log, metrics = workdir / "main_ppo.log", workdir / "metrics.jsonl"
    metrics.unlink(missing_ok=True)  # a previous launch's steps would be read as this launch's
    runner = threading.Thread(target=launch)
    runner.start()
    readings = {}  # step -> (when its metrics were logged, the run's processes then)
    for step, _ in follow_metrics(metrics, done.is_set, poll_s=0.2):
        if step in (args.from_step, args.to_step):
            readings[step] = (time.monotonic(), run_processes(run_id))
        if step == args.to_step:
            break
    runner.join()
    if set(readings) != {args.from_step, args.to_step}:
        raise SystemExit(f"the run ended before step {args.to_step}; see {log}")
    (first_at, processes), (last_at, later) = readings[args.from_step], readings[args.to_step]
    if not processes:
        raise SystemExit(f"step {args.from_step} was logged but no process of the run was found; see {log}")
    before, after = cpu_by_name(processes), cpu_by_name(later)
    steps = args.to_step - args.from_step
    rates = per_step(before, after, steps)
    report = {
        "command": "python -m benchmarks.perf.cpu_by_process " + " ".join(argv if argv is not None else sys.argv[1:]),
        "estimator": args.estimator,
        "steps": [args.from_step, args.to_step],
        "wall_s_per_step": (last_at - first_at) / steps,
        "cpu_s_per_step": sum(rates.values()),
        "cpu_s_per_step_by_process": rates,
        "start_up": launch_lines(log),
        "started_s_after_driver": start_order(processes),
    }
    print(f"steps {args.from_step}-{args.to_step}: wall {report['wall_s_per_step']:.2f} s/step, ", end="")
    print(f"CPU {report['cpu_s_per_step']:.2f} s/step")
    for name, seconds in rates.items():
        if seconds >= 0.01:
            print(f"  {seconds:6.2f}  {name}")
    print("each process kind's first start, s after the driver's:")
    print("  " + ", ".join(f"{name} {seconds:.0f}" for name, seconds in report["started_s_after_driver"].items()))
    (out / "cpu_by_process.json").write_text(json.dumps(report, indent=1) + "\n")
    print(f"json: {out / 'cpu_by_process.json'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
