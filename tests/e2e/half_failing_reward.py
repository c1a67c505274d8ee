"""Test-only reward that raises on about half of the rollouts (tests/e2e/test_reward_failures_e2e.py).

Which ones is decided by the parity of the response's and ground truth's character codes, so it varies
between the samples of one prompt. The driver's reward dry run (`input_checks`, a synthetic response
that starts with ``<think>``) is always scored, so the run gets past the checks before Ray. Scored rows
get `acc` = 1 when the response holds a digit (varied labels for the PRM, as prime_label_reward.py).
"""


def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    if not solution_str.startswith("<think>") and (sum(map(ord, solution_str + str(ground_truth))) % 2):
        raise ValueError(f"half_failing_reward: cannot score a response of {len(solution_str)} characters")
    acc = float(any(char.isdigit() for char in solution_str))
    return {"score": acc, "acc": acc, "format": 0.0}
