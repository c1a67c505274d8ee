"""The main job on CPU: PRIME trains on the chain-arithmetic task, shown step by step.

`python -m verl_prime_lora.demo [--out demo_out] [-- HYDRA_OVERRIDE ...]` (what `make demo` runs):

1. builds (or reuses) the warm-started tiny Qwen2 and its data (`verl_prime_lora.demo.warm_start`);
2. runs the real `python -m verl.trainer.main_ppo +recipe=[prime_lora_colocated,prompt_filter,cpu]` on it —
   LoRA actor, vLLM-CPU rollouts, the accuracy-band prompt filter, implicit PRM trained online, `prime_grpo`
   advantages — printing one line per step (validation accuracy, the share of prompts kept, batch accuracy,
   reward, PRM accuracies, gate, seconds) while veRL's full console output goes to `OUT/run/main_ppo.log`
   and every metric to `OUT/run/metrics.jsonl`;
3. prints a before/after table and writes `OUT/learning.png`.

Whether the run learns is what the table shows: validation accuracy rises, and the PRM, scoring against the
rollout policy, separates right from wrong answers (docs/findings.md has the runs' numbers and commands).

Exit code: main_ppo's (non-zero when the run failed, with the tail of its log printed).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from verl_prime_lora.demo import warm_start
from verl_prime_lora.demo.learning_run import DEMO_RECIPES, ESTIMATORS, LearningRun, plot_runs, run_learning, summarize

DEFAULT_STEPS = 15
DEFAULT_TEST_FREQ = 5


def before_after_table(run: LearningRun) -> str:
    """First vs last value of the quantities that show learning."""
    rows = [("validation accuracy (greedy, held-out)", run.val_accuracy())]
    for key, label in (
        ("prm/label_mean", "batch accuracy (sampled, T=1)"),
        ("critic/score/mean", "batch reward (acc + format)"),
        ("prm/classification_acc", "PRM classification accuracy"),
        ("prm/dpo_acc", "PRM pairwise accuracy (dpo_acc)"),
        ("prm/process_gate", "weight of the process term (gate)"),
    ):
        rows.append((label, run.series(key)))
    width = max(len(label) for label, _ in rows)
    lines = [f"{'(at step)':<{width}}   {'before':>10}   {'after':>10}"]
    for label, series in rows:
        if not series:
            continue
        (s0, v0), (s1, v1) = series[0], series[-1]
        lines.append(f"{label:<{width}}   {v0:5.3f} ({s0:>2})   {v1:5.3f} ({s1:>2})")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("demo_out"), help="assets, logs, metrics and plot")
    parser.add_argument("--steps", type=int, default=DEFAULT_STEPS, help="RL steps")
    parser.add_argument("--test-freq", type=int, default=DEFAULT_TEST_FREQ, help="validate every N steps")
    parser.add_argument("--estimator", choices=sorted(ESTIMATORS), default="prime_grpo")
    parser.add_argument("--seed", type=int, default=0, help="seed of the data, the warm start and the run")
    parser.add_argument("--timeout", type=float, default=1200.0, help="seconds before the run is killed")
    parser.add_argument(
        "--recipes",
        default=",".join(DEMO_RECIPES),
        help="the +recipe=[...] list (without the prompt filter: prime_lora_colocated,cpu)",
    )
    parser.add_argument("overrides", nargs="*", help="Hydra overrides for main_ppo, after --")
    args = parser.parse_args(argv)
    out = args.out.resolve()  # Ray workers do not share our working directory

    print(
        f"[1/3] warm start: tiny Qwen2 fine-tuned on worked solutions, then on a mix where most skip the steps "
        f"-> {out / 'assets'}"
    )
    assets = warm_start.write_warm_assets(out / "assets", seed=args.seed)
    print(
        f"[2/3] PRIME ({args.estimator}), {args.steps} steps, validation every {args.test_freq}; "
        f"veRL's console -> {out / 'run' / 'main_ppo.log'}",
        flush=True,
    )
    run = run_learning(
        args.estimator,
        assets,
        out / "run",
        steps=args.steps,
        test_freq=args.test_freq,
        overrides=args.overrides,
        seed=args.seed,
        timeout_s=args.timeout,
        recipes=tuple(args.recipes.split(",")),
    )
    if run.returncode != 0:
        print(f"main_ppo exited {run.returncode}; last lines of {run.log}:\n{run.tail()}", file=sys.stderr)
        return run.returncode
    summary = summarize(run)
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    plot = plot_runs([run], out / "learning.png", f"PRIME ({args.estimator}) on chain arithmetic, CPU")
    print("[3/3] before / after\n" + before_after_table(run))
    print(f"plot: {plot}\nmetrics: {run.log.parent / 'metrics.jsonl'}\nsummary: {out / 'summary.json'}")
    return 0
