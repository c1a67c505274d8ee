"""Test-only reward for the PRIME end-to-end tests: varied scores AND varied 0/1 `acc` labels.

A random tiny model never answers correctly, so a real verifier gives every response acc = 0: the
PRM would then only learn "everything is wrong" and every group's outcome advantage would be 0.
Here `acc` = 1 when the response holds a digit at all (the tiny tokenizer has one token per digit,
so about 70 % of a default tiny model's responses do: it varies between samples of one prompt, and
about half of the n = 2 groups are mixed). `score` = acc + the share of the response's characters that
are ASCII letters or digits: a random model mixes word pieces with stray bytes, so that share differs
between any two different samples and the outcome advantages are never all 0, even on a model that
writes no digit. `format` is a decoy the PRM must never be trained on (it is the opposite of `acc`).
"""


def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    acc = float(any(char.isdigit() for char in solution_str))
    word_share = sum(char.isascii() and char.isalnum() for char in solution_str) / max(len(solution_str), 1)
    return {"score": acc + word_share, "acc": acc, "format": 1.0 - acc}
