"""Every monkeypatch of veRL that the plugin makes, and its one warnings filter (the CPU platform keeps its own patches
in `cpu/patches.py`). They act on PRIME runs only: importing this module applies them all (`apply_all`), and only a
process of a PRIME run imports it (`plugin.prime_run`: the plugin in a PRIME run's Ray processes, the recipe's
Hydra callback in its driver). Any other run sees veRL as it is.

veRL 0.9.1 offers no hook for these things, so each patch wraps or replaces one or a few veRL names (a function,
a method, a module's logger or `open`), applied where veRL's module is imported (`MODULE_PATCHES`, which lists what
each replaces), idempotent.

1. `install_driver_validation` wraps `verl.utils.config.validate_config`, which `verl/trainer/main_ppo.py` calls in
   the driver right before `run_ppo` starts Ray. For a run with a PRIME trainer or estimator
   (`config.run.is_prime_run`) the wrapper runs `checks.inputs.check_devices` (a missing device is blamed as such,
   not as the micro-batch arithmetic that assumed it), `config_checks.validate_prime_config`,
   `environment_checks.check_environment` (the packages, GPUs and credentials the configured path needs),
   `checks.inputs.check_host_cpus` (with `ray_kwargs.ray_init.num_cpus` unset, the CPUs Ray counts here), then
   `checks.inputs.check_files_and_code` (model folders, data files, a reward dry run, agent loops, the resumed
   checkpoint), so a bad PRIME config or input fails before Ray with a message naming the key, instead of minutes
   later inside a Ray actor. The driver learns that its run is PRIME only once Hydra composed the config, after
   `main_ppo` bound `validate_config` by name: `apply_in_driver` points that name at the wrapper too. (Hydra's
   callbacks, the hook that runs at that moment, cannot stop a run: Hydra turns an exception raised in one into a
   warning.)

2. `install_lora_dropout` wraps `FSDPEngine._build_lora_module`
   (`verl/workers/engine/fsdp/transformer_impl.py`), whose `LoraConfig` has no
   `lora_dropout`. After veRL builds the adapter, the wrapper reads `model.lora.dropout` (the key that
   veRL's hf_model.yaml already defines, documented there for Megatron only) and, if > 0, swaps each
   LoRA layer's `nn.Identity` for `nn.Dropout(p)` and records `lora_dropout=p` in the adapter's
   `peft_config` — exactly what peft's `LoraConfig(lora_dropout=p)` would have built. Beside it,
   `record_lora_dropout_in_checkpoints` wraps `FSDPCheckpointManager._get_lora_train_meta`
   (`verl/utils/checkpoint/fsdp_checkpoint_manager.py`) to add `lora_dropout` to the `lora_train_meta.json` it
   writes, so a checkpoint records it.

3. `tolerate_flush_kwarg_in_separate_async_logger` — a veRL 0.9.1 bug on every platform:
   `verl/trainer/ppo/v1/trainer_separate_async.py` calls `logger.info(..., flush=True)`;
   `logging.Logger` has no `flush` argument, so `_setup` of the split placement
   (`hybrid_engine=false`, the seed's 2-GPU layout) dies with "Logger._log() got an unexpected
   keyword argument 'flush'". The module's logger is wrapped in an adapter that drops the argument.

4. `install_reward_failure_guard` wraps `RewardLoopWorker.compute_score`
   (`verl/experimental/reward_loop/reward_loop.py`), the one call through which the agent loop
   (`agent_loop.py`) and the colocated reward path (`compute_score_batch`, `reward_loop.py`)
   score each rollout. For PRIME trainers an exception there, or a call past `prime.reward_timeout_s`, becomes a
   counted failed row instead of a dropped rollout with a traceback each, or a stalled step
   (`verl_prime_lora.hardening.reward_failures`), and
   `compute_score_batch` gives a batch's failed rows the key set of its scored rows; a run of the recipe with one of
   veRL's own trainers keeps veRL's behaviour.

5. `publish_checkpoint_tracker_atomically` — veRL 0.9.1's `PPOTrainer._save_checkpoint`
   (verl/trainer/ppo/v1/trainer_base.py) publishes a checkpoint by writing `latest_checkpointed_iteration.txt` in
   place (`open(path, "w")`, then `write`): a crash between the two leaves an empty tracker that veRL's resume cannot
   parse. The module's `open` is given a wrapper that writes that one file beside itself and renames it over
   (`checkpoints.write_atomically`); every other file opens as before.

6. `keep_untied_lm_head_in_root_unit` wraps `verl.utils.fsdp_utils._select_fsdp2_wrap_targets`, which picks the
   modules `apply_fsdp2` shards as FSDP2 units of their own. For a model whose lm_head is not tied to its input
   embedding (DeepSeek-R1-Distill-Qwen-1.5B's) it picks the lm_head; but veRL's fused log-prob forward
   (`use_fused_kernels`, which the recipe sets: `verl/models/transformers/dense_common.py`) reads
   `lm_head.weight` without calling the lm_head, so that unit's pre-forward hook never gathers it, and the first
   actor or PRM forward dies with "aten.mm.default got mixed torch.Tensor and DTensor" (on any platform; upstream
   as verl-project/verl#7427). The wrapper leaves the lm_head to the root unit, which holds its parameters
   gathered through forward and backward: what a single-device run (the seed's) has anyway, and on N devices one
   full lm_head per device during a step (0.47 GB in bf16 for the seed model) instead of a 1/N shard. The embedding
   stays a unit of its own.

7. `install_run_unique_colocated_ipc` makes the socket of the colocated weight sync (actor -> vLLM,
   `verl/workers/rollout/vllm_rollout/bucketed_weight_transfer.py`) unique per run. veRL names it
   `/tmp/rl-colocate-zmq-{Ray job id}-replica-{r}-rank-{k}.sock`, on the sender's side in `ServerAdapter.__init__` and
   on the receiver's (the vLLM worker) from `VERL_RAY_JOB_ID`, which `vLLMHttpServer.__init__` sets. But each
   `main_ppo` starts a Ray cluster of its own, whose first job id is always `01000000`: two runs on one machine (two
   single-GPU experiments on one node) name the same socket, the later sender removes the earlier's file and binds
   it, and one run's weights go into the other's vLLM (found on CPU: a rank-16 LoRA sent into a rank-8 run's
   engine; with equal shapes nothing would fail). Both sides get `{job id}-{node id}` instead (`run_ipc_tag`): the
   node id is drawn at random for each Ray cluster, and the two sides of a colocated sync share a node.

The warnings filter (`hide_missing_engine_warnings`): veRL's engine package warns once per process for every optional
training backend it cannot import ("torchtitan engine is not available: ModuleNotFoundError(...)", likewise veomni,
automodel, mindspeed, megatron; verl/workers/engine/__init__.py), five lines in every Ray worker. A Ray process
applies it at `import verl`, before anything imports that package; it hides those messages only (exact message, that
module only).
"""

from __future__ import annotations

import logging
import os
import sys
import warnings
from typing import Any

from verl_prime_lora.config.run import is_prime_run
from verl_prime_lora.config.verl_view import model_view, verl_view
from verl_prime_lora.patching import ModulePatch, is_patched, mark, when_each_imported, wrap
from verl_prime_lora.run_processes import reap_after_driver

logger = logging.getLogger(__name__)

# ---------------------------------------------------------------------------------------------
# 1. config validation in the driver, before Ray starts
# ---------------------------------------------------------------------------------------------


def _is_main_ppo_driver() -> bool:
    """This process is `python -m verl.trainer.main_ppo` (not a test or a tool calling validate_config)."""
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    return getattr(spec, "name", None) == "verl.trainer.main_ppo"


def install_driver_validation(verl_config) -> None:
    wrap(verl_config, "validate_config", _validated)


def _validated(original):
    def validate_config(config, *args, **kwargs):
        from verl_prime_lora.checks.config_checks import validate_prime_config
        from verl_prime_lora.checks.environment_checks import check_environment
        from verl_prime_lora.checks.inputs import check_devices, check_files_and_code, check_host_cpus
        from verl_prime_lora.plugin.wandb_run import continue_wandb_run

        if is_prime_run(config):
            view = verl_view(config)
            check_devices(view)  # the devices first: the config checks' micro-batch arithmetic assumes them
            run = validate_prime_config(config, check_tokenizers=False, view=view)  # the config's keys: no file read
            check_environment(view)  # what the GPU path needs: flash-attn, cupy + NCCL, visible GPUs, wandb credentials
            check_host_cpus(view)  # num_cpus unset: the CPUs Ray will count on this machine hold the layout's actors
            check_files_and_code(run)  # model folders (+ the PRM tokenizer), data, reward dry run, checkpoint
            if _is_main_ppo_driver():
                continue_wandb_run(config, verl_view(config))  # the checkpoint to resume is known now
                reap_after_driver()  # the run's processes end with the driver, however it ends
        return original(config, *args, **kwargs)

    return validate_config


DRIVER_TASK_NAME = "validate_config"  # the name `main_ppo` imports from verl.utils.config


def apply_in_driver(task_function) -> None:
    """In a PRIME run's driver, once Hydra has composed the config (`prime_run.PrimeRunDriver`, which imported this
    module: the patches are applied): the module of Hydra's task function (`main_ppo`) bound veRL's
    `validate_config` by name at its import, so that name is pointed at the wrapper too."""
    import verl.utils.config as verl_config

    task_module = task_function.__globals__
    if task_module.get(DRIVER_TASK_NAME) is getattr(verl_config.validate_config, "__wrapped__", None):
        task_module[DRIVER_TASK_NAME] = verl_config.validate_config


# ---------------------------------------------------------------------------------------------
# 2. LoRA dropout on veRL's FSDP engine
# ---------------------------------------------------------------------------------------------


def apply_lora_dropout(peft_model: Any, p: float, adapter_name: str = "default") -> int:
    """Give every LoRA layer of `peft_model` dropout `p` on its input, as `LoraConfig(lora_dropout=p)`.

    Returns the number of LoRA layers changed. Call before FSDP wrapping.
    """
    import torch.nn as nn

    changed = 0
    for module in peft_model.modules():
        dropouts = getattr(module, "lora_dropout", None)
        if isinstance(dropouts, nn.ModuleDict) and adapter_name in dropouts:
            dropouts[adapter_name] = nn.Dropout(p=p) if p > 0 else nn.Identity()
            changed += 1
    peft_config = getattr(peft_model, "peft_config", None)
    if isinstance(peft_config, dict) and adapter_name in peft_config:
        peft_config[adapter_name].lora_dropout = p
    return changed


def install_lora_dropout(transformer_impl) -> None:
    def with_dropout(original):
        def _build_lora_module(self, module):
            module = original(self, module)
            p = model_view(self.model_config).lora_dropout
            if p > 0:
                n = apply_lora_dropout(module, p)
                logger.info("verl-prime-lora: LoRA dropout %.3g on %d adapter layers", p, n)
            return module

        return _build_lora_module

    wrap(transformer_impl.FSDPEngine, "_build_lora_module", with_dropout)


def record_lora_dropout_in_checkpoints(fsdp_checkpoint_manager) -> None:
    def with_dropout(original):
        def _get_lora_train_meta(self, unwrap_model):
            meta = original(self, unwrap_model)
            if meta is not None:
                peft_config = getattr(unwrap_model, "peft_config", None) or {}
                config = peft_config.get("default") if isinstance(peft_config, dict) else None
                if config is not None:
                    meta["lora_dropout"] = float(getattr(config, "lora_dropout", 0.0) or 0.0)
            return meta

        return _get_lora_train_meta

    wrap(fsdp_checkpoint_manager.FSDPCheckpointManager, "_get_lora_train_meta", with_dropout)


# ---------------------------------------------------------------------------------------------
# 3. separate_async's logger call with `flush=True`
# ---------------------------------------------------------------------------------------------


class _FlushTolerantLogger(logging.LoggerAdapter):
    def log(self, level, msg, *args, **kwargs):
        kwargs.pop("flush", None)
        super().log(level, msg, *args, **kwargs)


def tolerate_flush_kwarg_in_separate_async_logger(trainer_separate_async) -> None:
    if not isinstance(trainer_separate_async.logger, _FlushTolerantLogger):
        trainer_separate_async.logger = _FlushTolerantLogger(trainer_separate_async.logger, {})


# ---------------------------------------------------------------------------------------------
# 4. reward failures of PRIME runs: counted rows, not dropped rollouts
# ---------------------------------------------------------------------------------------------


_GUARD_ATTR = "_prime_reward_guard"  # cached on each RewardLoopWorker


def install_reward_failure_guard(reward_loop) -> None:
    from verl_prime_lora.hardening.reward_failures import complete_key_sets, guarded_score, reward_guard

    def guard(worker):
        """`reward_guard` of the worker's config, read (a typed PRIME config built) once per worker; None, and no
        view built, for a run that is not PRIME."""
        if _GUARD_ATTR not in worker.__dict__:
            config = worker.config
            worker.__dict__[_GUARD_ATTR] = reward_guard(verl_view(config)) if is_prime_run(config) else None
        return worker.__dict__[_GUARD_ATTR]

    def guarded(original):
        async def compute_score(self, data):
            settings = guard(self)
            if settings is None:
                return await original(self, data)
            return await guarded_score(lambda: original(self, data), settings.label_key, settings.timeout_s)

        return compute_score

    def completed(original):
        async def compute_score_batch(self, data):
            outputs = await original(self, data)
            return outputs if guard(self) is None else complete_key_sets(outputs)

        return compute_score_batch

    wrap(reward_loop.RewardLoopWorker, "compute_score", guarded)
    wrap(reward_loop.RewardLoopWorker, "compute_score_batch", completed)


# ---------------------------------------------------------------------------------------------
# 5. the checkpoint tracker, published atomically
# ---------------------------------------------------------------------------------------------


class _AtomicTrackerFile:
    """What `open(tracker, "w")` gives veRL's save: the text is kept, and written atomically when the file closes
    without an error (a failed save publishes nothing)."""

    def __init__(self, path):
        self.path, self.parts = path, []

    def write(self, text: str) -> int:
        self.parts.append(text)
        return len(text)

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            from verl_prime_lora.checkpoints import write_atomically

            write_atomically(self.path, "".join(self.parts))


def _tracker_open(file, mode="r", *args, **kwargs):
    from verl_prime_lora.checkpoints import CHECKPOINT_TRACKER

    if mode == "w" and str(file).endswith(CHECKPOINT_TRACKER):
        return _AtomicTrackerFile(file)
    return open(file, mode, *args, **kwargs)


def publish_checkpoint_tracker_atomically(trainer_base) -> None:
    if not is_patched(getattr(trainer_base, "open", None)):  # the module's own `open`: none until this one
        trainer_base.open = mark(_tracker_open)


# ---------------------------------------------------------------------------------------------
# 6. an untied lm_head in FSDP2's root unit, where the fused log-prob forward finds it gathered
# ---------------------------------------------------------------------------------------------


def keep_untied_lm_head_in_root_unit(fsdp_utils) -> None:
    def without_lm_head(original):
        def _select_fsdp2_wrap_targets(model, *args, **kwargs):
            targets = original(model, *args, **kwargs)
            lm_head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
            return [module for module in targets if lm_head is None or module is not lm_head]

        return _select_fsdp2_wrap_targets

    wrap(fsdp_utils, "_select_fsdp2_wrap_targets", without_lm_head)


# ---------------------------------------------------------------------------------------------
# 7. the colocated weight sync's socket, unique per run
# ---------------------------------------------------------------------------------------------

IPC_PREFIX = "rl-colocate-zmq-"  # veRL's socket name: /tmp/rl-colocate-zmq-{job id}-replica-{r}-rank-{k}.sock
RECEIVER_JOB_ENV = "VERL_RAY_JOB_ID"  # read by veRL's vLLMColocateWorkerExtension._get_zmq_handle


def run_ipc_tag() -> str:
    """`{Ray job id}-{node id}`: the job id tells jobs of one Ray cluster apart, the node id (random per cluster)
    clusters on one machine."""
    import ray

    context = ray.get_runtime_context()
    return f"{context.get_job_id()}-{context.get_node_id()[:16]}"


def with_run_tag(handle: str, job_id: str, tag: str) -> str:
    """veRL's socket `handle` for job `job_id`, named by `tag` instead."""
    named = handle.replace(f"{IPC_PREFIX}{job_id}-", f"{IPC_PREFIX}{tag}-", 1)
    if named == handle:
        raise RuntimeError(f"verl-prime-lora: veRL's colocated weight-sync socket {handle!r} names no job {job_id}")
    return named


def _then_after_init(cls: type, then) -> None:
    """`cls.__init__` followed by `then(self)`; a no-op when already wrapped."""

    def followed(original):
        def __init__(self, *args, **kwargs):
            original(self, *args, **kwargs)
            then(self)

        return __init__

    wrap(cls, "__init__", followed)


def install_run_unique_colocated_ipc(vllm_rollout) -> None:
    """The sender's side: `ServerAdapter.zmq_handle`."""

    def name_by_run(adapter) -> None:
        import ray

        adapter.zmq_handle = with_run_tag(adapter.zmq_handle, ray.get_runtime_context().get_job_id(), run_ipc_tag())

    _then_after_init(vllm_rollout.ServerAdapter, name_by_run)


def name_vllm_workers_ipc_by_run(vllm_async_server) -> None:
    """The receiver's side: the `VERL_RAY_JOB_ID` that vLLM's worker processes inherit and name the socket by."""

    def name_by_run(server) -> None:
        os.environ[RECEIVER_JOB_ENV] = run_ipc_tag()

    _then_after_init(vllm_async_server.vLLMHttpServer, name_by_run)


# ---------------------------------------------------------------------------------------------
# the warnings of veRL's engine package about backends it cannot import
# ---------------------------------------------------------------------------------------------


def hide_missing_engine_warnings() -> None:
    warnings.filterwarnings(
        "ignore", message=r"\w+ engine is not available: ", category=UserWarning, module=r"verl\.workers\.engine\Z"
    )


# veRL module -> its patch, applied where the module is imported (`patching.when_each_imported`)
MODULE_PATCHES = {
    "verl.utils.config": ModulePatch(install_driver_validation, ("validate_config",)),
    "verl.workers.engine.fsdp.transformer_impl": ModulePatch(install_lora_dropout, ("FSDPEngine._build_lora_module",)),
    "verl.utils.checkpoint.fsdp_checkpoint_manager": ModulePatch(
        record_lora_dropout_in_checkpoints, ("FSDPCheckpointManager._get_lora_train_meta",)
    ),
    "verl.trainer.ppo.v1.trainer_separate_async": ModulePatch(
        tolerate_flush_kwarg_in_separate_async_logger, ("logger",)
    ),
    "verl.experimental.reward_loop.reward_loop": ModulePatch(
        install_reward_failure_guard, ("RewardLoopWorker.compute_score", "RewardLoopWorker.compute_score_batch")
    ),
    "verl.trainer.ppo.v1.trainer_base": ModulePatch(publish_checkpoint_tracker_atomically, ("open",)),
    "verl.utils.fsdp_utils": ModulePatch(keep_untied_lm_head_in_root_unit, ("_select_fsdp2_wrap_targets",)),
    "verl.workers.rollout.vllm_rollout.vllm_rollout": ModulePatch(
        install_run_unique_colocated_ipc, ("ServerAdapter.__init__",)
    ),
    "verl.workers.rollout.vllm_rollout.vllm_async_server": ModulePatch(
        name_vllm_workers_ipc_by_run, ("vLLMHttpServer.__init__",)
    ),
}


def apply_all() -> None:
    hide_missing_engine_warnings()
    when_each_imported(MODULE_PATCHES)


apply_all()
