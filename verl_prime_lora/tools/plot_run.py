"""Plot a run from veRL's metrics file: where it stands, without W&B.

    python -m verl_prime_lora.tools.plot_run METRICS.jsonl [MORE.jsonl ...] --out run.png

A run logs to a file with `trainer.logger=[console,file]`: veRL's file logger writes one JSON line per step,
`{"step": N, "data": {metric: value}}`, to `VERL_FILE_LOGGER_PATH` (default `./<project_name>/<experiment_name>.jsonl`).
It opens that file anew at every launch, so a resumed run's earlier steps are in the file of its earlier launch: give
every file in launch order; a step logged in a later file replaces the same step of an earlier one.

Six panels over the step: greedy validation accuracy (every `val-core/*/acc/*` series) and the batch's accuracy
(`prm/label_mean`); the PRM's ranking of fresh responses (`prm/dpo_acc_before_mixed`, its running mean, ½ chance);
the gate and the effective weight (`prm/process_gate`, `prm/process_weight_effective`); the advantage's parts
(`prm/advantage/{outcome,process}_abs_mean`); the PRM's fit (`prm/ce_loss`, ln 2 at a PRM equal to its reference);
and seconds per step (`timing_s/step`) with the ETA to `--total-steps` at the median of the last 10 steps.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
from pathlib import Path

PANELS = (
    ("accuracy", ("val-core/", "prm/label_mean")),
    ("PRM ranking of fresh responses (½: chance)", ("prm/dpo_acc_before_mixed", "prm/dpo_acc_before_mixed_ema")),
    ("process term's weight", ("prm/process_gate", "prm/process_weight_effective")),
    ("mean |advantage| per token", ("prm/advantage/outcome_abs_mean", "prm/advantage/process_abs_mean")),
    ("PRM loss (ln 2: its reference)", ("prm/ce_loss", "prm/update_loss")),
    ("seconds per step", ("timing_s/step",)),
)


def read_steps(paths: list[Path]) -> dict[int, dict[str, float]]:
    """{step: metrics} of veRL file-logger files, in launch order (a later file's step replaces an earlier one's)."""
    steps: dict[int, dict[str, float]] = {}
    for path in paths:
        for number, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
                steps[int(row["step"])] = {k: v for k, v in row["data"].items() if isinstance(v, int | float)}
            except (ValueError, KeyError, TypeError) as err:
                raise SystemExit(f"{path}:{number}: not a line of veRL's file logger ({err})") from err
    return dict(sorted(steps.items()))


def series(steps: dict[int, dict[str, float]], key_or_prefix: str) -> dict[str, list[tuple[int, float]]]:
    """The (step, value) series of a metric, or of every metric under a prefix ending in '/'."""
    keys = sorted({k for m in steps.values() for k in m if (k.startswith(key_or_prefix) if key_or_prefix.endswith("/")
                   else k == key_or_prefix)})  # fmt: skip
    return {k: [(s, m[k]) for s, m in steps.items() if k in m and math.isfinite(m[k])] for k in keys}


def eta_hours(steps: dict[int, dict[str, float]], total_steps: int | None) -> float | None:
    """Hours to `total_steps` at the median `timing_s/step` of the last 10 steps logged; None without either."""
    times = [t for _, t in series(steps, "timing_s/step").get("timing_s/step", [])][-10:]
    if not times or not total_steps or not steps:
        return None
    return max(total_steps - max(steps), 0) * statistics.median(times) / 3600


def plot(steps: dict[int, dict[str, float]], out: Path, total_steps: int | None = None) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(3, 2, figsize=(12, 10))
    for ax, (title, keys) in zip(axes.flat, PANELS, strict=True):
        for key in keys:
            for name, points in series(steps, key).items():
                if points:
                    ax.plot(*zip(*points), marker="." if len(points) < 60 else None, label=name)
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
        if ax.lines:
            ax.legend(fontsize=6)
    eta = eta_hours(steps, total_steps)
    last = max(steps) if steps else 0
    fig.suptitle(f"step {last}" + (f" of {total_steps}, about {eta:.1f} h to go" if eta is not None else ""))
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("metrics", type=Path, nargs="+", help="veRL file-logger files, in launch order")
    parser.add_argument("--out", type=Path, default=Path("run.png"))
    parser.add_argument("--total-steps", type=int, help="the run's trainer.total_training_steps, for an ETA")
    args = parser.parse_args(argv)
    steps = read_steps(args.metrics)
    if not steps:
        raise SystemExit(f"{args.metrics[0]}: no step logged yet")
    print(f"{len(steps)} steps (last {max(steps)}); wrote {plot(steps, args.out, args.total_steps)}")
    eta = eta_hours(steps, args.total_steps)
    if eta is not None:
        print(f"ETA: about {eta:.1f} h to step {args.total_steps} at the median of the last 10 steps' timing_s/step")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
