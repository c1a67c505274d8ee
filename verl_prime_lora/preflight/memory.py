"""The memory model: the bytes formulas, one worker's states and phases, and vLLM's share of a rollout GPU, for a
model's shape (`model_shape`). Pure functions on bytes; nothing here reads a config.

**Memory formulas** (bytes) of one token or one micro-batch, and the rough constant terms.

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

**One worker** (a process per GPU): its resident states, its phases and what it holds while others run.

Notation as above (P = parameters, c = compute bytes, p = param bytes).

* weights are held in `fsdp_config.model_dtype` (veRL 0.9.1 default fp32, for the LoRA actor's frozen base
  too; `fsdp_config.dtype` is not read by the FSDP engine), computed in `mixed_precision.param_dtype`
  (bf16). Trainable weights: P·p weights + P·p grads + 2·P·p AdamW moments (16 B/param in fp32), all
  sharded: ÷ shards. LoRA: base P·p ÷ shards + the adapter's 4 copies. Offloaded weights/optimizer sit in
  CPU RAM and come to the GPU only for their worker's phase (veRL's `BaseEngineCtx`).
* forward-only engines (frozen references) keep their weights in CPU RAM: veRL wraps them with FSDP
  `CPUOffload(offload_params=True)` (fsdp) or `CPUOffloadPolicy` (fsdp2); the GPU sees one unit at a time.
* each worker process: its resident states + a CUDA context (0.5 GiB) + at most one phase at a time
  (update, forward and backward: grads + compute copy + activations + logits + offloaded states brought back;
  optimizer step: grads + the one temporary of the trainable parameters' size that PyTorch's foreach AdamW
  allocates (√v, `_foreach_sqrt`), the peak of a full-parameter update when its micro-batch is short;
  log-prob: compute copy + working set + logits; the actor's weight sync: the bucket buffers). The `nccl`
  sync's sender (the actor's rank 0) allocates its two buckets through cupy, whose memory pool keeps them
  after the sync (veRL's `finalize` empties only PyTorch's cache): resident from the first sync on.
* PyTorch's caching allocator keeps a process's freed blocks, and veRL empties a worker's cache only when it
  offloads its parameters (`fsdp_utils.offload_fsdp_model_to_cpu`) and, colocated, the actor's before vLLM
  wakes up (`engine_workers.py`); so a worker without `param_offload` keeps holding its resident states
  and its allocator's cache while the others run: `ALLOCATOR_CACHE_FACTOR` (2.0, measured on an H200) × its
  largest phase, more than that phase, as cached blocks of different phases' sizes are not reused.
  GPU peak = max over workers of (its peak + what the others hold).

**vLLM's share of a rollout GPU**: weights, overhead and the KV cache inside it.

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

from verl_prime_lora.preflight.model_shape import (
    ModelShape,
    layer_param_count,
    linear_shapes,
    lora_param_count,
    param_count,
    root_param_count,
)

GIB = 1 << 30
CUDA_CONTEXT_BYTES = GIB // 2  # per worker process (CUDA context + cuBLAS workspace), rough
VLLM_OVERHEAD_BYTES = 2 * GIB  # inside vLLM's share, not KV: profile-run activations, CUDA graphs, sampler
VLLM_SLEEP_RESIDUE_BYTES = 2 * GIB  # a sleeping colocated vLLM (KV cache and weights released), rough
# What PyTorch's caching allocator keeps of a worker that never empties its cache, over its resident states,
# as a multiple of its largest estimated phase. Measured on an H200 (benchmarks/perf/gpu_memory_check.py, results in
# benchmarks/perf/results/gpu_memory_check/gpu_memory_check.md): after log-prob micro-batches of 4 and update
# micro-batches of 2 sequences of 4096 tokens, max_memory_reserved − resident = 1.88 × (LoRA actor) and 2.00 × (full
# PRM) the estimated largest phase (default allocator; 1.40 × and 1.47 × with expandable_segments).
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


@dataclass(frozen=True)
class EngineSpec:
    """One veRL FSDP engine on one GPU, as the config sets it up."""

    name: str
    trainable: bool  # has an optimizer and an update phase
    param_bytes: int  # fsdp_config.model_dtype
    compute_bytes: int  # mixed_precision.param_dtype (bf16)
    shards: int  # FSDP shards of its states
    lora_rank: int = 0
    targets: tuple[str, ...] = ()
    lora_dropout: float = 0.0
    param_offload: bool = False
    optimizer_offload: bool = False
    reshard_after_forward: bool = True
    checkpointing: bool = True
    train_tokens: int = 0  # tokens per training micro-batch
    infer_tokens: int = 0  # tokens per log-prob micro-batch (0: no log-prob phase)
    train_temperature_copy: bool = False
    infer_temperature_copy: bool = False
    forward_only: bool = False  # frozen reference: weights in CPU RAM (FSDP CPU offload)
    sync_buffer_bytes: int = 0  # the actor's weight-sync bucket buffers
    sync_buffers_resident: bool = False  # nccl: the sender's buckets stay in cupy's pool for the whole run
    fused_logits: bool = False  # model.use_fused_kernels: logits one chunk at a time
    empties_cache_before_rollout: bool = False  # colocated actor (engine_workers.py)


@dataclass
class Row:
    label: str
    bytes: int


@dataclass
class WorkerEstimate:
    name: str
    resident: list[Row]
    phases: dict[str, list[Row]]
    cpu: list[Row]
    releases_cache: bool  # param_offload: veRL empties its cache after each phase
    empties_cache_before_rollout: bool = False

    @property
    def resident_bytes(self) -> int:
        return sum(r.bytes for r in self.resident)

    @property
    def peak_phase(self) -> str | None:
        if not self.phases:
            return None
        return max(self.phases, key=lambda p: sum(r.bytes for r in self.phases[p]))

    @property
    def peak_bytes(self) -> int:
        phase = self.peak_phase
        return self.resident_bytes + (sum(r.bytes for r in self.phases[phase]) if phase else 0)

    @property
    def held_bytes(self) -> int:
        """What it keeps on the GPU while another worker runs: its resident states if it offloads (veRL then
        empties its cache), else those + its allocator's cache, `ALLOCATOR_CACHE_FACTOR` × its largest phase."""
        if self.releases_cache or self.peak_phase is None:
            return self.resident_bytes
        return self.resident_bytes + int(ALLOCATOR_CACHE_FACTOR * (self.peak_bytes - self.resident_bytes))

    @property
    def held_at_rollout_bytes(self) -> int:
        return self.resident_bytes if self.empties_cache_before_rollout else self.held_bytes


def dtype_name(nbytes: int) -> str:
    """fp32 / bf16 for 4 / 2 bytes, as the tables name them."""
    return {4: "fp32", 2: "bf16"}.get(nbytes, f"{nbytes} B")


def worker_estimate(shape: ModelShape, spec: EngineSpec) -> WorkerEstimate:
    """Resident states, phases and CPU-RAM states of one engine on one GPU (formulas in the module docstring)."""
    p, c, n = spec.param_bytes, spec.compute_bytes, spec.shards
    total = param_count(shape)
    lora = lora_param_count(shape, spec.lora_rank, spec.targets)
    trainable = lora if spec.lora_rank > 0 else total
    shard_note = f"÷{n}" if n > 1 else "1 GPU"
    resident: list[Row] = [Row("CUDA context", CUDA_CONTEXT_BYTES)]
    cpu: list[Row] = []
    loaded: list[Row] = []  # brought back to the GPU for each phase (param_offload)
    loaded_for_update: list[Row] = []  # optimizer_offload

    copy_bytes = fsdp_compute_copy_bytes(shape, c, p, n, spec.reshard_after_forward, on_cpu=spec.forward_only)
    copy_row = Row(f"FSDP {dtype_name(c)} compute copy (embeddings + 2 layers)", copy_bytes)
    if spec.forward_only:
        cpu.append(Row(f"{spec.name}: frozen weights {dtype_name(p)} ({shard_note}, FSDP CPU offload)", total * p // n))
        infer = [
            copy_row,
            Row(f"working set ({spec.infer_tokens} tok)", working_set_bytes(shape, spec.infer_tokens, c)),
            Row(
                f"logits ({spec.infer_tokens} tok)",
                logits_bytes(shape, spec.infer_tokens, c, False, spec.infer_temperature_copy, spec.fused_logits),
            ),
        ]
        return WorkerEstimate(spec.name, resident, {"log-prob": infer}, cpu, releases_cache=False)

    weights = []
    if spec.lora_rank > 0:
        weights.append(Row(f"base weights {dtype_name(p)} ({shard_note})", (total * p) // n))
        weights.append(Row(f"LoRA r={spec.lora_rank} weights {dtype_name(p)} ({shard_note})", (lora * p) // n))
    else:
        weights.append(Row(f"weights {dtype_name(p)} ({shard_note})", (total * p) // n))
    adam = [Row(f"AdamW 2 moments {dtype_name(p)} ({shard_note})", (2 * trainable * p) // n)] if spec.trainable else []

    if spec.param_offload:
        cpu += [Row(f"{spec.name}: {r.label}", r.bytes) for r in weights]
        loaded += [Row(f"{r.label}, from CPU", r.bytes) for r in weights]
    else:
        resident += weights
    if spec.optimizer_offload:
        cpu += [Row(f"{spec.name}: {r.label}", r.bytes) for r in adam]
        loaded_for_update += [Row(f"{r.label}, from CPU", r.bytes) for r in adam]
    else:
        resident += adam

    phases: dict[str, list[Row]] = {}
    if spec.trainable and spec.train_tokens > 0:
        ckpt = "checkpointing" if spec.checkpointing else "no checkpointing"
        phases["update"] = [
            *loaded,
            *loaded_for_update,
            Row(f"grads {dtype_name(p)} ({shard_note})", (trainable * p) // n),
            copy_row,
            Row(
                f"activations ({spec.train_tokens} tok, {ckpt})",
                train_activation_bytes(
                    shape, spec.train_tokens, c, spec.checkpointing, spec.lora_rank, spec.targets, spec.lora_dropout
                ),
            ),
            Row(f"backward working set ({spec.train_tokens} tok)", working_set_bytes(shape, spec.train_tokens, c)),
            Row(
                f"logits ({spec.train_tokens} tok)",
                logits_bytes(shape, spec.train_tokens, c, True, spec.train_temperature_copy, spec.fused_logits),
            ),
        ]
        phases["optimizer step"] = [
            *loaded,
            *loaded_for_update,
            Row(f"grads {dtype_name(p)} ({shard_note})", (trainable * p) // n),
            Row(f"AdamW step temporary √v {dtype_name(p)} ({shard_note}, foreach)", (trainable * p) // n),
        ]
    if spec.infer_tokens > 0:
        phases["log-prob"] = [
            *loaded,
            copy_row,
            Row(f"working set ({spec.infer_tokens} tok)", working_set_bytes(shape, spec.infer_tokens, c)),
            Row(
                f"logits ({spec.infer_tokens} tok)",
                logits_bytes(shape, spec.infer_tokens, c, False, spec.infer_temperature_copy, spec.fused_logits),
            ),
        ]
    if spec.sync_buffer_bytes:
        largest = shape.vocab_size * shape.hidden_size * p  # the embedding, the largest tensor sent
        buckets = []
        if spec.sync_buffers_resident:
            resident.append(Row("nccl weight-sync buckets (2, in cupy's pool)", spec.sync_buffer_bytes))
        else:
            buckets.append(Row("weight-sync bucket buffers", spec.sync_buffer_bytes))
        phases["weight sync"] = [*loaded, *buckets, copy_row, Row("largest tensor, gathered", largest)]
    return WorkerEstimate(
        spec.name,
        resident,
        phases,
        cpu,
        releases_cache=spec.param_offload,
        empties_cache_before_rollout=spec.empties_cache_before_rollout,
    )


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
