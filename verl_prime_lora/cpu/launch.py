"""Run `python -m verl.trainer.main_ppo` under a hard timeout and leave no process behind.

Two veRL/vLLM behaviours make a bare run unsafe in CI: an error inside a vLLM worker makes veRL hang
instead of exit, and vLLM's `VLLM::EngineCore` / `VLLM::Worker` processes (and Ray's own daemons)
survive the driver being killed. So every process of a run carries a marker in its environment
(Ray's daemons and workers, and vLLM's processes, inherit it from the driver); after the run —
normal exit, error or timeout — every process that still carries the marker is killed by pid.

`python -m verl_prime_lora.cpu.launch --log FILE --timeout S -- OVERRIDE...` streams the run's output
to the console and FILE and exits with main_ppo's exit code (124 on timeout). At step 1 it prints where the
start-up went, phase by phase (`startup_phases`), and the CPU seconds the run's processes have used so far, by
process (on a machine of few cores that, not the phases' wall time, is what concurrent runs compete for).
"""

import argparse
import contextlib
import os
import signal
import subprocess
import sys
import threading
import uuid
from pathlib import Path

from verl_prime_lora.cpu.startup_phases import StartupClock
from verl_prime_lora.run_processes import RUN_MARKER, cpu_seconds_by_name, kill_run

TIMEOUT_EXIT_CODE = 124
# Offline, quiet, unbuffered: what every CPU run wants (an explicit caller value wins).
RUN_ENV_DEFAULTS = {
    "HF_HUB_OFFLINE": "1",
    "WANDB_MODE": "disabled",
    "TOKENIZERS_PARALLELISM": "false",
    "PYTHONUNBUFFERED": "1",
    "HYDRA_FULL_ERROR": "1",
    # The local Ray cluster's raylet starts idle Python workers for the first driver; veRL's actors never use
    # them (the job's runtime_env differs from theirs), and they cost ~2 s of CPU at start-up. (Read by the raylet
    # this driver starts; a cluster the run joins keeps its own setting.)
    "RAY_prestart_worker_first_driver": "0",
}


def run_env_defaults(overrides: list[str]) -> dict[str, str]:
    """`RUN_ENV_DEFAULTS`, and `RAY_ADDRESS=local` unless the overrides name a cluster to join: a run
    starts a Ray cluster of its own (the CPU preset gives it `num_cpus`), whatever `ray start` left running
    on this machine, which a bare `ray.init()` would join."""
    joins = any(override.lstrip("+").startswith("ray_kwargs.ray_init.address=") for override in overrides)
    return dict(RUN_ENV_DEFAULTS) if joins else {**RUN_ENV_DEFAULTS, "RAY_ADDRESS": "local"}


def run_main_ppo(
    overrides: list[str],
    log_path: Path,
    timeout_s: float,
    env: dict[str, str] | None = None,
    echo: bool = False,
) -> int:
    """Run main_ppo with `overrides`; write its output to `log_path`; return its exit code.

    The run's processes carry `RUN_MARKER`: the one given in `env` (a caller that reads the run's processes while it
    runs), else a fresh one; a marker in this process's own environment is never reused, since the cleanup kills
    every process that carries it."""
    run_id = (env or {}).get(RUN_MARKER) or uuid.uuid4().hex
    run_env = {**run_env_defaults(overrides), **os.environ, **(env or {}), RUN_MARKER: run_id}
    log_path.parent.mkdir(parents=True, exist_ok=True)
    if not any(override.startswith("hydra.run.dir=") for override in overrides):
        # Hydra's default output dir is ./outputs/<date>/ under the caller's working directory
        overrides = [*overrides, f"hydra.run.dir={log_path.parent / 'hydra'}"]
    command = [sys.executable, "-m", "verl.trainer.main_ppo", *overrides]
    startup = StartupClock()
    with open(log_path, "w", encoding="utf-8") as log, _sigterm_unwinds():
        log.write(" ".join(command) + "\n")
        log.flush()
        process = subprocess.Popen(
            command,
            env=run_env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: one killpg reaches the driver's children
            text=True,
            errors="replace",
        )
        copier = threading.Thread(target=_copy_lines, args=(process.stdout, log, echo, startup, run_id), daemon=True)
        copier.start()
        try:
            returncode = process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            _report(log, f"[launch] timeout after {timeout_s:.0f} s: killing the run")
            returncode = TIMEOUT_EXIT_CODE
        finally:
            try:
                os.killpg(process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            survivors = kill_run(run_id)
            process.wait()
            copier.join(timeout=10)
            if survivors:
                _report(log, f"[launch] could not kill: {survivors}")
    return returncode


def _report(log, message: str) -> None:
    """The launcher's own message: into the run's log and onto the console (stderr), echo or not."""
    log.write(f"\n{message}\n")
    log.flush()
    print(message, file=sys.stderr, flush=True)


@contextlib.contextmanager
def _sigterm_unwinds():
    """While a run is on, SIGTERM (a `timeout`, a CI job being cancelled, `kill`) raises SystemExit in the
    main thread, so the cleanup below still kills the run: the run sits in its own session, and Ray's and
    vLLM's processes would otherwise outlive us. Elsewhere than the main thread, a no-op."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def unwind(signum, frame):
        raise SystemExit(128 + signum)

    previous = signal.signal(signal.SIGTERM, unwind)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _copy_lines(stream, log, echo: bool, startup: StartupClock, run_id: str) -> None:
    for line in stream:
        log.write(line)
        log.flush()
        if echo:
            sys.stdout.write(line)
            sys.stdout.flush()
        summary = startup.feed(line)
        if summary is not None:
            _report(log, summary)
            _report(log, cpu_summary(cpu_seconds_by_name(run_id)))


def cpu_summary(seconds: dict[str, float], shown: int = 8) -> str:
    """The run's CPU seconds so far, in total and for its `shown` largest process kinds."""
    top = ", ".join(f"{name} {value:.1f} s" for name, value in list(seconds.items())[:shown])
    return f"[launch] CPU to the end of step 1: {sum(seconds.values()):.1f} s ({top})"


def main() -> None:
    parser = argparse.ArgumentParser(description="main_ppo under a timeout, with full cleanup")
    parser.add_argument("--log", type=Path, required=True)
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds")
    parser.add_argument("overrides", nargs="*", help="Hydra overrides for main_ppo (after --)")
    args = parser.parse_args()
    sys.exit(run_main_ppo(args.overrides, args.log, args.timeout, echo=True))


if __name__ == "__main__":
    main()
