"""Whether a reward result can be trained on: its score and its PRM label are finite numbers.

`value_problem` / `result_problem` say why not for a reward-loop result whose score or PRM label is NaN, ±inf or
not a number (a string, None). Two places ask: the start-up dry run (`checks.inputs.reward_dry_run`)
refuses the reward function that returned it, and during the run `hardening.reward_failures.guarded_score`
turns it into a failed row (reward 0, no PRM label; counted in ``reward/failed_*`` and stopped above
``prime.max_failed_rollout_ratio``).

Nothing here imports torch, veRL or Ray.
"""

from __future__ import annotations

import math
from typing import Any

NON_FINITE = "non-finite"  # how a value problem starts: "non-finite score nan"
NON_NUMBER = "non-number"  # "non-number score 'abc' (str)"
MAX_REPR_CHARS = 80


def value_problem(quantity: str, value: Any) -> str | None:
    """Why `value` cannot be trained on — "non-finite score nan", "non-number score 'abc' (str)" — or None
    when it is a finite number (anything `float()` takes, strings excepted: a Python or numpy number, a
    0-d tensor)."""
    if isinstance(value, (str, bytes)):
        number = None
    else:
        try:
            number = float(value)
        except (TypeError, ValueError):
            number = None
    if number is None:
        text = repr(value)
        text = text if len(text) <= MAX_REPR_CHARS else text[: MAX_REPR_CHARS - 3] + "..."
        return f"{NON_NUMBER} {quantity} {text} ({type(value).__name__})"
    if not math.isfinite(number):
        return f"{NON_FINITE} {quantity} {number}"
    return None


def is_value_problem(error: str) -> bool:
    """Whether a failed row's ``reward_error`` is a `value_problem` (else it is the exception the reward raised,
    "Type: message", whose type name has no hyphen)."""
    return error.startswith((NON_FINITE, NON_NUMBER))


def label_quantity(label_key: str) -> str:
    return f"PRM label {label_key!r}"


def result_problem(result: dict, label_key: str | None) -> str | None:
    """The first `value_problem` of a reward-loop result ({"reward_score", "reward_extra_info"}): its score,
    then its PRM label ``reward_extra_info[label_key]`` when it has one; None when both are finite numbers."""
    problem = value_problem("score", result.get("reward_score"))
    info = result.get("reward_extra_info") or {}
    if problem is None and label_key and label_key in info:
        problem = value_problem(label_quantity(label_key), info[label_key])
    return problem
