"""The built wheel ships the config group and the veRL entry point, and `+recipe=prime_lora`
composes through veRL's real entry point from a directory outside the checkout."""

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(out), str(REPO)],
        check=True,
        capture_output=True,
    )
    (path,) = out.glob("verl_prime_lora-*.whl")
    return path


def test_wheel_contents(wheel):
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        entry_points = next(zf.read(n).decode() for n in names if n.endswith(".dist-info/entry_points.txt"))
    assert "verl_prime_lora/recipe/prime_lora.yaml" in names
    assert "verl_prime_lora/algo/core_algos.py" in names
    assert "[verl.plugins]" in entry_points and "verl_prime_lora.integration.plugin" in entry_points


def test_installed_wheel_composes_recipe_outside_checkout(wheel, tmp_path):
    target = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target), str(wheel)],
        check=True,
        capture_output=True,
    )
    workdir = tmp_path / "elsewhere"
    workdir.mkdir()
    env = {**os.environ, "PYTHONPATH": str(target), "HYDRA_FULL_ERROR": "1"}
    run = subprocess.run(
        [sys.executable, "-m", "verl.trainer.main_ppo", "+recipe=prime_lora", "--cfg", "job"],
        cwd=workdir,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert "adv_estimator: prime_grpo" in run.stdout
    assert "\nrecipe:" not in run.stdout
    where = subprocess.run(
        [sys.executable, "-c", "import verl_prime_lora.integration.hydra_search_path as h; print(h.config_root())"],
        cwd=workdir,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert where.stdout.strip() == str(target / "verl_prime_lora"), where.stderr[-2000:]
