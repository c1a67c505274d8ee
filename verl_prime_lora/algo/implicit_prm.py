r"""The implicit PRM (Cui et al., arXiv 2502.01456, Eqs. 3–4): its token rewards, its loss and how well it ranks.

Notation as in `core_algos`: B responses, T response positions, the response mask m, groups by ``index``.
``q[i,t] = log π_φ(y_t|y_<t) − log π_ref(y_t|y_<t)``; token process reward ``r[i,t] = β · q[i,t] · m[i,t]``;
sequence logit ``z_i = β · Σ_t q[i,t] m[i,t]``, with σ(z_i) the PRM's probability that response i is correct.
Rows with an empty response (veRL's padding rows, empty generations) count nowhere. Computed in float32 (float64
when an input is float64), whatever the input dtype.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from verl_prime_lora.algo.groups import compute_dtype, group_ids


def mean_token_log_ratio(
    prm_log_probs: torch.Tensor, ref_log_probs: torch.Tensor, response_mask: torch.Tensor
) -> torch.Tensor:
    r"""q̄ = Σ_{i,t} q[i,t]·m[i,t] / Σ_{i,t} m[i,t]: the mean token log-ratio over the batch (a scalar; keeps the graph).

    On responses sampled from π_ref, E[q] = −KL(π_ref ‖ π_φ) ≤ 0 per token: as the PRM moves away from its
    reference, z_i = β·Σ_t q gains a term ≈ −β·L_i·KL that ranks short responses above long ones,
    whatever their answers (a diagnostic of the trainer, `prm/token_log_ratio_mean`).
    """
    dtype = compute_dtype(prm_log_probs, ref_log_probs)
    m = response_mask.to(dtype)
    return ((prm_log_probs.to(dtype) - ref_log_probs.to(dtype)) * m).sum() / m.sum().clamp_min(1)


def implicit_process_rewards(
    prm_log_probs: torch.Tensor,
    ref_log_probs: torch.Tensor,
    response_mask: torch.Tensor,
    beta: float,
) -> torch.Tensor:
    r"""Token process rewards r[i,t] = β · q[i,t] · m[i,t]   (paper Eq. 3).

    Every response token gets its reward, the last one included.
    """
    dtype = compute_dtype(prm_log_probs, ref_log_probs)
    q = prm_log_probs.to(dtype) - ref_log_probs.to(dtype)
    return beta * q * response_mask.to(dtype)


def prm_sequence_logits(
    prm_log_probs: torch.Tensor,
    ref_log_probs: torch.Tensor,
    response_mask: torch.Tensor,
    beta: float,
) -> torch.Tensor:
    r"""Sequence logit z_i = β · Σ_t q[i,t] · m[i,t]; keeps the graph.

    σ(z_i) is the implicit PRM's probability that response i is correct (paper Eq. 4).
    """
    return implicit_process_rewards(prm_log_probs, ref_log_probs, response_mask, beta).sum(dim=-1)


def _valid_rows(response_mask: torch.Tensor) -> torch.Tensor:
    """Rows with a non-empty response (padding rows and empty generations are excluded)."""
    return response_mask.sum(dim=-1) > 0


def _check_labels(labels: torch.Tensor) -> None:
    if labels.numel() and (labels.min() < 0 or labels.max() > 1):
        raise ValueError(
            "PRM labels must be outcome accuracies in [0, 1] (1 = correct); got values in "
            f"[{labels.min().item()}, {labels.max().item()}]. Use the reward's `acc` field, not its score."
        )


def balanced_label_weights(labels: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    r"""Per-row PRM loss weights that give right and wrong responses the same total weight.

    Over the n valid rows, n₁ = Σ acc_i and n₀ = n − n₁:
        w_i = acc_i · n/(2n₁) + (1 − acc_i) · n/(2n₀),   0 on rows with an empty response,
    so Σ_i w_i = n (the weighted mean BCE keeps the plain one's scale), and w_i = 1 when a class is
    absent. Why: with plain BCE the first thing a PRM learns is the batch's base rate, σ(z) ≈ n₁/n,
    and the implicit PRM can only express that rate by lowering (or raising) the log-probs of every
    token: z then follows the response length rather than its correctness. Balanced, the gradients
    on tokens shared by right and wrong responses cancel in expectation.
    """
    dtype = compute_dtype(labels)
    labels = labels.to(dtype)
    valid = _valid_rows(response_mask).to(dtype)
    n = valid.sum()
    n_right = (labels * valid).sum()
    n_wrong = n - n_right
    if n_right <= 0 or n_wrong <= 0:
        return valid
    return (labels * n / (2 * n_right) + (1 - labels) * n / (2 * n_wrong)) * valid


def prm_bce_loss(
    seq_logits: torch.Tensor,
    labels: torch.Tensor,
    response_mask: torch.Tensor,
    reduction: str = "mean",
    weights: torch.Tensor | None = None,
) -> torch.Tensor:
    r"""PRM cross-entropy ℓ_i = w_i · BCEWithLogits(z_i, acc_i) = −w_i [acc_i log σ(z_i) + (1−acc_i) log(1−σ(z_i))].

    The logits form is exact where σ saturates (no log(0) clamping). Rows with an empty response are
    excluded. ``weights``: w_i per row (1 if None; see `balanced_label_weights`). ``reduction="mean"``:
    mean over valid rows (0 if none); ``"sum"``: sum over valid rows, for callers that normalise by a
    global batch size themselves.
    """
    dtype = compute_dtype(seq_logits)
    labels = labels.to(dtype)
    _check_labels(labels)
    valid = _valid_rows(response_mask).to(dtype)
    per_row = F.binary_cross_entropy_with_logits(seq_logits.to(dtype), labels, reduction="none") * valid
    if weights is not None:
        per_row = per_row * weights.to(dtype)
    if reduction == "sum":
        return per_row.sum()
    if reduction == "mean":
        return per_row.sum() / valid.sum().clamp_min(1)
    raise ValueError(f"prm_bce_loss: reduction must be 'mean' or 'sum', got {reduction!r}")


def prm_classification_accuracy(
    seq_logits: torch.Tensor, labels: torch.Tensor, response_mask: torch.Tensor
) -> torch.Tensor:
    """Fraction of valid rows where the PRM's verdict agrees with the label: mean[(z_i > 0) == (acc_i > ½)]."""
    valid = _valid_rows(response_mask)
    agree = ((seq_logits > 0) == (labels > 0.5)) & valid
    return agree.sum().to(torch.float32) / valid.sum().clamp_min(1)


def _group_pairs(
    seq_logits: torch.Tensor, labels: torch.Tensor, index: Any, response_mask: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    r"""Per group g: (U_g, k_g·m_g, k_g + m_g, whether g holds a valid row), in float32/64.

    k_g, m_g: valid rows labelled right / wrong; U_g = Σ over the k_g·m_g (right i, wrong j) pairs of
    [z_i > z_j] + ½·[z_i = z_j], the Mann–Whitney count of pairs the scores rank the right way.
    """
    dtype = compute_dtype(seq_logits)
    gid = group_ids(index, seq_logits.device)
    valid = _valid_rows(response_mask)
    # Dense (G, K) layout: row i of group g goes to slot pos_i, K = largest group size.
    counts = torch.bincount(gid)
    order = torch.argsort(gid, stable=True)
    starts = torch.cumsum(counts, 0) - counts
    pos = torch.empty_like(gid)
    pos[order] = torch.arange(gid.numel(), device=gid.device) - starts[gid[order]]
    shape = (counts.numel(), int(counts.max().item()) if counts.numel() else 0)
    z = torch.zeros(shape, dtype=dtype, device=gid.device).index_put_((gid, pos), seq_logits.to(dtype))
    acc = torch.zeros(shape, dtype=dtype, device=gid.device).index_put_((gid, pos), labels.to(dtype))
    ok = torch.zeros(shape, dtype=torch.bool, device=gid.device).index_put_((gid, pos), valid)

    right = (acc > 0.5) & ok
    wrong = (acc <= 0.5) & ok
    pair = right[:, :, None] & wrong[:, None, :]  # (G, K, K): i right, j wrong
    dz = z[:, :, None] - z[:, None, :]
    wins = torch.where(dz == 0, torch.full_like(dz, 0.5), (dz > 0).to(dtype))
    u = (wins * pair).sum(dim=(1, 2))
    pairs = pair.sum(dim=(1, 2)).to(dtype)
    size = (right.sum(1) + wrong.sum(1)).to(dtype)
    return u, pairs, size, ok.any(dim=1)


def prm_pairwise_accuracy(
    seq_logits: torch.Tensor, labels: torch.Tensor, index: Any, response_mask: torch.Tensor, mixed_only: bool = False
) -> torch.Tensor:
    r"""Group pairwise ranking accuracy of the PRM ("dpo_acc" of the reference implementations).

    In each group g, over the k_g·m_g pairs (i right, j wrong) of valid rows:
        acc_g = U_g / (k_g·m_g),   U_g = Σ_{i,j} a_ij,   a_ij = 1 if z_i > z_j, ½ if z_i = z_j, else 0;
    acc_g = ½ for a group with no such pair. The result is the mean of acc_g over groups that hold at
    least one valid row. (Ties count ½ here; the reference code counts them by sign convention.)
    ``mixed_only``: the mean over groups that hold such a pair instead (½ if none does), so that groups
    with one label only do not pull the result towards ½.
    """
    u, pairs, _, has_rows = _group_pairs(seq_logits, labels, index, response_mask)
    per_group = torch.where(pairs > 0, u / pairs.clamp_min(1), torch.full_like(u, 0.5))
    counted = pairs > 0 if mixed_only else has_rows
    if mixed_only and not counted.any():
        return torch.tensor(0.5, dtype=u.dtype, device=u.device)
    return (per_group * counted).sum() / counted.sum().clamp_min(1)


def prm_ranking_z(
    seq_logits: torch.Tensor, labels: torch.Tensor, index: Any, response_mask: torch.Tensor
) -> torch.Tensor:
    r"""How far the PRM's ranking is from chance, in standard errors (a stratified Mann–Whitney z).

        Z = Σ_g (U_g − k_g m_g / 2) / sqrt(Σ_g k_g m_g (k_g + m_g + 1) / 12)

    over the mixed groups (U_g as in `prm_pairwise_accuracy`). Scores that rank at random within each
    group give E[U_g] = k_g m_g / 2 and Var[U_g] = k_g m_g (k_g + m_g + 1) / 12 (no ties; ties only
    lower the variance, so Z is conservative), and groups are independent: Z is ≈ N(0, 1) under chance,
    Z > 3.09 is one-sided p < 0.001. Steps pool by Stouffer's rule, Σ_s Z_s / √S. 0 without a mixed group.
    """
    u, pairs, size, _ = _group_pairs(seq_logits, labels, index, response_mask)
    variance = (pairs * (size + 1) / 12).sum()
    if variance <= 0:
        return torch.zeros((), dtype=u.dtype, device=u.device)
    return (u - pairs / 2).sum() / variance.sqrt()
