"""Reading a row's ``reward_extra_info`` back from veRL's TransferQueue, without the reward's dependencies.

The PRM worker and the prompt filter run in Ray workers that need only this reader; importing
`verl_prime_lora.rewards.math_format` (math-verify, sympy) there would cost every worker those imports.
"""

from typing import Any

# reward_extra_info key: 1.0 when the reward function could not decide the outcome (its verifier timed out
# or failed, the ground truth is unusable). The row still gets its reward (0); the PRM has no label for it.
LABEL_UNKNOWN_KEY = "label_unknown"


def reward_extra_info(extra_fields: Any) -> dict:
    """The ``reward_extra_info`` dict (the reward function's result for one row) inside a trajectory's veRL
    ``extra_fields`` as TransferQueue returns them (a dict, or NonTensorData wrapping one); {} if absent."""
    fields = getattr(extra_fields, "data", extra_fields)
    info = fields.get("reward_extra_info") if isinstance(fields, dict) else None
    return info if isinstance(info, dict) else {}


def label_unknown(extra_fields: Any) -> bool:
    """Whether the row's reward function flagged its outcome as undecided (``LABEL_UNKNOWN_KEY`` > 0)."""
    return float(reward_extra_info(extra_fields).get(LABEL_UNKNOWN_KEY, 0.0) or 0.0) > 0
