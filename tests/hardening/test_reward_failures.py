"""Reward failures of PRIME runs (verl_prime_lora.hardening.reward_failures), as the trainer meets them: the
per-step accounting and stop, the knob checked before Ray, that the PRM neither trains on nor measures a row
whose reward failed, that the prompt filter leaves such groups to the trainer, and the stop when no row of a
step has a finite reward. Where failed rows are made (the reward-loop worker's guard):
tests/hardening/test_reward_guard.py."""

import math
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch
import verl
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf
from tensordict import NonTensorData, TensorDict
from verl.trainer.ppo.v1.utils import MetricsAggregator

from verl_prime_lora.algo.implicit_prm import balanced_label_weights
from verl_prime_lora.algo.prm_metrics import prm_rewards_and_metrics
from verl_prime_lora.checks.config_checks import PrimeConfigError, validate_prime_config
from verl_prime_lora.config import prime_config, run_config
from verl_prime_lora.config.run import reward_function_name
from verl_prime_lora.config.verl_view import verl_view
from verl_prime_lora.hardening.reward_failures import ERROR_KEY, FAILED_KEY, RolloutFailureError, account_rollouts
from verl_prime_lora.prime import prompt_filter
from verl_prime_lora.prime.prm_loss import PRM_LABEL_FIELD, PRM_REF_FIELD, PRM_WEIGHT_FIELD, prm_loss
from verl_prime_lora.prime.prompt_filter import AccuracyBandFilterMixin, BandFilter
from verl_prime_lora.prime.step_rows import labelled_rows, labels_from_extra_fields, nested_rows, unlabelled_rows
from verl_prime_lora.rewards.reward_info import LABEL_UNKNOWN_KEY

PRIME_CONFIG = {
    "trainer": {"v1": {"trainer_mode": "prime_sync"}},
    "prime": {"prm": {"label_key": "acc"}},
    "reward": {"custom_reward_function": {"path": "reward.py"}, "reward_model": {"enable": False}},
}
REWARD_FN = reward_function_name(verl_view(OmegaConf.create(PRIME_CONFIG)))  # "reward.py:compute_score"


# --------------------------------------------------------------------------------------------------
# the trainer: accounting and stop
# --------------------------------------------------------------------------------------------------


def _fields(acc=None, failed=False, error=""):
    info = {"score": acc or 0.0, "acc": acc or 0.0, FAILED_KEY: float(failed), ERROR_KEY: error}
    return NonTensorData({"reward_extra_info": info})


def _batch():
    """3 prompts x n=3 asked for: `a` whole (one reward failed), `b` lost rollout 1, `c` lost entirely;
    one padding row (veRL copies the first row's fields into it: it must not count as failed)."""
    keys = ["a_0_0", "a_1_0", "a_2_0", "b_0_0", "b_2_0", "padX_0_0"]
    fields = [
        _fields(1.0),
        _fields(failed=True, error="KeyError: 'x'"),
        _fields(0.0),
        _fields(1.0),
        _fields(0.0),
        _fields(failed=True, error="KeyError: 'x'"),
    ]
    is_padding = [False] * 5 + [True]
    return keys, is_padding, fields


def test_account_counts_failed_dropped_padding_and_group_sizes():
    keys, is_padding, fields = _batch()
    account = account_rollouts(keys, is_padding, fields, rollout_n=3, expected_prompts=3)
    assert account.failed_rows == (False, True, False, False, False, False)
    assert account.first_error == "KeyError: 'x'"
    assert account.metrics() == pytest.approx(
        {
            "reward/failed_total": 1.0,
            "reward/failed_ratio": 1 / 9,
            "reward/timed_out_total": 0.0,
            "prime/dropped_rollouts_total": 4.0,  # b's rollout 1, and all 3 of c
            "prime/padding_rows_total": 1.0,
            "prime/group_size_min": 0.0,
            "prime/group_size_mean": 5 / 3,
            "prime/failed_rollout_ratio": 5 / 9,
        }
    )


def test_a_rollout_with_several_rows_counts_once():
    keys = ["a_0_0", "a_0_1", "a_1_0"]
    fields = [_fields(failed=True, error="E: 1"), _fields(failed=True, error="E: 1"), _fields(1.0)]
    account = account_rollouts(keys, [False] * 3, fields, rollout_n=2, expected_prompts=1)
    assert (account.failed, account.dropped, account.group_sizes) == (1, 0, (2,))


def test_a_clean_batch_passes_even_the_strictest_stop():
    keys = ["a_0_0", "a_1_0", "b_0_0", "b_1_0"]
    account = account_rollouts(keys, [False] * 4, [_fields(1.0), _fields(0.0), _fields(1.0), _fields(1.0)], 2, 2)
    assert account.metrics()["prime/failed_rollout_ratio"] == 0.0
    assert account.metrics()["prime/group_size_min"] == 2.0
    account.check(0.0, step=1, reward_fn=REWARD_FN)


def test_rows_without_the_flag_count_as_scored():
    """Rows scored before the guard existed (or by a plain veRL reward path) carry no `reward_failed`."""
    fields = [NonTensorData({"reward_extra_info": {"acc": 1.0}}), {"reward_extra_info": {}}]
    account = account_rollouts(["a_0_0", "a_1_0"], [False, False], fields, 2, 1)
    assert account.failed == 0 and account.failed_rows == (False, False)


def test_the_stop_names_the_knob_the_counts_and_the_first_error():
    keys, is_padding, fields = _batch()
    account = account_rollouts(keys, is_padding, fields, rollout_n=3, expected_prompts=3)
    with pytest.raises(RolloutFailureError) as err:
        account.check(0.5, step=7, reward_fn=REWARD_FN)
    message = str(err.value)
    assert message.startswith("prime.max_failed_rollout_ratio: step 7 lost 5 of 9 rollouts")
    assert (
        "1 scored 0 because the reward function reward.py:compute_score raised (first error: KeyError: 'x')" in message
    )
    assert "4 dropped by veRL before training" in message
    account.check(5 / 9, step=7, reward_fn=REWARD_FN)  # at the limit: goes on
    account.check(1.0, step=7, reward_fn=REWARD_FN)


def test_count_metrics_add_up_over_parameter_sync_steps():
    """veRL's MetricsAggregator picks the reduction from the name: counts are summed, the minimum kept."""
    aggregator = MetricsAggregator()
    keys, is_padding, fields = _batch()
    for _ in range(2):
        aggregator.add_step_metrics(account_rollouts(keys, is_padding, fields, 3, 3).metrics(), sample_count=5)
    total = aggregator.get_aggregated_metrics()
    assert total["reward/failed_total"] == 2.0 and total["prime/dropped_rollouts_total"] == 8.0
    assert total["prime/padding_rows_total"] == 2.0 and total["prime/group_size_min"] == 0.0
    assert total["prime/failed_rollout_ratio"] == pytest.approx(5 / 9)


VERL_CONFIG_DIR = str(Path(verl.__file__).parent / "trainer" / "config")


def colocated(*overrides):
    """veRL's ppo_trainer config with the one-GPU PRIME recipe."""
    with initialize_config_dir(config_dir=VERL_CONFIG_DIR, version_base=None):
        overrides = ["+recipe=prime_lora_colocated", "actor_rollout_ref.model.path=/m", *overrides]
        return compose("ppo_trainer", overrides=overrides)


def test_the_knob_is_in_the_recipe_and_checked_before_ray():
    config = colocated()
    assert (
        prime_config(verl_view(config)).max_failed_rollout_ratio == 0.0
    )  # the recipe's default: stop at the first failure
    validate_prime_config(config, check_tokenizers=False)
    for bad in ("1.5", "-0.1", "true"):
        with pytest.raises(PrimeConfigError, match=r"^prime.max_failed_rollout_ratio: "):
            validate_prime_config(colocated(f"prime.max_failed_rollout_ratio={bad}"), check_tokenizers=False)
    assert prime_config(verl_view(colocated("prime.max_failed_rollout_ratio=1.0"))).max_failed_rollout_ratio == 1.0


# --------------------------------------------------------------------------------------------------
# the PRM skips rows whose reward failed
# --------------------------------------------------------------------------------------------------


def test_failed_rows_get_no_label_and_no_prm_loss_weight():
    keys = ["a_0_0", "a_1_0", "a_2_0", "pad_0_0"]
    fields = [_fields(1.0), {"reward_extra_info": {FAILED_KEY: 1.0, ERROR_KEY: "E: x"}}, _fields(0.0), _fields(1.0)]
    is_padding = [False, False, False, True]
    account = account_rollouts(keys, is_padding, fields, 3, 1)
    unlabelled = unlabelled_rows(is_padding, account.failed_rows, fields)
    labels = labels_from_extra_fields(fields, unlabelled, "acc")  # no KeyError for the label-less failed row
    assert labels.tolist() == [1.0, 0.0, 0.0, 0.0]
    labelled = labelled_rows([4, 3, 2, 1], unlabelled)
    assert labelled.tolist() == [1.0, 0.0, 1.0, 0.0]
    assert balanced_label_weights(labels, labelled[:, None]).tolist() == [1.0, 0.0, 1.0, 0.0]


def test_rows_whose_outcome_the_reward_could_not_decide_get_no_label():
    """A verifier timeout scores acc 0 but flags label_unknown: the PRM must not learn 'wrong' from it."""
    timed_out = {"reward_extra_info": {"score": 0.0, "acc": 0.0, FAILED_KEY: 0.0, LABEL_UNKNOWN_KEY: 1.0}}
    decided = {"reward_extra_info": {"score": 0.0, "acc": 0.0, FAILED_KEY: 0.0, LABEL_UNKNOWN_KEY: 0.0}}
    fields = [_fields(1.0), timed_out, decided]
    unlabelled = unlabelled_rows([False] * 3, [False] * 3, fields)
    assert unlabelled == [False, True, False]
    assert labelled_rows([3, 3, 3], unlabelled).tolist() == [1.0, 0.0, 1.0]


def _nested(rows):
    return torch.nested.as_nested_tensor(rows, layout=torch.jagged)


def _prm_micro_batch(weights, prompt_len=2, resp_len=3):
    """Three rows as the PRM worker's loss receives them (labels 1, 0, 1), with per-row loss weights."""
    g = torch.Generator().manual_seed(0)
    seq_lp = [torch.randn(prompt_len + resp_len, generator=g).requires_grad_() for _ in range(3)]
    data = TensorDict(
        {
            "prompts": _nested([torch.zeros(prompt_len, dtype=torch.long)] * 3),
            "responses": _nested([torch.zeros(resp_len, dtype=torch.long)] * 3),
            "response_mask": _nested([torch.ones(resp_len)] * 3),
            PRM_REF_FIELD: _nested([torch.randn(resp_len, generator=g) for _ in range(3)]),
            PRM_LABEL_FIELD: nested_rows(torch.tensor([1.0, 0.0, 1.0]), [resp_len] * 3),
            PRM_WEIGHT_FIELD: nested_rows(torch.tensor(weights), [resp_len] * 3),
            "global_batch_size": NonTensorData(3),
            "dp_size": NonTensorData(1),
        },
        batch_size=[3],
    )
    return {"log_probs": _nested(seq_lp)}, data, seq_lp


def test_prm_loss_gives_a_failed_row_no_gradient():
    model_output, data, seq_lp = _prm_micro_batch(weights=(1.0, 0.0, 1.0))  # row 1: its reward failed
    loss, _ = prm_loss(model_output, data, beta=0.05)
    loss.backward()
    assert seq_lp[0].grad.abs().sum() > 0 and seq_lp[2].grad.abs().sum() > 0
    assert seq_lp[1].grad is None or seq_lp[1].grad.abs().sum() == 0


def test_prm_metrics_leave_out_failed_rows_but_their_process_rewards_stay():
    g = torch.Generator().manual_seed(1)
    B, T = 5, 4
    mask = torch.ones(B, T)
    prm, ref = -torch.rand(B, T, generator=g), -torch.rand(B, T, generator=g)
    labels = torch.tensor([1.0, 0.0, 0.0, 1.0, 0.0])
    uid = np.array(["a", "a", "a", "b", "b"], dtype=object)
    labelled = torch.tensor([1.0, 1.0, 0.0, 1.0, 1.0])  # row 2: the reward failed (label unknown)
    rewards, metrics, _ = prm_rewards_and_metrics(prm, prm, ref, mask, labels, uid, 0.05, labelled=labelled)
    keep = [0, 1, 3, 4]
    _, without, _ = prm_rewards_and_metrics(prm[keep], prm[keep], ref[keep], mask[keep], labels[keep], uid[keep], 0.05)
    assert metrics == pytest.approx(without)
    assert torch.all(rewards[2] != 0)  # the actor still gets the failed row's process rewards
    _, with_it, _ = prm_rewards_and_metrics(prm, prm, ref, mask, labels, uid, 0.05)
    assert with_it["prm/ce_loss"] != pytest.approx(metrics["prm/ce_loss"])  # the test can tell the difference
    assert all(math.isfinite(v) for v in metrics.values())


# --------------------------------------------------------------------------------------------------
# the prompt filter leaves groups with a failed reward to the trainer
# --------------------------------------------------------------------------------------------------


class _FilterUnderTest(AccuracyBandFilterMixin):
    """The band filter's verdict on finished groups, without TransferQueue or a replay buffer."""

    def __init__(self, keys):
        self.band = BandFilter(lower=0.2, upper=0.8, drop_truncated=False)
        self.accuracy_key = "acc"
        self.filter_counts = Counter()
        self.finished_keys = {"train": {key.split("_")[0] for key in keys}}
        self._dapo_classification_cache = {"train": {}}
        self.partitions = {"train": {key: {"response_len": 3} for key in keys}}


def test_prompt_filter_never_evicts_a_group_with_a_failed_reward(monkeypatch):
    rows = {
        "low_0_0": _fields(0.0),
        "low_1_0": _fields(0.0),  # all wrong: evicted
        "fail_0_0": _fields(0.0),
        "fail_1_0": _fields(failed=True, error="E: x"),  # wrong + failed: kept
    }
    monkeypatch.setattr(
        prompt_filter.tq,
        "kv_batch_get",
        lambda keys, partition_id, select_fields: {"extra_fields": [rows[key] for key in keys]},
    )
    band = _FilterUnderTest(rows)
    evicted, _ = band._dapo_filtered_keys("train")
    assert evicted == {"low"}
    assert band.filter_counts["judged"] == 1


def test_a_failed_batch_stops_before_any_prm_or_reference_forward(monkeypatch):
    """The step accounts for the batch first: a stop costs no PRM or reference forward."""
    from types import SimpleNamespace

    from verl_prime_lora.config.run import REF_FROZEN
    from verl_prime_lora.prime import prime_step

    keys, is_padding, fields = _batch()
    monkeypatch.setattr(prime_step.tq, "kv_batch_get", lambda **kw: {"extra_fields": fields})
    forwards = []
    run = run_config(colocated("data.train_batch_size=3", "actor_rollout_ref.rollout.n=3"))
    prm = SimpleNamespace(log_probs=lambda batch: forwards.append("prm"))
    step = prime_step.PrimeStep(run, prm, REF_FROZEN, prm_dropout=0.0, prm_fp32=True)
    step._prm_reference_log_probs = lambda batch, context: forwards.append("ref")
    batch = SimpleNamespace(keys=keys, partition_id="train", tags=[{"is_padding": p} for p in is_padding])
    metrics = {}
    with pytest.raises(RolloutFailureError, match="step 4 lost 5 of 9 rollouts"):
        step.compute_advantage(batch, metrics, prime_step.StepContext(global_step=4))
    assert forwards == [] and metrics["prime/dropped_rollouts_total"] == 4.0


# --------------------------------------------------------------------------------------------------
# rewards that are not a finite number: failed rows, and a stop when no row is left
# --------------------------------------------------------------------------------------------------


def _unusable(error="non-finite score nan"):
    return _fields(failed=True, error=error)


def test_non_finite_rows_are_failed_rows_for_the_account_and_the_prm():
    keys = ["a_0_0", "a_1_0", "b_0_0", "b_1_0"]
    fields = [_fields(1.0), _unusable(), _fields(0.0), _fields(failed=True, error="KeyError: 'x'")]
    account = account_rollouts(keys, [False] * 4, fields, rollout_n=2, expected_prompts=2)
    assert (account.failed, account.unusable) == (2, 1)
    assert account.metrics()["reward/failed_total"] == 2.0
    unlabelled = unlabelled_rows([False] * 4, account.failed_rows, fields)
    labels = labels_from_extra_fields(fields, unlabelled, "acc")
    assert labelled_rows([3] * 4, unlabelled).tolist() == [1.0, 0.0, 1.0, 0.0]  # no PRM loss weight, no metric
    assert torch.isfinite(labels).all()
    with pytest.raises(RolloutFailureError) as err:
        account.check(0.0, step=2, reward_fn=REWARD_FN)
    message = str(err.value)
    assert message.startswith("prime.max_failed_rollout_ratio: step 2 lost 2 of 4 rollouts")
    assert "the reward function reward.py:compute_score raised (1) or returned no finite number (1)" in message
    account.check(0.5, step=2, reward_fn=REWARD_FN)  # half failed: allowed


def test_a_step_whose_every_reward_is_non_finite_stops_whatever_the_ratio():
    keys = ["a_0_0", "a_1_0", "b_0_0", "pad_0_0"]
    fields = [_unusable(), _unusable("non-number score None (NoneType)"), _unusable(), _fields(1.0)]
    account = account_rollouts(keys, [False, False, False, True], fields, rollout_n=2, expected_prompts=2)
    assert (account.failed, account.unusable, account.dropped) == (3, 3, 1)
    with pytest.raises(RolloutFailureError) as err:
        account.check(1.0, step=5, reward_fn=REWARD_FN)
    message = str(err.value)
    assert message.startswith(
        "reward.custom_reward_function.path: step 5: the reward function reward.py:compute_score gave every one "
        "of the 3 rollouts a reward that is not a finite number (first: non-finite score nan)"
    )
    # one finite reward left: the ratio decides
    fields[2] = _fields(1.0)
    account_rollouts(keys, [False, False, False, True], fields, 2, 2).check(1.0, step=5, reward_fn=REWARD_FN)


def test_a_non_finite_batch_stops_before_any_prm_or_reference_forward(monkeypatch, caplog):
    """The step's accounting names the reward function of its config; nothing reaches the PRM."""
    from types import SimpleNamespace

    from verl_prime_lora.config.run import REF_FROZEN
    from verl_prime_lora.prime import prime_step

    keys = ["a_0_0", "a_1_0", "a_2_0"]
    fields = [_unusable()] * 3
    monkeypatch.setattr(prime_step.tq, "kv_batch_get", lambda **kw: {"extra_fields": fields})
    forwards = []
    run = run_config(
        colocated("data.train_batch_size=1", "actor_rollout_ref.rollout.n=3", "prime.max_failed_rollout_ratio=1.0")
    )
    prm = SimpleNamespace(log_probs=lambda batch: forwards.append("prm"))
    step = prime_step.PrimeStep(run, prm, REF_FROZEN, prm_dropout=0.0, prm_fp32=True)
    step._prm_reference_log_probs = lambda batch, context: forwards.append("ref")
    batch = SimpleNamespace(keys=keys, partition_id="train", tags=[{}] * 3)
    fn = "pkg://verl_prime_lora.rewards.math_format:compute_score"  # the recipe's
    with pytest.raises(RolloutFailureError, match=rf"^reward\.custom_reward_function\.path: step 2: .*{fn} gave"):
        step.compute_advantage(batch, {}, prime_step.StepContext(global_step=2))
    assert forwards == []
