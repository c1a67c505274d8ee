"""Runs `python -m verl.trainer.main_ppo` as a user would, for tests of checks that must stop it in the driver."""

import os
import subprocess
import sys
from pathlib import Path

RAY_STARTED = "Started a local Ray instance"


def main_ppo_stopped_before_ray(cwd: Path, *overrides: str) -> str:
    """Runs main_ppo with `overrides` in `cwd`; asserts it exited non-zero before `ray.init` (no Ray log line).
    Returns its stderr (the error message the user sees)."""
    env = dict(os.environ, HYDRA_FULL_ERROR="1", HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1")
    proc = subprocess.run(
        [sys.executable, "-m", "verl.trainer.main_ppo", *overrides],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        timeout=300,
    )
    assert proc.returncode != 0, proc.stdout[-3000:]
    assert RAY_STARTED not in proc.stdout + proc.stderr, proc.stderr[-3000:]
    return proc.stderr
