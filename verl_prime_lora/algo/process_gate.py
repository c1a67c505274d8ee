r"""The process gate: how much of PRIME's process term a step uses, from how well the PRM ranks fresh responses.

    w_t = clip((ā_t − ½) / (g − ½), 0, 1),    ā_t = d·ā_{t−1} + (1 − d)·a_t,   ā_0 = ½,   d = `GATE_EMA_DECAY`

a_t is the PRM's pairwise accuracy, before step t's update, on the step's groups that hold a right and a wrong
answer (`prm/dpo_acc_before_mixed`); g is `algorithm.prime.process_gate` (None: no gate, w = 1). A PRM that ranks a
fresh batch no better than chance (its reference does exactly that: z = 0) gets w = 0, so its process advantage,
whose scale the group normalisation fixes at O(1) whatever the PRM knows, cannot drown the outcome; from g on it
counts fully. The running mean makes one lucky step (a few mixed groups, few pairs) move w little.

`ProcessGate` holds ā, the gate's one piece of state, and gives it to a checkpoint as `state_dict()` (the key
`prm_pairwise_ema` of `global_step_N/prime_state.json`).
"""

from __future__ import annotations

GATE_EMA_DECAY = 0.9  # about the last 10 steps
STATE_KEY = "prm_pairwise_ema"


def ema(previous: float, value: float, decay: float) -> float:
    """Exponential moving average: decay·previous + (1 − decay)·value."""
    return decay * float(previous) + (1.0 - decay) * float(value)


def process_gate_weight(pairwise_acc: float, full_at: float | None) -> float:
    """w = clip((ā − ½) / (full_at − ½), 0, 1) of the running pairwise accuracy ā; 1 when `full_at` is None."""
    if full_at is None:
        return 1.0
    return min(1.0, max(0.0, (float(pairwise_acc) - 0.5) / (float(full_at) - 0.5)))


class ProcessGate:
    """ā and the weight it gives (the module docstring); `update` once a step, before the advantage."""

    def __init__(self, full_at: float | None, decay: float = GATE_EMA_DECAY):
        self.full_at, self.decay = full_at, decay
        self.pairwise_ema = 0.5  # chance, until the PRM has shown better

    @property
    def weight(self) -> float:
        return process_gate_weight(self.pairwise_ema, self.full_at)

    def update(self, pairwise_acc: float) -> float:
        """Move ā by this step's held-out pairwise accuracy; the step's weight w."""
        self.pairwise_ema = ema(self.pairwise_ema, pairwise_acc, self.decay)
        return self.weight

    def state_dict(self) -> dict[str, float]:
        return {STATE_KEY: self.pairwise_ema}

    def load_state_dict(self, state: dict) -> None:
        self.pairwise_ema = float(state[STATE_KEY])
