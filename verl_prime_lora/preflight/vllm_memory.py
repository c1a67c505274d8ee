"""vLLM's share of a rollout GPU: weights, overhead and the KV cache inside it.

* vLLM: `gpu_memory_utilization × GPU memory` per rollout GPU, holding weights P·2 ÷ TP, ~2 GiB of
  activations/CUDA graphs, and the KV cache 2·L·K·d·2 B per token ÷ TP (needs at least one
  `max_model_len` sequence); the nccl weight sync adds 2 × `update_weights_bucket_megabytes` on both sides.
  Colocated, vLLM sleeps while the trainers run (`free_cache_engine`), leaving ~2 GiB; the GPU must hold
  (a) the training peak + that residue and (b) at rollout, what the trainers hold + the full share
  (`report.trainer_gpu_estimate`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from verl_prime_lora.preflight.memory_formulas import VLLM_OVERHEAD_BYTES, kv_cache_bytes_per_token
from verl_prime_lora.preflight.model_shape import ModelShape, param_count


@dataclass(frozen=True)
class RolloutSpec:
    gpu_memory_utilization: float
    tensor_parallel: int
    pipeline_parallel: int
    weight_bytes: int  # rollout.dtype
    max_model_len: int
    sequences_per_step: int  # train_batch_size × n
    receive_buffer_bytes: int  # nccl weight sync: 2 × bucket on the vLLM side
    free_cache_engine: bool = True


@dataclass
class VllmEstimate:
    share: int
    weights: int
    overhead: int
    kv_room: int
    kv_per_token: int
    max_model_len: int
    sequences_per_step: int

    @property
    def full_sequences(self) -> int:
        return max(0, self.kv_room) // max(1, self.kv_per_token * self.max_model_len)

    @property
    def holds_one_sequence(self) -> bool:
        return self.full_sequences >= 1


def vllm_estimate(shape: ModelShape, spec: RolloutSpec, gpu_bytes: int) -> VllmEstimate:
    """vLLM's share = utilization × GPU; inside it weights P·b ÷ (TP·PP), ~2 GiB overhead, the KV cache."""
    share = int(spec.gpu_memory_utilization * gpu_bytes)
    weights = param_count(shape) * spec.weight_bytes // (spec.tensor_parallel * spec.pipeline_parallel)
    kv_per_token = kv_cache_bytes_per_token(shape, spec.weight_bytes, spec.tensor_parallel)
    if spec.pipeline_parallel > 1:
        kv_per_token = math.ceil(kv_per_token / spec.pipeline_parallel)
    kv_room = share - weights - VLLM_OVERHEAD_BYTES
    return VllmEstimate(
        share, weights, VLLM_OVERHEAD_BYTES, kv_room, kv_per_token, spec.max_model_len, spec.sequences_per_step
    )
