"""The implicit PRM on veRL's own trainable worker (`TrainingWorker` + FSDP engine).

No new worker class and no hand-made training loop: the PRM is a `RayWorkerGroup` of veRL's
`TrainingWorker` (workers/engine_workers.py), placed on the actor's resource pool, so it shards,
offloads (`prime.prm.engine.param_offload/optimizer_offload`) and checkpoints like veRL's critic.
PRIME only supplies

* `prm_loss` — the loss function given to `TrainingWorker.set_loss_fn` (runs inside the worker):
  BCE-with-logits of z = β·Σ_t (log π_φ − log π_ref)·m against the 0/1 accuracy label, from
  `core_algos` (the math is not re-implemented here);
* `build_prm_worker_config` — `prime.prm.*` → `TrainingWorkerConfig` (fp32 master weights,
  bf16 compute by default, the PRM's own lr/scheduler/clip/micro-batch knobs): its `model`, `engine`,
  `optim` and `checkpoint` sections become veRL's own config dataclasses, the batch knobs come from
  the typed `config.prime.PrmConfig`;
* `ImplicitPRM` — the controller-side handle the trainer uses: log-probs (with or without the LoRA
  adapter), one update over the batch, save/load; built from the trainer's `RunConfig`. Data travels
  through TransferQueue exactly as for veRL's critic (`trainer_base.py`).

Both PRM and reference log-probs are computed at temperature 1.0 (the PRM is a likelihood model,
not a sampler; veRL divides logits by the rollout temperature only when asked, so we always pass 1.0).
"""

from __future__ import annotations

import json
import logging
import os
from functools import partial
from typing import Any

import torch
from omegaconf import OmegaConf, open_dict
from tensordict import TensorDict

from verl_prime_lora.algo.core_algos import prm_bce_loss, prm_sequence_logits
from verl_prime_lora.config import RunConfig
from verl_prime_lora.config.prime import PrmConfig
from verl_prime_lora.config.run import PRM_TEMPERATURE, prm_is_lora
from verl_prime_lora.config.verl_view import ModelView, PrmView
from verl_prime_lora.rewards.reward_info import label_unknown, reward_extra_info

logger = logging.getLogger(__name__)

# TransferQueue fields written by the PRIME trainer for the PRM (per response token, nested).
PRM_REF_FIELD = "prm_ref_log_prob"  # reference log-probs at temperature 1
PRM_LABEL_FIELD = "prm_label"  # the 0/1 accuracy label, repeated over the response tokens
PRM_WEIGHT_FIELD = (
    "prm_label_weight"  # the row's loss weight (core_algos.balanced_label_weights, or 1), repeated likewise
)
PRM_ROW_FIELD = "prm_row"  # the row's index in the step's batch, repeated likewise (to place captured log-probs)
# prm_loss's metric carrying the log-probs of its forward, when the update is asked to capture them
CAPTURED_LOG_PROBS = "prm_captured_log_probs"


# ---------------------------------------------------------------------------------------------
# the loss (runs inside the TrainingWorker)
# ---------------------------------------------------------------------------------------------


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
            "may have changed: tests/test_verl_canaries.py names what to re-read)"
        )
    return out


def update_forward_is_pre_update(prm: PrmConfig, dropout: float, batch_rows: int, n: int, fp32_compute: bool) -> bool:
    """Whether the PRM update's first forward of each row gives exactly the pre-update log-probs.

    It does when the whole batch is one mini-batch (no optimizer step before any row's first forward), and
    the training forward computes what the log-prob forward does: no dropout anywhere in the PRM
    (`dropout`: `model_dropout`, the model's and, for a LoRA PRM, its adapter's) and, outside fp32 compute
    (`fp32_compute`: the PRM's `engine.mixed_precision.param_dtype`), the same fixed micro-batches in both, as
    bf16 results depend on the shapes a kernel is given (measured on CPU in bf16: up to 0.027 nats apart with
    micro-batches of 2 and 8, bit-equal with 8 and 8; docs/findings.md, "The compute precision"). A LoRA PRM
    also needs one forward with its adapter on before its first reference forward (see the trainer's step 1),
    so the trainer makes its process's first step with a forward of its own.
    """
    same_shapes = fp32_compute or (
        not prm.use_dynamic_bsz and prm.micro_batch_size_per_gpu == prm.infer_micro_batch_size_per_gpu
    )
    return prm.update != "none" and dropout == 0 and batch_rows == prm.mini_batch_size * n and same_shapes


# ---------------------------------------------------------------------------------------------
# config
# ---------------------------------------------------------------------------------------------


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


def model_dropout(model: ModelView) -> float:
    """The largest dropout probability in the PRM (`model`: its `prime.prm.model`): a `*dropout*` or `*_pdrop`
    number of its Hugging Face config (with `override_config`), and for a LoRA PRM its adapter's (`model.lora.dropout`,
    which `integration.patches.install_lora_dropout` applies, else the `lora_dropout` of the adapter loaded from
    `lora_adapter_path`). 1.0 when a config cannot be read here (then nothing counts on 0)."""
    from transformers import AutoConfig

    try:
        hf_config = AutoConfig.from_pretrained(str(model.path), trust_remote_code=model.trust_remote_code)
    except (OSError, ValueError) as exc:
        logger.info("PRM: cannot read %s's config (%s); its dropout is taken as unknown", model.path, exc)
        return 1.0
    values = {**hf_config.to_dict(), **OmegaConf.to_container(model.override_config or OmegaConf.create())}
    base = max(
        (
            float(value)
            for key, value in values.items()
            if ("dropout" in key or key.endswith("_pdrop"))
            and isinstance(value, (int, float))
            and not isinstance(value, bool)
        ),
        default=0.0,
    )
    adapter = model.lora_dropout
    if adapter == 0 and model.lora_adapter_path is not None:
        adapter = saved_adapter_dropout(str(model.lora_adapter_path))
    return max(base, adapter)


def saved_adapter_dropout(adapter_path: str) -> float:
    """`lora_dropout` of a saved peft adapter (its `adapter_config.json`); 1.0 when it cannot be read here."""
    try:
        with open(os.path.join(adapter_path, "adapter_config.json")) as f:
            return float(json.load(f).get("lora_dropout") or 0.0)
    except (OSError, ValueError) as exc:
        logger.info("PRM: cannot read %s/adapter_config.json (%s); its dropout is taken as unknown", adapter_path, exc)
        return 1.0


# ---------------------------------------------------------------------------------------------
# the controller-side handle
# ---------------------------------------------------------------------------------------------


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


def unlabelled_rows(is_padding: list[bool], failed_rows: list[bool], extra_fields: list[Any]) -> list[bool]:
    """Rows the PRM has no label for: veRL's padding rows, rows whose reward function raised, and rows whose
    reward function could not decide the outcome (`reward_info.label_unknown`: a verifier timeout, an
    unusable ground truth), whose 0 says nothing about the response."""
    return [
        pad or failed or label_unknown(fields)
        for pad, failed, fields in zip(is_padding, failed_rows, extra_fields, strict=True)
    ]


def labels_from_extra_fields(extra_fields: list[Any], unlabelled: list[bool], label_key: str) -> torch.Tensor:
    """The PRM label per row: `reward_extra_info[label_key]` (the 0/1 accuracy), 0 on `unlabelled` rows
    (`unlabelled_rows`: their weight in the PRM loss is 0)."""
    labels = []
    for i, (fields, skip) in enumerate(zip(extra_fields, unlabelled, strict=True)):
        if skip:
            labels.append(0.0)
            continue
        info = reward_extra_info(fields)
        if label_key not in info:
            raise KeyError(
                f"prime.prm.label_key: row {i} has no reward_extra_info[{label_key!r}] (keys: {sorted(info)}); "
                "the reward function must return the outcome accuracy under this key "
                "(reward.custom_reward_function.path=pkg://verl_prime_lora.rewards.math_format returns `acc`)."
            )
        labels.append(float(info[label_key]))
    return torch.tensor(labels, dtype=torch.float32)


# reward_extra_info key of the outcome accuracy, as veRL's validation reads it (`val-core/<source>/acc`)
OUTCOME_KEY = "acc"


def outcome_labels(extra_fields: list[Any], unlabelled: list[bool], labels: torch.Tensor) -> torch.Tensor:
    """The outcome per row that the PRM's rankings are measured against: `reward_extra_info["acc"]` where every
    labelled row has it, else the PRM's own labels. With the default `prime.prm.label_key=acc` the two are one;
    with another label key the rankings (and the gate and the alarm that read them) still ask whether the PRM
    orders right answers above wrong ones."""
    infos = [reward_extra_info(fields) for fields, skip in zip(extra_fields, unlabelled, strict=True) if not skip]
    if not all(OUTCOME_KEY in info for info in infos):
        return labels
    return labels_from_extra_fields(extra_fields, unlabelled, OUTCOME_KEY)


def labelled_rows(lengths: list[int], unlabelled: list[bool]) -> torch.Tensor:
    """(B,) 1.0 for the rows the PRM trains on and is measured on (a response and a label), else 0.0."""
    return torch.tensor([float(n > 0 and not skip) for n, skip in zip(lengths, unlabelled, strict=True)])


def nested_rows(values: torch.Tensor, lengths: list[int]) -> torch.Tensor:
    """Nested (B, T_i) tensor with row i = values[i] repeated over T_i tokens (or `values` (B,T) cut)."""
    rows = []
    for i, length in enumerate(lengths):
        rows.append(values[i].expand(length).clone() if values.dim() == 1 else values[i, :length])
    return torch.nested.as_nested_tensor(rows, layout=torch.jagged)
