"""Step-level credit on chain arithmetic (benchmarks/step_credit.py): labels, step sums, localisation."""

import random

import pytest

from benchmarks.lib import step_credit
from verl_prime_lora.demo.chain_task import Chain

bootstrap_ci, hit, label_steps = step_credit.bootstrap_ci, step_credit.hit, step_credit.label_steps
localisation, pair_wins = step_credit.localisation, step_credit.pair_wins
sequence_auc, step_rewards = step_credit.sequence_auc, step_credit.step_rewards

CHAIN = Chain.from_question("7+5-3+8")  # 7+5=12, 12-3=9, 9+8=17


def test_the_worked_solution_is_right_and_its_spans_are_its_steps():
    labels = label_steps(CHAIN, CHAIN.solution)
    assert labels.kind == "right" and labels.first_wrong is None
    assert [CHAIN.solution[a:b] for a, b in labels.spans] == ["7+5=12", "12-3=9", "9+8=17"]


@pytest.mark.parametrize(
    "think, first_wrong",
    [
        ("7+5=13, 13-3=10, 10+8=18", 0),  # a wrong total; the later steps carry it on consistently
        ("7+5=12, 12-3=8, 8+8=16", 1),
        ("7+5=12, 12-4=8, 8+8=16", 1),  # a miscopied operand
        ("7+5=12, 12-3=9, 9+8=17, 17+1=18", 3),  # a step past the last one
    ],
)
def test_the_first_step_that_differs_from_the_solution_is_the_first_wrong_one(think, first_wrong):
    response = f"<think>{think}</think> \\boxed{{0}}"
    labels = label_steps(CHAIN, response)
    assert labels.kind == "wrong" and labels.first_wrong == first_wrong
    assert [response[a:b] for a, b in labels.spans] == think.split(", ")


@pytest.mark.parametrize(
    "response, kind",
    [
        ("<think>7+5=12, 12-3=9</think> \\boxed{9}", "short"),
        (CHAIN.shortcut, "shortcut"),
        ("<think>7+5=12, then 9</think> \\boxed{9}", "other"),
        ("7+5=12, 12-3=9, 9+8=17 \\boxed{17}", "other"),
    ],
)
def test_responses_without_a_step_to_find(response, kind):
    labels = label_steps(CHAIN, response)
    assert labels.kind == kind and labels.first_wrong is None


def test_a_token_counts_for_the_step_it_starts_in():
    spans = ((7, 13), (15, 21))  # "<think>7+5=12, 12-3=9"
    starts = [0, 7, 10, 13, 15, 19, 21]  # "<think>", "7+5", "=12", ", ", "12-3", "=9", "</think>"
    assert step_rewards(starts, [9.0, 1.0, 2.0, 5.0, 3.0, 4.0, 9.0], spans) == [3.0, 7.0]


def test_ties_at_the_minimum_share_the_hit():
    assert hit([0.0, -1.0, 2.0], 1) == 1.0
    assert hit([0.0, -1.0, 2.0], 0) == 0.0
    assert hit([-1.0, -1.0, 2.0], 0) == 0.5
    assert pair_wins([1.0, 0.0, -2.0], 2) == [1.0, 1.0]
    assert pair_wins([1.0, 1.0, 3.0], 1) == [0.5]


def test_a_prm_equal_to_its_reference_scores_chance_exactly():
    rng = random.Random(0)
    lengths = [rng.randint(2, 5) for _ in range(200)]
    first_wrong = [rng.randrange(m) for m in lengths]
    found = localisation([[0.0] * m for m in lengths], first_wrong)
    assert found["localisation"] == pytest.approx(found["chance"])
    assert found["chance"] == pytest.approx(sum(1 / m for m in lengths) / len(lengths))
    assert found["auc"] == 0.5


def test_a_prm_that_marks_the_first_wrong_step_finds_it_every_time():
    rng = random.Random(1)
    rewards, first_wrong = [], []
    for _ in range(50):
        m = rng.randint(2, 5)
        k = rng.randrange(m)
        steps = [rng.uniform(-1, 1) for _ in range(m)]
        steps[k] = -2.0
        rewards.append(steps)
        first_wrong.append(k)
    found = localisation(rewards, first_wrong)
    assert found["localisation"] == 1.0 and found["auc"] == 1.0
    assert found["localisation_ci"] == [1.0, 1.0]
    flipped = localisation([[-r for r in steps] for steps in rewards], first_wrong)
    assert flipped["auc"] == 0.0


def test_single_step_responses_are_left_out():
    found = localisation([[0.3], [1.0, -1.0]], [0, 1])
    assert found["responses"] == 1 and found["localisation"] == 1.0 and found["pairs"] == 1


def test_fixed_position_baselines_are_the_shares_of_first_and_last_wrong_steps():
    found = localisation([[0.0, 0.0], [0.0, 0.0, 0.0], [0.0, 0.0, 0.0]], [0, 2, 1])
    assert found["first_step_share"] == pytest.approx(1 / 3) and found["last_step_share"] == pytest.approx(1 / 3)


def test_sequence_auc_counts_ties_half_and_is_antisymmetric():
    right, wrong = [1.0, 2.0, 0.0], [0.0, 1.5]
    assert sequence_auc(right, wrong) == pytest.approx((1 + 0 + 1 + 1 + 0.5 + 0) / 6)
    assert sequence_auc(right, wrong) + sequence_auc(wrong, right) == pytest.approx(1.0)
    assert sequence_auc([], wrong) is None


def test_bootstrap_interval_brackets_the_mean_and_is_seeded():
    values = [0.0] * 30 + [1.0] * 70
    items = list(range(len(values)))

    def mean(sample):
        return sum(values[i] for i in sample) / len(sample)

    low, high = bootstrap_ci(items, mean)
    assert low < 0.7 < high and high - low < 0.25
    assert bootstrap_ci(items, mean) == [low, high]
    assert bootstrap_ci([], mean) is None


def test_the_best_position_rule_blames_the_commonest_first_wrong_step_per_number_of_steps():
    # two steps: first wrong at 0, 0, 1; three steps: at 2, 2, 1, 0
    first_wrong = [0, 0, 1, 2, 2, 1, 0]
    rewards = [[0.0] * m for m in (2, 2, 2, 3, 3, 3, 3)]
    found = localisation(rewards, first_wrong)
    assert found["best_position_share"] == pytest.approx((2 + 2) / 7)
    assert found["best_position_share"] >= max(found["first_step_share"], found["last_step_share"])


def test_intervals_resample_whole_problems():
    """Eight samples of one problem are one draw: a rate that is 1 on one problem and 0 on the other has the
    widest interval over two problems, whatever the number of samples."""
    rewards = [[-1.0, 0.0]] * 8 + [[0.0, -1.0]] * 8
    first_wrong = [0] * 16
    by_problem = localisation(rewards, first_wrong, groups=["a"] * 8 + ["b"] * 8)
    by_response = localisation(rewards, first_wrong)
    assert by_problem["localisation"] == by_response["localisation"] == 0.5
    assert by_problem["groups"] == 2 and by_response["groups"] == 16
    assert by_problem["localisation_ci"] == [0.0, 1.0]
    assert by_response["localisation_ci"][1] - by_response["localisation_ci"][0] < 0.6


def test_step_means_are_per_token():
    spans = ((7, 13), (15, 21))
    starts = [0, 7, 10, 13, 15, 19, 21]
    assert step_credit.step_means(starts, [9.0, 1.0, 2.0, 5.0, 3.0, 4.0, 9.0], spans) == [1.5, 3.5]
    assert step_credit.step_means([0], [1.0], ((5, 6),)) == [0.0]
