"""The lab's statistics (benchmarks/lib/evidence.py, on scipy.stats): the formulas the lab relies on, with float64
references, and the learning assertions' error rate under chance by simulation. That the recorded analyses come out
the same: test_recorded_analyses.py."""

import math
import random
import statistics

import pytest

from benchmarks.lib import evidence

mean_ci95, pooled_z = evidence.mean_ci95, evidence.pooled_z
pooled_z_threshold, validation_rise_bound = evidence.pooled_z_threshold, evidence.validation_rise_bound


def test_validation_rise_bound_formula():
    # p0 = 0.175, best later check 0.5 of 200 problems, two later checks: z_{1 - 0.001/2} = 3.2905267314919255
    se = math.sqrt(0.175 * 0.825 / 200 + 0.5 * 0.5 / 200)
    assert validation_rise_bound(0.175, [0.4, 0.5], 200) == pytest.approx(0.325 - 3.2905267314919255 * se, rel=1e-12)
    assert validation_rise_bound(0.175, [0.5], 200) == pytest.approx(0.325 - 3.090232306167813 * se, rel=1e-12)
    assert validation_rise_bound(0.3, [0.3, 0.31], 200) < 0  # no rise beyond the noise


def test_pooled_z_is_stouffers():
    assert pooled_z([1.0, 2.0, 3.0, 2.0]) == pytest.approx(8 / 2)
    assert pooled_z([]) == 0.0
    assert pooled_z_threshold(1e-3) == pytest.approx(3.090232306167813, rel=1e-12)
    assert pooled_z_threshold(0.05) == pytest.approx(1.6448536269514722, rel=1e-12)


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
    # s = 0.1, t_{0.975, 2} = 4.302652729749462
    assert mean == pytest.approx(0.5) and high - mean == pytest.approx(4.302652729749462 * 0.1 / math.sqrt(3))
    assert mean - low == pytest.approx(high - mean)
    assert mean_ci95([0.3]) == (0.3, 0.3, 0.3)
    assert mean_ci95([0.2, 0.2, 0.2]) == (0.2, 0.2, 0.2)  # runs that all ended alike: no spread, not a rounding's


def test_mean_ci95_covers_the_true_mean_about_95_percent_of_the_time():
    rng = random.Random(0)
    covered = 0
    for _ in range(4000):
        low, high = mean_ci95([rng.gauss(1.0, 2.0) for _ in range(5)])[1:]
        covered += low <= 1.0 <= high
    assert 0.93 < covered / 4000 < 0.97  # binomial sd of the rate: 0.0034


def test_welch_interval_of_two_arms():
    a, b = [0.5, 0.6, 0.7, 0.55], [0.4, 0.45, 0.42]
    diff, low, high = evidence.welch_ci95(a, b)
    va, vb = statistics.variance(a) / 4, statistics.variance(b) / 3
    df = (va + vb) ** 2 / (va**2 / 3 + vb**2 / 2)  # Welch–Satterthwaite: 3.9 here
    assert diff == pytest.approx(statistics.mean(a) - statistics.mean(b))
    assert high - diff == pytest.approx(evidence.t_quantile(0.975, df) * math.sqrt(va + vb))
    assert diff - low == pytest.approx(high - diff)


def test_welch_interval_with_an_arm_of_equal_runs():
    # s_a = 0: ± t_{0.975, 1}·s_b/√2 = 12.706204736174698 · 0.05 (ν = n_b − 1 = 1)
    diff, low, high = evidence.welch_ci95([0.5, 0.5], [0.3, 0.4])
    assert diff == pytest.approx(0.15) and high - diff == pytest.approx(12.706204736174698 * 0.05)
    assert evidence.welch_ci95([0.2, 0.2, 0.2], [0.1, 0.1]) == pytest.approx((0.1, 0.1, 0.1))  # no spread at all


def test_permutation_p_exact_and_sampled():
    # 3 vs 3 fully separated: 2 of the C(6, 3) = 20 relabellings are as extreme (two-sided)
    assert evidence.permutation_p([1.0, 2.0, 3.0], [4.0, 5.0, 6.0]) == pytest.approx(2 / 20)
    assert evidence.permutation_p([1.0, 2.0], [1.0, 2.0]) == 1.0
    assert evidence.permutation_p([0.1, 0.2, 0.3], [0.3, 0.2, 0.1]) == 1.0  # equal means, but for rounding
    # 4 vs 2, |difference| 0.9: of the C(6, 2) = 15 relabellings only the observed one is as far apart
    assert evidence.permutation_p([0.0, 0.1, 0.2, 0.3], [1.0, 1.1]) == pytest.approx(1 / 15)
    rng = random.Random(3)
    a, b = [rng.gauss(0, 1) for _ in range(15)], [rng.gauss(0, 1) for _ in range(15)]
    sampled = evidence.permutation_p(a, b, draws=20_000)  # C(30, 15) = 1.55e8 relabellings: sampled
    assert 0.0 < sampled <= 1.0
    assert evidence.permutation_p(a, b, draws=20_000, seed=1) == pytest.approx(sampled, abs=0.02)


def test_permutation_p_is_uniform_under_the_null():
    rng = random.Random(4)
    ps = [
        evidence.permutation_p([rng.gauss(0, 1) for _ in range(4)], [rng.gauss(0, 1) for _ in range(4)])
        for _ in range(400)
    ]
    assert 0.02 < sum(p <= 0.05 for p in ps) / 400 < 0.09  # exact test over 70 relabellings: P(p ≤ 0.05) ≈ 0.057


def test_fishers_exact_test_two_sided():
    # 3/3 against 0/3: P(k) = C(3, k)·C(3, 3 − k)/C(6, 3) = 1/20, 9/20, 9/20, 1/20; the two tables as unlikely as the
    # observed one (k = 3 and k = 0): p = 2/20
    assert evidence.fisher_exact_p(3, 3, 0, 3) == pytest.approx(0.1, rel=1e-12)
    assert evidence.fisher_exact_p(2, 4, 2, 4) == 1.0
