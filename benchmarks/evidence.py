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

Across seeds (benchmarks/learning.py), a quantity's mean comes with its 95 % Student-t interval (`mean_ci95`);
two arms compare by the Welch interval of their difference (`welch_ci95`) and a permutation test (`permutation_p`).
"""

from __future__ import annotations

import functools
import itertools
import math
import random
from statistics import NormalDist


def normal_quantile(p: float) -> float:
    """z_p of the standard normal."""
    return NormalDist().inv_cdf(p)


def validation_rise_bound(before: float, afters: list[float], n: int, alpha: float = 1e-3) -> float:
    """Lower (1 − α) confidence bound of max(afters) − before, accuracies of n problems (see the module)."""
    best = max(afters)
    z = normal_quantile(1 - alpha / len(afters))
    se = math.sqrt(before * (1 - before) / n + best * (1 - best) / n)
    return best - before - z * se


def pooled_z(step_z: list[float]) -> float:
    """Stouffer's Z = Σ_s z_s / √S of independent per-step z (0 for no step)."""
    return sum(step_z) / math.sqrt(len(step_z)) if step_z else 0.0


def pooled_z_threshold(alpha: float = 1e-3) -> float:
    """The Z above which chance is rejected at one-sided level α."""
    return normal_quantile(1 - alpha)


def t_cdf(x: float, df: float) -> float:
    """P(T ≤ x) for Student's t with `df` (> 0, not necessarily whole) degrees of freedom: ½ + ∫_0^x f,
    the density f(u) = Γ((ν+1)/2) / (√(νπ) Γ(ν/2)) · (1 + u²/ν)^(−(ν+1)/2) integrated by Simpson's rule."""
    if x < 0:
        return 1.0 - t_cdf(-x, df)
    log_c = math.lgamma((df + 1) / 2) - math.lgamma(df / 2) - 0.5 * math.log(df * math.pi)
    steps = 2000
    h = x / steps
    total = 0.0
    for i in range(steps + 1):
        u = i * h
        weight = 1 if i in (0, steps) else 4 if i % 2 else 2
        total += weight * math.exp(log_c - (df + 1) / 2 * math.log1p(u * u / df))
    return 0.5 + total * h / 3


@functools.lru_cache(maxsize=256)
def t_quantile(p: float, df: float) -> float:
    """t_{p, df}, Student's t quantile (bisection on `t_cdf`), for ½ ≤ p < 1."""
    low, high = 0.0, 1.0
    while t_cdf(high, df) < p:
        high *= 2
    for _ in range(60):
        mid = (low + high) / 2
        low, high = (mid, high) if t_cdf(mid, df) < p else (low, mid)
    return (low + high) / 2


def _mean_sd(values: list[float]) -> tuple[float, float]:
    mean = sum(values) / len(values)
    return mean, math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))


def mean_ci95(values: list[float]) -> tuple[float, float, float]:
    """Mean of independent runs (seeds) and its 95 % Student-t interval, mean ± t_{0.975, n−1}·s/√n
    (the interval is the mean itself for one run)."""
    n = len(values)
    if n < 2:
        return values[0], values[0], values[0]
    mean, sd = _mean_sd(values)
    half = t_quantile(0.975, n - 1) * sd / math.sqrt(n)
    return mean, mean - half, mean + half


def welch_ci95(a: list[float], b: list[float]) -> tuple[float, float, float]:
    """mean(a) − mean(b) and its 95 % Welch interval: ± t_{0.975, ν}·√(s_a²/n_a + s_b²/n_b), ν by
    Welch–Satterthwaite (unpaired runs: vLLM's sampling is not seeded, so seed i of two arms is no pair)."""
    (mean_a, sd_a), (mean_b, sd_b) = _mean_sd(a), _mean_sd(b)
    va, vb = sd_a**2 / len(a), sd_b**2 / len(b)
    diff, se = mean_a - mean_b, math.sqrt(va + vb)
    if se == 0:
        return diff, diff, diff
    df = (va + vb) ** 2 / (va**2 / (len(a) - 1) + vb**2 / (len(b) - 1))
    half = t_quantile(0.975, df) * se
    return diff, diff - half, diff + half


def permutation_p(a: list[float], b: list[float], draws: int = 200_000, seed: int = 0) -> float:
    """Two-sided p of mean(a) − mean(b) under exchangeable labels: the share of relabellings (all of them when
    there are at most `draws`, else `draws` random ones, the observed one counted) whose |difference| is at
    least the observed one."""
    pooled, n_a = [*a, *b], len(a)
    total = sum(pooled)

    def gap(chosen_sum: float) -> float:
        return abs(chosen_sum / n_a - (total - chosen_sum) / (len(pooled) - n_a))

    observed = gap(sum(a)) - 1e-12
    if math.comb(len(pooled), n_a) <= draws:
        sums = [sum(pooled[i] for i in chosen) for chosen in itertools.combinations(range(len(pooled)), n_a)]
        return sum(gap(s) >= observed for s in sums) / len(sums)
    rng = random.Random(seed)
    hits = sum(gap(sum(rng.sample(pooled, n_a))) >= observed for _ in range(draws))
    return (hits + 1) / (draws + 1)


def fisher_exact_p(hits_a: int, n_a: int, hits_b: int, n_b: int) -> float:
    """Two-sided p of Fisher's exact test on the 2×2 table (hits_a, n_a − hits_a; hits_b, n_b − hits_b): the sum,
    over the tables with the same margins, of the hypergeometric probabilities
        P(k) = C(n_a, k)·C(n_b, K − k) / C(n_a + n_b, K),   K = hits_a + hits_b,
    that are at most the observed table's (with a relative tolerance of 1e-7 for ties)."""
    total = hits_a + hits_b
    denominator = math.comb(n_a + n_b, total)
    probabilities = {
        k: math.comb(n_a, k) * math.comb(n_b, total - k) / denominator
        for k in range(max(0, total - n_b), min(n_a, total) + 1)
    }
    observed = probabilities[hits_a] * (1 + 1e-7)
    return min(1.0, sum(p for p in probabilities.values() if p <= observed))
