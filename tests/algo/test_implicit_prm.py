"""The implicit PRM's math (`algo.implicit_prm`) against plain float64 references written from the formulas: its
process rewards and sequence logits, the BCE loss and its label weights, and the rankings it is measured by
(classification and pairwise accuracy, the stratified Mann-Whitney z)."""

import math

import numpy as np
import pytest
import torch
from advantage_batches import batches, groups_of
from hypothesis import given, settings
from hypothesis import strategies as st

from verl_prime_lora.algo import implicit_prm as iprm

# ---------------------------------------------------------------------------------------------
# Implicit PRM: rewards, loss, metrics
# ---------------------------------------------------------------------------------------------


def test_implicit_rewards_and_sequence_logits():
    lp = torch.tensor([[-1.0, -2.0, -3.0], [-0.5, -0.5, -9.0]], dtype=torch.float64)
    lr = torch.tensor([[-1.5, -1.0, -3.0], [-1.0, -0.5, -1.0]], dtype=torch.float64)
    m = torch.tensor([[1, 1, 1], [1, 1, 0]])
    r = iprm.implicit_process_rewards(lp, lr, m, beta=0.05)
    torch.testing.assert_close(r, torch.tensor([[0.025, -0.05, 0.0], [0.025, 0.0, 0.0]], dtype=torch.float64))
    torch.testing.assert_close(
        iprm.prm_sequence_logits(lp, lr, m, 0.05), torch.tensor([-0.025, 0.025], dtype=torch.float64)
    )
    assert iprm.implicit_process_rewards(lp.bfloat16(), lr.bfloat16(), m, 0.05).dtype == torch.float32


def test_mean_token_log_ratio_and_the_length_term_of_a_uniform_shift():
    lp = torch.tensor([[-1.0, -2.0, -3.0], [-0.5, -0.5, -9.0]], dtype=torch.float64)
    lr = torch.tensor([[-1.5, -1.0, -3.0], [-1.0, -0.5, -1.0]], dtype=torch.float64)
    m = torch.tensor([[1, 1, 1], [1, 1, 0]])
    # q on the 5 masked tokens: 0.5, -1, 0, 0.5, 0 -> q̄ = 0
    assert iprm.mean_token_log_ratio(lp, lr, m).item() == pytest.approx(0.0)
    shifted = lp - 0.4  # the PRM lowered every token by 0.4: q̄ = -0.4
    assert iprm.mean_token_log_ratio(shifted, lr, m).item() == pytest.approx(-0.4)
    # the shift is a length term: z falls by β·0.4·L_i (L = 3, 2)
    torch.testing.assert_close(
        iprm.prm_sequence_logits(shifted, lr, m, 0.05) - iprm.prm_sequence_logits(lp, lr, m, 0.05),
        torch.tensor([-0.06, -0.04], dtype=torch.float64),
    )


def test_bce_loss_matches_formula_and_skips_empty_rows():
    z = torch.tensor([0.3, -2.0, 40.0, 7.0], dtype=torch.float64, requires_grad=True)
    y = torch.tensor([1.0, 0.0, 0.0, 1.0], dtype=torch.float64)
    m = torch.tensor([[1, 1], [1, 0], [1, 1], [0, 0]])  # last row: empty response
    per_row = [
        -(yi * math.log(1 / (1 + math.exp(-zi))) + (1 - yi) * math.log(1 - 1 / (1 + math.exp(-zi))))
        for zi, yi in zip(z.tolist()[:2], y.tolist()[:2])
    ]
    per_row.append(40.0 + math.log1p(math.exp(-40.0)))  # −log(1 − σ(40)), exact in logits form
    loss = iprm.prm_bce_loss(z, y, m)
    assert loss.item() == pytest.approx(sum(per_row) / 3, rel=1e-12)
    assert iprm.prm_bce_loss(z, y, m, reduction="sum").item() == pytest.approx(sum(per_row), rel=1e-12)
    loss.backward()
    assert z.grad[3] == 0 and torch.isfinite(z.grad).all()
    assert iprm.prm_bce_loss(z, y, torch.zeros_like(m)).item() == 0.0
    with pytest.raises(ValueError, match="acc"):
        iprm.prm_bce_loss(z, torch.tensor([1.0, -1.0, 0.0, 1.0]), m)


def test_balanced_label_weights_by_hand():
    y = torch.tensor([1.0, 0.0, 0.0, 0.0, 1.0], dtype=torch.float64)
    m = torch.tensor([[1], [1], [1], [1], [0]])  # last row: empty response (it counts nowhere)
    # 4 valid rows, 1 right and 3 wrong: right gets 4/(2·1) = 2, each wrong 4/(2·3) = 2/3
    torch.testing.assert_close(
        iprm.balanced_label_weights(y, m), torch.tensor([2, 2 / 3, 2 / 3, 2 / 3, 0], dtype=torch.float64)
    )
    one_class = torch.zeros(5, dtype=torch.float64)
    torch.testing.assert_close(
        iprm.balanced_label_weights(one_class, m), torch.tensor([1, 1, 1, 1, 0], dtype=torch.float64)
    )
    z = torch.tensor([0.5, -1.0, 2.0, 0.0, 3.0], dtype=torch.float64)
    w = iprm.balanced_label_weights(y, m)
    bce = torch.nn.functional.binary_cross_entropy_with_logits(z, y, reduction="none")
    expected = (2 * bce[0] + 2 / 3 * (bce[1] + bce[2] + bce[3])) / 4
    assert iprm.prm_bce_loss(z, y, m, weights=w).item() == pytest.approx(expected.item(), rel=1e-12)


@settings(max_examples=50, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.booleans()), min_size=1, max_size=40))
def test_balanced_label_weights_give_both_classes_half(rows):
    y = torch.tensor([float(right) for right, _ in rows], dtype=torch.float64)
    m = torch.tensor([[int(valid)] for _, valid in rows])
    w = iprm.balanced_label_weights(y, m)
    valid = m[:, 0].bool()
    n = int(valid.sum())
    assert (w[~valid] == 0).all()
    assert w.sum().item() == pytest.approx(n)  # the weighted mean keeps the plain mean's scale
    right, wrong = w[valid & (y == 1)].sum().item(), w[valid & (y == 0)].sum().item()
    if right and wrong:
        assert right == pytest.approx(wrong)
        # a shift of every z (what a base rate would ask for) has zero gradient at z = 0
        z = torch.zeros(len(rows), dtype=torch.float64, requires_grad=True)
        iprm.prm_bce_loss(z, y, m, weights=w).backward()
        assert z.grad.sum().item() == pytest.approx(0.0, abs=1e-12)


def test_bce_gradient_flows_to_prm_log_probs():
    lp = torch.randn(4, 5, dtype=torch.float64, requires_grad=True)
    lr = torch.randn(4, 5, dtype=torch.float64)
    m = torch.ones(4, 5)
    y = torch.tensor([1.0, 0.0, 1.0, 0.0], dtype=torch.float64)
    loss = iprm.prm_bce_loss(iprm.prm_sequence_logits(lp, lr, m, 0.05), y, m)
    loss.backward()
    z = (0.05 * (lp - lr).sum(-1)).detach()
    expected_row_grad = 0.05 * (torch.sigmoid(z) - y) / 4  # d mean-BCE / d lp[i,t]
    torch.testing.assert_close(lp.grad, expected_row_grad[:, None].expand(4, 5))


def test_classification_accuracy():
    z = torch.tensor([1.0, -1.0, 2.0, -3.0, 5.0])
    y = torch.tensor([1.0, 1.0, 0.0, 0.0, 1.0])
    m = torch.tensor([[1], [1], [1], [1], [0]])
    assert iprm.prm_classification_accuracy(z, y, m).item() == pytest.approx(2 / 4)


def ref_pairwise(z, y, index, valid, mixed_only=False):
    accs = []
    for members in groups_of(index).values():
        members = [i for i in members if valid[i]]
        if not members:
            continue
        num = den = 0.0
        for i in members:
            for j in members:
                w = abs(y[i] - y[j])
                if w == 0:
                    continue
                a = 0.5 if z[i] == z[j] else float((z[i] - z[j]) * (y[i] - y[j]) > 0)
                num, den = num + w * a, den + w
        if den or not mixed_only:
            accs.append(num / den if den else 0.5)
    return sum(accs) / len(accs) if accs else (0.5 if mixed_only else 0.0)


@settings(max_examples=60, deadline=None)
@given(batch=batches, tie=st.booleans(), mixed_only=st.booleans())
def test_pairwise_accuracy_matches_reference(batch, tie, mixed_only):
    _, mask, index, process = batch
    gen = torch.Generator().manual_seed(len(index))
    z = torch.randn(len(index), generator=gen, dtype=torch.float64)
    if tie:
        z = z.round()
    y = torch.randint(0, 2, (len(index),), generator=gen).to(torch.float64)
    got = iprm.prm_pairwise_accuracy(z, y, index, mask, mixed_only=mixed_only).item()
    valid = (mask.sum(-1) > 0).tolist()
    assert got == pytest.approx(ref_pairwise(z.tolist(), y.tolist(), list(index), valid, mixed_only))


def test_pairwise_accuracy_perfect_and_inverted():
    index = np.array(["a", "a", "a", "b", "b"], dtype=object)
    y = torch.tensor([1.0, 0.0, 1.0, 0.0, 0.0])
    m = torch.ones(5, 2)
    z = torch.tensor([2.0, -1.0, 1.0, 0.3, 0.1])
    assert iprm.prm_pairwise_accuracy(z, y, index, m).item() == pytest.approx((1.0 + 0.5) / 2)
    assert iprm.prm_pairwise_accuracy(-z, y, index, m).item() == pytest.approx((0.0 + 0.5) / 2)
    # over mixed groups only, the one-label group "b" does not pull the result towards 1/2
    assert iprm.prm_pairwise_accuracy(z, y, index, m, mixed_only=True).item() == pytest.approx(1.0)
    assert iprm.prm_pairwise_accuracy(-z, y, index, m, mixed_only=True).item() == pytest.approx(0.0)
    assert iprm.prm_pairwise_accuracy(z, torch.zeros(5), index, m, mixed_only=True).item() == 0.5  # no pair at all


def ref_ranking_z(z, y, index, valid):
    """Stratified Mann–Whitney z by loops: Σ_g (U_g − k m / 2) / sqrt(Σ_g k m (k + m + 1) / 12)."""
    excess = variance = 0.0
    for members in groups_of(index).values():
        right = [i for i in members if valid[i] and y[i] > 0.5]
        wrong = [j for j in members if valid[j] and y[j] <= 0.5]
        u = sum(1.0 if z[i] > z[j] else 0.5 if z[i] == z[j] else 0.0 for i in right for j in wrong)
        k, m = len(right), len(wrong)
        excess += u - k * m / 2
        variance += k * m * (k + m + 1) / 12
    return excess / variance**0.5 if variance else 0.0


@settings(max_examples=60, deadline=None)
@given(batch=batches, tie=st.booleans())
def test_ranking_z_matches_reference(batch, tie):
    _, mask, index, _ = batch
    gen = torch.Generator().manual_seed(len(index) + 1)
    z = torch.randn(len(index), generator=gen, dtype=torch.float64)
    if tie:
        z = z.round()
    y = torch.randint(0, 2, (len(index),), generator=gen).to(torch.float64)
    valid = (mask.sum(-1) > 0).tolist()
    got = iprm.prm_ranking_z(z, y, index, mask).item()
    assert got == pytest.approx(ref_ranking_z(z.tolist(), y.tolist(), list(index), valid), abs=1e-12)


def test_ranking_z_of_a_perfect_ranking_and_of_chance():
    # one group of 4 right and 4 wrong, ranked perfectly: U = 16, excess 8, variance 16·9/12 = 12
    index = np.array(["a"] * 8 + ["b"] * 3, dtype=object)
    y = torch.tensor([1.0] * 4 + [0.0] * 4 + [1.0] * 3)  # group b holds one label: no pair
    z = torch.tensor([4.0, 3, 2, 1, 0, -1, -2, -3, 9, 9, 9], dtype=torch.float64)
    m = torch.ones(11, 3)
    assert iprm.prm_ranking_z(z, y, index, m).item() == pytest.approx(8 / 12**0.5)
    assert iprm.prm_ranking_z(-z, y, index, m).item() == pytest.approx(-8 / 12**0.5)
    assert iprm.prm_ranking_z(z, torch.ones(11), index, m).item() == 0.0
    # random scores: Z over many batches of 16 groups of 8 is standard normal (mean 0, variance 1)
    gen = torch.Generator().manual_seed(0)
    index = np.repeat(np.arange(16), 8)
    draws = []
    for _ in range(2000):
        labels = torch.randint(0, 2, (128,), generator=gen).double()
        draws.append(
            iprm.prm_ranking_z(
                torch.randn(128, generator=gen, dtype=torch.float64), labels, index, m[:1].expand(128, 3)
            ).item()
        )
    draws = torch.tensor(draws)
    assert abs(draws.mean().item()) < 0.1 and abs(draws.var().item() - 1) < 0.1  # 2000 draws: se 0.022, 0.032
    assert (draws > 3.09).float().mean().item() < 0.004  # the one-sided p < 0.001 bound holds
