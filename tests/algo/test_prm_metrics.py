"""The PRM's rewards and metrics (`algo.prm_metrics`) and what reaches the registered estimator: padding rows and
reordered batches (groups by uid), the process spread and advantage parts, the PRM's rankings before and after
its update, and its diagnostics of length drift and the policy's shift."""

import math

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf

from verl_prime_lora.algo.prm_metrics import (
    advantage_part_metrics,
    prm_diagnostics,
    prm_rewards_and_metrics,
    process_reward_stats,
    process_spread_metrics,
)
from verl_prime_lora.config.prime import advantage_config
from verl_prime_lora.config.verl_view import algorithm_view
from verl_prime_lora.prime.prime_step import prime_advantages


def test_process_reward_stats_ignore_padding_rows():
    r = torch.tensor([[0.1, 0.2, 0.0], [-0.3, 0.0, 0.0], [5.0, 5.0, 5.0]])
    m = torch.tensor([[1, 1, 0], [1, 0, 0], [0, 0, 0]]).float()
    stats = process_reward_stats(r, m, torch.tensor([1.0, 0.0, 1.0]))
    assert stats["prm/process_reward/token_max"] == pytest.approx(0.2)
    assert stats["prm/process_reward/seq_mean"] == pytest.approx((0.3 - 0.3) / 2)
    assert stats["prm/process_reward/seq_mean_correct"] == pytest.approx(0.3)
    assert all(math.isfinite(v) for v in stats.values())


# --------------------------------------------------------------------------------------------------
# process rewards -> registered estimator: padding rows and reordered batches (groups by uid)
# --------------------------------------------------------------------------------------------------


def _step_tensors(seed=0):
    g = torch.Generator().manual_seed(seed)
    B, T = 6, 5
    lengths = torch.tensor([5, 3, 4, 2, 5, 1])
    mask = (torch.arange(T)[None] < lengths[:, None]).float()
    mask[5] = 0  # a veRL padding row (uid "pad...", empty response)
    prm = -torch.rand(B, T, generator=g) * mask
    ref = -torch.rand(B, T, generator=g) * mask
    labels = torch.tensor([1.0, 0.0, 1.0, 1.0, 0.0, 1.0])
    scores = torch.zeros(B, T)
    scores[torch.arange(B), (lengths - 1).clamp_min(0)] = labels * 2
    scores = scores * mask
    uid = ["a", "a", "b", "b", "c", "pad0"]
    return prm, ref, mask, labels, uid, scores


@pytest.mark.parametrize("estimator", ["prime_grpo", "prime_rloo"])
def test_advantages_follow_uid_groups_and_ignore_padding(estimator):
    prm, ref, mask, labels, uid, scores = _step_tensors()  # prm, ref: independent seeded random log-probs
    algo = algorithm_view(
        OmegaConf.create(
            {
                "adv_estimator": estimator,
                "gamma": 1.0,
                "norm_adv_by_std_in_grpo": True,
                "prime": {"process_std_threshold": 0.0},
            }
        )
    )
    r, metrics, _ = prm_rewards_and_metrics(prm, prm, ref, mask, labels, np.array(uid, dtype=object), 0.05)
    assert all(math.isfinite(v) for v in metrics.values())
    assert torch.all(r[5] == 0)
    assert torch.all(r[mask.bool()] != 0)  # a process part on every valid token: the check below covers it
    adv, _ = prime_advantages(algo, scores, mask, np.array(uid, dtype=object), r)
    assert torch.all(adv[5] == 0)

    perm = [4, 2, 5, 0, 3, 1]  # veRL's _balance_batch reorders rows
    r_p, metrics_p, _ = prm_rewards_and_metrics(
        prm[perm], prm[perm], ref[perm], mask[perm], labels[perm], np.array([uid[i] for i in perm], dtype=object), 0.05
    )
    adv_p, _ = prime_advantages(algo, scores[perm], mask[perm], np.array([uid[i] for i in perm], dtype=object), r_p)
    assert torch.allclose(adv_p, adv[perm], atol=1e-6)
    assert metrics_p == pytest.approx(metrics)  # labels travel with their rows

    # the gate's weight reaches the estimator: 0 gives the outcome-only advantage
    r_prm, _, _ = prm_rewards_and_metrics(prm, prm, ref, mask, labels, np.array(uid, dtype=object), 0.05)
    full, _ = prime_advantages(algo, scores, mask, np.array(uid, dtype=object), r_prm)
    gated, _ = prime_advantages(algo, scores, mask, np.array(uid, dtype=object), r_prm, process_scale=0.0)
    outcome_only, _ = prime_advantages(algo, scores, mask, np.array(uid, dtype=object), torch.zeros_like(r))
    assert torch.equal(gated, outcome_only) and not torch.allclose(full, outcome_only)


def test_the_metrics_show_what_reached_the_advantage():
    """`prm/process_group_std/*` and `prm/process_groups_on` (is the process term on at all), and the mean |A| of the
    outcome and the process part that the actor receives (gate and threshold applied)."""
    prm, ref, mask, labels, uid, scores = _step_tensors()
    uid = np.array(uid, dtype=object)
    algo = algorithm_view(
        OmegaConf.create({"adv_estimator": "prime_grpo", "gamma": 1.0, "prime": {"process_std_threshold": 0.01}})
    )
    options = advantage_config(algo.node)
    untrained, _, _ = prm_rewards_and_metrics(ref, ref, ref, mask, labels, uid, 0.05)  # PRM == reference
    trained, _, _ = prm_rewards_and_metrics(prm, prm, ref, mask, labels, uid, 0.05)

    quiet = process_spread_metrics(untrained, mask, uid, options, "prime_grpo")
    assert quiet == {
        "prm/process_group_std/mean": 0.0,
        "prm/process_group_std/max": 0.0,
        "prm/process_groups_on": 0.0,
    }  # groups a, b and c (c is a singleton + the padding row's own group: not counted)
    loud = process_spread_metrics(trained, mask, uid, options, "prime_grpo")
    assert loud["prm/process_group_std/max"] >= loud["prm/process_group_std/mean"] > 0.01
    assert loud["prm/process_groups_on"] == 1.0
    assert "prm/process_groups_on" not in process_spread_metrics(trained, mask, uid, options, "prime_rloo")

    for rewards, gate, process_on in ((trained, 1.0, True), (trained, 0.0, False), (untrained, 1.0, False)):
        _, returns = prime_advantages(algo, scores, mask, uid, rewards, process_scale=gate)
        _, outcome = prime_advantages(algo, scores, mask, uid, rewards, process_scale=0.0)
        parts = advantage_part_metrics(returns, outcome, mask)
        assert parts["prm/advantage/outcome_abs_mean"] > 0
        assert (parts["prm/advantage/process_abs_mean"] > 0) is process_on


def test_prm_metrics_before_and_after_the_update():
    prm, ref, mask, labels, uid, _ = _step_tensors()
    uid = np.array(uid, dtype=object)
    _, m0, _ = prm_rewards_and_metrics(
        ref, ref, ref, mask, labels, uid, 0.05, {"loss": 0.7, "grad_norm": 1.0, "lr": 1e-6}
    )
    assert m0["prm/ce_loss"] == pytest.approx(math.log(2))  # PRM == reference: z = 0
    assert m0["prm/update_loss"] == 0.7 and m0["prm/grad_norm"] == 1.0 and m0["prm/lr"] == 1e-6
    # a PRM that ranks the correct answer higher: group a (labels 1, 0) is right after the update;
    # groups b (1, 1) and c (one row) have no pair and count 1/2 (core_algos' convention)
    better = ref + 0.5 * labels[:, None] * mask
    _, m1, _ = prm_rewards_and_metrics(ref, better, ref, mask, labels, uid, 0.05)
    assert m1["prm/dpo_acc_before"] == pytest.approx(0.5)
    assert m1["prm/dpo_acc"] == pytest.approx((1.0 + 0.5 + 0.5) / 3)
    assert m1["prm/dpo_acc_mixed"] == pytest.approx(1.0)  # over group a only, the one with a right and a wrong
    assert m1["prm/dpo_acc_before_mixed"] == pytest.approx(0.5)  # the gate's input: the PRM before the update
    _, m2, _ = prm_rewards_and_metrics(better, better, ref, mask, labels, uid, 0.05)
    assert m2["prm/dpo_acc_before_mixed"] == pytest.approx(1.0)  # group a only: b and c hold no pair


def test_prm_diagnostics_of_length_drift_and_the_policy_shift():
    """Over the mixed group a only (row 0 right, 5 tokens; row 1 wrong, 3 tokens)."""
    prm, ref, mask, labels, uid, _ = _step_tensors()
    uid = np.array(uid, dtype=object)
    # a PRM that raised right answers' tokens by 0.1 nats, and lowered every token by 0.5
    drifted = ref + (0.1 * labels[:, None] - 0.5) * mask
    wrong_up = ref + 0.3 * (1 - labels[:, None]) * mask  # a policy that moved towards the wrong answers
    _, m, _ = prm_rewards_and_metrics(drifted, drifted, ref, mask, labels, uid, 0.05)
    m.update(prm_diagnostics(drifted, ref, mask, labels, uid, 0.05, policy=wrong_up))
    assert m["prm/token_log_ratio_mean"] == pytest.approx(0.1 * 11 / 19 - 0.5)  # 11 of 19 tokens are right ones
    assert m["prm/length_pairwise_mixed"] == 1.0  # the right answer is the longer one
    assert m["prm/dpo_acc_mixed"] == 0.0  # z0 = β(0.5 − 2.5) < z1 = β(−1.5): the drift ranks the shorter first
    # what the reference's own likelihood Σ_t log π_ref ranks, on planted references: row 0 = 5 × −0.2 = −1.0 against
    # row 1 = 3 × −0.5 = −1.5 (the right answer more likely: 1), then against 3 × −0.2 = −0.6 (the wrong one: 0)
    for row_1_token, ranked in ((-0.5, 1.0), (-0.2, 0.0)):
        planted = ref.clone()
        planted[0], planted[1] = -0.2 * mask[0], row_1_token * mask[1]
        assert prm_diagnostics(drifted, planted, mask, labels, uid, 0.05)["prm/ref_likelihood_dpo_acc_mixed"] == ranked
    assert m["prm/policy_dpo_acc_mixed"] == 0.0
    assert "prm/policy_dpo_acc_mixed" not in prm_diagnostics(drifted, ref, mask, labels, uid, 0.05)  # no policy
