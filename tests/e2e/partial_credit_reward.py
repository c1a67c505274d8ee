"""Test-only reward: partial credit, so a random tiny model gets non-zero GRPO advantages.

veRL's rule-based scorer gives a random model 0 on every arithmetic problem, every group's rewards
are then equal and every advantage is 0 — nothing trains. Here a response earns the share of its
characters that are digits (varies from sample to sample) plus 1 for the right boxed answer.
"""

import re

_BOXED = re.compile(r"\\boxed\{([^{}]*)\}")


def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    digit_share = sum(char.isdigit() for char in solution_str) / max(len(solution_str), 1)
    boxed = _BOXED.findall(solution_str)
    correct = bool(boxed) and boxed[-1].strip() == str(ground_truth).strip()
    return float(correct) + digit_share
