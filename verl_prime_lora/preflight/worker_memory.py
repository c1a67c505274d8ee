"""One worker (a process per GPU): its resident states, its phases and what it holds while others run.

Notation as in `memory_formulas` (P = parameters, c = compute bytes, p = param bytes).

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
"""

from __future__ import annotations

from dataclasses import dataclass

from verl_prime_lora.preflight.memory_formulas import (
    ALLOCATOR_CACHE_FACTOR,
    CUDA_CONTEXT_BYTES,
    fsdp_compute_copy_bytes,
    logits_bytes,
    train_activation_bytes,
    working_set_bytes,
)
from verl_prime_lora.preflight.model_shape import ModelShape, lora_param_count, param_count


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
    """Resident states, phases and CPU-RAM states of one engine on one GPU (formulas in the module docstring
    and `memory_formulas`)."""
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
