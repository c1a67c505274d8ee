"""Reward failures of PRIME runs (verl_prime_lora.hardening.reward_failures), where they are made: the guard on
veRL's reward-loop worker turns a reward call that raised, ran past its time limit or returned no finite number
into a failed row (reward 0, no label) with the batch's key set, and logs the first error once. What the trainer
does with those rows: tests/hardening/test_reward_failures.py."""

import asyncio
import logging

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf
from tensordict import NonTensorData
from verl import DataProto
from verl.experimental.reward_loop.reward_loop import RewardLoopWorker
from verl.experimental.reward_loop.reward_manager.naive import NaiveRewardManager

import verl_prime_lora.plugin.patches  # noqa: F401 - installs the guard under test (also loaded at `import verl`)
from verl_prime_lora.checks.config_checks import PrimeConfigError
from verl_prime_lora.config.verl_view import verl_view
from verl_prime_lora.hardening import reward_failures as rf
from verl_prime_lora.hardening.reward_failures import ERROR_KEY, FAILED_KEY, account_rollouts, guarded_score

PRIME_CONFIG = {
    "trainer": {"v1": {"trainer_mode": "prime_sync"}},
    "prime": {"prm": {"label_key": "acc"}},
    "reward": {"custom_reward_function": {"path": "reward.py"}, "reward_model": {"enable": False}},
}


@pytest.fixture(autouse=True)
def fresh_process_state(monkeypatch):
    """Each test starts as a fresh reward-loop worker process: no keys seen, no failure logged yet."""
    monkeypatch.setattr(rf, "_ZEROED_KEYS", {})
    monkeypatch.setattr(rf, "_FIRST_FAILURE_LOGGED", False)


def run(coroutine_fn):
    return asyncio.run(coroutine_fn())


def scored(info: dict) -> dict:
    async def score():
        return {"reward_score": float(info.get("score", 0.0)), "reward_extra_info": dict(info)}

    return score


def raising(exc: Exception):
    async def score():
        raise exc

    return score


# --------------------------------------------------------------------------------------------------
# the guard in the reward-loop worker
# --------------------------------------------------------------------------------------------------


def test_scored_rows_are_marked_and_keep_their_values():
    result = run(lambda: guarded_score(scored({"score": 2.0, "acc": 1.0, "pred": "4"}), "acc"))
    assert result["reward_score"] == 2.0
    assert result["reward_extra_info"] == {"score": 2.0, "acc": 1.0, "pred": "4", FAILED_KEY: 0.0, ERROR_KEY: ""}


def test_a_failed_row_scores_zero_and_has_the_key_set_of_the_scored_rows():
    good = run(lambda: guarded_score(scored({"score": 2.0, "acc": 1.0, "format": 1.0, "pred": "4"}), "acc"))
    bad = run(lambda: guarded_score(raising(ValueError("no ground truth")), "acc"))
    assert bad["reward_score"] == 0.0
    assert set(bad["reward_extra_info"]) == set(good["reward_extra_info"])
    info = bad["reward_extra_info"]
    assert info["score"] == info["acc"] == info["format"] == 0.0 and info["pred"] == ""
    assert info[FAILED_KEY] == 1.0 and info[ERROR_KEY] == "ValueError: no ground truth"


def test_a_failure_before_any_scored_row_carries_a_subset_of_their_keys():
    """veRL's colocated path reads the key set from the first row: a first failed row must not hold a
    key that a later scored row lacks (PRIME checks before Ray that the reward returns the label key)."""
    bad = run(lambda: guarded_score(raising(KeyError("ground_truth")), "acc"))
    good = run(lambda: guarded_score(scored({"score": 1.0, "acc": 1.0, "reason": "correct"}), "acc"))
    assert set(bad["reward_extra_info"]) == {"acc", FAILED_KEY, ERROR_KEY}
    assert set(bad["reward_extra_info"]) <= set(good["reward_extra_info"])


def test_a_batch_gives_its_failed_rows_the_keys_of_its_scored_rows():
    """Rows of one batch are scored concurrently: a row may fail before the process has scored any."""
    bad = run(lambda: guarded_score(raising(KeyError("ground_truth")), "acc"))
    good = run(lambda: guarded_score(scored({"score": 1.0, "acc": 1.0, "reason": "correct"}), "acc"))
    outputs = rf.complete_key_sets([bad, good])
    assert set(outputs[0]["reward_extra_info"]) == set(good["reward_extra_info"])
    assert outputs[0]["reward_extra_info"] == {
        "score": 0.0,
        "acc": 0.0,
        "reason": "",
        FAILED_KEY: 1.0,
        ERROR_KEY: "KeyError: 'ground_truth'",
    }
    assert outputs[1] is good


def test_the_first_failure_is_logged_once_with_its_message(caplog):
    caplog.set_level(logging.ERROR, logger=rf.logger.name)
    for i in range(50):
        run(lambda i=i: guarded_score(raising(RuntimeError(f"verifier crashed on row {i}")), "acc"))
    records = [r for r in caplog.records if r.name == rf.logger.name]
    assert len(records) == 1
    assert "verifier crashed on row 0" in records[0].getMessage()
    assert "prime.max_failed_rollout_ratio" in records[0].getMessage()
    assert records[0].exc_info is not None  # the one traceback


def test_the_error_message_is_truncated():
    bad = run(lambda: guarded_score(raising(ValueError("x" * 10_000)), "acc"))
    assert len(bad["reward_extra_info"][ERROR_KEY]) == rf.MAX_ERROR_CHARS


class _Tokenizer:
    def decode(self, ids, skip_special_tokens=True):
        return " ".join(str(int(i)) for i in ids)


def _reward_fn(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    if int(ground_truth) % 2:
        raise ZeroDivisionError(f"odd ground truth {ground_truth}")
    return {"score": 1.0, "acc": 1.0, "pred": solution_str}


def _rows(n: int) -> DataProto:
    prompts = torch.ones(n, 3, dtype=torch.long)
    responses = torch.arange(n * 2, dtype=torch.long).reshape(n, 2)
    return DataProto.from_dict(
        tensors={
            "prompts": prompts,
            "responses": responses,
            "input_ids": torch.cat([prompts, responses], 1),
            "attention_mask": torch.ones(n, 5, dtype=torch.long),
        },
        non_tensors={
            "data_source": np.array(["test"] * n, dtype=object),
            "reward_model": np.array([{"ground_truth": str(i)} for i in range(n)], dtype=object),
            "extra_info": np.array([{} for _ in range(n)], dtype=object),
        },
    )


def _worker(config: dict) -> RewardLoopWorker:
    """A RewardLoopWorker as veRL builds it in a Ray actor, minus the tokenizer download: veRL's naive
    reward manager calling the (raising) custom reward function. Built inside the running event loop."""
    worker = RewardLoopWorker.__new__(RewardLoopWorker)
    worker.config = OmegaConf.create(config)
    worker.reward_manager = NaiveRewardManager(worker.config, _Tokenizer(), _reward_fn)
    return worker


def test_verl_reward_loop_worker_is_guarded_for_prime_trainers():
    async def score_batch():
        return await _worker(PRIME_CONFIG).compute_score_batch(_rows(4))

    outputs = run(score_batch)
    assert [o["reward_score"] for o in outputs] == [1.0, 0.0, 1.0, 0.0]
    infos = [o["reward_extra_info"] for o in outputs]
    assert [info[FAILED_KEY] for info in infos] == [0.0, 1.0, 0.0, 1.0]
    assert infos[1][ERROR_KEY] == "ZeroDivisionError: odd ground truth 1"
    # what RewardLoopManager.compute_rm_score (reward_loop.py:365-369) does with them: no KeyError
    keys = list(infos[0])
    columns = {key: np.array([info[key] for info in infos]) for key in keys}
    assert columns["acc"].tolist() == [1.0, 0.0, 1.0, 0.0]


def test_guard_reads_the_prime_config_once_per_worker(monkeypatch):
    """The typed PRIME config is built once per reward worker, not once per rollout."""
    import verl_prime_lora.hardening.reward_failures as rf

    calls = []
    real = rf.prime_config
    monkeypatch.setattr(rf, "prime_config", lambda cfg: calls.append(1) or real(cfg))

    async def score_twice():
        worker = _worker(PRIME_CONFIG)
        await worker.compute_score_batch(_rows(4))
        return await worker.compute_score_batch(_rows(4))

    assert [o["reward_score"] for o in run(score_twice)] == [1.0, 0.0, 1.0, 0.0]
    assert len(calls) == 1


def test_a_reward_call_past_its_time_limit_is_a_failed_row_and_the_batch_goes_on(monkeypatch):
    """veRL runs the reward function in a thread and waits for ever; the guard gives up after
    `prime.reward_timeout_s` and scores the row as failed, naming the limit, while the other rows are scored."""
    import threading

    release = threading.Event()

    def reward_fn(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
        if ground_truth == "1":
            release.wait(30)  # a grader stuck on a dead socket
        return {"score": 1.0, "acc": 1.0}

    # a limit the two quick rows keep on a loaded machine (the unit tier beside a run): 1 s
    config = {**PRIME_CONFIG, "prime": {"prm": {"label_key": "acc"}, "reward_timeout_s": 1.0}}

    async def score_batch():
        worker = _worker(config)
        worker.reward_manager = NaiveRewardManager(worker.config, _Tokenizer(), reward_fn)
        return await worker.compute_score_batch(_rows(3))

    # the stuck call ends 5 s in, 5x past the limit: asyncio.run waits for veRL's reward thread when it closes
    unstick = threading.Timer(5.0, release.set)
    unstick.start()
    try:
        outputs = run(score_batch)
    finally:
        release.set()
        unstick.cancel()
    infos = [o["reward_extra_info"] for o in outputs]
    assert [info[FAILED_KEY] for info in infos] == [0.0, 1.0, 0.0]
    assert infos[1][ERROR_KEY] == "TimeoutError: the reward call timed out after 1 s (prime.reward_timeout_s)"
    assert [o["reward_score"] for o in outputs] == [1.0, 0.0, 1.0]
    account = account_rollouts(
        ["a_0_0", "a_1_0", "a_2_0"],
        [False] * 3,
        [NonTensorData({"reward_extra_info": info}) for info in infos],
        rollout_n=3,
        expected_prompts=1,
    )
    assert (account.failed, account.timed_out) == (1, 1)
    assert account.metrics()["reward/timed_out_total"] == 1.0


def test_the_reward_time_limit_is_a_prime_key_null_for_none():
    assert (
        rf.reward_guard(verl_view(OmegaConf.create(PRIME_CONFIG))).timeout_s == 120.0
    )  # the default: a grader never nears it
    none = {**PRIME_CONFIG, "prime": {"prm": {"label_key": "acc"}, "reward_timeout_s": None}}
    assert rf.reward_guard(verl_view(OmegaConf.create(none))).timeout_s is None
    with pytest.raises(PrimeConfigError, match=r"^prime\.reward_timeout_s: is 0"):
        rf.reward_guard(verl_view(OmegaConf.create({**PRIME_CONFIG, "prime": {"reward_timeout_s": 0}})))


def test_other_trainers_keep_verl_behaviour():
    config = {**PRIME_CONFIG, "trainer": {"v1": {"trainer_mode": "sync"}}}

    async def score_one():
        return await _worker(config).compute_score(_rows(2)[1:2])

    with pytest.raises(ZeroDivisionError):
        run(score_one)


def test_a_run_that_is_not_prime_gets_no_view_built():
    """A value the view would refuse (an int field) does not reach a reward worker of a non-PRIME run."""
    config = {**PRIME_CONFIG, "trainer": {"v1": {"trainer_mode": "sync"}, "n_gpus_per_node": "all"}}

    async def score_one():
        return await _worker(config).compute_score(_rows(2)[1:2])

    with pytest.raises(ZeroDivisionError):
        run(score_one)


# --------------------------------------------------------------------------------------------------
# rewards that are not a finite number: failed rows, and a stop when no row is left
# --------------------------------------------------------------------------------------------------


def value(score):
    """A reward-loop result as veRL's naive manager builds it from a reward function that returned `score`."""

    async def result():
        return {"reward_score": score, "reward_extra_info": {"acc": score}}

    return result


@pytest.mark.parametrize(
    "score, error",
    [
        (float("nan"), "non-finite score nan"),
        (float("inf"), "non-finite score inf"),
        (float("-inf"), "non-finite score -inf"),
        ("1.0", "non-number score '1.0' (str)"),
        (None, "non-number score None (NoneType)"),
    ],
)
def test_a_score_that_is_not_a_finite_number_makes_a_failed_row(score, error):
    good = run(lambda: guarded_score(scored({"score": 1.0, "acc": 1.0, "pred": "4"}), "acc"))
    bad = run(lambda: guarded_score(value(score), "acc"))
    assert bad["reward_score"] == 0.0
    assert bad["reward_extra_info"] == {"score": 0.0, "acc": 0.0, "pred": "", FAILED_KEY: 1.0, ERROR_KEY: error}
    assert set(bad["reward_extra_info"]) == set(good["reward_extra_info"])


def test_a_prm_label_that_is_not_a_finite_number_makes_a_failed_row():
    bad = run(lambda: guarded_score(scored({"score": 1.0, "acc": float("inf")}), "acc"))
    assert bad["reward_score"] == 0.0 and bad["reward_extra_info"][ERROR_KEY] == "non-finite PRM label 'acc' inf"
    assert run(lambda: guarded_score(scored({"score": 1.0, "acc": 1.0}), "acc"))["reward_extra_info"][FAILED_KEY] == 0


def test_the_first_non_finite_reward_is_logged_once_without_a_traceback(caplog):
    caplog.set_level(logging.ERROR, logger=rf.logger.name)
    for _ in range(5):
        run(lambda: guarded_score(value(float("nan")), "acc"))
    records = [r for r in caplog.records if r.name == rf.logger.name]
    assert len(records) == 1 and "non-finite score nan" in records[0].getMessage()
    assert records[0].exc_info is None


def _nan_reward_fn(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    return float("nan") if int(ground_truth) % 2 else 1.0


def test_verl_reward_loop_worker_turns_a_nan_reward_into_failed_rows():
    """veRL's naive manager stores a returned number as the score and as `acc`: both NaN on odd rows."""

    async def score_batch():
        worker = _worker(PRIME_CONFIG)
        worker.reward_manager = NaiveRewardManager(worker.config, _Tokenizer(), _nan_reward_fn)
        return await worker.compute_score_batch(_rows(4))

    outputs = run(score_batch)
    assert [o["reward_score"] for o in outputs] == [1.0, 0.0, 1.0, 0.0]
    infos = [o["reward_extra_info"] for o in outputs]
    assert [info[FAILED_KEY] for info in infos] == [0.0, 1.0, 0.0, 1.0]
    assert [info["acc"] for info in infos] == [1.0, 0.0, 1.0, 0.0]
    assert infos[1][ERROR_KEY] == "non-finite score nan"
