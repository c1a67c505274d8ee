"""The γ = 0 study's two measurements: `benchmarks/oracle_credit_scale.py` (the oracle's credit at the error against
the outcome advantage, which set its `process_coef`) and `benchmarks/planted_token_credit.py` (what the PRM pays at
the planted step), on a tiny tokenizer and random tiny models."""

import pytest
import torch

from benchmarks.studies.planted_error import task as planted_error_task
from benchmarks.studies.planted_gamma0 import oracle_credit_scale
from benchmarks.studies.planted_gamma0 import planted_token_credit as credit
from verl_prime_lora.demo.chain_task import DATA_SOURCE, Chain, make_splits, prompt_text, tokenizer_corpus
from verl_prime_lora.tools.tiny import build_model, build_tokenizer

CHAIN = Chain((4, 9, 3, 2), ("+", "-", "+"))  # 4+9=13, 13-3=10, 10+2=12: one +9 step
RIGHT = CHAIN.solution
PLANTED = "<think>4+9=12, 12-3=9, 9+2=11</think> \\boxed{11}"  # the planted step, the rest right from it


@pytest.fixture(scope="module")
def tokenizer():
    chains = make_splits(0, {"sft_eval": 1, "test": 1, "train": 50})["train"]
    return build_tokenizer(tokenizer_corpus([*chains, CHAIN]), 400)


def scores(answers: list[str]) -> list[dict]:
    return [
        planted_error_task.compute_score(DATA_SOURCE, text, str(CHAIN.answer), {"question": CHAIN.question})
        for text in answers
    ]


def test_the_oracles_credit_at_the_error_is_one_over_n_p_of_the_outcome_advantage(tokenizer):
    """At γ = 0, coefficient 1, in a group of right and planted answers (format paid to all): the oracle's mean
    process advantage on the n error tokens of a wrong answer is (1/n − (1 − p)/L)/σ, its outcome advantage −p/σ
    (p the group's accuracy, L the answer's tokens, σ the spread of right/wrong): the ratio is (1/n − (1 − p)/L)/p."""
    answers = [RIGHT, PLANTED, PLANTED, RIGHT, PLANTED, PLANTED]
    rows = oracle_credit_scale.group_credit(tokenizer, answers, scores(answers))
    assert len(rows) == 4 and all(row["planted"] and row["group_accuracy"] == pytest.approx(1 / 3) for row in rows)
    length = len(tokenizer(PLANTED, add_special_tokens=False)["input_ids"])
    p = 1 / 3
    for row in rows:
        n = row["n_error_tokens"]
        assert 1 <= n < length
        assert row["ratio"] == pytest.approx((1 / n - (1 - p) / length) / p, rel=1e-4)
    summary = oracle_credit_scale.describe(rows)
    assert summary["coef_for_median_ratio_1"] == pytest.approx(1 / rows[0]["ratio"], rel=1e-3)


def test_an_answer_at_the_groups_mean_score_has_no_ratio(tokenizer):
    """A wrong answer whose score equals the group's mean (A^o = 0) is left out, not divided by."""
    answers = [PLANTED, PLANTED]
    assert oracle_credit_scale.group_credit(tokenizer, answers, scores(answers)) == []


def test_the_continuations_differ_from_the_first_token_of_the_total(tokenizer):
    prompt, ((planted, first_p), (right, first_r)) = credit.continuations(tokenizer, CHAIN)
    assert prompt == tokenizer(prompt_text(tokenizer, CHAIN), add_special_tokens=False)["input_ids"]
    head = "<think>4+9="
    assert tokenizer.decode(planted) == f"{head}12, " and tokenizer.decode(right) == f"{head}13, "
    for ids, first in ((planted, first_p), (right, first_r)):
        assert len(tokenizer.decode(ids[:first])) <= len(head) < len(tokenizer.decode(ids[: first + 1]))


def test_the_quantities_are_those_of_each_sequence_scored_alone(tokenizer):
    """Policy margin and PRM rewards from batched forwards equal sums of per-sequence log-probs from the total on;
    a PRM equal to its reference pays 0."""
    policy = build_model(tokenizer, seed=0, initializer_range=0.5).eval()
    prm = build_model(tokenizer, seed=1, initializer_range=0.5).eval()
    prompt, pair = credit.continuations(tokenizer, CHAIN)
    rows = [(prompt, response, first) for response, first in pair]

    def alone(model, response, first):
        ids = torch.tensor([prompt + response])
        with torch.no_grad():
            log_probs = torch.log_softmax(model(input_ids=ids).logits[0, :-1].float(), -1)
        return sum(log_probs[len(prompt) - 1 + t, response[t]].item() for t in range(first, len(response)))

    (got,) = credit.step_quantities(policy, prm, policy, rows, beta=0.05)
    (planted, first_p), (right, first_r) = pair
    margin = alone(policy, planted, first_p) - alone(policy, right, first_r)
    reward = [0.05 * (alone(prm, r, f) - alone(policy, r, f)) for r, f in pair]
    assert got["policy_margin"] == pytest.approx(margin, abs=1e-4)
    assert [got["prm_reward_planted"], got["prm_reward_right"]] == pytest.approx(reward, abs=1e-5)
    assert got["prm_margin"] == pytest.approx(reward[0] - reward[1], abs=1e-5)
    (same,) = credit.step_quantities(policy, policy, policy, rows, beta=0.05)
    assert same["prm_reward_planted"] == same["prm_reward_right"] == 0.0
    summary = credit.summarise([got, same])
    assert summary["prm_margin"]["share_above_0"] == float(got["prm_margin"] > 0) / 2
