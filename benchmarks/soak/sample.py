"""The soak's readings: the run's processes from `/proc`, the disk, and the per-step records made of them.

Per process (found by the launcher's run marker, `run_processes`): RSS and anonymous RSS (`/proc/<pid>/status`),
threads and open file descriptors by type (`/proc/<pid>/fd`), summed by process kind (`kind_totals`); CPU seconds
between two readings (`cpu_deltas`); bytes under a folder (`dir_bytes`); the Ray session folder from a raylet's
command line (`session_dir`); and SIGKILL to every process of a run at once (`kill_whole_run`). `step_records`
joins the launcher's step lines and the sampler's samples into one record per logged step: what `analyse` fits and
`report` shows.
"""

from __future__ import annotations

import math
import os
import signal
from collections import Counter
from collections.abc import Iterable
from pathlib import Path

from verl_prime_lora.run_processes import pids_with_marker, run_processes, signal_and_wait

PROC = Path("/proc")
ALL = "all"  # the key of a quantity's total over every process kind
MB = 1024 * 1024
# Quantities that grow with every step by nature: their growth per step is fitted instead (`disk/*_per_step`).
CUMULATIVE = ("disk/log_kb", "disk/metrics_kb", "disk/ray_logs_mb")


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
