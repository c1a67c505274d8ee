"""What a learning run shows with confidence: the statistics behind the demo's assertions and the benchmarks.

Two claims, each tested against chance with a one-sided error probability `alpha`:

* **The policy learned.** Greedy validation accuracy on the same n problems rose from p0 to the best later
  check p1. `validation_rise_bound` is the lower confidence bound of p1 − p0,
      (p1 − p0) − z_{1−α/k} · sqrt(p0(1 − p0)/n + p1(1 − p1)/n),
  with a Bonferroni factor k for picking the best of k later checks. The variance is that of two
  independent samples; the two checks score the same problems, whose positive correlation only lowers the
  variance of the difference, so the bound is conservative.
* **The PRM ranks right above wrong answers.** Each step logs `prm/ranking_z`, a stratified Mann–Whitney
  z (`core_algos.prm_ranking_z`): ≈ N(0, 1) when the PRM ranks at chance within every group. Steps hold
  different groups, so under chance their z are independent, and Stouffer's Z = Σ_s z_s / √S is ≈ N(0, 1)
  too: Z > z_{1−α} rejects chance at level α (`pooled_z`).

Across seeds (benchmarks/learning.py), a quantity's mean comes with its 95 % Student-t interval (`mean_ci95`).
"""

from __future__ import annotations

import math
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


# Student's t quantile t_{0.975, df} for the small numbers of seeds a CPU study runs; the normal's beyond.
_T_975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228}


def mean_ci95(values: list[float]) -> tuple[float, float, float]:
    """Mean of independent runs (seeds) and its 95 % Student-t interval, mean ± t_{0.975, n−1}·s/√n
    (the interval is the mean itself for one run)."""
    n = len(values)
    mean = sum(values) / n
    if n < 2:
        return mean, mean, mean
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    half = _T_975.get(n - 1, normal_quantile(0.975)) * sd / math.sqrt(n)
    return mean, mean - half, mean + half
