"""benchmarks/prime_step_time.py: the per-run summary its ratios come from."""

import pytest
from benchmark_scripts import load_benchmark


@pytest.fixture(scope="module")
def bench():
    return load_benchmark("prime_step_time")


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
