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
