r"""A PRIME run that says when its PRM has gone bad, or when it pays for a PRM it does not use.

Two conditions, checked every step on the step's `ProcessSignals`:

* **ranking**: the PRM ranks fresh responses *below* chance, by evidence, not by a mean that a PRM at chance sits on.
  Each step's `prm/ranking_z_before` (the stratified Mann–Whitney z of the PRM's ranking, before its update, of the
  step's responses against their outcome; ≈ N(0, 1) at chance, `implicit_prm.prm_ranking_z`) is pooled with
  exponentially decaying weights d^{t−s} (d = `GATE_EMA_DECAY`, the gate's horizon):

      Z_t = S_t / √Q_t,   S_t = d·S_{t−1} + z_t,   Q_t = d²·Q_{t−1} + 1,

  a weighted Stouffer Z that is exactly N(0, 1) at every step while the PRM ranks at chance (independent z_s), so it
  needs no warm-up. The condition holds while Z_t ≤ −`RANKING_Z_ALARM` (4). Simulated (per-step z i.i.d.): at chance
  a run of 1500 steps crosses it at least once with probability 0.03 (at −3 it would be 0.59); a PRM whose per-step
  z averages −1 is named within 20 steps with probability 0.69 and within 60 with 0.997, one at −1.5 (pairwise
  accuracy 0.30 on the seed's 4 groups of 6 with 3 right answers each) within 10 steps with 0.80.
  The running Z is logged as `prm/ranking_z_before_running` and starts again at a resume.
* **unused**: the effective weight of the process term, e_t = w_t · (share of groups over the std threshold,
  `prm/process_groups_on`; 1 where the estimator has no threshold), averaged over the last `UNUSED_WINDOW` (5)
  steps, is below `UNUSED_WEIGHT` (0.15); once holding it clears at 2 × that mean. The run then trains as GRPO while
  paying for the PRM's forwards and update. In the bf16 study every gated run had a mean of 0.00–0.11 over its
  steps 1–5 (gate weight 0.045 on average, PRMs ranking at chance); a PRM that ranks at 0.65 from its first step
  opens the gate to a mean of 0.16 over steps 1–5 (w = clip((ā − ½)/(0.75 − ½), 0, 1), ā from ½ with d = 0.9), so
  only a PRM slower than that is named, and it clears as the gate opens. Not checked with `process_coef` = 0.

Each condition logs a 0/1 metric every step (`prm/alert/ranking`, `prm/alert/unused`: a dashboard alerts on them)
and prints one warning when it starts to hold, naming the metric, its value, what it means and the overrides that
answer it; the next warning comes after the condition has cleared and holds again.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field

from verl_prime_lora.algo.process_gate import GATE_EMA_DECAY

RANKING_Z_ALARM = 4.0
UNUSED_WEIGHT, UNUSED_WINDOW = 0.15, 5
RANKING_METRIC, UNUSED_METRIC = "prm/alert/ranking", "prm/alert/unused"
RUNNING_Z_METRIC, EFFECTIVE_WEIGHT_METRIC = "prm/ranking_z_before_running", "prm/process_weight_effective"


@dataclass(frozen=True)
class ProcessSignals:
    """What a step tells the alarm of its PRM: the held-out ranking's z (`prm/ranking_z_before`), the gate's running
    mean ā and weight w, the share of groups over the std threshold (None: no threshold, or no group) and the largest
    group spread σ_g(z) (None: not measured)."""

    ranking_z_before: float
    pairwise_ema: float
    gate: float
    groups_on: float | None = None
    group_std_max: float | None = None

    @property
    def effective_weight(self) -> float:
        """e = w · share of groups on: how much of the process term reaches the actor this step."""
        return self.gate * (1.0 if self.groups_on is None else self.groups_on)


@dataclass
class PrmAlarm:
    """What the run watches of its PRM; `check` is called once a step."""

    process_gate: float | None
    threshold: float
    process_coef: float = 1.0
    threshold_per_token: float = 0.0
    ranking_sum: float = 0.0
    ranking_norm: float = 0.0
    recent_weights: deque = field(default_factory=lambda: deque(maxlen=UNUSED_WINDOW))
    holding: set[str] = field(default_factory=set)

    def running_z(self, step_z: float) -> float:
        """Z_t after this step's z (the module docstring)."""
        self.ranking_sum = GATE_EMA_DECAY * self.ranking_sum + step_z
        self.ranking_norm = GATE_EMA_DECAY**2 * self.ranking_norm + 1.0
        return self.ranking_sum / math.sqrt(self.ranking_norm)

    def check(self, signals: ProcessSignals) -> tuple[dict[str, float], list[str]]:
        """This step's alarm metrics (the alerts, the running Z, the effective weight) and the warnings to print (at
        most one per condition)."""
        z = self.running_z(signals.ranking_z_before)
        self.recent_weights.append(signals.effective_weight)
        mean_weight = sum(self.recent_weights) / len(self.recent_weights)
        unused_bar = UNUSED_WEIGHT * (2.0 if UNUSED_METRIC in self.holding else 1.0)
        conditions = {
            RANKING_METRIC: z <= -RANKING_Z_ALARM,
            UNUSED_METRIC: self.process_coef != 0.0
            and len(self.recent_weights) == UNUSED_WINDOW
            and mean_weight < unused_bar,
        }
        warnings = [
            self._warning(name, signals, z, mean_weight)
            for name, on in conditions.items()
            if on and name not in self.holding
        ]
        self.holding = {name for name, on in conditions.items() if on}
        metrics = {name: float(on) for name, on in conditions.items()}
        metrics[RUNNING_Z_METRIC] = z
        metrics[EFFECTIVE_WEIGHT_METRIC] = signals.effective_weight
        return metrics, warnings

    def _warning(self, name: str, signals: ProcessSignals, z: float, mean_weight: float) -> str:
        if name == RANKING_METRIC:
            text = (
                f"PRIME: the PRM ranks fresh responses below chance: the running z of prm/ranking_z_before is {z:.1f} "
                f"(at or below -{RANKING_Z_ALARM:g}; 0 = chance), prm/dpo_acc_before_mixed_ema "
                f"{signals.pairwise_ema:.3f}. Its process term pushes the actor towards wrong answers."
            )
            if self.process_gate is not None:
                text += f" The process gate holds it at weight {signals.gate:.2f}."
            else:
                text += " The gate is off: the process term keeps its full weight."
            return (
                text + " Answers: prime.prm.reference=policy (the frozen initial weights share the policy's own "
                "shift), algorithm.prime.process_gate=0.75 if it is off, +recipe=prompt_filter (groups with a right "
                f"and a wrong answer); check that prime.prm.label_key is the outcome. Metric: {RANKING_METRIC}."
            )
        causes = []
        if self.process_gate is not None and signals.gate < 1.0:
            causes.append(
                f"the gate (algorithm.prime.process_gate={self.process_gate:g}) is at {signals.gate:.2f}: the PRM's "
                f"ranking of fresh responses, prm/dpo_acc_before_mixed_ema {signals.pairwise_ema:.3f}, is near chance"
            )
        if signals.groups_on is not None and signals.groups_on < 1.0:
            spread = "" if signals.group_std_max is None else f", prm/process_group_std/max {signals.group_std_max:.2e}"
            per_token = (
                f" + process_std_threshold_per_token={self.threshold_per_token:g} × mean length"
                if self.threshold_per_token
                else ""
            )
            causes.append(
                f"{signals.groups_on:.0%} of groups reach algorithm.prime.process_std_threshold={self.threshold:g}"
                f"{per_token}{spread}"
            )
        return (
            f"PRIME: the process term's effective weight (gate × share of groups over the std threshold) averaged "
            f"{mean_weight:.2f} over the last {UNUSED_WINDOW} steps: the run trains as GRPO and pays for a PRM it "
            f"does not use. Now: {'; '.join(causes) or 'both factors are at 1 this step'}. Answers: a PRM that ranks "
            "(prime.prm.reference=policy, prime.prm.epochs, +recipe=prompt_filter); a threshold below the group "
            "spreads the run logs; or algorithm.adv_estimator=grpo trainer.v1.trainer_mode=sync to stop paying for "
            f"it. Metric: {UNUSED_METRIC}."
        )
