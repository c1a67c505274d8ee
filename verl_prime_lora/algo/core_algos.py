r"""PRIME's advantage (Cui et al., arXiv 2502.01456) as pure tensor functions, and the estimators veRL looks up.

The implicit PRM's token rewards and loss are in `implicit_prm`, the group statistics in `groups`.
Notation (every function below states which part it computes):

* B responses, T response positions; ``m[i, t]`` is the response mask (1 = a generated token).
* Groups are responses to the same prompt, found by equal ``index`` (veRL's ``uid``) values, in any
  order — never by position. Padding rows (veRL's ``pad…`` uids, zero mask) form their own groups.
* ``L_i = max(Σ_t m[i,t], 1)``; outcome score ``R_i = Σ_t token_level_rewards[i, t]``.
* Implicit PRM: ``q[i,t] = log π_φ(y_t|y_<t) − log π_ref(y_t|y_<t)``; token process reward
  ``r[i,t] = β · q[i,t] · m[i,t]``; sequence logit ``z_i = β · Σ_t q[i,t] m[i,t]``.
* Mean process reward of a response: ``r̄_i = Σ_t r[i,t] m[i,t] / L_i``.

The arithmetic is vectorised (no Python loop over tokens; over rows only the one dict lookup per row that turns
``index`` labels into group ids, `groups.group_ids`) and computed in float32 (float64 when an input is float64),
whatever the input dtype.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from verl_prime_lora.algo.groups import compute_dtype, group_ids, group_mean_std, leave_one_out_mean

# veRL's, bound at first call: importing this module does not import veRL (see verl_bindings).
from verl_prime_lora.algo.verl_bindings import masked_whiten, register_adv_est
from verl_prime_lora.config.prime import PROCESS_NORMS, AdvantageConfig, advantage_config
from verl_prime_lora.config.verl_view import algorithm_view

# algorithm.prime's defaults (config.prime), for the functions below called without a config
DEFAULT_EPSILON = AdvantageConfig.epsilon  # as veRL's grpo
DEFAULT_PROCESS_STD_THRESHOLD = AdvantageConfig.process_std_threshold  # compared with std_g(z) or std_g(r̄)
DEFAULT_PROCESS_STD_THRESHOLD_PER_TOKEN = AdvantageConfig.process_std_threshold_per_token  # × the group's mean L


# --------------------------------------------------------------------------------------------------
# Advantages
# --------------------------------------------------------------------------------------------------


def discounted_suffix_sum(values: torch.Tensor, gamma: float, block: int = 64) -> torch.Tensor:
    r"""G[i,t] = Σ_{s ≥ t} γ^{s−t} values[i,s] along the last dimension (a new tensor).

    γ = 1: one reverse cumulative sum. γ < 1: blocks of ``block`` positions; inside a block the sums
    are one matmul with W[t,s] = γ^{s−t} (s ≥ t), the block starts are chained by a second matmul
    with γ^{block·(b'−b)}, and each position adds γ^{block−t}·(suffix at the next block's start).
    Every factor is ≤ 1, so long rows neither overflow nor lose the tail (γ^{s−t} merely underflows
    to 0 where it is below float range).
    """
    if gamma == 1.0:
        out = values.flip(-1)
        out.cumsum_(-1)
        return out.flip(-1)
    length = values.shape[-1]
    num_blocks = -(-length // block)
    x = F.pad(values, (0, num_blocks * block - length)).reshape(-1, num_blocks, block)
    g = torch.tensor(float(gamma), dtype=torch.float64)

    def powers(steps: torch.Tensor, scale: int) -> torch.Tensor:  # γ^{scale·(s−t)} for s ≥ t, else 0
        exponent = steps[None, :] - steps[:, None]
        return torch.where(exponent >= 0, g ** (scale * exponent.clamp_min(0)), 0).to(values.dtype)

    k = torch.arange(block, device=values.device)
    local = x @ powers(k, 1).T
    starts = local[..., 0] @ powers(torch.arange(num_blocks, device=values.device), block).T
    next_start = F.pad(starts[..., 1:], (0, 1))
    out = local + next_start[..., None] * (g ** (block - k)).to(values.dtype)
    return out.reshape(*values.shape[:-1], num_blocks * block)[..., :length]


def grpo_outcome_advantage(
    scores: torch.Tensor, gid: torch.Tensor, epsilon: float = DEFAULT_EPSILON, norm_by_std: bool = True
) -> torch.Tensor:
    r"""GRPO outcome advantage A^o_i = (R_i − mean_g R) / (std_g R + ε)  (or R_i − mean_g R, Dr.GRPO).

    Unbiased std; singleton groups use mean 0, std 1 (veRL's ``grpo``).
    """
    _, mean, std = group_mean_std(scores, gid)
    centered = scores - mean
    return centered / (std + epsilon) if norm_by_std else centered


def rloo_outcome_advantage(scores: torch.Tensor, gid: torch.Tensor) -> torch.Tensor:
    r"""RLOO outcome advantage A^o_i = R_i − mean_{j ≠ i} R_j; a singleton keeps R_i (veRL's ``rloo``)."""
    _, baseline = leave_one_out_mean(scores, gid)
    return scores - baseline


def mean_process_reward(process_rewards: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """r̄_i = Σ_t r[i,t] m[i,t] / max(Σ_t m[i,t], 1)."""
    return torch.linalg.vecdot(process_rewards, mask) / mask.sum(-1).clamp_min(1)


def group_std_threshold(
    mask: torch.Tensor, gid: torch.Tensor, threshold: float, per_token: float = 0.0, process_norm: str = "sequence"
) -> torch.Tensor | float:
    r"""The threshold of each row's group spread: τ_i = τ_0 + τ_L · L̄_g(i) for the spread of z (``sequence``),
    with L̄_g the mean response length Σ_t m[j,t] over the rows j of row i's group; τ_0 + τ_L for the spread of
    z / L (``token``), a statistic per token already; τ_0 alone when τ_L = 0. bf16's rounding of z grows about
    linearly with the response length (docs/findings.md, "The rounding floor"), so a floor set per token holds at
    every length."""
    if per_token == 0.0:
        return threshold
    if process_norm == "token":
        return threshold + per_token
    _, mean_length, _ = group_mean_std(mask.sum(-1), gid)
    return threshold + per_token * mean_length


def sequence_norm_process_advantage(
    process_rewards: torch.Tensor,
    mask: torch.Tensor,
    gid: torch.Tensor,
    gamma: float = 1.0,
    std_threshold: float | torch.Tensor = DEFAULT_PROCESS_STD_THRESHOLD,
    epsilon: float = DEFAULT_EPSILON,
) -> torch.Tensor:
    r"""Length-free group-normalised process advantage (``process_norm: sequence``, the default).

    The group statistics are those of the PRM's sequence logits z_i = Σ_t r[i,t] m[i,t]:
    μ_g, σ_g = mean and unbiased std of z over group g (singletons: 0 and 1, as for the outcome).
    Each response spreads the baseline μ_g evenly over its own L_i tokens:

        r̃[i,t] = (r[i,t] − μ_g / L_i) / (σ_g + ε) · m[i,t],      A^p[i,t] = Σ_{s ≥ t} γ^{s−t} r̃[i,s],

    and r̃ = 0 in groups with σ_g < ``std_threshold`` (one number, or one per row: `group_std_threshold`; the PRM
    still equal to its reference, z ≈ 0, or within bf16's rounding of it, where dividing by σ_g would blow noise
    up). With γ = 1 the return at the first token is

        A^p[i,0] = (z_i − μ_g) / (σ_g + ε),

    the GRPO advantage of the sequence logits, whatever the lengths: it is ordered like z, sums to 0
    over a group, is O(1) like the outcome part, and does not grow with L. Later positions hold a
    token's share of that return: the PRM's own partial sums Σ_{s≥t} r minus the share
    (L_i − t)/L_i of the baseline. (Spreading μ_g over each response's own tokens, rather than PRIME
    RLOO's per-token baseline L_i·mean_g(z/L), keeps A^p[i,0] zero-mean in the group for unequal
    lengths and never ranks a response by its length.) The mask is applied before the suffix sum.
    """
    z = process_rewards.mul(mask).sum(-1)
    _, mean, std = group_mean_std(z, gid)
    per_token_baseline = mean / mask.sum(-1).clamp_min(1)
    return _normalised_return(process_rewards, mask, per_token_baseline, std, gamma, std_threshold, epsilon)


def token_norm_process_advantage(
    process_rewards: torch.Tensor,
    mask: torch.Tensor,
    gid: torch.Tensor,
    gamma: float = 1.0,
    std_threshold: float | torch.Tensor = DEFAULT_PROCESS_STD_THRESHOLD,
    epsilon: float = DEFAULT_EPSILON,
) -> torch.Tensor:
    r"""The seed's group-normalised process advantage (``process_norm: token``; open-rs2-grpo-lora).

    μ_g, σ_g = mean and unbiased std of the per-token mean r̄_i = z_i / L_i over group g (singletons:
    0 and 1); r̃[i,t] = (r[i,t] − μ_g) / (σ_g + ε) · m[i,t], and r̃ = 0 in groups with
    σ_g < ``std_threshold``; A^p[i,t] = Σ_{s ≥ t} γ^{s−t} r̃[i,s].

    Kept to reproduce the seed run; not the default, because its scale depends on the length L:
    σ_g(r̄) = σ_g(z)/L, so at the seed's L = 3584 a PRM that separates a group well (z from −3 to 3)
    has σ_g(r̄) ≈ 6.6e-4 < 1e-2 and the process term is exactly 0; below the threshold each r̃ is
    O(1) per token and the return A^p[i,0] = (z_i − L·μ_g)/σ_g(r̄) is O(L) (≈ 4.5e3 against an
    outcome part ≈ 0.9). The mask is applied before the suffix sum (the seed code did not).
    """
    _, mean, std = group_mean_std(mean_process_reward(process_rewards, mask), gid)
    return _normalised_return(process_rewards, mask, mean, std, gamma, std_threshold, epsilon)


def _normalised_return(
    process_rewards: torch.Tensor,
    mask: torch.Tensor,
    baseline: torch.Tensor,
    std: torch.Tensor,
    gamma: float,
    std_threshold: float | torch.Tensor,
    epsilon: float,
) -> torch.Tensor:
    r"""A^p[i,t] = Σ_{s ≥ t} γ^{s−t} r̃[i,s],  r̃[i,t] = (r[i,t] − b_i) / (σ_i + ε) · m[i,t], and r̃ = 0 in rows
    whose group spread σ_i < ``std_threshold`` (one number, or one per row): the tail both group-normalised process
    advantages share (b_i and σ_i per row, from the row's group)."""
    scale = torch.where(std >= std_threshold, 1.0 / (std + epsilon), torch.zeros_like(std))
    normalised = (process_rewards - baseline[:, None]).mul_(mask).mul_(scale[:, None])
    return discounted_suffix_sum(normalised, gamma)


def process_group_spread(
    process_rewards: torch.Tensor,
    mask: torch.Tensor,
    index: Any,
    process_norm: str = "sequence",
    threshold: float = DEFAULT_PROCESS_STD_THRESHOLD,
    threshold_per_token: float = DEFAULT_PROCESS_STD_THRESHOLD_PER_TOKEN,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    r"""(σ_g, n_g, τ_g) per group: the spread that ``prime_grpo``'s process part divides by and holds against its
    threshold — the unbiased std of z_i (``sequence``) or of r̄_i = z_i / L_i (``token``) over the group's rows —,
    the group's row count, and the threshold τ_g (`group_std_threshold` of ``threshold`` and
    ``threshold_per_token``). Groups in order of first appearance (``group_ids``); a singleton's σ is 1, as in
    ``group_mean_std``. A PRM equal to its reference gives σ_g = 0 in every group.
    """
    dtype = compute_dtype(process_rewards)
    mask = mask.to(dtype)
    if process_norm == "token":
        values = mean_process_reward(process_rewards.to(dtype), mask)
    else:
        values = process_rewards.to(dtype).mul(mask).sum(-1)
    gid = group_ids(index, values.device)
    count, _, std = group_mean_std(values, gid)
    num_groups = int(gid.max().item()) + 1 if gid.numel() else 0
    first_row = torch.full((num_groups,), gid.numel(), dtype=torch.long, device=gid.device)
    first_row.scatter_reduce_(0, gid, torch.arange(gid.numel(), device=gid.device), reduce="amin")
    row_threshold = group_std_threshold(mask, gid, threshold, threshold_per_token, process_norm)
    row_threshold = torch.as_tensor(row_threshold, dtype=dtype, device=gid.device)
    return std[first_row], count[first_row], row_threshold.expand_as(std)[first_row]


def rloo_process_advantage(
    process_rewards: torch.Tensor, mask: torch.Tensor, gid: torch.Tensor, gamma: float = 1.0
) -> torch.Tensor:
    r"""Leave-one-out process advantage (paper Eq. 6):
    A^p[i,t] = Σ_{s ≥ t} γ^{s−t} (r[i,s] − mean_{j ≠ i} r̄_j) · m[i,s]   (baseline 0 for a singleton)."""
    _, baseline = leave_one_out_mean(mean_process_reward(process_rewards, mask), gid)
    return discounted_suffix_sum((process_rewards - baseline[:, None]).mul_(mask), gamma)


# --------------------------------------------------------------------------------------------------
# Registered veRL estimators
# --------------------------------------------------------------------------------------------------


def _whiten(advantages: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """veRL's masked whitening over all valid tokens of the batch; skipped with < 2 valid tokens."""
    if mask.sum() < 2:
        return advantages
    return masked_whiten(advantages, mask) * mask


def prime_advantage(
    outcome: Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor],
    process: Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor],
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: Any,
    options: AdvantageConfig,
    process_rewards: torch.Tensor | None = None,
    process_scale: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    r"""A[i,t] = (c_o · A^o[i,t] + w · c_p · A^p[i,t]) · m[i,t], optionally whitened over the batch.

    ``outcome(token_level_rewards, m, gid)`` gives A^o, per response (B,) or per token (B, T);
    ``process(r, m, gid) -> (B, T)`` gives A^p. The coefficients c_o, c_p are ``options``'
    ``outcome_coef`` and ``process_coef`` (``algorithm.prime``); w is ``process_scale`` (the trainer's
    ``process_gate.ProcessGate``'s weight, default 1). Returns (advantages, returns); the
    returns are the unwhitened advantages, as in veRL's outcome estimators (PRIME has no critic).
    """
    dtype = compute_dtype(token_level_rewards, process_rewards)
    mask = response_mask.to(dtype)
    gid = group_ids(index, token_level_rewards.device)
    with torch.no_grad():
        outcome_advantage = outcome(token_level_rewards.to(dtype), mask, gid)
        if outcome_advantage.dim() == 1:
            outcome_advantage = outcome_advantage[:, None]
        outcome_advantage = options.outcome_coef * outcome_advantage
        process_coef = options.process_coef * float(process_scale)
        if process_rewards is not None and process_coef != 0.0:
            advantages = process(process_rewards.to(dtype), mask, gid)
            if process_coef != 1.0:
                advantages.mul_(process_coef)
            advantages.add_(outcome_advantage).mul_(mask)
        else:
            advantages = outcome_advantage * mask
        returns = advantages
        if options.whiten_advantages:
            advantages = _whiten(advantages, mask)
    return advantages, returns


# algorithm.prime.process_norm -> its process advantage, for each of the names config.prime.PROCESS_NORMS accepts
PROCESS_ADVANTAGES = dict(
    zip(PROCESS_NORMS, (sequence_norm_process_advantage, token_norm_process_advantage), strict=True)
)


def _process_part(
    gamma: float, options: AdvantageConfig, baseline: str
) -> Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]:
    """The process advantage with a ``group_norm`` (GRPO-like) or ``leave_one_out`` (paper) baseline.

    ``group_norm`` normalises per ``algorithm.prime.process_norm``: ``sequence`` (default,
    length-free) or ``token`` (the seed's formula). ``gamma``: ``algorithm.gamma``.
    """
    if baseline == "group_norm":
        process_fn = PROCESS_ADVANTAGES[options.process_norm]
        threshold, per_token = options.process_std_threshold, options.process_std_threshold_per_token

        def group_norm(r: torch.Tensor, m: torch.Tensor, gid: torch.Tensor) -> torch.Tensor:
            group_threshold = group_std_threshold(m, gid, threshold, per_token, options.process_norm)
            return process_fn(r, m, gid, gamma, group_threshold, options.epsilon)

        return group_norm
    return lambda r, m, gid: rloo_process_advantage(r, m, gid, gamma)


@register_adv_est("prime_grpo")
def compute_prime_grpo_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: np.ndarray,
    config: Any = None,
    process_rewards: torch.Tensor | None = None,
    norm_adv_by_std_in_grpo: bool | None = None,
    process_scale: float = 1.0,
    options: AdvantageConfig | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    r"""PRIME with GRPO baselines: A = c_o·(R − mean_g R)/(std_g R + ε) + c_p·A^p_group_norm.

    A^p is ``sequence_norm_process_advantage`` (default; at the first token the GRPO advantage of
    the PRM's sequence logits) or, with ``algorithm.prime.process_norm=token``, the seed's
    ``token_norm_process_advantage``. Knobs: ``algorithm.norm_adv_by_std_in_grpo`` (or the keyword,
    as veRL's ``grpo``), ``algorithm.gamma``, ``algorithm.prime.{outcome_coef, process_coef,
    process_norm, process_std_threshold[_per_token], epsilon, whiten_advantages}``; ``process_scale`` (the trainer's
    process gate) multiplies c_p. ``options``: the typed ``algorithm.prime`` (the PRIME step's), else read from
    ``config``. Without process rewards it equals veRL's ``grpo``.
    """
    options, algorithm = options or advantage_config(config), algorithm_view(config)
    if norm_adv_by_std_in_grpo is None:
        norm_adv_by_std_in_grpo = algorithm.norm_adv_by_std_in_grpo
    return prime_advantage(
        lambda rewards, m, gid: grpo_outcome_advantage(rewards.sum(-1), gid, options.epsilon, norm_adv_by_std_in_grpo),
        _process_part(algorithm.gamma, options, "group_norm"),
        token_level_rewards,
        response_mask,
        index,
        options,
        process_rewards,
        process_scale,
    )


@register_adv_est("prime_rloo")
def compute_prime_rloo_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: np.ndarray,
    config: Any = None,
    process_rewards: torch.Tensor | None = None,
    process_scale: float = 1.0,
    options: AdvantageConfig | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    r"""PRIME as in the paper (Eq. 5–6): A = c_o·(R_i − mean_{j≠i} R_j) + c_p·A^p_leave_one_out.

    Knobs: ``algorithm.gamma``, ``algorithm.prime.{outcome_coef, process_coef, whiten_advantages}``;
    ``process_scale`` (the trainer's process gate) multiplies c_p; ``options`` as for ``prime_grpo``. Without process
    rewards it equals veRL's ``rloo``.
    """
    options = options or advantage_config(config)
    return prime_advantage(
        lambda rewards, m, gid: rloo_outcome_advantage(rewards.sum(-1), gid),
        _process_part(algorithm_view(config).gamma, options, "leave_one_out"),
        token_level_rewards,
        response_mask,
        index,
        options,
        process_rewards,
        process_scale,
    )
