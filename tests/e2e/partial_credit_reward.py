"""Test-only reward: partial credit, so a random tiny model gets non-zero GRPO advantages.

veRL's rule-based scorer gives a random model 0 on every arithmetic problem, every group's rewards
are then equal and every advantage is 0 — nothing trains. Here a response earns the share of its
characters that are ASCII letters or digits, plus 1 for the right boxed answer. A random model's
responses mix word pieces with stray bytes, so that share differs between any two different samples
(e.g. on the peaky tiny model). The share of digits alone, used before, was 0 for every
response of a step on some CPUs (digits are rare): all advantages 0, a flaky test.
"""

import re

_BOXED = re.compile(r"\\boxed\{([^{}]*)\}")


def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    word_share = sum(char.isascii() and char.isalnum() for char in solution_str) / max(len(solution_str), 1)
    boxed = _BOXED.findall(solution_str)
    correct = bool(boxed) and boxed[-1].strip() == str(ground_truth).strip()
    return float(correct) + word_share
