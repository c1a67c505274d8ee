"""Reading a row's ``reward_extra_info`` back from veRL's TransferQueue, without the reward's dependencies.

The PRM worker and the prompt filter run in Ray workers that need only this reader; importing
`verl_prime_lora.reward` (math-verify, sympy) there would cost every worker those imports.
"""

from typing import Any


def reward_extra_info(extra_fields: Any) -> dict:
    """The ``reward_extra_info`` dict (the reward function's result for one row) inside a trajectory's veRL
    ``extra_fields`` as TransferQueue returns them (a dict, or NonTensorData wrapping one); {} if absent."""
    fields = getattr(extra_fields, "data", extra_fields)
    info = fields.get("reward_extra_info") if isinstance(fields, dict) else None
    return info if isinstance(info, dict) else {}
