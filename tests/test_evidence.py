"""The statistics of the learning assertions (benchmarks/evidence.py): formulas, and their error rate under
chance by simulation."""

import math
import random

import pytest
from benchmark_scripts import load_benchmark

evidence = load_benchmark("evidence")
mean_ci95, pooled_z = evidence.mean_ci95, evidence.pooled_z
pooled_z_threshold, validation_rise_bound = evidence.pooled_z_threshold, evidence.validation_rise_bound


def test_validation_rise_bound_formula():
    # p0 = 0.175, best later check 0.5 of 200 problems, two later checks: z_{1 - 0.001/2} = 3.2905
    se = math.sqrt(0.175 * 0.825 / 200 + 0.5 * 0.5 / 200)
    assert validation_rise_bound(0.175, [0.4, 0.5], 200) == pytest.approx(0.325 - 3.2905 * se, abs=1e-4)
    assert validation_rise_bound(0.175, [0.5], 200) == pytest.approx(0.325 - 3.0902 * se, abs=1e-4)
    assert validation_rise_bound(0.3, [0.3, 0.31], 200) < 0  # no rise beyond the noise


def test_pooled_z_is_stouffers():
    assert pooled_z([1.0, 2.0, 3.0, 2.0]) == pytest.approx(8 / 2)
    assert pooled_z([]) == 0.0
    assert pooled_z_threshold(1e-3) == pytest.approx(3.0902, abs=1e-4)
    assert pooled_z_threshold(0.05) == pytest.approx(1.6449, abs=1e-4)


def test_under_chance_the_rise_bound_is_rarely_above_zero():
    """A policy that did not learn (every check a fresh binomial sample of the same accuracy): the bound
    claims a rise in under α of the runs (here α = 0.01, so that 20,000 runs can show it)."""
    rng = random.Random(0)
    n, p, runs, alpha = 200, 0.3, 20_000, 0.01
    claims = 0
    for _ in range(runs):
        before = sum(rng.random() < p for _ in range(n)) / n
        afters = [sum(rng.random() < p for _ in range(n)) / n for _ in range(2)]
        claims += validation_rise_bound(before, afters, n, alpha) > 0
    assert claims / runs < alpha, claims / runs


def test_under_chance_the_pooled_z_rarely_passes_its_threshold():
    rng = random.Random(1)
    threshold, runs = pooled_z_threshold(0.01), 20_000
    passes = sum(pooled_z([rng.gauss(0, 1) for _ in range(10)]) > threshold for _ in range(runs))
    assert passes / runs < 0.0125, passes / runs  # α = 0.01 up to the simulation's noise (sd 0.0007)


def test_mean_ci95_is_the_student_t_interval():
    mean, low, high = mean_ci95([0.4, 0.5, 0.6])
    # s = 0.1, t_{0.975, 2} = 4.303
    assert mean == pytest.approx(0.5) and high - mean == pytest.approx(4.303 * 0.1 / math.sqrt(3))
    assert mean - low == pytest.approx(high - mean)
    assert mean_ci95([0.3]) == (0.3, 0.3, 0.3)


def test_mean_ci95_covers_the_true_mean_about_95_percent_of_the_time():
    rng = random.Random(0)
    covered = 0
    for _ in range(4000):
        low, high = mean_ci95([rng.gauss(1.0, 2.0) for _ in range(5)])[1:]
        covered += low <= 1.0 <= high
    assert 0.93 < covered / 4000 < 0.97  # binomial sd of the rate: 0.0034
