"""The processes of one run, found by a marker in their environment, and their cleanup.

A `main_ppo` run spreads over many processes: the driver, the local Ray cluster it starts (GCS, raylet,
dashboard and runtime-env agents, workers) and vLLM's engine processes. Each inherits the driver's
environment, so a marker set there before Ray starts (`RUN_MARKER`) names them all, whatever their
parentage. `kill_run` ends every process that carries a run's marker.

`reap_after_driver` starts a watcher process for a PRIME run's driver: when the driver ends, however it
ends (normal exit, an exception, SIGINT, SIGTERM, SIGKILL), the watcher kills whatever of the run is
left, so no Ray daemon or vLLM engine outlives it by more than a few seconds. A run on an external Ray
cluster (`ray start`) is not touched there: its raylet and workers do not carry the driver's environment.

`cpu_seconds_by_name` counts the CPU seconds a run's live processes have used so far, by process; `start_order`
says when each kind of process started.
Nothing here imports Ray, torch or veRL.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

RUN_MARKER = "VERL_PRIME_LORA_RUN_ID"
WATCH_INTERVAL_S = 0.5


def pids_with_marker(run_id: str) -> list[int]:
    """Every live process (but this one) whose environment holds `RUN_MARKER=run_id`."""
    needle = f"{RUN_MARKER}={run_id}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:  # gone, or not ours to read
            continue
        if needle in environ.split(b"\0") and not is_gone(int(entry.name)):
            found.append(int(entry.name))
    return found


def process_name(cmdline: list[str]) -> str:
    """A short name for a run's process: Ray's worker titles (`ray::WorkerDict`), vLLM's
    (`VLLM::EngineCore`), a Python module or script (`verl.trainer.main_ppo`, `log_monitor.py`), a binary."""
    if not cmdline:
        return "?"
    head = cmdline[0].split()[0] if cmdline[0].split() else cmdline[0]
    if "::" in head:
        return head.split(".", 1)[0]
    args = cmdline[1:]
    if "-m" in args and args.index("-m") + 1 < len(args):
        return args[args.index("-m") + 1]
    if "-c" in args:
        return "python -c"
    scripts = [arg for arg in args if arg.endswith(".py")]
    return Path(scripts[0] if scripts else head).name


@dataclass(frozen=True)
class RunProcess:
    """One live process of a run: its `process_name`, when it started (seconds since boot) and the CPU
    seconds (user + system) it has used so far."""

    pid: int
    name: str
    started_s: float
    cpu_s: float


def run_processes(run_id: str) -> list[RunProcess]:
    """The run's live processes, read from /proc (one that exits meanwhile is left out)."""
    ticks = os.sysconf("SC_CLK_TCK")
    found = []
    for pid in pids_with_marker(run_id):
        try:
            stat = Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1].split()
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
            # stat fields after the name, from 0: utime 11, stime 12, starttime 19 (clock ticks)
            cpu_s, started_s = (int(stat[11]) + int(stat[12])) / ticks, int(stat[19]) / ticks
        except (OSError, IndexError, ValueError):  # gone meanwhile, or not ours to read
            continue
        found.append(RunProcess(pid, process_name([part for part in cmdline if part]), started_s, cpu_s))
    return found


def cpu_seconds_by_name(run_id: str) -> dict[str, float]:
    """CPU seconds used so far by the run's live processes, summed by `process_name`, largest first.
    Processes that have already exited are not counted."""
    return cpu_by_name(run_processes(run_id))


def cpu_by_name(processes: list[RunProcess]) -> dict[str, float]:
    """The processes' CPU seconds summed by name, largest first."""
    totals: dict[str, float] = {}
    for process in processes:
        totals[process.name] = totals.get(process.name, 0.0) + process.cpu_s
    return dict(sorted(totals.items(), key=lambda item: -item[1]))


def start_order(processes: list[RunProcess]) -> dict[str, float]:
    """When each process kind's first process started, in seconds after the run's first process, in order
    of starting: a run's set-up read as a timeline (which part waited for which)."""
    first: dict[str, float] = {}
    for process in processes:
        first[process.name] = min(first.get(process.name, process.started_s), process.started_s)
    if not first:
        return {}
    origin = min(first.values())
    return {name: started - origin for name, started in sorted(first.items(), key=lambda item: item[1])}


def is_gone(pid: int) -> bool:
    """The process has exited (no /proc entry, or a zombie waiting for its parent)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1].startswith("Z")
    except (OSError, IndexError):
        return True


def signal_and_wait(pids: list[int], sig: int, wait_s: float) -> tuple[list[int], list[int]]:
    """Send `sig` to each of `pids`, then wait up to `wait_s` for them to end: (the pids signalled, those still
    alive)."""
    signalled = []
    for pid in pids:
        try:
            os.kill(pid, sig)
            signalled.append(pid)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + wait_s
    while pids and time.monotonic() < deadline:
        pids = [pid for pid in pids if not is_gone(pid)]
        time.sleep(0.1)
    return signalled, pids


def kill_run(run_id: str, grace_s: float = 5.0) -> list[int]:
    """SIGTERM, then SIGKILL, every process whose environment carries this run's marker; the survivors."""
    pids = pids_with_marker(run_id)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        _, pids = signal_and_wait(pids, sig, grace_s)
    return pids


def reap_after_driver() -> str:
    """Mark this (driver) process's environment with a run id, unless it has one, and start the watcher
    that kills the run's processes once this process ends. Returns the run id."""
    run_id = os.environ.setdefault(RUN_MARKER, uuid.uuid4().hex)
    env = {key: value for key, value in os.environ.items() if key != RUN_MARKER}
    subprocess.Popen(
        [sys.executable, "-m", "verl_prime_lora.run_processes", str(os.getpid()), run_id],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # not in the terminal's process group: Ctrl-C reaches the driver, not us
        close_fds=True,
    )
    return run_id


def watch(driver_pid: int, run_id: str) -> None:
    """Wait for the driver to end, then kill what is left of its run."""
    while not is_gone(driver_pid):
        time.sleep(WATCH_INTERVAL_S)
    kill_run(run_id)


if __name__ == "__main__":
    watch(int(sys.argv[1]), sys.argv[2])
