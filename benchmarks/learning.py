"""Learning benchmark on CPU: GRPO vs PRIME (four variants), same data, seeds, batch and steps.

Each run is a real `main_ppo` (LoRA actor, vLLM-CPU rollouts, veRL's greedy validation every
`--test-freq` steps) on the warm-started tiny model of `verl_prime_lora.demo.chain_task`, through
`verl_prime_lora.demo.learning_run` — the demo's settings (its accuracy-band prompt filter included, for every
estimator: `--recipes prime_lora_colocated,cpu` leaves it out), only the estimator changes:

* `grpo`              veRL's sync trainer, no PRM (the baseline);
* `prime_grpo`        PRIME, length-free process advantage (`process_norm: sequence`, the default), with
                      the recipe's process gate (`algorithm.prime.process_gate: 0.75`);
* `prime_grpo_ungated` the same with `process_gate=null`: the process term always counts fully;
* `prime_grpo_token`  PRIME with the seed's formula (`process_norm: token`);
* `prime_rloo`        PRIME as in the paper (RLOO).

    python benchmarks/learning.py [--steps 15] [--seeds 0] [--estimators ...] [--out benchmarks/out/learning]

By default the four runs the paper's comparison needs (`grpo`, `prime_grpo`, `prime_grpo_token`,
`prime_rloo`), 15 steps, seed 0: about 28 minutes on 2 cores (33 at 20 steps, measured).

Writes `learning.json` (every run's metrics per step and its summary) and `learning.png` (validation
accuracy vs step and vs wall time, PRM accuracies, training reward) and prints one table: start and
final accuracy, best, the step at which a run first reaches the target (start + `--gain`), and each
run's median step time as a ratio to GRPO's in the same seed (machines are noisy: ratios within one
invocation only). The paper's claim to compare with: 2.5x sample efficiency, +24 % time per step.
"""

import argparse
import json
import statistics
import sys
from pathlib import Path

from verl_prime_lora.demo import chain_task
from verl_prime_lora.demo.learning_run import DEMO_RECIPES, ESTIMATORS, plot_runs, run_learning, summarize

DEFAULT_ESTIMATORS = ["grpo", "prime_grpo", "prime_grpo_token", "prime_rloo"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("benchmarks/out/learning"))
    parser.add_argument("--steps", type=int, default=15)
    parser.add_argument("--test-freq", type=int, default=5)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--estimators", nargs="+", choices=sorted(ESTIMATORS), default=DEFAULT_ESTIMATORS)
    parser.add_argument("--recipes", default=",".join(DEMO_RECIPES), help="the +recipe=[...] list of every run")
    parser.add_argument("--gain", type=float, default=0.10, help="target = start accuracy + gain")
    parser.add_argument("overrides", nargs="*", help="Hydra overrides for every run, after --")
    args = parser.parse_args()
    out = args.out.resolve()

    assets = chain_task.write_warm_assets(out / "assets", seed=0)
    runs, summaries = [], []
    for seed in args.seeds:
        for name in args.estimators:
            print(f"== {name}, seed {seed}", flush=True)
            run = run_learning(
                name,
                assets,
                out / f"{name}_seed{seed}",
                args.steps,
                args.test_freq,
                overrides=args.overrides,
                seed=seed,
                recipes=tuple(args.recipes.split(",")),
            )
            run.name = f"{name} (seed {seed})" if len(args.seeds) > 1 else name
            val = run.val_accuracy()
            summary = summarize(run, target=val[0][1] + args.gain if val else None)
            runs.append(run)
            summaries.append({**summary, "estimator": name, "seed": seed})
            if run.returncode != 0:
                print(f"{name} seed {seed}: main_ppo exited {run.returncode}\n{run.tail()}", file=sys.stderr)

    for summary in summaries:
        baseline = next((s for s in summaries if s["seed"] == summary["seed"] and s["estimator"] == "grpo"), None)
        summary["step_time_vs_grpo"] = (
            summary["median_step_s"] / baseline["median_step_s"]
            if baseline and baseline["median_step_s"] and summary["median_step_s"]
            else None
        )
    print(table(summaries, args.gain))
    (out / "learning.json").write_text(
        json.dumps(
            {
                "args": {k: str(v) for k, v in vars(args).items() if k != "out"},
                "summaries": summaries,
                "runs": [{"name": r.name, "steps": r.steps, "wall": r.wall} for r in runs],
            },
            indent=1,
        )
        + "\n"
    )
    plot = plot_runs(runs, out / "learning.png", f"chain arithmetic on CPU, {args.steps} steps")
    print(f"json: {out / 'learning.json'}\nplot: {plot}")
    return 0 if all(s["returncode"] == 0 for s in summaries) else 1


def table(summaries: list[dict], gain: float) -> str:
    def cell(value, fmt):
        return "-" if value is None else format(value, fmt)

    head = (
        f"{'run':<20} {'seed':>4} {'start':>6} {'final':>6} {'best':>6} {'steps to +' + format(gain, '.2f'):>14} "
        f"{'s/step':>7} {'vs grpo':>8} {'PRM dpo_acc (last 5)':>21}"
    )
    lines = [head, "-" * len(head)]
    for s in summaries:
        lines.append(
            f"{s['estimator']:<20} {s['seed']:>4} {cell(s['start_acc'], '.3f'):>6} {cell(s['final_acc'], '.3f'):>6} "
            f"{cell(s['best_acc'], '.3f'):>6} {cell(s['steps_to_target'], 'd'):>14} "
            f"{cell(s['median_step_s'], '.2f'):>7} "
            f"{cell(s['step_time_vs_grpo'], '.2f'):>8} {cell(s['prm_dpo_acc_last5'], '.3f'):>21}"
        )
    by_estimator = {}
    for s in summaries:
        if s["final_acc"] is not None and s["start_acc"] is not None:
            by_estimator.setdefault(s["estimator"], []).append(s["final_acc"] - s["start_acc"])
    lines.append(
        "mean gain over seeds: "
        + ", ".join(f"{name} {statistics.mean(gains):+.3f}" for name, gains in by_estimator.items())
    )
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
