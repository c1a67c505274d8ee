"""verl_prime_lora.rewards.math_format: accuracy (math-verify, in killable helper processes), the think-format
reward, weights, bad rows, the timeout path, and loading through veRL's own `pkg://` loader."""

from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from fractions import Fraction

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from verl_prime_lora.rewards import math_format as rw
from verl_prime_lora.rewards.math_format import (
    BAD_GROUND_TRUTH,
    CORRECT,
    EMPTY_RESPONSE,
    NO_ANSWER,
    REASONS,
    TIMEOUT,
    VERIFIER_ERROR,
    WRONG,
    answer_text,
    compute_score,
    format_reward,
    last_boxed,
    reason_counts,
)
from verl_prime_lora.rewards.reward_info import LABEL_UNKNOWN_KEY

KEYS = {"score", "acc", "format", "pred", "reason", LABEL_UNKNOWN_KEY}
# math-verify needs ~10 s to decide this one (an exact rational with a 10^9-bit denominator).
SLOW_ANSWER = r"\boxed{\frac{1}{2}^{10^{9}}}"


def think(answer: str, reasoning: str = "Let me work it out.") -> str:
    """A well-formatted response in the R1 style (the chat template already opened <think>)."""
    return f"{reasoning}\n</think>\n\n{answer}"


def score(response, ground_truth, **kwargs):
    return compute_score("open_rs", response, ground_truth, extra_info={"index": 0}, **kwargs)


# ---------------------------------------------------------------------------------------------
# accuracy
# ---------------------------------------------------------------------------------------------

EQUIVALENT = [
    (r"So the answer is \boxed{\frac{1}{2}}.", "1/2"),
    (r"\boxed{\frac12}", r"\frac{1}{2}"),
    (r"\boxed{0.5}", r"$\frac{1}{2}$"),
    (r"\boxed{\dfrac{3}{4}}", "0.75"),
    (r"\boxed{1,000}", "1000"),
    (r"\boxed{1000}", "1,000"),
    (r"\boxed{12,345,678}", "12345678"),
    (r"\boxed{1{,}000}", "1000"),
    (r"\boxed{\sqrt{2}/2}", r"\frac{\sqrt2}{2}"),
    (r"\boxed{x^2 + 1}", "1+x^2"),
    (r"\boxed{(1,2)}", "(1, 2)"),
    (r"\boxed{\left( 3, \frac{\pi}{2} \right)}", r"\left( 3, \frac{\pi}{2} \right)"),
    (r"\boxed{\text{(C)}}", "C"),
    (r"\boxed{x=3}", "3"),
    (r"\boxed{5\text{ cm}}", "5"),
    (r"\boxed{-7}", "-7"),
    (r"\boxed{27}", 27),  # numeric ground truths (parquet int/float columns)
    (r"\boxed{27}", 27.0),
    (r"The final answer is $42$.", "42"),  # no box: an anchored answer
    (r"\boxed{7}", r"Adding them up gives $\boxed{7}$."),  # a full solution: its last box is the answer
]

DIFFERENT = [
    (r"\boxed{3}", "-3"),
    (r"\boxed{1,001}", "1000"),
    (r"\boxed{\frac{1}{3}}", "0.33"),
    (r"\boxed{\pi}", "3.14159"),
    (r"\boxed{x^2 - 1}", "x^2+1"),
    (r"\boxed{(1,2)}", "[1, 2]"),
    (r"\boxed{\text{(B)}}", "C"),
]


@pytest.mark.parametrize("answer,ground_truth", EQUIVALENT)
def test_equivalent_answers_are_correct(answer, ground_truth):
    result = score(think(answer), ground_truth)
    assert result["reason"] == CORRECT, result
    assert result["acc"] == 1.0 and result["format"] == 1.0
    assert result["score"] == 2.0  # seed weights: 1 * acc + 1 * format


@pytest.mark.parametrize("answer,ground_truth", DIFFERENT)
def test_different_answers_are_wrong_but_keep_the_format_reward(answer, ground_truth):
    result = score(think(answer), ground_truth)
    assert result["reason"] == WRONG, result
    assert result["acc"] == 0.0 and result["score"] == 1.0


def test_the_last_box_of_the_answer_section_is_the_answer():
    response = think(r"First \boxed{3}, but correcting the sign: \boxed{5}.")
    assert score(response, "5")["reason"] == CORRECT
    assert score(response, "3")["reason"] == WRONG
    # A box inside the reasoning is not the final answer.
    assert score(think(r"\boxed{7}", reasoning=r"Maybe \boxed{5}?"), "5")["reason"] == WRONG
    assert score(think(r"\boxed{7}", reasoning=r"Maybe \boxed{5}?"), "7")["pred"] == "7"


def test_last_boxed_and_answer_text():
    assert last_boxed(r"a \boxed{\frac{1}{2}} b") == r"\frac{1}{2}"
    assert last_boxed(r"\boxed{1} and \fbox{2}") == "2"
    assert last_boxed(r"\boxed{\{1,2\}}") == r"\{1,2\}"
    assert last_boxed(r"\boxed{4} then \boxed{5") == "4"  # an unclosed (truncated) box is skipped
    assert last_boxed("no box") is None
    assert answer_text(r"x</think> it is \boxed{9}.") == r"\boxed{9}"
    assert answer_text("x</think> it is 9.") == " it is 9."
    assert answer_text(r"no think block, \boxed{2}") == r"\boxed{2}"


def naive_last_boxed(text):
    """Reference: scan forward from each box opening, last one first, counting braces."""
    openings = [i + len(tag) for tag in ("\\boxed{", "\\fbox{") for i in range(len(text)) if text.startswith(tag, i)]
    for start in sorted(openings, reverse=True):
        depth = 1
        for i in range(start, len(text)):
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            if depth == 0:
                return text[start:i]
    return None


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(["\\boxed{", "\\fbox{", "{", "}", "1", "x", "\\{"]), max_size=14).map("".join))
def test_last_boxed_matches_a_naive_reference(text):
    assert last_boxed(text) == naive_last_boxed(text)


def test_degenerate_response_with_thousands_of_unclosed_boxes():
    # Repetition, as RL policies produce. A fixed-size input, no timing: last_boxed is one linear pass;
    # a backtracking or quadratic scan would not finish on it.
    response = think("\\boxed{4} then " + "\\boxed{" * 20_000)
    assert last_boxed(response) == "4"
    result = score(response, "4")
    assert (result["reason"], result["pred"], result["acc"]) == (CORRECT, "4", 1.0)


def test_pred_is_the_extracted_answer_for_majority_voting():
    assert score(think(r"\boxed{\dfrac{3}{4}}"), "0.75")["pred"] == r"\frac{3}{4}"
    assert score(think(r"\boxed{%s}" % ("9" * 500)), "1")["pred"] == "9" * 200  # capped


# ---------------------------------------------------------------------------------------------
# format
# ---------------------------------------------------------------------------------------------

FORMAT_CASES = [
    ("<think>\nreasoning\n</think>\nanswer", 1.0),
    ("reasoning\n</think>\n\\boxed{1}", 1.0),  # the chat template opened the block
    ("  \n<think>reasoning</think>answer", 1.0),
    ("reasoning</think>answer", 1.0),  # the seed wanted "\n</think>\n"; the newlines are not required
    ("reasoning\n</think>\n", 0.0),  # no answer after the block
    ("reasoning</think>   \n ", 0.0),
    ("</think>answer", 0.0),  # no reasoning
    ("<think> \n</think>answer", 0.0),
    ("no tags \\boxed{1}", 0.0),
    ("<think>reasoning without end", 0.0),
    ("<think>a</think>b</think>c", 0.0),  # two closing tags
    ("preamble <think>a</think>b", 0.0),  # text before the block
    ("<think>a<think>b</think>c", 0.0),  # nested opening
    ("a</think>b<think>c", 0.0),  # stray opening after the block
    ("", 0.0),
]


@pytest.mark.parametrize("response,expected", FORMAT_CASES)
def test_format_reward(response, expected):
    assert format_reward(response) == expected


@pytest.mark.parametrize("response,expected", FORMAT_CASES + [(None, 0.0)])
def test_score_reports_the_format_of_the_response(response, expected):
    assert score(response, "1")["format"] == expected


def test_unformatted_correct_answer_gets_accuracy_only():
    result = score(r"The answer is \boxed{5}.", "5")
    assert (result["reason"], result["format"], result["score"]) == (CORRECT, 0.0, 1.0)


@given(
    reasoning=st.text(min_size=1).filter(lambda s: s.strip() and "think>" not in s),
    answer=st.text(min_size=1).filter(lambda s: s.strip() and "think>" not in s),
    opened=st.booleans(),
    pad=st.sampled_from(["", "\n", "  \n"]),
)
def test_format_reward_accepts_any_single_block_with_an_answer(reasoning, answer, opened, pad):
    head = pad + "<think>" if opened else ""
    response = f"{head}{reasoning}</think>{answer}"
    assert format_reward(response) == 1.0
    assert format_reward(response + "</think>") == 0.0
    assert format_reward(f"{reasoning}</think>") == 0.0


# ---------------------------------------------------------------------------------------------
# weights, and veRL's loader
# ---------------------------------------------------------------------------------------------


def test_weights_are_configurable():
    kwargs = {"accuracy_weight": 1.0, "format_weight": 0.5}
    assert score(think(r"\boxed{5}"), "5", **kwargs)["score"] == 1.5
    assert score(think(r"\boxed{4}"), "5", **kwargs)["score"] == 0.5
    assert score(r"\boxed{5}", "5", **kwargs)["score"] == 1.0


def test_loads_through_verl_pkg_path_with_reward_kwargs():
    from omegaconf import OmegaConf
    from verl.trainer.ppo.reward import get_custom_reward_fn

    config = OmegaConf.create(
        {
            "reward": {
                "custom_reward_function": {
                    "path": "pkg://verl_prime_lora.rewards.math_format",
                    "name": "compute_score",
                    "reward_kwargs": {"accuracy_weight": 1.0, "format_weight": 0.0},
                }
            }
        }
    )
    fn = get_custom_reward_fn(config)
    # the call NaiveRewardManager makes (keyword arguments, veRL's extra_info fields)
    result = fn(
        data_source="open_rs",
        solution_str=think(r"\boxed{5}"),
        ground_truth="5",
        extra_info={"index": 3, "num_turns": None, "rollout_reward_scores": {}},
    )
    assert result == {"score": 1.0, "acc": 1.0, "format": 1.0, "pred": "5", "reason": CORRECT, LABEL_UNKNOWN_KEY: 0.0}


def test_scores_through_verl_naive_reward_manager():
    """veRL's own reward manager: decodes the response, calls us from its executor thread, keeps the dict."""
    import numpy as np
    import torch
    from omegaconf import OmegaConf
    from verl import DataProto
    from verl.experimental.reward_loop.reward_manager.naive import NaiveRewardManager

    from verl_prime_lora.tools.tiny import build_tokenizer

    response = think(r"\boxed{\frac{1}{2}}")
    tokenizer = build_tokenizer([response, "What is one half?"], 300)
    prompt_ids = tokenizer("What is one half?")["input_ids"]
    response_ids = tokenizer(response)["input_ids"] + [tokenizer.pad_token_id] * 3  # right padding
    mask = [1] * (len(response_ids) - 3) + [0] * 3
    data = DataProto.from_dict(
        tensors={
            "prompts": torch.tensor([prompt_ids]),
            "responses": torch.tensor([response_ids]),
            "attention_mask": torch.tensor([[1] * len(prompt_ids) + mask]),
        },
        non_tensors={
            "data_source": np.array(["open_rs"], dtype=object),
            "reward_model": np.array([{"style": "rule", "ground_truth": "0.5"}], dtype=object),
            "extra_info": np.array([{"split": "train", "index": 0}], dtype=object),
        },
    )
    manager = NaiveRewardManager(OmegaConf.create({}), tokenizer, compute_score)
    out = manager.loop.run_until_complete(manager.run_single(data))
    assert out["reward_score"] == 2.0
    assert out["reward_extra_info"] == {
        "score": 2.0,
        "acc": 1.0,
        "format": 1.0,
        "pred": r"\frac{1}{2}",
        "reason": CORRECT,
        LABEL_UNKNOWN_KEY: 0.0,
    }


# ---------------------------------------------------------------------------------------------
# bad rows: score 0, a counted reason, never an exception
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("ground_truth", [None, "", "   ", "$$", r"\boxed{}", float("nan"), ["5"], {"a": 1}])
def test_missing_ground_truth(ground_truth):
    result = score(think(r"\boxed{5}"), ground_truth)
    assert (result["reason"], result["score"], result["acc"]) == (BAD_GROUND_TRUTH, 0.0, 0.0)
    assert result["format"] == 1.0  # still reported
    assert result[LABEL_UNKNOWN_KEY] == 1.0


def test_non_math_ground_truth_is_bad_unless_matched_verbatim():
    assert score(think(r"\boxed{5}"), "@@@")["reason"] == BAD_GROUND_TRUTH
    assert score(think(r"\boxed{@@@}"), "@@@")["reason"] == CORRECT


@pytest.mark.parametrize("response", ["", "   \n", None])
def test_empty_response(response):
    result = score(response, "5")
    assert (result["reason"], result["score"], result["format"], result["pred"]) == (EMPTY_RESPONSE, 0.0, 0.0, "")


@pytest.mark.parametrize("answer", ["I could not solve it.", r"\boxed{}", r"\boxed{@#?}"])
def test_unparsable_answer_scores_zero_despite_the_format(answer):
    result = score(think(answer), "5")
    assert (result["reason"], result["score"], result["acc"], result["format"]) == (NO_ANSWER, 0.0, 0.0, 1.0)
    assert result[LABEL_UNKNOWN_KEY] == 0.0  # no answer is a wrong answer: a label for the PRM


def test_reasons_are_counted():
    before = reason_counts()
    score("", "5")
    score(think(r"\boxed{5}"), None)
    score(think(r"\boxed{5}"), "5")
    after = reason_counts()
    for reason in (EMPTY_RESPONSE, BAD_GROUND_TRUTH, CORRECT):
        assert after.get(reason, 0) - before.get(reason, 0) == 1


def test_anomalies_are_logged_at_their_1st_10th_100th_occurrence(caplog, monkeypatch):
    monkeypatch.setattr(rw, "_COUNTS", Counter())
    with caplog.at_level("WARNING", logger="verl_prime_lora.rewards.math_format"):
        for _ in range(12):
            score(think(r"\boxed{5}"), None)
    logged = [r.getMessage() for r in caplog.records if "bad_ground_truth row" in r.getMessage()]
    assert [m.split("#")[1].split(" ")[0] for m in logged] == ["1", "10"]
    assert "ground_truth=None" in logged[0]


def test_reason_shares_are_summarised_periodically(caplog, monkeypatch):
    monkeypatch.setattr(rw, "_COUNTS", Counter())
    monkeypatch.setattr(rw, "_SUMMARY_EVERY", 4)
    with caplog.at_level("INFO", logger="verl_prime_lora.rewards.math_format"):
        for ground_truth in ("5", "5", "6", "5"):
            score(think(r"\boxed{5}"), ground_truth)
    summaries = [r.getMessage() for r in caplog.records if "reasons over" in r.getMessage()]
    assert summaries == ["reward: reasons over 4 rows: {'correct': '75.0%', 'wrong': '25.0%'}"]


# ---------------------------------------------------------------------------------------------
# timeouts and verifier processes
# ---------------------------------------------------------------------------------------------


def test_slow_verification_times_out_and_the_verifier_is_replaced():
    score(think(r"\boxed{1}"), "1")  # a verifier process started
    busy = rw._POOL._idle.queue[-1]  # the pool is a LIFO: the next call takes this one
    result = score(think(SLOW_ANSWER), "5", timeout_s=1.0)
    assert (result["reason"], result["score"], result["acc"]) == (TIMEOUT, 0.0, 0.0)
    assert result[LABEL_UNKNOWN_KEY] == 1.0  # acc 0 is no verdict: the PRM leaves the row out
    assert not busy.alive()  # killed at the timeout, not waited out (math-verify alone takes ~10 s)
    assert score(think(r"\boxed{5}"), "5", timeout_s=1.0)["reason"] == CORRECT


def test_concurrent_calls_from_threads_with_a_slow_one():
    # veRL calls a sync reward function from executor threads: SIGALRM timeouts cannot work there.
    jobs = [(think(SLOW_ANSWER), "5")] + [(think(rf"\boxed{{{n}}}"), str(n)) for n in range(8)]
    with ThreadPoolExecutor(max_workers=4) as executor:
        results = list(executor.map(lambda job: score(*job, timeout_s=1.0), jobs))
    assert results[0]["reason"] == TIMEOUT
    assert [r["reason"] for r in results[1:]] == [CORRECT] * 8


def test_a_dead_verifier_process_is_replaced():
    score(think(r"\boxed{1}"), "1")
    for verifier in list(rw._POOL._idle.queue):
        if verifier is not None:
            verifier.process.kill()
            verifier.process.wait()
    assert score(think(r"\boxed{5}"), "5")["reason"] == CORRECT


def test_a_verifier_that_cannot_start_is_a_counted_reason_not_a_crash(monkeypatch, caplog):
    def cannot_start(self):
        raise OSError("no processes left")

    monkeypatch.setattr(rw, "_POOL", rw._VerifierPool(1))
    monkeypatch.setattr(rw._Verifier, "__init__", cannot_start)
    monkeypatch.setattr(rw, "_LOGGED_ERRORS", set())
    with caplog.at_level("ERROR", logger="verl_prime_lora.rewards.math_format"):
        results = [score(think(r"\boxed{5}"), "5") for _ in range(3)]
    assert {(r["reason"], r["score"], r["acc"], r[LABEL_UNKNOWN_KEY]) for r in results} == {
        (VERIFIER_ERROR, 0.0, 0.0, 1.0)
    }
    errors = [r for r in caplog.records if r.levelname == "ERROR"]
    assert len(errors) == 1 and "no processes left" in caplog.text  # the traceback once, not per row


# ---------------------------------------------------------------------------------------------
# properties
# ---------------------------------------------------------------------------------------------

FRAGMENTS = ["<think>", "</think>", r"\boxed{", "}", "{", "1", "x", " ", "\n", r"\frac{1}{2}", "=", "$", "answer"]
responses = st.one_of(st.text(max_size=40), st.lists(st.sampled_from(FRAGMENTS), max_size=12).map("".join))
ground_truths = st.one_of(
    st.none(), st.integers(-1000, 1000), st.sampled_from(["1", "x", r"\frac{1}{2}", "", "1,000"]), st.text(max_size=8)
)
weights = st.floats(min_value=0.0, max_value=5.0)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(response=responses, ground_truth=ground_truths, acc_w=weights, fmt_w=weights)
def test_result_invariants(response, ground_truth, acc_w, fmt_w):
    result = score(response, ground_truth, accuracy_weight=acc_w, format_weight=fmt_w)
    assert set(result) == KEYS  # veRL takes the reward_extra_info keys from the first row
    assert result["reason"] in REASONS
    assert result["acc"] in (0.0, 1.0) and result["format"] in (0.0, 1.0)
    assert result["acc"] == float(result["reason"] == CORRECT)
    expected = acc_w * result["acc"] + fmt_w * result["format"] if result["reason"] in (CORRECT, WRONG) else 0.0
    assert result["score"] == pytest.approx(expected)
    assert 0.0 <= result["score"] <= acc_w + fmt_w


@settings(max_examples=40, deadline=None)
@given(n=st.integers(-(10**7), 10**7), m=st.integers(-(10**7), 10**7), commas=st.booleans())
def test_integer_answers_match_exactly_when_equal(n, m, commas):
    truth = f"{m:,}" if commas else str(m)
    result = score(think(rf"\boxed{{{n}}}"), truth)
    assert result["reason"] == (CORRECT if n == m else WRONG)


@settings(max_examples=30, deadline=None)
@given(p=st.integers(1, 50), q=st.integers(1, 50), r=st.integers(1, 50), s=st.integers(1, 50))
def test_fractions_are_compared_by_value(p, q, r, s):
    result = score(think(rf"\boxed{{\frac{{{p}}}{{{q}}}}}"), f"{r}/{s}")
    assert result["acc"] == float(Fraction(p, q) == Fraction(r, s))


def test_reward_extra_info_reads_what_transfer_queue_returns():
    from tensordict import NonTensorData

    from verl_prime_lora.rewards.reward_info import reward_extra_info

    info = {"acc": 1.0, "format": 0.0}
    assert reward_extra_info({"reward_extra_info": info}) == info
    assert reward_extra_info(NonTensorData({"reward_extra_info": info})) == info
    assert reward_extra_info({"other": 1}) == {} and reward_extra_info(None) == {}
