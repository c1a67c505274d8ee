"""What a learning run shows with confidence: the statistics behind the demo's assertions and the benchmarks.

Two claims, each tested against chance with a one-sided error probability `alpha`:

* **The policy learned.** Greedy validation accuracy on the same n problems rose from p0 to the best later
  check p1. `validation_rise_bound` is the lower confidence bound of p1 − p0,
      (p1 − p0) − z_{1−α/k} · sqrt(p0(1 − p0)/n + p1(1 − p1)/n),
  with a Bonferroni factor k for picking the best of k later checks. The variance is that of two
  independent samples; the two checks score the same problems, whose positive correlation only lowers the
  variance of the difference, so the bound is conservative.
* **The PRM ranks right above wrong answers.** Each step logs `prm/ranking_z`, a stratified Mann–Whitney
  z (`implicit_prm.prm_ranking_z`): ≈ N(0, 1) when the PRM ranks at chance within every group. Steps hold
  different groups, so under chance their z are independent, and Stouffer's Z = Σ_s z_s / √S is ≈ N(0, 1)
  too: Z > z_{1−α} rejects chance at level α (`pooled_z`).

Across seeds (the studies), a quantity's mean comes with its 95 % Student-t interval (`mean_ci95`);
two arms compare by the Welch interval of their difference (`welch_ci95`) and a permutation test (`permutation_p`);
shares of runs by Fisher's exact test (`fisher_exact_p`). The distributions and tests are scipy.stats' (the `lab`
extra); Holm's adjustment of several p's is `analysis.adjusted`.
"""

from __future__ import annotations

import functools
import math
import warnings

import numpy as np
from scipy import stats


@functools.lru_cache(maxsize=256)
def _normal_quantile(q: float) -> float:
    """z_q = `scipy.stats.norm.ppf(q)` (cached: the simulations of the assertions' error rate ask it often)."""
    return float(stats.norm.ppf(q))


def validation_rise_bound(before: float, afters: list[float], n: int, alpha: float = 1e-3) -> float:
    """Lower (1 − α) confidence bound of max(afters) − before, accuracies of n problems (see the module):
    (p1 − p0) − z_{1−α/k} · sqrt(p0(1 − p0)/n + p1(1 − p1)/n), z_q = `scipy.stats.norm.ppf(q)`."""
    best = max(afters)
    z = _normal_quantile(1 - alpha / len(afters))
    se = math.sqrt(before * (1 - before) / n + best * (1 - best) / n)
    return best - before - z * se


def pooled_z(step_z: list[float]) -> float:
    """Stouffer's Z = Σ_s z_s / √S of independent per-step z (0 for no step)."""
    return sum(step_z) / math.sqrt(len(step_z)) if step_z else 0.0


def pooled_z_threshold(alpha: float = 1e-3) -> float:
    """The Z above which chance is rejected at one-sided level α: z_{1−α} of the standard normal."""
    return _normal_quantile(1 - alpha)


@functools.lru_cache(maxsize=256)
def t_quantile(p: float, df: float) -> float:
    """t_{p, df}, the p quantile of Student's t with `df` (> 0, not necessarily whole) degrees of freedom
    (`scipy.stats.t.ppf`, cached)."""
    return float(stats.t.ppf(p, df))


def mean_ci95(values: list[float]) -> tuple[float, float, float]:
    """Mean of independent runs (seeds) and its 95 % Student-t interval, mean ± t_{0.975, n−1}·s/√n with s the
    sample standard deviation (n − 1 in its denominator); the interval is the value itself for one run or runs that
    all ended at the same value."""
    if min(values) == max(values):
        return values[0], values[0], values[0]
    mean = sum(values) / len(values)
    half = t_quantile(0.975, len(values) - 1) * float(stats.sem(values))
    return mean, mean - half, mean + half


def welch_ci95(a: list[float], b: list[float]) -> tuple[float, float, float]:
    """mean(a) − mean(b) and its 95 % Welch interval, ± t_{0.975, ν}·√(s_a²/n_a + s_b²/n_b) with ν by
    Welch–Satterthwaite, ν = (s_a²/n_a + s_b²/n_b)² / ((s_a²/n_a)²/(n_a − 1) + (s_b²/n_b)²/(n_b − 1))
    (`scipy.stats.ttest_ind(a, b, equal_var=False)`; unpaired runs: vLLM's sampling is not seeded, so seed i of two
    arms is no pair). An arm whose runs all ended at the same value has s = 0; both such: the interval is the
    difference itself."""
    diff = sum(a) / len(a) - sum(b) / len(b)
    constant = [min(arm) == max(arm) for arm in (a, b)]
    if all(constant):
        return diff, diff, diff
    with warnings.catch_warnings():
        if any(constant):  # scipy warns of lost precision in a variance of equal values; it is 0, as it should be
            warnings.filterwarnings("ignore", "Precision loss", RuntimeWarning)
        low, high = stats.ttest_ind(a, b, equal_var=False).confidence_interval(0.95)
    return diff, float(low), float(high)


def _mean_gap(x: np.ndarray, y: np.ndarray, axis: int = -1) -> np.ndarray:
    """|mean(x) − mean(y)| rounded to 12 decimals: relabellings whose difference equals the observed one but for
    floating-point rounding (endpoints are means of accuracies, so equal differences are common) are ties."""
    return np.round(np.abs(np.mean(x, axis=axis) - np.mean(y, axis=axis)), 12)


def permutation_p(a: list[float], b: list[float], draws: int = 200_000, seed: int = 0) -> float:
    """Two-sided p of mean(a) − mean(b) under exchangeable labels: the share of relabellings whose
    |mean difference| is at least the observed one (`scipy.stats.permutation_test`; differences compared at 12
    decimals, so that equal ones tie). All C(n_a + n_b, n_a) relabellings when there are at most `draws`
    (exact: the count over all of them); else `draws` random ones, with the observed relabelling counted,
    p = (hits + 1)/(draws + 1): uniform orderings of the pooled runs split at n_a, drawn from
    `numpy.random.default_rng(seed)` (scipy's `pairings` permutations of the one pooled sample, drawn in one array,
    where its random relabellings of two samples are drawn one by one, about ten times slower)."""
    n_a = len(a)
    if math.comb(n_a + len(b), n_a) <= draws:
        test = stats.permutation_test(
            (np.asarray(a, float), np.asarray(b, float)),
            _mean_gap,
            permutation_type="independent",
            vectorized=True,
            n_resamples=draws,
            alternative="greater",
        )
    else:
        test = stats.permutation_test(
            (np.asarray([*a, *b], float),),
            lambda pooled, axis=-1: _mean_gap(pooled[..., :n_a], pooled[..., n_a:]),
            permutation_type="pairings",
            vectorized=True,
            n_resamples=draws,
            alternative="greater",
            rng=np.random.default_rng(seed),
        )
    return float(test.pvalue)


def fisher_exact_p(hits_a: int, n_a: int, hits_b: int, n_b: int) -> float:
    """Two-sided p of Fisher's exact test on the 2×2 table (hits_a, n_a − hits_a; hits_b, n_b − hits_b): the sum,
    over the tables with the same margins, of the hypergeometric probabilities
        P(k) = C(n_a, k)·C(n_b, K − k) / C(n_a + n_b, K),   K = hits_a + hits_b,
    that are at most the observed table's (`scipy.stats.fisher_exact`, ties within a relative 1e-7)."""
    return float(stats.fisher_exact([[hits_a, n_a - hits_a], [hits_b, n_b - hits_b]]).pvalue)
