"""GPU preflight: will a PRIME config fit its GPUs? `python -m verl_prime_lora.preflight +recipe=… <overrides>`.

The config is composed exactly as `python -m verl.trainer.main_ppo` composes it (Hydra, veRL's `ppo_trainer`
from veRL's config dir, the same overrides; `import verl` loads this plugin, which puts the `recipe` group
on Hydra's search path) and checked as `main_ppo` checks it before Ray starts: this package's
`config_checks.validate_prime_config`, veRL's own `verl.utils.config.validate_config` (unwrapped: no data
file or reward dry run) and the layout part of `input_checks.check_devices`. Then, from the models'
`config.json` only (no weights, nothing downloaded), it estimates every GPU's memory and prints a table per
GPU, a verdict and, when something does not fit, the knobs that make it fit. Exit code 0: every GPU fits;
1: one does not; 2: a config error (the message names the key).

What sits where (veRL 0.9.1 V1 trainer, FSDP engine; every worker group is its own process per GPU)

* trainer pool (`trainer.n_gpus_per_node × trainer.nnodes` GPUs, FSDP shards over all of them, or
  `fsdp_size`): the actor; the PRM (`prime.prm`, veRL's `TrainingWorker`); a frozen PRM reference only
  when `verl_prime_lora.algo.run_config.reference_source` picks one (a full-parameter PRM that does not start
  from a LoRA actor's base; the seed borrows the LoRA actor with its adapter off, so it has none); veRL's
  actor reference only with a KL term and a non-LoRA actor.
* rollout: the split trainers (`separate_async`) have a standalone pool
  (`actor_rollout_ref.rollout.n_gpus_per_node × .nnodes`) that is vLLM's alone; otherwise vLLM shares each
  trainer GPU, with `gpu_memory_utilization × GPU memory`.

Modules (the estimator is pure functions on bytes; each module's docstring states its formulas)

* `model_shape`: `ModelShape` from `config.json`; parameter and LoRA parameter counts.
* `memory_formulas`: bytes of activations, logits, the FSDP compute copy and the KV cache; the constant terms.
* `worker_memory`: one worker process (`EngineSpec` → `WorkerEstimate`): resident states, phases, CPU RAM.
* `vllm_memory`: vLLM's share of a rollout GPU (`RolloutSpec` → `VllmEstimate`).
* `config_values`: reading a composed config: keys with defaults, dtypes, a model's `config.json`.
* `layout`: `Layout`, everything the estimate needs, from a composed config (`prime.*` via `prime_config`).
* `report`: per-GPU totals, peaks and verdicts (`estimate` → `Report`), the placement lines.
* `report_format`: the report as text and as JSON.
* `knobs`: config changes that make it fit, alone or greedily combined.
* `compose_and_check`: the config composed and checked as `main_ppo` does; hints for veRL's messages.
* `cli` (and `__main__`): the command line.

These are planning numbers (a fit with under 5 % free is reported as tight). On an H200 with the seed's shapes
(`benchmarks/gpu_memory_check.py`, `benchmarks/results/gpu_memory_check.md`) the resident states came out at
1.00–1.01 × the estimate, each worker's allocated peak at 0.87–0.92 × (the phases are overestimated by ~20 %),
and the allocator's cache of a worker that keeps it sets `ALLOCATOR_CACHE_FACTOR`.
"""

from verl_prime_lora.preflight.cli import DEFAULT_GPU_GIB, main
from verl_prime_lora.preflight.compose_and_check import HINTS, check_config, compose_config, hint_for
from verl_prime_lora.preflight.config_values import DTYPE_BYTES, dtype_bytes, load_model_shape, select
from verl_prime_lora.preflight.errors import PreflightConfigError
from verl_prime_lora.preflight.knobs import apply_knob, candidate_knobs, find_knobs, knob_text
from verl_prime_lora.preflight.layout import Layout, layout_from_config
from verl_prime_lora.preflight.memory_formulas import (
    ALLOCATOR_CACHE_FACTOR,
    CUDA_CONTEXT_BYTES,
    GIB,
    VLLM_OVERHEAD_BYTES,
    VLLM_SLEEP_RESIDUE_BYTES,
    fsdp_compute_copy_bytes,
    kv_cache_bytes_per_token,
    layer_activation_bytes,
    logits_bytes,
    train_activation_bytes,
    working_set_bytes,
)
from verl_prime_lora.preflight.model_shape import (
    DENSE_MODEL_TYPES,
    LINEARS,
    ModelShape,
    layer_param_count,
    linear_shapes,
    lora_param_count,
    lora_targets,
    param_count,
    root_param_count,
)
from verl_prime_lora.preflight.report import GpuEstimate, Report, estimate, placement_lines, trainer_gpu_estimate
from verl_prime_lora.preflight.report_format import TIGHT, format_report, report_json
from verl_prime_lora.preflight.vllm_memory import RolloutSpec, VllmEstimate, vllm_estimate
from verl_prime_lora.preflight.worker_memory import EngineSpec, Row, WorkerEstimate, worker_estimate

__all__ = [
    "ALLOCATOR_CACHE_FACTOR",
    "CUDA_CONTEXT_BYTES",
    "DEFAULT_GPU_GIB",
    "DENSE_MODEL_TYPES",
    "DTYPE_BYTES",
    "GIB",
    "HINTS",
    "LINEARS",
    "TIGHT",
    "VLLM_OVERHEAD_BYTES",
    "VLLM_SLEEP_RESIDUE_BYTES",
    "EngineSpec",
    "GpuEstimate",
    "Layout",
    "ModelShape",
    "PreflightConfigError",
    "Report",
    "RolloutSpec",
    "Row",
    "VllmEstimate",
    "WorkerEstimate",
    "apply_knob",
    "candidate_knobs",
    "check_config",
    "compose_config",
    "dtype_bytes",
    "estimate",
    "find_knobs",
    "format_report",
    "fsdp_compute_copy_bytes",
    "hint_for",
    "knob_text",
    "kv_cache_bytes_per_token",
    "layer_activation_bytes",
    "layer_param_count",
    "layout_from_config",
    "linear_shapes",
    "load_model_shape",
    "logits_bytes",
    "lora_param_count",
    "lora_targets",
    "main",
    "param_count",
    "placement_lines",
    "report_json",
    "root_param_count",
    "select",
    "train_activation_bytes",
    "trainer_gpu_estimate",
    "vllm_estimate",
    "worker_estimate",
    "working_set_bytes",
]
