"""Process credit with known answers, for the chain task: an oracle that knows the first wrong step, and PRIME's
own token rewards shuffled within each response.

Both replace the PRM's token rewards through `prime.process_rewards_fn` (the trainer calls them once a step),
so they reach the actor by exactly the path PRIME's rewards take: `algorithm.prime.process_norm`'s group
normalisation, the suffix sum, `process_coef` (run them with `algorithm.prime.process_gate=null`: the gate
reads the PRM's accuracy, which says nothing about these rewards).

* `oracle_rewards`: r[i,t] = −1/n_i on the n_i tokens that overlap response i's first error
  (`first_error_span`: its first wrong step — a wrong total, a miscopied operand, a step past the last one —
  or, in a wrong answer without one, where the error must lie), 0 elsewhere and in right responses without a
  wrong step. Its sequence sum z_i is −1 for every wrong answer: the outcome's split, so at the first token its
  process advantage is the outcome's; its suffix sum blames the tokens up to the error and none after it.
  (Blaming wrong steps only would leave a wrong answer that skipped the steps unblamed, above one that wrote
  them and slipped: on this task that steers the policy to skip them.)
  It needs `compute_score` below as the run's reward, which finds the error where the chain is known.
* `shuffled_rewards`: PRIME's r[i,·] permuted over response i's tokens: the same z_i (so the same
  response-level ranking), the positions random. What PRIME gains over it is what its placement of credit
  within a response is worth.
* `oracle_shuffled_rewards`: `oracle_rewards` permuted the same way: the oracle's z_i, its positions random (the
  planted-error study's control for the oracle, `benchmarks/planted_error_task.py`).

    reward.custom_reward_function.path=pkg://benchmarks.credit_controls reward.custom_reward_function.name=compute_score
    prime.process_rewards_fn.path=pkg://benchmarks.credit_controls prime.process_rewards_fn.name=oracle_rewards
"""

from __future__ import annotations

import torch

from benchmarks.lib.step_credit import label_steps
from verl_prime_lora.demo.chain_task import Chain
from verl_prime_lora.rewards import math_format

WRONG_START, WRONG_END = "first_error_start", "first_error_end"  # reward_extra_info keys; -1: no error
SHUFFLE_SEED = 0


def first_error_span(chain: Chain, response: str, correct: bool) -> tuple[int, int]:
    """The characters of `response`'s first error against `chain`, (-1, -1) for none: its first wrong step
    (`step_credit.label_steps`); in a wrong answer without one, where the error must lie: the one step of a
    response that skipped the steps (`<think>7+5-3+8=16</think>`), what follows the last step of one whose
    steps are right but stop short or box a wrong total, the whole of one that does not parse."""
    labels = label_steps(chain, response)
    if labels.first_wrong is not None:
        return labels.spans[labels.first_wrong]
    if correct:
        return -1, -1
    if labels.kind == "shortcut":
        open_at = response.find("<think>") + len("<think>")
        return open_at, response.find("</think>", open_at)
    if labels.kind in ("right", "short"):
        return labels.spans[-1][1], len(response)
    return 0, len(response)


def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs) -> dict:
    """The recipe's reward (`math_format.compute_score`), plus the character span of the response's first
    error against the chain in `extra_info["question"]` (`first_error_span`; `WRONG_START`, `WRONG_END`)."""
    result = math_format.compute_score(data_source, solution_str, ground_truth, extra_info, **kwargs)
    start = end = -1
    question = (extra_info or {}).get("question")
    if question:
        start, end = first_error_span(Chain.from_question(question), solution_str, result["acc"] == 1.0)
    return {**result, WRONG_START: start, WRONG_END: end}


def token_spans(tokenizer, ids: list[int]) -> tuple[list[int], int]:
    """Where each token starts in the decoded response (special tokens dropped, as the reward sees it), and the
    text's length: token k covers [starts[k], starts[k+1])."""
    starts = [len(tokenizer.decode(ids[:k], skip_special_tokens=True)) for k in range(len(ids))]
    return starts, len(tokenizer.decode(ids, skip_special_tokens=True))


def oracle_rewards(process_rewards, response_mask, responses, reward_infos, tokenizer) -> torch.Tensor:
    """−1 spread evenly over the tokens that overlap each response's first error; 0 everywhere else."""
    rewards = torch.zeros_like(process_rewards)
    for row, info in enumerate(reward_infos):
        low, high = int(info.get(WRONG_START, -1)), int(info.get(WRONG_END, -1))
        if low < 0:
            continue
        positions = response_mask[row].nonzero().flatten()
        starts, length = token_spans(tokenizer, responses[row, positions].tolist())
        ends = [*starts[1:], length]
        hit = [k for k, (a, b) in enumerate(zip(starts, ends, strict=True)) if a < high and b > low]
        if hit:
            rewards[row, positions[hit]] = -1.0 / len(hit)
    return rewards


_generator = torch.Generator().manual_seed(SHUFFLE_SEED)


def shuffled_rewards(process_rewards, response_mask, responses, reward_infos, tokenizer) -> torch.Tensor:
    """PRIME's token rewards, each response's permuted at random over its own response tokens."""
    rewards = process_rewards.clone()
    for row in range(process_rewards.shape[0]):
        positions = response_mask[row].nonzero().flatten()
        order = torch.randperm(len(positions), generator=_generator)
        rewards[row, positions] = process_rewards[row, positions[order]]
    return rewards


def oracle_shuffled_rewards(process_rewards, response_mask, responses, reward_infos, tokenizer) -> torch.Tensor:
    """`oracle_rewards`, each response's permuted at random over its own response tokens (`shuffled_rewards`): the
    oracle's z_i, its positions random. What the oracle gains over it is what placing its credit is worth."""
    oracle = oracle_rewards(process_rewards, response_mask, responses, reward_infos, tokenizer)
    return shuffled_rewards(oracle, response_mask, responses, reward_infos, tokenizer)
