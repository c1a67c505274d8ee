"""benchmarks/credit_controls.py: the oracle's rewards sit on the first wrong step's tokens, the shuffled control
keeps each response's sum and values, and both reach the advantage by PRIME's path."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from benchmarks.lib import credit_controls as controls
from verl_prime_lora.algo.core_algos import sequence_norm_process_advantage
from verl_prime_lora.algo.groups import group_ids
from verl_prime_lora.demo.chain_task import Chain, make_splits, tokenizer_corpus
from verl_prime_lora.tools.tiny import build_tokenizer

CHAIN = Chain((7, 5, 3, 8), ("+", "-", "+"))  # 7+5=12, 12-3=9, 9+8=17
RIGHT = CHAIN.solution
WRONG_SECOND = "<think>7+5=12, 12-3=8, 8+8=16</think> \\boxed{16}"


@pytest.fixture(scope="module")
def tokenizer():
    chains = make_splits(0, {"sft_eval": 1, "test": 1, "train": 50})["train"]
    return build_tokenizer(tokenizer_corpus([*chains, CHAIN]), 400)


def score(response: str) -> dict:
    return controls.compute_score("prime_lora/chain_arithmetic", response, CHAIN.answer, {"question": CHAIN.question})


@pytest.mark.parametrize(
    "response, blamed",
    [
        (RIGHT, None),
        (WRONG_SECOND, "12-3=8"),  # the first wrong step
        ("<think>7+5=12, 12-3=9, 9+8=17</think> \\boxed{16}", "</think> \\boxed{16}"),  # right steps, wrong answer
        ("<think>7+5=12, 12-3=9</think> \\boxed{9}", "</think> \\boxed{9}"),  # stops short
        ("<think>7+5-3+8=16</think> \\boxed{16}", "7+5-3+8=16"),  # skipped the steps: its one step
        ("<think>7+5-3+8=17</think> \\boxed{17}", None),  # skipped them and was right
        ("no think block \\boxed{16}", "no think block \\boxed{16}"),  # does not parse: all of it
    ],
)
def test_the_reward_adds_the_first_errors_span_and_keeps_the_rest(response, blamed):
    result = score(response)
    assert (
        result["score"]
        == controls.math_format.compute_score(
            "prime_lora/chain_arithmetic", response, CHAIN.answer, {"question": CHAIN.question}
        )["score"]
    )
    start, end = result[controls.WRONG_START], result[controls.WRONG_END]
    assert (start, end) == (-1, -1) if blamed is None else response[start:end] == blamed


def padded(tokenizer, responses: list[str], width: int) -> tuple[torch.Tensor, torch.Tensor]:
    ids = torch.zeros(len(responses), width, dtype=torch.long)
    mask = torch.zeros(len(responses), width)
    for row, text in enumerate(responses):
        encoded = tokenizer(text, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
        ids[row, : len(encoded)] = torch.tensor(encoded)
        mask[row, : len(encoded)] = 1
    return ids, mask


def test_the_oracle_blames_exactly_the_tokens_of_the_first_wrong_step(tokenizer):
    responses = [WRONG_SECOND, RIGHT]
    ids, mask = padded(tokenizer, responses, 40)
    infos = [score(text) for text in responses]
    rewards = controls.oracle_rewards(torch.randn(2, 40), mask, ids, infos, tokenizer)
    assert rewards[1].abs().sum() == 0  # no wrong step, no reward; the PRM's rewards are not kept
    blamed = rewards[0].nonzero().flatten()
    assert torch.allclose(rewards[0].sum(), torch.tensor(-1.0)) and (rewards[0, blamed] < 0).all()
    assert blamed.diff().eq(1).all()  # one run of tokens
    text = tokenizer.decode(ids[0, blamed].tolist())
    assert "12-3=8" in "".join(text.split()) and "7+5" not in text and "8+8" not in text


def test_the_oracles_process_advantage_spares_the_tokens_after_the_wrong_step(tokenizer):
    """Through `prime_grpo`'s process part: inside a group, the wrong response's tokens up to its error carry the
    blame (the tokens of the step itself
    hand it on as they pass), those after it do not, and the right response is never blamed."""
    responses = [WRONG_SECOND, RIGHT]
    ids, mask = padded(tokenizer, responses, 40)
    rewards = controls.oracle_rewards(torch.zeros(2, 40), mask, ids, [score(t) for t in responses], tokenizer)
    advantage = sequence_norm_process_advantage(rewards.double(), mask.double(), group_ids(["g", "g"], "cpu"))
    blamed = rewards[0].nonzero().flatten()
    before, after = advantage[0, : int(blamed.min()) + 1], advantage[0, int(blamed.max()) + 1 : int(mask[0].sum())]
    assert (before < 0).all() and (after >= 0).all()
    assert (advantage[1, : int(mask[1].sum())] >= 0).all()


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(1, 9), min_size=1, max_size=5), st.integers(0, 2**16))
def test_shuffling_keeps_each_responses_values_and_sum(lengths, seed):
    width = max(lengths) + 2
    generator = torch.Generator().manual_seed(seed)
    rewards = torch.randn(len(lengths), width, generator=generator, dtype=torch.float64)
    mask = (torch.arange(width)[None] < torch.tensor(lengths)[:, None]).double()
    rewards = rewards * mask
    shuffled = controls.shuffled_rewards(rewards, mask, None, [{}] * len(lengths), None)
    for row, length in enumerate(lengths):
        assert torch.equal(shuffled[row, :length].sort().values, rewards[row, :length].sort().values)
        assert torch.allclose(shuffled[row].sum(), rewards[row].sum())
    assert torch.equal(shuffled * (1 - mask), torch.zeros_like(shuffled))


def test_shuffling_moves_rewards():
    rewards = torch.arange(1.0, 33.0)[None]
    assert not torch.equal(controls.shuffled_rewards(rewards, torch.ones(1, 32), None, [{}], None), rewards)
