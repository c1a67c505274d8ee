"""GPU preflight: will a PRIME config fit its GPUs? `python -m verl_prime_lora.preflight +recipe=… <overrides>`.

The config is composed exactly as `python -m verl.trainer.main_ppo` composes it (Hydra, veRL's `ppo_trainer`
from veRL's config dir, the same overrides; `import verl` loads this plugin, which puts the `recipe` group
on Hydra's search path) and checked as `main_ppo` checks it before Ray starts: this package's
`config_checks.validate_prime_config`, veRL's own `verl.utils.config.validate_config` (unwrapped: no data
file or reward dry run) and the layout part of `checks.inputs.check_devices`. Then, from the models'
`config.json` only (no weights, nothing downloaded), it estimates every GPU's memory and prints a table per
GPU, a verdict and, when something does not fit, the knobs that make it fit. Exit code 0: every GPU fits;
1: one does not; 2: a config error (the message names the key).

What sits where (veRL 0.9.1 V1 trainer, FSDP engine; every worker group is its own process per GPU)

* trainer pool (`trainer.n_gpus_per_node × trainer.nnodes` GPUs, FSDP shards over all of them, or
  `fsdp_size`): the actor; the PRM (`prime.prm`, veRL's `TrainingWorker`); a frozen PRM reference only
  when `verl_prime_lora.config.run.reference_source` picks one (a full-parameter PRM that does not start
  from a LoRA actor's base; the seed borrows the LoRA actor with its adapter off, so it has none); veRL's
  actor reference only with a KL term and a non-LoRA actor.
* rollout: the split trainers (`separate_async`) have a standalone pool
  (`actor_rollout_ref.rollout.n_gpus_per_node × .nnodes`) that is vLLM's alone; otherwise vLLM shares each
  trainer GPU, with `gpu_memory_utilization × GPU memory`.

Modules (the estimator is pure functions on bytes; each module's docstring states its formulas)

* `model_shape`: `ModelShape` from `config.json` and its parameter counts (LoRA's too).
* `memory`: the memory model, pure functions on bytes: bytes of activations, logits, the FSDP compute copy and
  the KV cache, and the constant terms; one worker process (`EngineSpec` → `WorkerEstimate`: resident states,
  phases, CPU RAM); vLLM's share of a rollout GPU (`RolloutSpec` → `VllmEstimate`).
* `layout`: the config composed and checked as `main_ppo` does, its values read from its view
  (`verl_prime_lora.config`), and `Layout`, everything the estimate needs.
* `report`: per-GPU totals, peaks and verdicts (`estimate` → `Report`), as text and as JSON.
* `knobs`: config changes that make it fit, alone or greedily combined.
* `cli` (and `__main__`): the command line.

These are planning numbers (a fit with under 5 % free is reported as tight). How close they came on an H200 with
the seed's shapes: `benchmarks/perf/results/gpu_memory_check/gpu_memory_check.md`
(`benchmarks/perf/gpu_memory_check.py`).
"""

from verl_prime_lora.preflight.cli import main
from verl_prime_lora.preflight.knobs import find_knobs
from verl_prime_lora.preflight.layout import Layout, check_config, compose_config, layout_from_config
from verl_prime_lora.preflight.model_shape import PreflightConfigError
from verl_prime_lora.preflight.report import Report, estimate, format_report, report_json

__all__ = [
    "Layout",
    "PreflightConfigError",
    "Report",
    "check_config",
    "compose_config",
    "estimate",
    "find_knobs",
    "format_report",
    "layout_from_config",
    "main",
    "report_json",
]
