"""Test-only reward whose PRM label disagrees with the outcome: `prm_label` = 1 − `acc`.

`acc` = 1 when the response holds a digit, `score` = acc + its share of ASCII letters and digits (as in
prime_label_reward.py, which veRL's loader cannot import from here). A run that trains its PRM on
`prime.prm.label_key=prm_label` learns to rank the responses without a digit (outcome wrong) above those with
one (outcome right): a PRM gone bad on purpose, which the run's alarm must name (`prime.prm_alarm`).
"""


def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    acc = float(any(char.isdigit() for char in solution_str))
    word_share = sum(char.isascii() and char.isalnum() for char in solution_str) / max(len(solution_str), 1)
    return {"score": acc + word_share, "acc": acc, "prm_label": 1.0 - acc}
