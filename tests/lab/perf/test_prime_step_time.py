"""benchmarks/prime_step_time.py: the per-run summary its ratios come from."""

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from verl_prime_lora.run_processes import RUN_MARKER


@pytest.fixture(scope="module")
def bench():
    from benchmarks.perf import prime_step_time

    return prime_step_time


def _step(step, old, update, **prm):
    return {"timing_s/step": step, "timing_s/old_log_prob": old, "timing_s/update_actor": update, **prm}


def test_medians_skip_the_warm_up_step_and_count_a_phase_a_step_did_not_run_as_zero(bench):
    steps = [
        _step(9.0, 1.0, 1.0, **{"timing_s/prm_forward": 5.0, "timing_s/prm_update": 4.0}),  # warm-up
        _step(2.0, 0.1, 0.2, **{"timing_s/prm_update": 0.3}),
        _step(3.0, 0.1, 0.2, **{"timing_s/prm_update": 0.2}),
        _step(2.5, 0.1, 0.2, **{"timing_s/prm_update": 0.4, "timing_s/prm_forward": 0.1}),
    ]
    out = bench.summarise({"steps": steps, "pool_rss_peak_gb": 1.0})
    assert out["step_s_median"] == 2.5
    assert out["timing_s/prm_forward"] == 0.0  # ran in one timed step of three, not 5 s of the warm-up
    assert out["timing_s/prm_update"] == pytest.approx(0.3)
    assert out["prm_phases_over_actor_phases"] == pytest.approx(0.3 / 0.3)


def test_a_single_step_is_its_own_median(bench):
    out = bench.summarise({"steps": [_step(4.0, 0.5, 0.5, **{"timing_s/prm_update": 0.5})], "pool_rss_peak_gb": 1.0})
    assert out["step_s_median"] == 4.0 and out["prm_phases_over_actor_phases"] == pytest.approx(0.5)


def test_the_memory_sampler_counts_the_runs_pool_processes_only(bench, tmp_path):
    run_id = uuid.uuid4().hex
    sleep = [sys.executable, "-c", "import sys, time; open(sys.argv[1], 'w'); time.sleep(30)"]
    env = {**os.environ, RUN_MARKER: run_id}
    ready = [tmp_path / "pool", tmp_path / "other"]  # written once a process is up, so its memory holds still
    pool = subprocess.Popen([*sleep, str(ready[0]), "ray::WorkerDict"], env=env)  # the title: in the command line
    other = subprocess.Popen([*sleep, str(ready[1]), "ray::vLLMHttpServer"], env=env)
    try:
        deadline = time.monotonic() + 20
        while not all(path.exists() for path in ready) and time.monotonic() < deadline:
            time.sleep(0.05)
        gb = bench.PoolMemorySampler(run_id)._pool_rss()
        status = Path(f"/proc/{pool.pid}/status").read_text().splitlines()
        pool_gb = next(int(line.split()[1]) for line in status if line.startswith("VmRSS:")) / 1024**2
        assert gb == pytest.approx(pool_gb, rel=0.2)  # the pool process, not the server, not this test
        assert bench.PoolMemorySampler(uuid.uuid4().hex)._pool_rss() == 0.0
    finally:
        for child in (pool, other):
            child.kill()
            child.wait()
