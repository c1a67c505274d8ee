"""A study's run files and what the lab reads from them: where a run's file is, a logged metric by step, the commit
a measurement came from.

A run file (`runs/<arm>_seed<seed>.json` beside its plan, written by `study run`) holds the run's arm, seed,
commit, start, exit code, wall clock, greedy validation accuracy by step and every logged metric by step.
"""

from __future__ import annotations

import datetime
import hashlib
import importlib
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from benchmarks import REPO


def run_file(plan_path: Path, entry: dict) -> Path:
    """Where the result of the plan's run `entry` is (or goes)."""
    if "from" in entry:
        return plan_path.parent / entry["from"]
    return plan_path.parent / "runs" / f"{entry['arm']}_seed{int(entry['seed'])}.json"


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


def weights_digest(model_dir: Path | None) -> str | None:
    """The first 16 hex digits of the SHA-256 of a model folder's `model.safetensors` (None without one): which warm
    start a run trained from. The same commit and seed need not give the same bytes on another machine (CPU kernels
    differ), so a study records it per run."""
    weights = Path(model_dir) / "model.safetensors" if model_dir is not None else None
    if weights is None or not weights.is_file():
        return None
    return hashlib.sha256(weights.read_bytes()).hexdigest()[:16]
