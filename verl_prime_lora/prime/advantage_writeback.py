"""The parts of veRL's advantage hook that the PRIME step keeps: copied here, and nowhere else.

veRL 0.9.1's `PPOTrainer._compute_advantage` (verl/trainer/ppo/v1/trainer_base.py) reads the step's data from
TransferQueue, pre-processes the rewards (1. the KL penalty in the reward, 2. rollout correction), computes the
advantages (3.) and writes them back (4.). The PRIME step (`prime_step`) replaces 3. by its own estimator call,
with the process rewards and the gate's weight, and keeps the rest as veRL has it:

* `read_step_data`: veRL's read, without the critic's `values` (PRIME has no critic);
* `preprocess_rewards`: veRL's 1. and 2.;
* `write_back`: veRL's 4., the same fields under the same conditions.

The canary of `verl.trainer.ppo.v1.trainer_base:PPOTrainer._compute_advantage`
(tests/verl_surface/test_verl_canaries.py) fails when veRL changes that function; then compare it with this module.
"""

from __future__ import annotations

import numpy as np
import transfer_queue as tq
from tensordict import TensorDict
from verl.protocol import DataProto
from verl.trainer.ppo.ray_trainer import apply_kl_penalty
from verl.trainer.ppo.rollout_corr_helper import compute_rollout_correction_and_add_to_batch
from verl.workers.utils.padding import response_to_nested

from verl_prime_lora.config.verl_view import AlgorithmView

# What the step reads of veRL's batch (veRL's list without the critic's `values`).
STEP_FIELDS = ("uid", "response_mask", "rm_scores", "rollout_log_probs", "old_log_probs", "ref_log_prob")


def read_step_data(batch, fields: list[str]):
    """(the step's `fields`, padded (B, T), `uid` as an object array, as a `DataProto`; veRL's nested response
    mask, which the write-back puts the advantages in)."""
    data = tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id, select_fields=fields)
    response_mask_nested = data["response_mask"]
    data = DataProto(batch=data.to_padded_tensor())
    data.non_tensor_batch["uid"] = np.array(data.batch.pop("uid").tolist(), dtype=object)
    return data, response_mask_nested


def preprocess_rewards(data: DataProto, algorithm: AlgorithmView, kl_ctrl, metrics: dict) -> tuple[DataProto, bool]:
    """veRL's pre-processing of the token-level rewards: `token_level_scores` = `rm_scores`; `token_level_rewards`
    = the scores less the KL penalty (`algorithm.use_kl_in_reward`, with `kl_ctrl`, veRL's controller) or the
    scores; then rollout correction (importance weights, rejection) when `algorithm.rollout_correction` is set,
    the rollout's log-probs are there and `bypass_mode` is off. Returns (the data, whether the correction ran)."""
    data.batch["token_level_scores"] = data.batch["rm_scores"]
    if algorithm.use_kl_in_reward:
        data, kl_metrics = apply_kl_penalty(data, kl_ctrl=kl_ctrl, kl_penalty=algorithm.kl_penalty)
        metrics.update(kl_metrics)
    else:
        data.batch["token_level_rewards"] = data.batch["token_level_scores"]
    rollout_correction = (
        algorithm.rollout_correction is not None and "rollout_log_probs" in data.batch and not algorithm.bypass_mode
    )
    if rollout_correction:
        data, is_metrics = compute_rollout_correction_and_add_to_batch(data, algorithm.rollout_correction)
        metrics.update(is_metrics)
    return data, rollout_correction


def write_back(batch, data: DataProto, response_mask_nested, algorithm: AlgorithmView, rollout_correction: bool):
    """The fields veRL's advantage hook writes to TransferQueue, nested like `response_mask_nested`: the advantages
    and returns; the KL-penalised rewards with `use_kl_in_reward`; the response mask and the importance weights
    after a rollout correction."""
    fields = ["advantages", "returns"]
    if algorithm.use_kl_in_reward:
        fields.append("token_level_rewards")
    if rollout_correction:
        fields.append("response_mask")
        if "rollout_is_weights" in data.batch:
            fields.append("rollout_is_weights")
    output = {field: response_to_nested(data.batch[field], response_mask_nested) for field in fields}
    return tq.kv_batch_put(
        keys=batch.keys, partition_id=batch.partition_id, fields=TensorDict(output, batch_size=len(batch))
    )
