"""A PRIME run that says when its PRM has gone bad.

Two conditions, checked every step once the gate's running mean has seen its horizon (`WARMUP_STEPS` =
1 / (1 − `GATE_EMA_DECAY`) steps):

* **ranking**: ā ≤ ½, ā the running mean of `prm/dpo_acc_before_mixed` (the PRM's pairwise accuracy, before its
  update, on fresh responses of groups that hold a right and a wrong answer; the gate's input). A PRM at or below
  chance gives the actor a process term that is noise, or that pushes towards the wrong answers.
* **silent** (`prime_grpo` only): for the last `WARMUP_STEPS` steps no group's spread σ_g(z) reached
  `algorithm.prime.process_std_threshold` (`prm/process_groups_on` = 0): the PRM's log-ratio has not grown out of
  its reference's (in bf16, its rounding floor) and PRIME runs as GRPO.

Each condition logs a 0/1 metric every step (`prm/alert/ranking`, `prm/alert/silent`: a dashboard alerts on
them) and prints one warning when it starts to hold, naming the metric, its value, what it means and the
overrides that answer it; the next warning comes after the condition has cleared and holds again.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from verl_prime_lora.algo.core_algos import GATE_EMA_DECAY

WARMUP_STEPS = round(1.0 / (1.0 - GATE_EMA_DECAY))
RANKING_METRIC, SILENT_METRIC = "prm/alert/ranking", "prm/alert/silent"


@dataclass
class PrmAlarm:
    """What the run watches of its PRM; `check` is called once a step with that step's metrics."""

    estimator: str
    process_gate: float | None
    threshold: float
    steps: int = 0
    steps_without_process_term: int = 0
    holding: set[str] = field(default_factory=set)

    def check(self, metrics: dict[str, float]) -> tuple[dict[str, float], list[str]]:
        """The alert metrics of this step and the warnings to print (at most one per condition)."""
        self.steps += 1
        groups_on = metrics.get("prm/process_groups_on")  # absent: no group of two or more rows, nothing to count
        if groups_on is not None:
            self.steps_without_process_term = 0 if groups_on > 0 else self.steps_without_process_term + 1
        warmed_up = self.steps >= WARMUP_STEPS
        ema = float(metrics["prm/dpo_acc_before_mixed_ema"])
        conditions = {
            RANKING_METRIC: warmed_up and ema <= 0.5,
            SILENT_METRIC: self.estimator == "prime_grpo" and self.steps_without_process_term >= WARMUP_STEPS,
        }
        warnings = [self._warning(name, metrics) for name, on in conditions.items() if on and name not in self.holding]
        self.holding = {name for name, on in conditions.items() if on}
        return {name: float(on) for name, on in conditions.items()}, warnings

    def _warning(self, name: str, metrics: dict[str, float]) -> str:
        if name == RANKING_METRIC:
            text = (
                f"PRIME: the PRM ranks fresh responses at or below chance: the running mean of "
                f"prm/dpo_acc_before_mixed is {float(metrics['prm/dpo_acc_before_mixed_ema']):.3f} (½ = chance) after "
                f"{self.steps} steps. Its process term is noise, or pushes the actor towards wrong answers."
            )
            if self.process_gate is not None:
                text += (
                    f" The process gate (algorithm.prime.process_gate={self.process_gate}) has closed: weight "
                    f"{float(metrics.get('prm/process_gate', 0.0)):.2f}, the run trains on the outcome alone until the "
                    "ranking recovers."
                )
            else:
                text += " The gate is off: the process term keeps its full weight."
            return (
                text + " Answers: prime.prm.reference=policy (the frozen initial weights share the policy's shift), "
                "algorithm.prime.process_gate=0.75 (weight the term by the ranking), a larger prime.prm.optim.lr or "
                "prime.prm.epochs, +recipe=prompt_filter (groups with a right and a wrong answer). "
                f"Metric: {RANKING_METRIC}."
            )
        return (
            f"PRIME: no group's process spread reached algorithm.prime.process_std_threshold={self.threshold:g} "
            f"in the last {self.steps_without_process_term} steps (prm/process_groups_on = 0; "
            f"prm/process_group_std/max {float(metrics.get('prm/process_group_std/max', 0.0)):.2e}): the PRM's "
            "log-ratio has not grown out of its reference's (in bf16, out of its rounding) and the run trains as "
            "GRPO. Answers: a larger prime.prm.optim.lr or prime.prm.epochs; check prm/ce_loss falls below ln 2. "
            f"Metric: {SILENT_METRIC}."
        )
