"""The PRM's loss function (`prime.prm_loss`) on hand-built TensorDicts, what veRL's TrainingWorker hands it: the
BCE of `core_algos` with veRL's global normalisation, per-row label weights, the response log-probs it captures
on request, and the same gradient on one rank and on two."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from tensordict import NonTensorData, TensorDict

from verl_prime_lora.algo.implicit_prm import prm_bce_loss
from verl_prime_lora.prime.prm_loss import (
    CAPTURED_LOG_PROBS,
    PRM_LABEL_FIELD,
    PRM_REF_FIELD,
    PRM_ROW_FIELD,
    PRM_WEIGHT_FIELD,
    prm_loss,
)
from verl_prime_lora.prime.step_rows import nested_rows

# --------------------------------------------------------------------------------------------------
# the PRM loss function on hand-built TensorDicts (what TrainingWorker hands to it)
# --------------------------------------------------------------------------------------------------


def _nested(rows):
    return torch.nested.as_nested_tensor(rows, layout=torch.jagged)


def _micro_batch(beta=0.05, weights=(1.0, 1.0, 1.0)):
    torch.manual_seed(0)
    prompt_lens, resp_lens = [2, 3, 2], [3, 2, 1]
    resp_mask = [torch.ones(3), torch.ones(2), torch.zeros(1)]  # row 2 = a veRL padding row
    seq_lp = [torch.randn(p + r, requires_grad=True) for p, r in zip(prompt_lens, resp_lens)]
    ref = [torch.randn(r) for r in resp_lens]
    labels = torch.tensor([1.0, 0.0, 1.0])
    data = TensorDict(
        {
            "prompts": _nested([torch.zeros(p, dtype=torch.long) for p in prompt_lens]),
            "responses": _nested([torch.zeros(r, dtype=torch.long) for r in resp_lens]),
            "response_mask": _nested(resp_mask),
            PRM_REF_FIELD: _nested(ref),
            PRM_LABEL_FIELD: nested_rows(labels, resp_lens),
            PRM_WEIGHT_FIELD: nested_rows(torch.tensor(weights), resp_lens),
            "global_batch_size": NonTensorData(4),
            "dp_size": NonTensorData(2),
        },
        batch_size=[3],
    )
    # model log-probs over the whole sequence; position t predicts token t+1 (veRL's convention)
    model_output = {"log_probs": _nested(seq_lp)}
    expected_logits = []
    for lp, p, r, rf, m in zip(seq_lp, prompt_lens, resp_lens, ref, resp_mask):
        resp_lp = lp[p - 1 : p + r - 1]
        expected_logits.append(beta * ((resp_lp - rf) * m).sum())
    return model_output, data, seq_lp, torch.stack(expected_logits), labels


def test_prm_loss_matches_the_bce_of_core_algos_with_global_normalisation():
    beta = 0.05
    model_output, data, seq_lp, logits, labels = _micro_batch(beta)
    loss, metrics = prm_loss(model_output, data, beta=beta)
    mask = torch.tensor([[1.0], [1.0], [0.0]])
    expected = prm_bce_loss(logits, labels, mask, reduction="sum") * 2 / 4  # x dp_size / global_batch_size
    assert loss.item() == pytest.approx(expected.item(), rel=1e-6)
    # by hand: the padding row is excluded
    by_hand = sum(
        -(y * math.log(torch.sigmoid(z).item()) + (1 - y) * math.log(1 - torch.sigmoid(z).item()))
        for z, y in zip(logits[:2], labels[:2].tolist())
    )
    assert loss.item() == pytest.approx(by_hand * 2 / 4, rel=1e-5)
    loss.backward()
    assert seq_lp[0].grad is not None and seq_lp[0].grad.abs().sum() > 0
    assert seq_lp[2].grad is None or seq_lp[2].grad.abs().sum() == 0  # padding row gets no gradient


def test_prm_loss_weights_each_row_by_its_label_weight():
    beta = 0.05
    model_output, data, _, logits, labels = _micro_batch(beta, weights=(1.5, 0.5, 0.0))
    loss, _ = prm_loss(model_output, data, beta=beta)
    bce = torch.nn.functional.binary_cross_entropy_with_logits(logits[:2].detach(), labels[:2], reduction="none")
    assert loss.item() == pytest.approx((1.5 * bce[0] + 0.5 * bce[1]).item() * 2 / 4, rel=1e-6)


def test_prm_loss_captures_each_rows_response_log_probs_on_request():
    """With `capture_log_probs`, the loss also returns (row in the step's batch, the row's response log-probs)
    for every row of the micro-batch: what the PRM would compute in a forward of its own, before the update."""
    beta = 0.05
    model_output, data, seq_lp, _, _ = _micro_batch(beta)
    loss, metrics = prm_loss(model_output, data, beta=beta)
    assert metrics == {}  # not asked
    data[PRM_ROW_FIELD] = nested_rows(torch.tensor([5.0, 0.0, 9.0]), [3, 2, 1])
    data["capture_log_probs"] = NonTensorData(True)
    captured_loss, metrics = prm_loss(model_output, data, beta=beta)
    assert captured_loss.item() == loss.item()
    rows = metrics[CAPTURED_LOG_PROBS]
    assert [row for row, _ in rows] == [5, 0, 9]
    for (_, values), lp, p, r in zip(rows, seq_lp, [2, 3, 2], [3, 2, 1]):
        assert not values.requires_grad
        assert torch.equal(values, lp[p - 1 : p + r - 1].detach())  # position t predicts token t+1


# A mini-batch of rows for the data-parallel check: (prompt length, response length, label, weight);
# response length 0 = a padding row of veRL's batch balancing.
_DP_ROWS = st.lists(
    st.tuples(st.integers(1, 3), st.integers(0, 4), st.sampled_from([0.0, 1.0]), st.floats(0.25, 2.0, allow_nan=False)),
    min_size=2,
    max_size=12,
)


def _prm_micro_batch(rows, theta, features, global_batch_size, dp_size):
    """`prm_loss` on one micro-batch whose per-token PRM log-probs are features @ theta (a shared 'model')."""
    prompt_lens = [p for p, _, _, _ in rows]
    resp_lens = [max(r, 1) for _, r, _, _ in rows]  # a padding row keeps one masked token, as veRL's do
    data = TensorDict(
        {
            "prompts": _nested([torch.zeros(p, dtype=torch.long) for p in prompt_lens]),
            "responses": _nested([torch.zeros(r, dtype=torch.long) for r in resp_lens]),
            "response_mask": _nested([torch.full((max(r, 1),), float(r > 0)) for _, r, _, _ in rows]),
            PRM_REF_FIELD: _nested([f[:n, 0] for f, n in zip(features, resp_lens)]),
            PRM_LABEL_FIELD: nested_rows(torch.tensor([y for _, _, y, _ in rows]), resp_lens),
            PRM_WEIGHT_FIELD: nested_rows(torch.tensor([w for _, _, _, w in rows]), resp_lens),
            "global_batch_size": NonTensorData(global_batch_size),
            "dp_size": NonTensorData(dp_size),
        },
        batch_size=[len(rows)],
    )
    log_probs = _nested([f[: p + r] @ theta for f, p, r in zip(features, prompt_lens, resp_lens)])
    return prm_loss({"log_probs": log_probs}, data, beta=0.5)[0]


@settings(max_examples=60, deadline=None)
@given(rows=_DP_ROWS, micro_1=st.integers(1, 5), micro_2=st.integers(1, 5), seed=st.integers(0, 2**16))
def test_prm_gradient_is_the_same_on_one_rank_and_on_two(rows, micro_1, micro_2, seed):
    """The PRM's mini-batch gradient does not depend on how veRL lays the rows out: one rank, or two ranks
    (veRL's dispatch gives each a contiguous half; FSDP averages their gradients), each summing its own
    micro-batches of any size, padding rows anywhere. All equal the gradient of
    Σ_i w_i·BCE(z_i, acc_i) / G, G = the mini-batch's rows (padding included; veRL's `global_batch_size`)."""
    if len(rows) % 2:
        rows = rows[:-1]
    generator = torch.Generator().manual_seed(seed)
    features = [torch.randn(p + max(r, 1), 3, generator=generator, dtype=torch.float64) for p, r, _, _ in rows]
    theta0 = torch.randn(3, generator=generator, dtype=torch.float64)
    n = len(rows)

    def gradient(shards, micro, dp_size):
        theta = theta0.clone().float().requires_grad_()
        for shard in shards:  # each rank: the sum of its micro-batch losses
            for i in range(shard.start, shard.stop, micro):
                chunk = range(i, min(i + micro, shard.stop))
                loss = _prm_micro_batch(
                    [rows[j] for j in chunk], theta, [features[j].float() for j in chunk], n, dp_size
                )
                loss.backward()
        return theta.grad.double() / dp_size  # FSDP's mean over the ranks

    one_rank = gradient([range(n)], micro_1, dp_size=1)
    two_ranks = gradient([range(n // 2), range(n // 2, n)], micro_2, dp_size=2)

    theta = theta0.clone().requires_grad_()
    z, labels, weights, valid = [], [], [], []
    for (p, r, y, w), f in zip(rows, features):
        q = f[p - 1 : p + r - 1] @ theta - f[:r, 0]  # log π_φ − log π_ref of the response tokens
        z.append(0.5 * q.sum())
        labels.append(y), weights.append(w), valid.append(float(r > 0))
    bce = torch.nn.functional.binary_cross_entropy_with_logits(
        torch.stack(z), torch.tensor(labels, dtype=torch.float64), reduction="none"
    )
    (bce * torch.tensor(weights, dtype=torch.float64) * torch.tensor(valid, dtype=torch.float64)).sum().div(
        n
    ).backward()

    torch.testing.assert_close(one_rank, theta.grad, rtol=1e-4, atol=1e-6)
    torch.testing.assert_close(two_ranks, theta.grad, rtol=1e-4, atol=1e-6)
