"""The PRM's loss, as veRL's `TrainingWorker` runs it inside each PRM worker (`TrainingWorker.set_loss_fn`).

    ℓ = Σ_i w_i · BCEWithLogits(z_i, acc_i),   z_i = β · Σ_t (log π_φ − log π_ref)[i,t] · m[i,t]

over the rows of a micro-batch, normalised as veRL normalises its critic's loss. The math is `core_algos`'; the
inputs are TransferQueue fields the trainer writes before the update (`step_rows.StepRows.prm_loss_inputs`). With
`capture_log_probs` the loss also returns the log-probs of its forward, the one channel veRL's
`TrainingWorker.train_mini_batch` hands back to the trainer (`prm_worker.assemble_captured_log_probs`).

Ray workers unpickle `prm_loss` by this module's name: it imports veRL only inside the function.
"""

from __future__ import annotations

import torch
from tensordict import TensorDict

from verl_prime_lora.algo.implicit_prm import prm_bce_loss, prm_sequence_logits

# TransferQueue fields written by the PRIME trainer for the PRM (per response token, nested).
PRM_REF_FIELD = "prm_ref_log_prob"  # reference log-probs at temperature 1
PRM_LABEL_FIELD = "prm_label"  # the 0/1 accuracy label, repeated over the response tokens
PRM_WEIGHT_FIELD = (
    "prm_label_weight"  # the row's loss weight (implicit_prm.balanced_label_weights, or 1), repeated likewise
)
PRM_ROW_FIELD = "prm_row"  # the row's index in the step's batch, repeated likewise (to place captured log-probs)
# prm_loss's metric carrying the log-probs of its forward, when the update is asked to capture them
CAPTURED_LOG_PROBS = "prm_captured_log_probs"


def prm_loss(model_output: dict, data: TensorDict, dp_group=None, *, beta: float):
    """PRM cross-entropy for one micro-batch, normalised over the global mini-batch.

    ℓ = Σ_{valid rows i in micro-batch} w_i · BCEWithLogits(z_i, acc_i) · dp_size / global_batch_size, so the
    gradients summed over micro-batches and averaged over DP ranks are those of the mean BCE over
    the mini-batch — veRL's convention for `value_loss`/`ppo_loss` (workers/utils/losses.py).
    `global_batch_size` counts every row of the mini-batch, padding rows (empty response, excluded
    from the sum) included.
    """
    from verl.workers.utils.padding import no_padding_2_padding

    log_prob = no_padding_2_padding(model_output["log_probs"], data)  # (b, T), keeps the graph
    padded = data.select("response_mask", PRM_REF_FIELD, PRM_LABEL_FIELD, PRM_WEIGHT_FIELD).to_padded_tensor()
    mask = padded["response_mask"].to(log_prob.device)
    ref = padded[PRM_REF_FIELD].to(log_prob.device)
    labels = padded[PRM_LABEL_FIELD][:, 0].to(log_prob.device)
    weights = padded[PRM_WEIGHT_FIELD][:, 0].to(log_prob.device)
    width = min(log_prob.shape[-1], mask.shape[-1])
    log_prob, ref, mask = log_prob[:, :width], ref[:, :width], mask[:, :width]

    seq_logits = prm_sequence_logits(log_prob.float(), ref.float(), mask, beta)
    loss_sum = prm_bce_loss(seq_logits, labels, mask, reduction="sum", weights=weights)
    global_batch_size = data["global_batch_size"] if "global_batch_size" in data.keys() else None
    dp_size = data["dp_size"] if "dp_size" in data.keys() else 1
    if global_batch_size:
        loss = loss_sum * dp_size / global_batch_size
    else:
        loss = loss_sum / (mask.sum(-1) > 0).sum().clamp_min(1)
    metrics = {}
    if "capture_log_probs" in data.keys() and data["capture_log_probs"]:
        metrics[CAPTURED_LOG_PROBS] = captured_rows(log_prob, data)
    return loss, metrics


def captured_rows(log_prob: torch.Tensor, data: TensorDict) -> list[tuple[int, torch.Tensor]]:
    """(row, log-probs of the row's response tokens) for each row of a micro-batch with a response.

    `row` is the row's index in the step's batch (`PRM_ROW_FIELD`), so the rows can be put back in order
    whatever veRL's split over ranks, micro-batches and token budgets. The values are detached CPU copies:
    they travel back to the trainer inside the update's metrics (`ImplicitPRM.update(capture=True)`), the
    one channel veRL's `TrainingWorker.train_mini_batch` returns.
    """
    lengths = data["response_mask"].offsets().diff().tolist()
    rows = data.select(PRM_ROW_FIELD).to_padded_tensor()[PRM_ROW_FIELD]
    return [
        (int(rows[i, 0].item()), log_prob[i, :length].detach().float().cpu())
        for i, length in enumerate(lengths)
        if length > 0
    ]
