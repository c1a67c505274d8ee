"""A PRIME run's processes end with its driver, however the driver ends.

`python -m verl.trainer.main_ppo +recipe=[prime_lora_colocated,cpu]` is started as a user starts it (no
launcher), with a run marker in its environment; once Ray's workers are up, the driver gets SIGINT or SIGKILL.
Every process that carries the marker (Ray's GCS, raylet, agents and workers, vLLM's engines: found by the marker,
not by name) must be gone within seconds of the driver's end: the plugin's watcher (`verl_prime_lora.run_processes
.reap_after_driver`) kills what the driver leaves behind.
"""

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from verl_prime_lora.cpu.launch import RUN_ENV_DEFAULTS
from verl_prime_lora.run_processes import RUN_MARKER, kill_run, pids_with_marker

pytestmark = [pytest.mark.e2e, pytest.mark.xdist_group("shutdown")]  # one run per xdist worker

START_TIMEOUT_S = 300
# SIGINT unwinds the driver through Ray's shutdown: seconds when quiet, over 15 s once beside other runs on 2 cores
DRIVER_ENDS_WITHIN_S = 60.0
GONE_WITHIN_S = 15.0  # after the driver: the watcher's poll (0.5 s) + SIGTERM's grace (5 s) + SIGKILL, with room


def _ray_workers(run_id: str) -> list[int]:
    workers = []
    for pid in pids_with_marker(run_id):
        try:
            if Path(f"/proc/{pid}/cmdline").read_bytes().startswith(b"ray::"):
                workers.append(pid)
        except OSError:
            pass
    return workers


def _names(pids: list[int]) -> list[bytes]:
    names = []
    for pid in pids:
        try:
            names.append(Path(f"/proc/{pid}/cmdline").read_bytes()[:80])
        except OSError:
            names.append(b"(gone)")
    return names


# SIGINT unwinds the driver (Ray's own shutdown runs), SIGKILL leaves everything to the watcher; SIGTERM, which ends the
# driver without unwinding as SIGKILL does, is pinned by the unit test of the watcher (tests/test_run_processes.py).
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGKILL], ids=lambda s: s.name)
def test_no_process_of_the_run_outlives_its_driver(tmp_path, tiny_assets, sig):
    run_id = uuid.uuid4().hex
    env = {**RUN_ENV_DEFAULTS, **os.environ, RUN_MARKER: run_id}
    command = [
        sys.executable,
        "-m",
        "verl.trainer.main_ppo",
        "+recipe=[prime_lora_colocated,cpu]",
        "actor_rollout_ref.rollout.n=2",
        "actor_rollout_ref.model.lora_rank=8",
        "actor_rollout_ref.model.lora_alpha=16",
        "actor_rollout_ref.model.target_modules=all-linear",
        f"data.train_files={tiny_assets['train']}",
        f"data.val_files={tiny_assets['test']}",
        f"actor_rollout_ref.model.path={tiny_assets['model']}",
        "trainer.total_training_steps=50",
        "trainer.save_freq=-1",
        f"trainer.default_local_dir={tmp_path / 'ckpt'}",
        f"hydra.run.dir={tmp_path / 'hydra'}",
    ]
    with open(tmp_path / "driver.log", "w") as log:
        # SIGINT as a terminal gives it (a run started in the background, as some CI shells do, inherits it ignored)
        driver = subprocess.Popen(
            command,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while not _ray_workers(run_id):
            assert driver.poll() is None, (tmp_path / "driver.log").read_text()[-3000:]
            assert time.monotonic() < deadline, "Ray's workers never started"
            time.sleep(0.5)
        time.sleep(2)  # a moment more: the TaskRunner builds the trainer, vLLM engines start
        left_at_kill = len(pids_with_marker(run_id))
        os.kill(driver.pid, sig)
        driver.wait(timeout=DRIVER_ENDS_WITHIN_S)
        driver_ended_at = time.monotonic()
        while pids_with_marker(run_id) and time.monotonic() - driver_ended_at < GONE_WITHIN_S:
            time.sleep(0.5)
        survivors = pids_with_marker(run_id)
        assert not survivors, f"{len(survivors)} of {left_at_kill} processes outlived the driver: {_names(survivors)}"
    finally:
        kill_run(run_id)
        if driver.poll() is None:
            driver.kill()
