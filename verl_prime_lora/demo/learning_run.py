"""Learning runs on CPU: real `main_ppo` runs on the chain-arithmetic task, read back as they go.

One run is `python -m verl.trainer.main_ppo +recipe=[prime_lora_colocated,cpu]` on the warm-started
tiny model of `verl_prime_lora.demo.warm_start`, with veRL's own validation (greedy, `trainer.test_freq`)
and veRL's `file` logger (one JSON line per step, `VERL_FILE_LOGGER_PATH`). While it runs, a thread
follows that file and prints one compact line per step; veRL's full console output goes to the log
file only. The demo (`python -m verl_prime_lora.demo`, run as written by `tests/e2e/test_demo.py`) and
`benchmarks/learning.py` both run through `run_learning`.

Estimators compared (`ESTIMATORS`): `grpo` (veRL's sync trainer, no PRM), `prime_grpo` (length-free
process advantage, ungated as the demo's `DEMO_OVERRIDES` set it), `prime_grpo_gated` (the same, gated by the PRM's
held-out pairwise accuracy, full at 0.75), `prime_grpo_ungated` (the gate off whatever the recipe says),
`prime_grpo_token` (the seed's formula) and `prime_rloo` (the paper's). Runs recorded under `prime_grpo`,
`prime_grpo_token` and `prime_rloo` before the recipe dropped the gate had it at 0.75 (docs/findings.md).
"""

from __future__ import annotations

import json
import math
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from verl_prime_lora.cpu.launch import run_main_ppo

# Estimator name -> the overrides that select it on top of `DEMO_OVERRIDES`.
ESTIMATORS: dict[str, list[str]] = {
    "grpo": ["algorithm.adv_estimator=grpo", "trainer.v1.trainer_mode=sync"],
    "prime_grpo": ["algorithm.adv_estimator=prime_grpo", "algorithm.prime.process_norm=sequence"],
    "prime_grpo_gated": ["algorithm.adv_estimator=prime_grpo", "algorithm.prime.process_gate=0.75"],
    "prime_grpo_ungated": ["algorithm.adv_estimator=prime_grpo", "algorithm.prime.process_gate=null"],
    "prime_grpo_token": ["algorithm.adv_estimator=prime_grpo", "algorithm.prime.process_norm=token"],
    "prime_rloo": ["algorithm.adv_estimator=prime_rloo"],
}

# The recipes of the CPU learning setting (`+recipe=[...]`, in this order): the colocated PRIME recipe, the
# accuracy-band prompt filter (PRIME §3.3: only prompts with 0.2 <= mean accuracy <= 0.8 over their 8 samples are
# trained on, and veRL's replay buffer generates replacements), then the CPU preset, which must come last.
# With the filter every trained group holds a right and a wrong answer: the PRM learns from a contrast within
# each prompt, and its pairwise accuracy counts every group (a group with one label only counts ½ in
# `prm/dpo_acc`). Its steps take longer: vLLM generates replacements while few prompts are in the band.
DEMO_RECIPES = ("prime_lora_colocated", "prompt_filter", "cpu")
# Placements of the learning setting: the `+recipe=[...]` list and what the placement needs besides.
# `split` is the seed's own recipe (`prime_lora`: veRL's separate_async trainer, vLLM on a GPU of its own,
# here a second fake GPU, rollouts generated one step ahead of the weights that train on them);
# `split_on_policy` the same with nothing generated ahead (`num_warmup_batches=0`): each step's rollouts come
# from the newest weights, and generation no longer overlaps training.
SPLIT_RECIPES = ("prime_lora", "prompt_filter", "cpu")
LAYOUTS: dict[str, tuple[tuple[str, ...], list[str]]] = {
    "colocated": (DEMO_RECIPES, []),
    "split": (SPLIT_RECIPES, ["ray_kwargs.ray_init.num_gpus=2"]),
    "split_on_policy": (
        SPLIT_RECIPES,
        ["ray_kwargs.ray_init.num_gpus=2", "trainer.v1.separate_async.num_warmup_batches=0"],
    ),
}
# The rest of the setting, sized for the tiny model.
DEMO_OVERRIDES = [
    "data.train_batch_size=16",
    "data.max_prompt_length=64",
    "data.max_response_length=64",
    "actor_rollout_ref.rollout.n=8",
    "actor_rollout_ref.rollout.temperature=1.0",
    "actor_rollout_ref.model.lora_rank=16",
    "actor_rollout_ref.model.lora_alpha=32",
    "actor_rollout_ref.model.target_modules=all-linear",
    "actor_rollout_ref.actor.optim.lr=1e-3",
    "actor_rollout_ref.actor.optim.lr_scheduler_type=constant",
    "actor_rollout_ref.actor.optim.lr_warmup_steps_ratio=0.0",
    "actor_rollout_ref.actor.ppo_mini_batch_size=16",
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=64",
    "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=64",
    "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=64",
    # The PRM's reference is the rollout policy (old log-probs, T = 1): its log-ratio then measures what the PRM
    # adds to the policy. With the frozen init as reference the policy's own shift, which RL points at the
    # wrong answers it still samples (prm/policy_dpo_acc_mixed < ½), leaks into z and inverts the ranking.
    "prime.prm.reference=policy",
    # The demo's process term at full weight: its own pre-registered study (fp32, these PRM settings) kept it ungated;
    # the GPU recipe's gate (0.75) came from a study of the recipe's PRM settings in bf16 (docs/findings.md).
    "algorithm.prime.process_gate=null",
    "prime.prm.optim.lr=5e-5",
    # Three passes over each batch (`update: before`: the rewards come from the PRM after them): the PRM ranked
    # right above wrong better than with one pass or a 4x larger lr (docs/findings.md).
    "prime.prm.epochs=3",
    "prime.prm.balance_labels=true",  # 13 % of the warm start's samples are right: keep the base rate out of z
    "prime.prm.micro_batch_size_per_gpu=64",
    "prime.prm.infer_micro_batch_size_per_gpu=64",
    "trainer.val_before_train=true",
    "trainer.save_freq=-1",
    # The CPU setting the findings measured, not the seed's loss: no KL term, the token mean over the batch
    "actor_rollout_ref.actor.use_kl_loss=false",
    "actor_rollout_ref.actor.loss_agg_mode=token-mean",
]
RUN_ENV = {"WANDB_SILENT": "true", "WANDB_CONSOLE": "off", "WANDB_X_DISABLE_STATS": "true"}


def print_now(line: str) -> None:
    """print, flushed: progress lines appear as they come when stdout is a file or a pipe."""
    print(line, flush=True)


@dataclass
class LearningRun:
    """What one run logged, step by step (step 0 = validation before training)."""

    name: str
    returncode: int
    log: Path
    steps: dict[int, dict] = field(default_factory=dict)  # veRL's metrics per step
    wall: dict[int, float] = field(default_factory=dict)  # seconds since launch when each step was logged

    def series(self, key: str) -> list[tuple[int, float]]:
        """(step, value) for every step that logged `key` with a finite value."""
        out = []
        for step in sorted(self.steps):
            value = self.steps[step].get(key)
            if value is not None and math.isfinite(float(value)):
                out.append((step, float(value)))
        return out

    def val_accuracy(self) -> list[tuple[int, float]]:
        """veRL's validation accuracy, `val-core/<data_source>/acc/mean@<n>`, per validated step."""
        key = next((k for s in self.steps.values() for k in s if is_val_accuracy_key(k)), None)
        return [] if key is None else self.series(key)

    def tail(self, lines: int = 40) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])


def is_val_accuracy_key(key: str) -> bool:
    """veRL's `val-core/<data_source>/acc/mean@<n>` (n = `rollout.val_kwargs.n` samples per problem)."""
    return key.startswith("val-core/") and "/acc/mean@" in key


def follow_metrics(path: Path, stop: Callable[[], bool], poll_s: float = 1.0) -> Iterator[tuple[int, dict]]:
    """Yield (step, metrics) from veRL's `file` logger as its lines complete, until `stop()` and EOF.

    The file appears once veRL's `fit()` starts; each line is `{"step": N, "data": {...}}`.
    """
    while not path.exists():
        if stop():
            return
        time.sleep(poll_s)
    with open(path, "rb") as stream:
        pending = b""
        while True:
            stopping = stop()  # read after checking, so lines written before the stop are not lost
            chunk = stream.read()
            if chunk:
                pending += chunk
                *lines, pending = pending.split(b"\n")
                for line in lines:
                    if line.strip():
                        row = json.loads(line)
                        yield int(row["step"]), row["data"]
            elif stopping:
                return
            else:
                time.sleep(poll_s)


def progress_line(run: LearningRun, step: int, total_steps: int) -> str:
    """One console line per logged step, e.g. `step 12/40 | val acc 0.41 (start 0.28) | kept 0.62 |
    batch acc 0.35 | reward 1.21 | PRM acc 0.71 | pairs 0.68 | gate 0.00 | s/step 4.1` (on one line; `kept`:
    the share of prompts the accuracy-band filter kept)."""
    data = run.steps[step]
    parts = [f"step {step:>3}/{total_steps}"]
    val = dict(run.val_accuracy())
    if step in val:
        start = val.get(0)
        parts.append(f"val acc {val[step]:.3f}" + (f" (start {start:.3f})" if start is not None and step else ""))
    for key, label in (
        ("training/prompt_filter/kept_ratio", "kept"),
        ("prm/label_mean", "batch acc"),
        ("critic/score/mean", "reward"),
        ("prm/classification_acc", "PRM acc"),
        ("prm/dpo_acc", "pairs"),
        ("prm/process_gate", "gate"),
        ("timing_s/step", "s/step"),
    ):
        if data.get(key) is not None:
            parts.append(f"{label} {float(data[key]):.2f}")
    return " | ".join(parts)


def run_learning(
    name: str,
    assets: dict[str, Path],
    workdir: Path,
    steps: int,
    test_freq: int,
    overrides: list[str] = (),
    seed: int = 0,
    timeout_s: float = 1200.0,
    env: dict[str, str] | None = None,
    echo: Callable[[str], None] | None = print_now,
    recipes: tuple[str, ...] = DEMO_RECIPES,
    estimator: list[str] | None = None,
) -> LearningRun:
    """One real `main_ppo` learning run of estimator `name` (a key of `ESTIMATORS`) on `assets`.

    `overrides` come last (they win); `echo` receives one progress line per logged step as it is logged (None: quiet);
    `recipes`: the `+recipe=[...]` list; `estimator`: the overrides that select the estimator, for an arm not in
    `ESTIMATORS` (default: `ESTIMATORS[name]`).
    """
    workdir.mkdir(parents=True, exist_ok=True)
    metrics = workdir / "metrics.jsonl"
    metrics.unlink(missing_ok=True)
    args = [
        f"+recipe=[{','.join(recipes)}]",
        *DEMO_OVERRIDES,
        *(ESTIMATORS[name] if estimator is None else estimator),
        f"data.train_files={assets['train']}",
        f"data.val_files={assets['test']}",
        f"actor_rollout_ref.model.path={assets['model']}",
        f"data.seed={seed}",
        f"actor_rollout_ref.actor.fsdp_config.seed={seed}",
        f"prime.prm.engine.seed={seed}",
        f"trainer.total_training_steps={steps}",
        f"trainer.test_freq={test_freq}",
        "trainer.logger=[console,file]",
        "trainer.project_name=prime_lora_learning",
        f"trainer.experiment_name={name}_seed{seed}",
        f"trainer.default_local_dir={workdir / 'checkpoints'}",
        *overrides,
    ]
    run = LearningRun(name=name, returncode=-1, log=workdir / "main_ppo.log")
    done = threading.Event()
    started = time.monotonic()

    def follow() -> None:
        for step, data in follow_metrics(metrics, done.is_set):
            run.steps[step] = data
            run.wall[step] = time.monotonic() - started
            if echo is not None:
                echo(progress_line(run, step, steps))

    follower = threading.Thread(target=follow, daemon=True)
    follower.start()
    run_env = {**RUN_ENV, **(env or {}), "VERL_FILE_LOGGER_PATH": str(metrics)}
    try:
        run.returncode = run_main_ppo(args, run.log, timeout_s, env=run_env)
    finally:
        done.set()
        follower.join(timeout=30)
    return run


def steps_to_reach(series: list[tuple[int, float]], target: float) -> int | None:
    """The first step whose value is ≥ target (None if never)."""
    return next((step for step, value in series if value >= target), None)


def summarize(run: LearningRun, target: float | None = None) -> dict:
    """Start/final/best validation accuracy, steps to `target`, time per step, PRM separation."""
    val = run.val_accuracy()
    step_times = [v for _, v in run.series("timing_s/step")]
    later = step_times[1:] or step_times  # step 1 includes vLLM's first generation
    dpo = [v for _, v in run.series("prm/dpo_acc")]
    cls = [v for _, v in run.series("prm/classification_acc")]
    return {
        "name": run.name,
        "returncode": run.returncode,
        "start_acc": val[0][1] if val else None,
        "final_acc": val[-1][1] if val else None,
        "best_acc": max(v for _, v in val) if val else None,
        "steps_to_target": None if target is None else steps_to_reach(val, target),
        "steps": max((s for s in run.steps if s > 0), default=0),
        "median_step_s": sorted(later)[len(later) // 2] if later else None,
        "prm_dpo_acc_last5": sum(dpo[-5:]) / len(dpo[-5:]) if dpo else None,
        "prm_classification_acc_last5": sum(cls[-5:]) / len(cls[-5:]) if cls else None,
    }


def plot_runs(runs: list[LearningRun], path: Path, title: str) -> Path:
    """Validation accuracy vs step and vs wall time (top) and the PRM's accuracies (bottom)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(11, 7))
    for run in runs:
        val = run.val_accuracy()
        if val:
            axes[0, 0].plot(*zip(*val), marker="o", label=run.name)
            axes[0, 1].plot(
                [run.wall.get(s, math.nan) for s, _ in val], [v for _, v in val], marker="o", label=run.name
            )
        for key, style in (("prm/classification_acc", "-"), ("prm/dpo_acc", "--")):
            series = run.series(key)
            if series:
                axes[1, 0].plot(*zip(*series), style, label=f"{run.name} {key.split('/')[1]}")
        score = run.series("critic/score/mean")
        if score:
            axes[1, 1].plot(*zip(*score), label=run.name)
    labels = (
        ("step", "validation accuracy (greedy)"),
        ("seconds since launch", "validation accuracy (greedy)"),
        ("step", "PRM accuracy (solid: classification, dashed: pairwise)"),
        ("step", "training reward (acc + format)"),
    )
    for ax, (xlabel, ylabel) in zip(axes.flat, labels):
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel, fontsize=8)
        ax.grid(alpha=0.3)
        if ax.lines:
            ax.legend(fontsize=7)
    fig.suptitle(title)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
