"""`pkg://benchmarks.credit_controls`: the path registered plans give veRL for the credit controls, which live in
`benchmarks.lib.credit_controls`."""

from benchmarks.lib.credit_controls import compute_score, oracle_rewards, oracle_shuffled_rewards, shuffled_rewards

__all__ = ["compute_score", "oracle_rewards", "oracle_shuffled_rewards", "shuffled_rewards"]
