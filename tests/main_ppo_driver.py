"""veRL's `main_ppo` for the unit tests: its config composed as it composes it (`compose_ppo`), and the driver run as a
user would (`main_ppo_stopped_before_ray`, for tests of checks that must stop it in the driver). Importable from any
test module as `main_ppo_driver` (tests/conftest.py puts this folder on sys.path)."""

import os
import subprocess
import sys
from pathlib import Path

import verl
from hydra import compose, initialize_config_dir

RAY_STARTED = "Started a local Ray instance"
VERL_CONFIG_DIR = str(Path(verl.__file__).parent / "trainer" / "config")


def compose_ppo(*overrides):
    """veRL's `ppo_trainer` config with `overrides`, composed by Hydra as `main_ppo` composes it."""
    with initialize_config_dir(config_dir=VERL_CONFIG_DIR, version_base=None):
        return compose(config_name="ppo_trainer", overrides=list(overrides))


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
