"""The implicit PRM's worker group, driven from the trainer: veRL's own trainable worker (`TrainingWorker` + FSDP).

No new worker class and no hand-made training loop: the PRM is a `RayWorkerGroup` of veRL's
`TrainingWorker` (workers/engine_workers.py), placed on the actor's resource pool, so it shards,
offloads (`prime.prm.engine.param_offload/optimizer_offload`) and checkpoints like veRL's critic.
PRIME supplies its loss (`prm_loss`, which runs inside the workers) and, here, on the trainer's side:

* `build_prm_worker_config` — `prime.prm.*` → `TrainingWorkerConfig` (fp32 master weights,
  bf16 compute by default, the PRM's own lr/scheduler/clip/micro-batch knobs): its `model`, `engine`,
  `optim` and `checkpoint` sections become veRL's own config dataclasses, the batch knobs come from
  the typed `config.prime.PrmConfig`;
* `ImplicitPRM` — the handle the PRIME step uses: log-probs (with or without the LoRA adapter), one update
  over the batch, save/load; built from the trainer's `RunConfig`. Data travels through TransferQueue exactly
  as for veRL's critic (`trainer_base.py`);
* `assemble_captured_log_probs` — the update's pre-update log-probs, put back in row order from what
  `prm_loss` captured.

Both PRM and reference log-probs are computed at temperature 1.0 (the PRM is a likelihood model,
not a sampler; veRL divides logits by the rollout temperature only when asked, so we always pass 1.0).
"""

from __future__ import annotations

import logging
import os
from functools import partial
from typing import Any

import torch
from omegaconf import OmegaConf, open_dict

from verl_prime_lora.config import RunConfig
from verl_prime_lora.config.prime import PrmConfig
from verl_prime_lora.config.run import PRM_TEMPERATURE, prm_is_lora
from verl_prime_lora.config.verl_view import PrmView
from verl_prime_lora.prime.prm_loss import CAPTURED_LOG_PROBS, prm_loss

logger = logging.getLogger(__name__)


def build_prm_worker_config(prm_view: PrmView, prm: PrmConfig, total_training_steps: int, forward_only: bool = False):
    """`prime.prm` → veRL `TrainingWorkerConfig` for the PRM (or, `forward_only`, its frozen reference): veRL's
    sections from the node `prm_view` holds, the batch knobs from `prm`, the typed `prime.prm`."""
    from verl.trainer.config import CheckpointConfig
    from verl.utils.config import omega_conf_to_dataclass
    from verl.workers.config import TrainingWorkerConfig

    prm_cfg = OmegaConf.create(OmegaConf.to_container(prm_view.node, resolve=True))
    with open_dict(prm_cfg):
        prm_cfg.optim.total_training_steps = int(total_training_steps)
        if prm_cfg.optim.get("clip_grad") is None:
            prm_cfg.optim.clip_grad = 1.0
        prm_cfg.engine.forward_only = bool(forward_only)
        if forward_only:  # the frozen reference of a full-parameter PRM: never LoRA, never trained
            prm_cfg.model.lora_rank = 0
            prm_cfg.model.lora_adapter_path = None

    model_config = omega_conf_to_dataclass(prm_cfg.model)
    engine_config = omega_conf_to_dataclass(prm_cfg.engine)
    optimizer_config = omega_conf_to_dataclass(prm_cfg.optim)
    checkpoint_config = omega_conf_to_dataclass(prm_cfg.checkpoint, dataclass_type=CheckpointConfig)

    engine_config.use_dynamic_bsz = prm.use_dynamic_bsz
    engine_config.micro_batch_size_per_gpu = prm.micro_batch_size_per_gpu
    engine_config.infer_micro_batch_size_per_gpu = prm.infer_micro_batch_size_per_gpu
    engine_config.max_token_len_per_gpu = prm.max_token_len_per_gpu
    engine_config.infer_max_token_len_per_gpu = prm.infer_max_token_len_per_gpu
    engine_config.use_remove_padding = prm_view.model.use_remove_padding

    return TrainingWorkerConfig(
        model_type="language_model",
        model_config=model_config,
        engine_config=engine_config,
        optimizer_config=optimizer_config,
        checkpoint_config=checkpoint_config,
    )


def _meta_for(batch, **extra_info):
    """A copy of the step's KVBatchMeta with its own extra_info and every TQ field (fields=None)."""
    from transfer_queue import KVBatchMeta

    info = dict(batch.extra_info or {})
    info.update(extra_info)
    return KVBatchMeta(
        keys=list(batch.keys), tags=batch.tags, partition_id=batch.partition_id, fields=None, extra_info=info
    )


def log_prob_meta(batch, no_lora_adapter: bool):
    """The step's batch as a log-prob request at temperature 1 (no loss, no entropy), adapter on/off."""
    return _meta_for(
        batch,
        compute_loss=False,
        calculate_entropy=False,
        temperature=PRM_TEMPERATURE,
        no_lora_adapter=bool(no_lora_adapter),
    )


def read_response_log_probs(batch) -> torch.Tensor:
    """The `log_probs` a worker just wrote to TQ, cut to the response (nested, like old_log_probs)."""
    import transfer_queue as tq
    from verl.workers.utils.padding import response_from_nested

    data = tq.kv_batch_get(
        keys=batch.keys, partition_id=batch.partition_id, select_fields=["log_probs", "response_mask"]
    )
    return response_from_nested(data["log_probs"], data["response_mask"])


class ImplicitPRM:
    """The PRM worker group (and, for a full-parameter PRM whose reference cannot be borrowed, a
    frozen forward-only reference group) on one resource pool."""

    def __init__(
        self, run: RunConfig, resource_pool, device_name: str, total_training_steps: int, need_frozen_ref: bool
    ):
        import ray
        from verl.single_controller.ray import RayClassWithInitArgs, RayWorkerGroup
        from verl.workers.engine_workers import TrainingWorker

        self.prm = run.prime.prm
        self.rollout_n = run.verl.rollout.n
        self.is_lora = prm_is_lora(run.verl.prm.model)

        worker_cfg = build_prm_worker_config(run.verl.prm, self.prm, total_training_steps)
        self.wg = RayWorkerGroup(
            resource_pool=resource_pool,
            ray_cls_with_init=RayClassWithInitArgs(cls=ray.remote(TrainingWorker), config=worker_cfg),
            device_name=device_name,
        )
        self.wg.reset()
        self.wg.set_loss_fn(partial(prm_loss, beta=self.prm.beta))

        self.ref_wg = None
        if need_frozen_ref:
            ref_cfg = build_prm_worker_config(run.verl.prm, self.prm, total_training_steps, forward_only=True)
            self.ref_wg = RayWorkerGroup(
                resource_pool=resource_pool,
                ray_cls_with_init=RayClassWithInitArgs(cls=ray.remote(TrainingWorker), config=ref_cfg),
                device_name=device_name,
            )
            self.ref_wg.reset()
        logger.info("implicit PRM ready (lora=%s, frozen reference group=%s)", self.is_lora, need_frozen_ref)

    # -- forward -------------------------------------------------------------------------------

    def _infer(self, wg, batch, no_lora_adapter: bool) -> torch.Tensor:
        import ray

        output = wg.infer_batch(log_prob_meta(batch, no_lora_adapter))
        ray.get(output.futures)
        return read_response_log_probs(batch)

    def log_probs(self, batch) -> torch.Tensor:
        """log π_φ of the responses (nested (B, T_i)), temperature 1."""
        return self._infer(self.wg, batch, no_lora_adapter=False)

    def reference_log_probs(self, batch) -> torch.Tensor:
        """log π_ref with π_ref = the PRM's initial weights: adapter off (LoRA PRM) or the frozen group."""
        if self.is_lora:
            return self._infer(self.wg, batch, no_lora_adapter=True)
        if self.ref_wg is None:
            raise RuntimeError("full-parameter PRM without a frozen reference group")
        return self._infer(self.ref_wg, batch, no_lora_adapter=False)

    # -- update --------------------------------------------------------------------------------

    def update(self, batch, capture: bool = False) -> tuple[dict[str, float], Any]:
        """`prime.prm.epochs` passes of mini-batch updates over the batch: (veRL's reduced worker metrics, the
        log-probs of every forward as `prm_loss` captured them, for `assemble_captured_log_probs`, or None).
        With `capture`, the batch must hold `PRM_ROW_FIELD`."""
        from verl.utils.metric import reduce_metrics

        mini = self.prm.mini_batch_size * self.rollout_n
        meta = _meta_for(
            batch,
            global_batch_size=mini,
            mini_batch_size=mini,
            epochs=self.prm.epochs,
            seed=self.prm.seed,
            dataloader_kwargs={"shuffle": self.prm.shuffle},
            temperature=PRM_TEMPERATURE,
            calculate_entropy=False,
            no_lora_adapter=False,
            capture_log_probs=capture,
        )
        output = self.wg.train_mini_batch(meta).get()
        worker_metrics = dict(output["metrics"])
        captured = worker_metrics.pop(CAPTURED_LOG_PROBS, None)
        metrics = {}
        for key in ("loss", "grad_norm", "lr"):
            if key in worker_metrics:
                metrics[key] = worker_metrics[key]
        for key in ("perf/max_memory_allocated_gb", "perf/max_memory_reserved_gb"):
            if key in worker_metrics:
                metrics[key.replace("perf/", "")] = worker_metrics[key]
        return reduce_metrics(metrics), captured

    # -- checkpoints ---------------------------------------------------------------------------

    def save(self, local_path: str, remote_path: str | None, global_step: int, max_ckpt_to_keep: int | None) -> None:
        self.wg.save_checkpoint(local_path, remote_path, global_step, max_ckpt_to_keep=max_ckpt_to_keep)

    def load(self, local_path: str, del_local_after_load: bool = False) -> None:
        if not os.path.isdir(local_path):
            raise FileNotFoundError(
                f"trainer.resume_mode: the checkpoint being resumed has no PRM state at {local_path}; "
                "PRIME saves it with every veRL checkpoint (was this checkpoint written by a run without the PRM?)"
            )
        self.wg.load_checkpoint(local_path, del_local_after_load=del_local_after_load)


def _captured_pairs(value: Any):
    """The (row, log-probs) pairs inside the nested lists veRL builds from one metric (micro-batches, DP
    ranks, mini-batches: the nesting depends on the rank count)."""
    if isinstance(value, tuple):
        yield value
    elif value is not None:
        for item in value:
            yield from _captured_pairs(item)


def assemble_captured_log_probs(captured: Any, lengths: list[int], width: int) -> torch.Tensor:
    """(B, width) log-probs, row i from the first capture of row i (later epochs repeat the rows), zero padded.

    Every row with a response must have been captured: a missing one means veRL no longer runs each row
    through the loss once per epoch, and the pre-update log-probs cannot be taken from the update.
    """
    out = torch.zeros(len(lengths), width)
    seen = set()
    for row, values in _captured_pairs(captured):
        if row in seen:
            continue
        seen.add(row)
        if values.shape[0] != lengths[row]:
            raise RuntimeError(f"PRM update: row {row} has {lengths[row]} tokens, {values.shape[0]} captured")
        out[row, : min(width, lengths[row])] = values[:width]
    missing = [row for row, length in enumerate(lengths) if length > 0 and row not in seen]
    if missing:
        raise RuntimeError(
            f"PRM update: rows {missing[:8]} were not captured by the update's forward (veRL's TrainingWorker "
            "may have changed: tests/verl_surface/test_verl_canaries.py names what to re-read)"
        )
    return out
