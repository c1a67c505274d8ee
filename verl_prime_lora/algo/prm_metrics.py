r"""The `prm/*` metrics of a PRIME step, as pure tensor functions beside the math they measure (`core_algos`).

Notation as in `core_algos`: B responses, T response positions, the response mask m, groups by `uid`;
q = log π_φ − log π_ref per token, r = β·q·m the token process rewards, z_i = Σ_t r[i,t] the sequence logit.
Every function takes (B, T) padded tensors; rows with an empty mask (veRL's padding rows) count nowhere, and rows
whose `labelled` is 0 (no PRM label: their reward failed or could not decide the outcome) count in no metric.
`*_mixed`: over the groups that hold a right and a wrong answer only.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from verl_prime_lora.algo.core_algos import process_group_spread
from verl_prime_lora.algo.implicit_prm import (
    implicit_process_rewards,
    mean_token_log_ratio,
    prm_bce_loss,
    prm_classification_accuracy,
    prm_pairwise_accuracy,
    prm_ranking_z,
    prm_sequence_logits,
)
from verl_prime_lora.config.prime import AdvantageConfig


def _label_mask(mask: torch.Tensor, labelled: torch.Tensor | None) -> torch.Tensor:
    """m on the labelled rows, 0 on the others."""
    return mask if labelled is None else mask * labelled.to(mask.dtype)[:, None]


@dataclass(frozen=True)
class HeldOutRanking:
    """The PRM's ranking of a step's responses before it trains on them, against their outcome: the pairwise
    accuracy over groups with a right and a wrong answer (`prm/dpo_acc_before_mixed`, the gate's input) and the
    ranking's stratified Mann–Whitney z (`prm/ranking_z_before`, the alarm's)."""

    pairwise_mixed: float
    z: float


def prm_rewards_and_metrics(
    prm_before, prm_used, ref, mask, labels, uid, beta, update_metrics=None, labelled=None, outcomes=None
) -> tuple[torch.Tensor, dict[str, float], HeldOutRanking]:
    """Process rewards from the PRM log-probs used for the advantage, the `prm/*` metrics, and the held-out ranking.

    `prm_before`: PRM log-probs before this step's update (classification accuracy, CE loss and
    `dpo_acc_before` are measured on them: responses the PRM has not trained on); `prm_used`: the ones the
    rewards come from (after the update in `before` mode, the same tensor otherwise). `labelled` (B,): 0 for rows
    without a PRM label: they get process rewards but count in no metric.
    `prm/ranking_z[_before]`: the ranking's distance from chance in standard errors (`implicit_prm.prm_ranking_z`).
    The loss and classification accuracy are measured against the PRM's `labels`; the rankings (`dpo_acc*`,
    `ranking_z*`) against `outcomes` (B,), the outcome accuracy (`step_rows.outcome_labels`; default `labels`).
    `update_metrics`: the PRM update's, logged as `prm/update_loss` (its mean BCE) and `prm/<name>`.
    """
    outcomes = labels if outcomes is None else outcomes
    label_mask = _label_mask(mask, labelled)
    logits_before = prm_sequence_logits(prm_before, ref, label_mask, beta)
    metrics = {
        "prm/ce_loss": prm_bce_loss(logits_before, labels, label_mask).item(),
        "prm/classification_acc": prm_classification_accuracy(logits_before, labels, label_mask).item(),
        "prm/dpo_acc_before": prm_pairwise_accuracy(logits_before, outcomes, uid, label_mask).item(),
        "prm/dpo_acc_before_mixed": prm_pairwise_accuracy(
            logits_before, outcomes, uid, label_mask, mixed_only=True
        ).item(),
        "prm/ranking_z_before": prm_ranking_z(logits_before, outcomes, uid, label_mask).item(),
    }
    for key, value in (update_metrics or {}).items():
        name = "update_loss" if key == "loss" else key  # the worker's mean BCE over the update's mini-batches
        metrics[f"prm/{name}"] = value
    process_rewards = implicit_process_rewards(prm_used, ref, mask, beta)
    used_logits = process_rewards.sum(-1)
    metrics["prm/dpo_acc"] = prm_pairwise_accuracy(used_logits, outcomes, uid, label_mask).item()
    metrics["prm/dpo_acc_mixed"] = prm_pairwise_accuracy(used_logits, outcomes, uid, label_mask, mixed_only=True).item()
    metrics["prm/ranking_z"] = prm_ranking_z(used_logits, outcomes, uid, label_mask).item()
    metrics.update(process_reward_stats(process_rewards, label_mask, labels))
    held_out = HeldOutRanking(metrics["prm/dpo_acc_before_mixed"], metrics["prm/ranking_z_before"])
    return process_rewards, metrics, held_out


def process_reward_stats(process_rewards: torch.Tensor, mask: torch.Tensor, labels: torch.Tensor) -> dict[str, float]:
    """Token and sequence statistics of the implicit process rewards over valid (non-padding) rows."""
    valid_rows = mask.sum(-1) > 0
    tokens = process_rewards[mask.bool()]
    seq = process_rewards.sum(-1)[valid_rows]
    lab = labels[valid_rows]
    stats = {
        "prm/process_reward/token_mean": tokens.mean().item() if tokens.numel() else 0.0,
        "prm/process_reward/token_max": tokens.max().item() if tokens.numel() else 0.0,
        "prm/process_reward/token_min": tokens.min().item() if tokens.numel() else 0.0,
        "prm/process_reward/seq_mean": seq.mean().item() if seq.numel() else 0.0,
        "prm/label_mean": lab.mean().item() if lab.numel() else 0.0,
    }
    for name, sel in (("correct", lab > 0.5), ("incorrect", lab <= 0.5)):
        if sel.any():
            stats[f"prm/process_reward/seq_mean_{name}"] = seq[sel].mean().item()
    return stats


def prm_diagnostics(prm_used, ref, mask, labels, uid, beta, labelled=None, policy=None) -> dict[str, float]:
    """`prime.diagnostics`: what else ranks a step's mixed groups, to tell a PRM's knowledge from a shortcut.

    `prm/token_log_ratio_mean` (q̄ of the PRM used: below 0 when the PRM lowers every token, so z favours
    short responses); `prm/length_pairwise_mixed` (response length alone: above ½ when right answers are
    longer); `prm/ref_likelihood_dpo_acc_mixed` (Σ_t log π_ref: what the reference's own likelihood ranks);
    and, given `policy` (the rollout policy's log-probs at temperature 1), `prm/policy_dpo_acc_mixed` (the
    policy's own implicit reward Σ_t (log π_θ − log π_ref): below ½ when RL moved the policy towards the wrong
    answers it still samples, a shift a PRM trained on the same responses can share). Arguments as in
    `prm_rewards_and_metrics`.
    """
    label_mask = _label_mask(mask, labelled)

    def ranking(scores: torch.Tensor) -> float:
        return prm_pairwise_accuracy(scores, labels, uid, label_mask, mixed_only=True).item()

    metrics = {
        "prm/token_log_ratio_mean": mean_token_log_ratio(prm_used, ref, label_mask).item(),
        "prm/length_pairwise_mixed": ranking(label_mask.sum(-1)),
        "prm/ref_likelihood_dpo_acc_mixed": ranking((ref * label_mask).sum(-1)),
    }
    if policy is not None:
        metrics["prm/policy_dpo_acc_mixed"] = ranking(prm_sequence_logits(policy, ref, label_mask, beta))
    return metrics


def process_spread_metrics(process_rewards, mask, uid, options: AdvantageConfig, estimator: str) -> dict[str, float]:
    """The spread σ_g of the PRM's rewards per prompt group (`core_algos.process_group_spread`), over groups of at
    least two responses: `prm/process_group_std/{mean,max}` (0 while the PRM equals its reference) and, for
    `prime_grpo`, `prm/process_groups_on`, the share of groups whose σ_g reaches their threshold τ_g
    (`algorithm.prime.process_std_threshold[_per_token]`), i.e. that get a process term at all."""
    spread, size, threshold = process_group_spread(
        process_rewards,
        mask,
        uid,
        options.process_norm,
        options.process_std_threshold,
        options.process_std_threshold_per_token,
    )
    groups = size > 1
    spread, threshold = spread[groups], threshold[groups]
    if not spread.numel():
        return {}
    metrics = {"prm/process_group_std/mean": spread.mean().item(), "prm/process_group_std/max": spread.max().item()}
    if estimator == "prime_grpo":
        metrics["prm/process_groups_on"] = (spread >= threshold).float().mean().item()
    return metrics


def advantage_part_metrics(returns, outcome_returns, response_mask) -> dict[str, float]:
    """What reached the actor, by part: the mean |A| over response tokens of the outcome part (c_o·A^o) and of the
    process part (w·c_p·A^p, the estimator's unwhitened advantage minus its outcome-only one)."""
    mask = response_mask.to(returns.dtype)
    tokens = mask.sum().clamp_min(1)
    return {
        "prm/advantage/outcome_abs_mean": ((outcome_returns.abs() * mask).sum() / tokens).item(),
        "prm/advantage/process_abs_mean": (((returns - outcome_returns).abs() * mask).sum() / tokens).item(),
    }
