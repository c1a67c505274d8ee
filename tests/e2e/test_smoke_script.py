"""The README's main job, as written: examples/run_cpu_smoke.sh runs the PRIME loop on CPU."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e
SCRIPT = Path(__file__).resolve().parents[2] / "examples" / "run_cpu_smoke.sh"


def test_smoke_script_runs_prime_steps(tmp_path):
    env = {**os.environ, "PYTHON": sys.executable, "STEPS": "2", "HF_HUB_OFFLINE": "1", "WANDB_MODE": "disabled"}
    run = subprocess.run(
        ["bash", str(SCRIPT), str(tmp_path / "smoke")], env=env, capture_output=True, text=True, timeout=1200
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    steps = re.findall(r"^.*step:(\d+) - .*$", run.stdout, flags=re.M)
    assert steps == ["1", "2"], run.stdout[-3000:]
    for line in re.findall(r"^.*step:\d+ - .*$", run.stdout, flags=re.M):
        for key in ("prm/ce_loss", "prm/dpo_acc", "critic/advantages/mean", "actor/pg_loss"):
            assert f"{key}:" in line, key
