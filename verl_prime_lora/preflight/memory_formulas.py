"""Memory formulas (bytes) of one token or one micro-batch, and the rough constant terms.

Notation: P = parameters, c = compute bytes (`mixed_precision.param_dtype`), p = param bytes
(`fsdp_config.model_dtype`); h, I, V, L, H, K, d: hidden, intermediate, vocab, layers, heads, KV heads, head dim.

* FSDP compute copy (`fsdp_compute_copy_bytes`): the root unit (embeddings, lm_head, final norm) stays
  gathered through forward and backward, plus the current and the prefetched decoder layer, in c bytes;
  the whole model with `reshard_after_forward=false`; none on one GPU when p == c.
* activations (`layer_activation_bytes`, per token per decoder layer, saved for backward, flash/SDPA
  attention with no s² term): 8·h (two RMSNorms keep their fp32 input) + c·(2·h + 2·H·d + 2·K·d + 4·I)
  (the two norm outputs, q/k after RoPE and v, the attention output, MLP gate, SiLU(gate), up, their
  product); a LoRA linear adds c·r and, with dropout, (c + 1)·in (the dropped input and its mask).
  Without gradient checkpointing: L layers of that. With it (`enable_gradient_checkpointing`): c·h per
  layer (its input) + one layer recomputed in backward. Plus a working set c·(2·h + 3·I) per token
  (live tensors of one layer / activation gradients). Tokens per micro-batch: `micro_batch_size_per_gpu ×
  (max_prompt_length + max_response_length)`, or the token budget with `use_dynamic_bsz`; ÷ Ulysses SP.
* logits (`logits_bytes`): tokens·V·c (lm_head output, not upcast), + tokens·V·4 when training (an
  fp32-sized working buffer: log-softmax or its gradient), + tokens·V·c when the temperature is not 1
  (veRL divides into a new tensor; the actor at the rollout temperature, the PRM always at 1.0). With
  veRL's fused log-prob kernels (the recipes' `model.use_fused_kernels`) one chunk of 512 tokens at a time.
* vLLM's KV cache (`kv_cache_bytes_per_token`): 2·L·K·d·2 B per token ÷ TP.
"""

from __future__ import annotations

import math

from verl_prime_lora.preflight.model_shape import (
    ModelShape,
    layer_param_count,
    linear_shapes,
    param_count,
    root_param_count,
)

GIB = 1 << 30
CUDA_CONTEXT_BYTES = GIB // 2  # per worker process (CUDA context + cuBLAS workspace), rough
VLLM_OVERHEAD_BYTES = 2 * GIB  # inside vLLM's share, not KV: profile-run activations, CUDA graphs, sampler
VLLM_SLEEP_RESIDUE_BYTES = 2 * GIB  # a sleeping colocated vLLM (KV cache and weights released), rough
# What PyTorch's caching allocator keeps of a worker that never empties its cache, over its resident states,
# as a multiple of its largest estimated phase. Measured on an H200 (benchmarks/gpu_memory_check.py, results in
# benchmarks/results/gpu_memory_check.md): after log-prob micro-batches of 4 and update micro-batches of 2
# sequences of 4096 tokens, max_memory_reserved − resident = 1.88 × (LoRA actor) and 2.00 × (full PRM) the
# estimated largest phase (default allocator; 1.40 × and 1.47 × with expandable_segments).
ALLOCATOR_CACHE_FACTOR = 2.0


def layer_activation_bytes(
    shape: ModelShape, compute_bytes: int, lora_rank: int = 0, targets: tuple[str, ...] = (), lora_dropout: float = 0.0
) -> int:
    """Bytes one token leaves saved for backward in one decoder layer (no gradient checkpointing).

    8·h (the fp32 inputs the two RMSNorms keep) + c·(2·h + 2·H·d + 2·K·d + 4·I): the two norm outputs, q
    and k after RoPE, v, the attention output (flash/SDPA: no s² scores), MLP gate, SiLU(gate), up and
    their product. A LoRA linear adds c·r (A's output) and, with dropout, (c + 1)·in (dropped input + mask).
    """
    c = compute_bytes
    h, i = shape.hidden_size, shape.intermediate_size
    dense = 8 * h + c * (2 * h + 2 * shape.q_dim + 2 * shape.kv_dim + 4 * i)
    lora = 0
    if lora_rank > 0:
        shapes = linear_shapes(shape)
        for m in targets:
            lora += c * lora_rank + ((c + 1) * shapes[m][0] if lora_dropout > 0 else 0)
    return dense + lora


def working_set_bytes(shape: ModelShape, tokens: int, compute_bytes: int) -> int:
    """tokens · c·(2·h + 3·I): one layer's live tensors in a forward (hidden, residual, gate, up, act), or
    the activation gradients of the layer in backward."""
    return tokens * compute_bytes * (2 * shape.hidden_size + 3 * shape.intermediate_size)


def train_activation_bytes(
    shape: ModelShape,
    tokens: int,
    compute_bytes: int,
    checkpointing: bool,
    lora_rank: int = 0,
    targets: tuple[str, ...] = (),
    lora_dropout: float = 0.0,
) -> int:
    """Saved activations of one training micro-batch of `tokens` tokens.

    Without checkpointing: tokens · L · A (A = `layer_activation_bytes`). With it: tokens · (L·c·h + A)
    (each layer keeps its input; one layer is recomputed at a time). Plus tokens·(4 + c)·h for the final norm.
    """
    per_layer = layer_activation_bytes(shape, compute_bytes, lora_rank, targets, lora_dropout)
    h = shape.hidden_size
    if checkpointing:
        per_token = shape.num_layers * compute_bytes * h + per_layer
    else:
        per_token = shape.num_layers * per_layer
    return tokens * (per_token + (4 + compute_bytes) * h)


# veRL's torch fused linear + log-softmax (`model.use_fused_kernels`) works on this many tokens at a time
# (verl/utils/experimental/torch_functional.py, FusedLinearForPPO's chunk_size).
FUSED_LOGITS_CHUNK = 512


def logits_bytes(
    shape: ModelShape, tokens: int, compute_bytes: int, train: bool, temperature_copy: bool, fused: bool = False
) -> int:
    """tokens·V·(c [lm_head output] + 4 if training [fp32 log-softmax / its gradient] + c if T ≠ 1 [scaled copy]).

    `fused` (`model.use_fused_kernels`): no logits tensor of the micro-batch, one chunk of ≤ 512 tokens at a
    time, each with its c-byte logits (+ c scaled if T ≠ 1) and fp32 working tensors: 4 in a forward (the fp32
    logits, softmax, log-softmax, the entropy's product), 5 in backward (+ one-hot − softmax, and the logits'
    gradient). Read from veRL's code, not measured.
    """
    if fused:
        per_entry = compute_bytes + (compute_bytes if temperature_copy else 0) + 4 * (5 if train else 4)
        return min(tokens, FUSED_LOGITS_CHUNK) * shape.vocab_size * per_entry
    per_entry = compute_bytes + (4 if train else 0) + (compute_bytes if temperature_copy else 0)
    return tokens * shape.vocab_size * per_entry


def fsdp_compute_copy_bytes(
    shape: ModelShape,
    compute_bytes: int,
    param_bytes: int,
    shards: int,
    reshard_after_forward: bool,
    on_cpu: bool = False,
) -> int:
    """Gathered low-precision copy FSDP builds for compute.

    (root + 2 layers)·c: the root unit (embeddings, lm_head, final norm) for the whole forward/backward, the
    current and the prefetched layer; P·c with `reshard_after_forward=false` (SHARD_GRAD_OP keeps every
    unit gathered); 0 on one GPU when the weights already are in the compute dtype. `on_cpu` (a CPU-offloaded
    forward-only engine): + the same units' shards copied in from CPU, (root + 2 layers)·p ÷ shards.
    """
    units = root_param_count(shape) + 2 * layer_param_count(shape)
    if not reshard_after_forward and not on_cpu:
        return param_count(shape) * compute_bytes
    if shards == 1 and param_bytes == compute_bytes and not on_cpu:
        return 0
    return units * compute_bytes + (units * param_bytes // shards if on_cpu else 0)


def kv_cache_bytes_per_token(shape: ModelShape, kv_bytes: int, tensor_parallel: int) -> int:
    """2 (K and V) · L · K_rank · d · kv_bytes, with K_rank = max(1, K ÷ TP) KV heads per rank."""
    kv_heads = max(1, math.ceil(shape.num_kv_heads / tensor_parallel))
    return 2 * shape.num_layers * kv_heads * shape.head_dim * kv_bytes
