"""PRIME trainers for veRL 0.9.1's V1 loop, registered with `@register_trainer`.

* `prime_sync` — veRL's `sync` trainer (actor, vLLM and PRM colocated; one or more GPUs).
* `prime_separate_async` — veRL's `separate_async` trainer; with `actor_rollout_ref.hybrid_engine=false`
  the actor and the PRM train on the trainer pool (GPU 0) and vLLM serves from its own GPU (GPU 1).

Each is the veRL trainer plus `PrimeTrainerMixin`, which overrides only private hooks of
`PPOTrainer` (verl/trainer/ppo/v1/trainer_base.py):

* `_load_checkpoint` (called at the end of `_setup`, once every pool exists): builds the
  PRM worker group on the actor's pool, then veRL's resume, then the PRM's resume from
  `global_step_N/prm`.
* `_save_checkpoint`: the PRM (weights, optimizer, scheduler, via veRL's FSDP checkpoint
  manager) into `global_step_N/prm` first, then veRL's own save, whose tracker file
  `latest_checkpointed_iteration.txt` is written last — a checkpoint is never marked complete
  without its PRM — and only then old checkpoints removed (`checkpoint_files`).
* `_compute_advantage` (runs after old/ref log-probs, before the actor update):
  reference log-probs → labels → PRM forward → PRM update (`prime.prm.update`) → token process
  rewards → the estimator named by `algorithm.adv_estimator`, called with `process_rewards`.

The veRL mode name (`sync` / `separate_async`) is what the base classes see as `self.trainer_mode`
(it selects the replay buffer, TQ checkpointing and `trainer.v1.<mode>.*`), so both PRIME trainers
behave exactly like the veRL trainer they extend apart from the hooks above.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass

import numpy as np
import torch
import transfer_queue as tq
from omegaconf import DictConfig
from tensordict import TensorDict
from verl.protocol import DataProto
from verl.trainer.ppo.core_algos import get_adv_estimator_fn
from verl.trainer.ppo.ray_trainer import apply_kl_penalty
from verl.trainer.ppo.rollout_corr_helper import compute_rollout_correction_and_add_to_batch
from verl.trainer.ppo.utils import Role
from verl.trainer.ppo.v1.trainer_base import register_trainer
from verl.trainer.ppo.v1.trainer_separate_async import PPOTrainerSeparateAsync
from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync
from verl.utils.debug import marked_timer
from verl.workers.utils.padding import response_to_nested

from verl_prime_lora.algo.core_algos import (
    GATE_EMA_DECAY,
    balanced_label_weights,
    ema,
    implicit_process_rewards,
    mean_token_log_ratio,
    prm_bce_loss,
    prm_classification_accuracy,
    prm_pairwise_accuracy,
    prm_ranking_z,
    prm_sequence_logits,
    process_gate_weight,
    process_group_spread,
)
from verl_prime_lora.checkpoint_folders import prime_state_file, prm_checkpoint_dir
from verl_prime_lora.checks.config_checks import compute_precision, step_batch_rows, validate_prime_config
from verl_prime_lora.config import RunConfig
from verl_prime_lora.config.prime import PrimeConfigError, PrmConfig, ProcessRewardsFn
from verl_prime_lora.config.run import (
    PRM_TEMPERATURE,
    REF_ACTOR_BASE,
    REF_ACTOR_REF,
    REF_FROZEN,
    REF_POLICY_OLD,
    REF_POLICY_T1,
    reference_source,
    resume_folder,
    reward_function_name,
)
from verl_prime_lora.config.verl_view import AlgorithmView, key_of
from verl_prime_lora.integration.checkpoint_files import (
    checkpoints_to_keep,
    no_space_left,
    remove_old_checkpoints,
    saving_without_removal,
    space_error,
)
from verl_prime_lora.integration.prm_alarm import PrmAlarm
from verl_prime_lora.integration.prm_worker import (
    PRM_LABEL_FIELD,
    PRM_REF_FIELD,
    PRM_ROW_FIELD,
    PRM_WEIGHT_FIELD,
    ImplicitPRM,
    assemble_captured_log_probs,
    labelled_rows,
    labels_from_extra_fields,
    log_prob_meta,
    model_dropout,
    nested_rows,
    outcome_labels,
    read_response_log_probs,
    unlabelled_rows,
    update_forward_is_pre_update,
)
from verl_prime_lora.integration.reward_failures import account_rollouts
from verl_prime_lora.integration.rollout_health import EngineMonitor, dead_replicas, engine_error
from verl_prime_lora.integration.step_guards import check_actor_update, check_finite, check_prm_update
from verl_prime_lora.integration.step_watchdog import StepWatchdog
from verl_prime_lora.rewards.reward_info import label_unknown, reward_extra_info

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class PrmPasses:
    """Passes over a step's batch that the PRM part of a PRIME step makes (each a whole-batch pass)."""

    prm_forward: int  # forward-only passes of the PRM
    prm_train: int  # forward + backward passes of the PRM (its update: one per epoch)
    reference_forward: int  # forwards for log π_ref outside veRL's own log-probs (PRM copy, adapter off, actor)

    def total(self) -> int:
        return self.prm_forward + self.prm_train + self.reference_forward


@dataclass
class StepRows:
    """What the accounting of a step's batch found, per row: the PRM label (0/1), whether the row is labelled (a
    response with a decided reward: the PRM trains and is measured on it), and the response length."""

    labels: torch.Tensor  # (B,)
    labelled: torch.Tensor  # (B,) 1.0 / 0.0
    lengths: list[int]
    reward_infos: list[dict]  # each row's reward_extra_info (for `prime.process_rewards_fn`)
    outcomes: torch.Tensor  # (B,) the outcome accuracy the rankings are measured against (`outcome_labels`)
    response_mask_nested: torch.Tensor | None = None  # veRL's nested response mask, for the write-back


def prm_passes(update: str, reference: str, epochs: int = 1, from_update: bool = False) -> tuple[PrmPasses, PrmPasses]:
    """(what a step makes, the minimum) for `prime.prm.update`, a `reference_source`, and whether the
    pre-update log-probs come `from_update` (`prm_worker.update_forward_is_pre_update`).

    A step makes: the PRM's pre-update log-probs (the `after` rewards, and `prm/dpo_acc_before`, the
    held-out ranking, in every mode) from a forward of their own unless `from_update`, `epochs`
    forward/backward passes unless `none`, one more forward after the update in `before` mode, and one
    reference forward unless veRL's ref/old log-probs are reused.
    Minimum: `after` = reference + the forward/backward passes (the first one's forward gives the
    pre-update log-probs); `before` = the same + one forward; `none` = reference + one forward. With
    `from_update` a step makes the minimum; without (several PRM mini-batches, dropout, or
    `prime.diagnostics`) one forward more. A LoRA PRM makes one forward more on the
    first step of a process only (the trainer's step 1).
    """
    reference_forward = 0 if reference in (REF_ACTOR_REF, REF_POLICY_OLD) else 1
    train = 0 if update == "none" else epochs
    today = PrmPasses((not from_update) + (update == "before"), train, reference_forward)
    minimum = PrmPasses({"none": 1, "after": 0, "before": 1}[update], train, reference_forward)
    return today, minimum


def pad_nested(nested: torch.Tensor, width: int) -> torch.Tensor:
    """(B, T_i) nested → (B, width) dense, zero padded."""
    rows = nested.unbind()
    out = torch.zeros(len(rows), width, dtype=rows[0].dtype if rows else torch.float32)
    for i, row in enumerate(rows):
        n = min(row.shape[0], width)
        out[i, :n] = row[:n]
    return out


class PrimeTrainerMixin:
    """The PRIME steps inside a veRL V1 trainer (see the module docstring)."""

    _BASE_MODE: str = ""

    # veRL's base classes read `self.trainer_mode` to decide replay buffer, TQ checkpointing and the
    # `trainer.v1.<mode>` section; they must see the mode this trainer extends.
    @property
    def trainer_mode(self) -> str:
        return self._BASE_MODE

    @trainer_mode.setter
    def trainer_mode(self, value: str) -> None:
        self.prime_trainer_mode = value

    def __init__(self, config: DictConfig):
        self.run: RunConfig = validate_prime_config(config)  # this process's one view of the run's configuration
        super().__init__(config)
        self.prm: ImplicitPRM | None = None
        self.prm_reference = reference_source(self.run.verl, self.run.prime.prm, self.use_reference_policy)
        self.prm_pairwise_ema = 0.5  # the process gate's input; chance level until the PRM has shown better
        advantage = self.run.advantage
        self.prm_alarm = PrmAlarm(
            str(self.run.verl.algorithm.adv_estimator), advantage.process_gate, advantage.process_std_threshold
        )
        self.watchdog = StepWatchdog()  # a step far past its usual time is logged with its phase

    # -------------------------------------------------------------------------------------------
    # setup and checkpoints
    # -------------------------------------------------------------------------------------------

    def _actor_role(self):
        for role in (Role.Actor, Role.ActorRolloutRef, Role.ActorRollout):
            if role in self.role_worker_mapping:
                return role
        raise RuntimeError("no actor role in role_worker_mapping")

    def _init_prm(self) -> None:
        pool = self.resource_pool_manager.get_resource_pool(self._actor_role())
        verl, prm = self.run.verl, self.run.prime.prm
        self.prm = ImplicitPRM(
            run=self.run,
            resource_pool=pool,
            device_name=verl.trainer.device,
            total_training_steps=self.total_training_steps,
            need_frozen_ref=self.prm_reference == REF_FROZEN,
        )
        self.prm_dropout = model_dropout(verl.prm.model)
        self.prm_fp32 = compute_precision(verl.prm.engine) == "fp32"
        self.prm_adapter_forwarded = False  # a LoRA PRM's first forward in this process (step 1 below) is done
        today, minimum = prm_passes(
            prm.update,
            self.prm_reference,
            prm.epochs,
            from_update=self._pre_update_from_update(step_batch_rows(verl)[0]) and not self.run.prime.diagnostics,
        )
        logger.info(
            "PRIME: PRM on the actor pool; reference=%s (%s), update=%s, beta=%s; passes per step %s (minimum %s)",
            prm.reference,
            self.prm_reference,
            prm.update,
            prm.beta,
            today,
            minimum,
        )

    def _pre_update_from_update(self, batch_rows: int) -> bool:
        n = self.run.verl.rollout.n
        return update_forward_is_pre_update(self.run.prime.prm, self.prm_dropout, batch_rows, n, self.prm_fp32)

    def _load_checkpoint(self):
        if self.prm is None:
            self._init_prm()
        super()._load_checkpoint()
        if self.global_steps > 0:
            folder = resume_folder(self.run.verl)
            if folder is not None:
                self._load_prime_state(prime_state_file(folder))
                path = prm_checkpoint_dir(folder)
                logger.info("PRIME: restoring the PRM from %s", path)
                self.prm.load(path, del_local_after_load=self.run.verl.trainer.del_local_ckpt_after_load)

    def _save_prime_state(self, path: str) -> None:
        """What the next step reads besides the weights: the process gate's running mean."""
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            json.dump({"prm_pairwise_ema": self.prm_pairwise_ema}, f)

    def _load_prime_state(self, path: str) -> None:
        if not os.path.exists(path):
            logger.warning("PRIME: %s is missing (a checkpoint older than the file); the gate restarts at 1/2", path)
            return
        with open(path) as f:
            state = json.load(f)
        self.prm_pairwise_ema = float(state["prm_pairwise_ema"])
        logger.info("PRIME: restored %s from %s", state, path)

    def _save_checkpoint(self):
        """The PRM and the gate's state into `global_step_N`, then veRL's own save, which publishes the step in its
        tracker last; nothing is removed before that, and then the step folders beyond `max_actor_ckpt_to_keep`
        (`checkpoint_files`). Out of disk: `CheckpointSpaceError`, the previous checkpoint still published."""
        trainer = self.run.verl.trainer
        step_dir = f"global_step_{self.global_steps}"
        local = prm_checkpoint_dir(os.path.join(trainer.default_local_dir, step_dir))
        remote = (
            None
            if trainer.default_hdfs_dir is None
            else prm_checkpoint_dir(os.path.join(trainer.default_hdfs_dir, step_dir))
        )
        keep = checkpoints_to_keep(trainer)
        self.watchdog.enter(
            "the checkpoint save", f"the PRM's and the actor's workers writing to {trainer.default_local_dir}"
        )
        try:
            with saving_without_removal(trainer):
                with marked_timer("prm_save_checkpoint", getattr(self, "timing_raw", {})):
                    self.prm.save(local, remote, self.global_steps, max_ckpt_to_keep=None)
                self._save_prime_state(prime_state_file(os.path.join(trainer.default_local_dir, step_dir)))
                super()._save_checkpoint()
        except Exception as exc:
            if no_space_left(exc):
                raise space_error(trainer.default_local_dir, self.global_steps, exc) from exc
            raise
        if self.run.verl.actor.async_save:
            return  # veRL publishes an async save later: nothing is removed before it does
        for folder in remove_old_checkpoints(trainer.default_local_dir, keep, self.global_steps):
            logger.info(
                "PRIME: removed %s (trainer.max_actor_ckpt_to_keep=%s), step %d published",
                folder,
                keep,
                self.global_steps,
            )

    # -------------------------------------------------------------------------------------------
    # the step's phases, for the watchdog (each hook runs veRL's own)
    # -------------------------------------------------------------------------------------------

    def fit(self, *args, **kwargs):
        """veRL's training loop, stopped when a vLLM engine dies; such a stop says so (`rollout_health`)."""
        monitor = EngineMonitor(self._rollout_server_addresses)
        monitor.start()
        try:
            return super().fit(*args, **kwargs)
        except BaseException as exc:
            monitor.stop()
            dead = monitor.dead or dead_replicas(self._rollout_server_addresses())
            if dead:
                raise engine_error(dead, self.global_steps, exc) from exc
            raise
        finally:
            monitor.stop()

    def _rollout_server_addresses(self) -> list[str]:
        """The HTTP addresses of every vLLM replica of the run (colocated, and the split trainer's standalone ones)."""
        managers = (getattr(self, "llm_server_manager", None), getattr(self, "standalone_server_manager", None))
        return [address for manager in managers if manager is not None for address in manager.server_addresses]

    def init(self):
        """veRL's set-up, watched like a step: a stall before step 1 (a worker or a vLLM replica that never comes up,
        a first weight sync that hangs) is named past `step_watchdog.FLOOR_S`."""
        self.watchdog.start()
        self.watchdog.begin_setup(
            "building the worker groups and the vLLM replicas", "Ray actors loading the models and starting vLLM"
        )
        super().init()

    def on_init_end(self):
        self.watchdog.enter(
            "the first weight sync", "the checkpoint engine shipping the actor's weights to the vLLM replicas"
        )
        super().on_init_end()
        self.watchdog.end_setup()

    def on_train_begin(self):
        super().on_train_begin()
        self.watchdog.start()

    def on_train_end(self):
        self.watchdog.stop()
        super().on_train_end()

    def on_step_begin(self):
        self.watchdog.begin_step(self.global_steps)
        super().on_step_begin()

    def on_sample_begin(self):
        self.watchdog.enter(
            "sampling",
            "rollouts from the vLLM replicas and their rewards from the reward-loop workers "
            f"({reward_function_name(self.run.verl)}; a reward call past prime.reward_timeout_s counts as failed)",
        )
        super().on_sample_begin()

    def _compute_old_log_prob(self, batch, *args, **kwargs):
        self.watchdog.enter("old log-probs", "the actor worker group")
        return super()._compute_old_log_prob(batch, *args, **kwargs)

    def _compute_ref_log_prob(self, batch, *args, **kwargs):
        self.watchdog.enter("reference log-probs", "the actor worker group (adapter off) or veRL's reference")
        return super()._compute_ref_log_prob(batch, *args, **kwargs)

    def on_step_end(self):
        self.watchdog.enter("the step's end", "the weight sync to the vLLM replicas")
        super().on_step_end()
        self.watchdog.end_step()

    # -------------------------------------------------------------------------------------------
    # the PRIME step
    # -------------------------------------------------------------------------------------------

    def _actor_log_probs_t1(self, batch, no_lora_adapter: bool) -> torch.Tensor:
        self.actor_rollout_wg.compute_log_prob(log_prob_meta(batch, no_lora_adapter))
        return read_response_log_probs(batch)

    def _prm_reference_log_probs(self, batch) -> torch.Tensor:
        source = self.prm_reference
        if source in (REF_ACTOR_REF, REF_POLICY_OLD):
            field = "ref_log_prob" if source == REF_ACTOR_REF else "old_log_probs"
            return tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id, select_fields=[field])[field]
        if source == REF_ACTOR_BASE:
            return self._actor_log_probs_t1(batch, no_lora_adapter=True)
        if source == REF_POLICY_T1:
            return self._actor_log_probs_t1(batch, no_lora_adapter=False)
        return self.prm.reference_log_probs(batch)

    def _policy_log_probs_t1(self, data: DataProto) -> torch.Tensor | None:
        """veRL's old log-probs when they are the rollout policy's at temperature 1 and the PRM's reference is not
        the policy itself (then they would equal it): for the `prm/policy_dpo_acc_mixed` diagnostic."""
        if self.prm_reference in (REF_POLICY_OLD, REF_POLICY_T1) or "old_log_probs" not in data.batch.keys():
            return None
        if self.run.verl.rollout.temperature != PRM_TEMPERATURE:
            return None
        return data.batch["old_log_probs"].float()

    def _update_actor(self, batch, metrics: dict):
        """veRL's actor update, then its loss and grad norm checked finite (`step_guards.check_actor_update`)."""
        self.watchdog.enter("the actor update", "the actor worker group")
        batch = super()._update_actor(batch, metrics)
        check_actor_update(metrics, self.global_steps)
        return batch

    def _compute_advantage(self, batch, metrics: dict):
        """veRL's advantage hook: the batch's accounting, the PRM step (process rewards), then the advantages."""
        self.watchdog.enter("the PRM step", "the PRM worker group (log-probs, update) and its reference's forward")
        step = self._account_batch(batch, metrics)
        data, process_rewards = self._prm_step(batch, step, metrics)
        return self._advantage_step(batch, data, step, process_rewards, metrics)

    def _account_batch(self, batch, metrics: dict) -> StepRows:
        """Failed and dropped rollouts counted (and the stop above `prime.max_failed_rollout_ratio`), multi-output
        sessions refused: a failed or refused batch stops here, before any PRM or reference forward."""
        info = tq.kv_batch_get(
            keys=batch.keys, partition_id=batch.partition_id, select_fields=["extra_fields", "response_mask"]
        )
        is_padding = [bool(tag.get("is_padding", False)) for tag in batch.tags]
        extra_fields = list(info["extra_fields"])
        verl = self.run.verl
        expected_prompts = verl.data.train_batch_size // self.parameter_sync_step
        account = account_rollouts(batch.keys, is_padding, extra_fields, verl.rollout.n, expected_prompts)
        metrics.update(account.metrics())
        account.check(self.run.prime.max_failed_rollout_ratio, self.global_steps, reward_function_name(verl))
        refuse_multi_output_sessions(batch.keys, is_padding)
        # a row whose reward failed, or whose outcome the reward could not decide (reward_info.label_unknown),
        # has no label: the PRM skips it (weight 0, no prm/* metric), as a padding row
        unlabelled = unlabelled_rows(is_padding, account.failed_rows, extra_fields)
        metrics["prm/label_unknown_total"] = float(
            sum(label_unknown(fields) and not pad for fields, pad in zip(extra_fields, is_padding, strict=True))
        )
        lengths = info["response_mask"].offsets().diff().tolist()
        labels = labels_from_extra_fields(extra_fields, unlabelled, self.run.prime.prm.label_key)
        return StepRows(
            labels=labels,
            labelled=labelled_rows(lengths, unlabelled),
            lengths=lengths,
            reward_infos=[reward_extra_info(fields) for fields in extra_fields],
            outcomes=outcome_labels(extra_fields, unlabelled, labels),
        )

    def _prm_step(self, batch, step: StepRows, metrics: dict) -> tuple[DataProto, torch.Tensor]:
        """The PRM's part of a step: its log-probs before the update, the reference's, the update
        (`prime.prm.update`), and the token process rewards r = β·(log π_φ − log π_ref)·m with the `prm/*`
        metrics. A NaN/inf update loss or grad norm, or process reward on a response token, stops the run
        (`step_guards`). Returns veRL's step data (padded) and the process rewards (B, T)."""
        timing = getattr(self, "timing_raw", {})
        prime = self.run.prime
        # 1. the PRM's log-probs before this step's update: from the update's own first forward where that is
        # exact (prm_worker.update_forward_is_pre_update), else from a forward of their own, made here. It comes
        # before the reference on purpose: FSDP2 fixes a parameter's mixed-precision dtypes at its first
        # forward, and a LoRA PRM's reference forward disables the adapter (peft sets requires_grad=False on
        # it), so a first forward in that state would leave bf16 gradients for fp32 adapter weights. A LoRA
        # PRM therefore makes its process's first step with a forward of its own, whatever the mode.
        first_lora_forward = self.prm.is_lora and not self.prm_adapter_forwarded
        capture = self._pre_update_from_update(len(batch)) and not first_lora_forward
        self.prm_adapter_forwarded = True
        metrics["prm/pre_update_from_update"] = float(capture and not prime.diagnostics)
        prm_lp = None
        if not capture or prime.diagnostics:
            with marked_timer("prm_forward", timing):
                prm_lp = self.prm.log_probs(batch)

        # 2. reference log-probs, labels and loss weights for the PRM, into TQ (the PRM worker reads them there)
        with marked_timer("prm_ref", timing):
            ref_lp = self._prm_reference_log_probs(batch)
        labelled = step.labelled[:, None]
        weights = balanced_label_weights(step.labels, labelled) if prime.prm.balance_labels else step.labelled
        prm_fields = {
            PRM_REF_FIELD: ref_lp,
            PRM_LABEL_FIELD: nested_rows(step.labels, step.lengths),
            PRM_WEIGHT_FIELD: nested_rows(weights, step.lengths),
        }
        if capture:
            rows = torch.arange(len(step.lengths), dtype=torch.float32)
            prm_fields[PRM_ROW_FIELD] = nested_rows(rows, step.lengths)
        tq.kv_batch_put(
            keys=batch.keys, partition_id=batch.partition_id, fields=TensorDict(prm_fields, batch_size=len(batch))
        )

        fields = ["uid", "response_mask", "rm_scores", "rollout_log_probs", "old_log_probs", "ref_log_prob"]
        if self.run.process_rewards_fn is not None:
            fields.append("responses")
        data = tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id, select_fields=fields)
        step.response_mask_nested = data["response_mask"]
        data = DataProto(batch=data.to_padded_tensor())
        data.non_tensor_batch["uid"] = np.array(data.batch.pop("uid").tolist(), dtype=object)
        mask = data.batch["response_mask"].float()
        width = mask.shape[-1]
        ref_pad = pad_nested(ref_lp, width).float()

        # 3. the PRM update per mode (the pre-update log-probs from its first forward when `capture`);
        # `before` recomputes the rewards with the updated PRM
        prm_before = None if prm_lp is None else pad_nested(prm_lp, width).float()
        prm_used, update_metrics = None, {}
        if prime.prm.update != "none":
            with marked_timer("prm_update", timing):
                update_metrics, captured = self.prm.update(batch, capture=capture)
            check_prm_update(update_metrics, self.global_steps)
            if capture:
                from_update = assemble_captured_log_probs(captured, step.lengths, width)
                if prm_before is None:
                    prm_before = from_update
                else:  # `prime.diagnostics`: the separate forward's are used
                    gap = ((from_update - prm_before).abs() * mask).max()
                    metrics["prm/pre_update_log_prob_max_abs_diff"] = gap.item()
            if prime.prm.update == "before":
                with marked_timer("prm_forward_updated", timing):
                    prm_used = pad_nested(self.prm.log_probs(batch), width).float()
        if prm_used is None:
            prm_used = prm_before

        # 4. token process rewards and the PRM metrics
        uid = data.non_tensor_batch["uid"]
        process_rewards, prm_metrics = prm_rewards_and_metrics(
            prm_before,
            prm_used,
            ref_pad,
            mask,
            step.labels,
            uid,
            prime.prm.beta,
            update_metrics,
            step.labelled,
            outcomes=step.outcomes,
        )
        check_finite(
            PrmConfig.KEY,
            "token process rewards β·(log π_φ − log π_ref)",
            process_rewards,
            mask,
            self.global_steps,
            "Look for NaN/inf in the PRM's log-probs or in its reference's (prime.prm.reference).",
        )
        if self.run.process_rewards_fn is not None:
            process_rewards = self._replaced_process_rewards(data, step, process_rewards, mask)
        prm_metrics.update(
            process_spread_metrics(
                process_rewards, mask, uid, self.run.advantage, str(self.run.verl.algorithm.adv_estimator)
            )
        )
        if prime.diagnostics:
            policy = self._policy_log_probs_t1(data)
            prm_metrics.update(
                prm_diagnostics(prm_used, ref_pad, mask, step.outcomes, uid, prime.prm.beta, step.labelled, policy)
            )
        metrics.update(prm_metrics)
        return data, process_rewards

    def _replaced_process_rewards(self, data: DataProto, step: StepRows, process_rewards, mask) -> torch.Tensor:
        """`prime.process_rewards_fn`'s token rewards in place of the PRM's (its contract: `ProcessRewardsFn`),
        masked, and checked for shape and finiteness before any advantage reads them."""
        key = ProcessRewardsFn.KEY
        replaced = self.run.process_rewards_fn(
            process_rewards=process_rewards.clone(),
            response_mask=mask,
            responses=data.batch["responses"],
            reward_infos=step.reward_infos,
            tokenizer=self.tokenizer,
        )
        if not isinstance(replaced, torch.Tensor) or replaced.shape != process_rewards.shape:
            got = tuple(replaced.shape) if isinstance(replaced, torch.Tensor) else type(replaced).__name__
            raise PrimeConfigError(
                f"{key}: {self.run.prime.process_rewards_fn.name} returned {got}; expected a tensor of shape "
                f"{tuple(process_rewards.shape)} (one reward per response token)."
            )
        check_finite(key, "replaced token process rewards", replaced, mask, self.global_steps, "Fix the function.")
        # padding is set, not multiplied, to 0: a NaN there would reach the response's suffix sums
        return torch.where(mask > 0, replaced.to(process_rewards.dtype), 0.0)

    def _advantage_step(self, batch, data: DataProto, step: StepRows, process_rewards: torch.Tensor, metrics: dict):
        """veRL's own pre-processing (trainer_base.py: KL in reward, rollout correction), the process
        gate, the estimator named by `algorithm.adv_estimator`, and the write-back of exactly the fields veRL's
        `_compute_advantage` writes (trainer_base.py); advantages or returns that are NaN/inf on a
        response token stop the run before the write-back (`step_guards.check_finite`)."""
        data.batch["token_level_scores"] = data.batch["rm_scores"]
        algorithm = self.run.verl.algorithm
        if algorithm.use_kl_in_reward:
            data, kl_metrics = apply_kl_penalty(data, kl_ctrl=self.kl_ctrl_in_reward, kl_penalty=algorithm.kl_penalty)
            metrics.update(kl_metrics)
        else:
            data.batch["token_level_rewards"] = data.batch["token_level_scores"]
        rollout_correction = (
            algorithm.rollout_correction is not None and "rollout_log_probs" in data.batch and not algorithm.bypass_mode
        )
        if rollout_correction:
            data, is_metrics = compute_rollout_correction_and_add_to_batch(data, algorithm.rollout_correction)
            metrics.update(is_metrics)

        # the gate reads a running mean: one step holds only a few mixed groups, too few pairs to trust alone
        self.prm_pairwise_ema = ema(self.prm_pairwise_ema, metrics["prm/dpo_acc_before_mixed"], GATE_EMA_DECAY)
        gate = process_gate_weight(self.prm_pairwise_ema, self.run.advantage.process_gate)
        metrics["prm/dpo_acc_before_mixed_ema"] = self.prm_pairwise_ema
        metrics["prm/process_gate"] = gate
        alerts, warnings = self.prm_alarm.check(metrics)
        metrics.update(alerts)
        for warning in warnings:
            logger.warning(warning)
        advantage_inputs = (
            algorithm,
            data.batch["token_level_rewards"],
            data.batch["response_mask"],
            data.non_tensor_batch["uid"],
            process_rewards,
        )
        data.batch["advantages"], data.batch["returns"] = prime_advantages(*advantage_inputs, process_scale=gate)
        _, outcome_returns = prime_advantages(*advantage_inputs, process_scale=0.0)
        metrics.update(advantage_part_metrics(data.batch["returns"], outcome_returns, data.batch["response_mask"]))
        for field in ("advantages", "returns"):
            check_finite(
                key_of(algorithm, "adv_estimator"),
                f"{field} of {algorithm.adv_estimator}",
                data.batch[field],
                data.batch["response_mask"],
                self.global_steps,
                "Its inputs: the token-level rewards (finite when scored through the PRIME reward guard), the "
                "process rewards (checked at the PRM step), the KL penalty in the reward "
                "(algorithm.use_kl_in_reward) and algorithm.prime.*.",
            )

        out_fields = ["advantages", "returns"]
        if algorithm.use_kl_in_reward:
            out_fields.append("token_level_rewards")
        if rollout_correction:
            out_fields.append("response_mask")
            if "rollout_is_weights" in data.batch:
                out_fields.append("rollout_is_weights")
        output = {f: response_to_nested(data.batch[f], step.response_mask_nested) for f in out_fields}
        return tq.kv_batch_put(
            keys=batch.keys, partition_id=batch.partition_id, fields=TensorDict(output, batch_size=len(batch))
        )


def refuse_multi_output_sessions(keys, is_padding) -> None:
    """Stop (before any update) on agent loops that return several outputs per session.

    veRL's keys are `{uid}_{session}_{index}`; index > 0 means a session produced several trajectories
    (e.g. one per turn), which veRL's own GRPO scores by each session's final output and broadcasts
    (`compute_advantage_for_multi_trajectories`). PRIME's estimators and PRM would instead treat every
    output as a response of its own in the prompt's group, so such runs are refused, not mis-trained.
    Loops annotated to return a list are refused before Ray (`checks.inputs.agent_loops`); this
    catches the others at their first step.
    """
    for key, pad in zip(keys, is_padding, strict=True):
        if not pad and int(key.rsplit("_", 2)[2]) > 0:
            raise NotImplementedError(
                f"trainer.v1.trainer_mode: PRIME trainers take one output per session, but the agent loop "
                f"returned several (trajectory key {key!r}); multi-output sessions are not supported by "
                "prime_sync / prime_separate_async: use an agent loop that returns the whole session as one "
                "response (multi-turn with a response mask is fine), or veRL's own trainer with grpo."
            )


def prm_rewards_and_metrics(
    prm_before, prm_used, ref, mask, labels, uid, beta, update_metrics=None, labelled=None, outcomes=None
):
    """Process rewards from the PRM log-probs used for the advantage, and the `prm/*` metrics.

    `prm_before`: PRM log-probs before this step's update (classification accuracy, CE loss and
    `dpo_acc_before` are measured on them: responses the PRM has not trained on); `prm_used`: the ones the
    rewards come from (after the update in `before` mode, the same tensor otherwise). All (B, T) padded;
    rows with an empty mask (veRL's padding rows) count nowhere; groups are the `uid`s, whatever the row
    order. `labelled` (B,): 0 for rows without a PRM label (their reward failed): they get process rewards
    but count in no metric. `*_mixed`: over the groups holding a right and a wrong answer only.
    `prm/ranking_z[_before]`: the ranking's distance from chance in standard errors (`core_algos.prm_ranking_z`).
    The loss and classification accuracy are measured against the PRM's `labels`; the rankings (`dpo_acc*`,
    `ranking_z*`) against `outcomes` (B,), the outcome accuracy (`prm_worker.outcome_labels`; default `labels`).
    """
    outcomes = labels if outcomes is None else outcomes
    label_mask = mask if labelled is None else mask * labelled.to(mask.dtype)[:, None]
    logits_before = prm_sequence_logits(prm_before, ref, label_mask, beta)
    metrics = {
        "prm/ce_loss": prm_bce_loss(logits_before, labels, label_mask).item(),
        "prm/classification_acc": prm_classification_accuracy(logits_before, labels, label_mask).item(),
        "prm/dpo_acc_before": prm_pairwise_accuracy(logits_before, outcomes, uid, label_mask).item(),
        "prm/dpo_acc_before_mixed": prm_pairwise_accuracy(
            logits_before, outcomes, uid, label_mask, mixed_only=True
        ).item(),
        "prm/ranking_z_before": prm_ranking_z(logits_before, outcomes, uid, label_mask).item(),
    }
    for key, value in (update_metrics or {}).items():
        name = "update_loss" if key == "loss" else key  # the worker's mean BCE over the update's mini-batches
        metrics[f"prm/{name}"] = value
    process_rewards = implicit_process_rewards(prm_used, ref, mask, beta)
    used_logits = process_rewards.sum(-1)
    metrics["prm/dpo_acc"] = prm_pairwise_accuracy(used_logits, outcomes, uid, label_mask).item()
    metrics["prm/dpo_acc_mixed"] = prm_pairwise_accuracy(used_logits, outcomes, uid, label_mask, mixed_only=True).item()
    metrics["prm/ranking_z"] = prm_ranking_z(used_logits, outcomes, uid, label_mask).item()
    metrics.update(process_reward_stats(process_rewards, label_mask, labels))
    return process_rewards, metrics


def prm_diagnostics(prm_used, ref, mask, labels, uid, beta, labelled=None, policy=None) -> dict[str, float]:
    """`prime.diagnostics`: what else ranks a step's mixed groups, to tell a PRM's knowledge from a shortcut.

    `prm/token_log_ratio_mean` (q̄ of the PRM used: below 0 when the PRM lowers every token, so z favours
    short responses); `prm/length_pairwise_mixed` (response length alone: above ½ when right answers are
    longer); `prm/ref_likelihood_dpo_acc_mixed` (Σ_t log π_ref: what the reference's own likelihood ranks);
    and, given `policy` (the rollout policy's log-probs at temperature 1), `prm/policy_dpo_acc_mixed` (the
    policy's own implicit reward Σ_t (log π_θ − log π_ref): below ½ when RL moved the policy towards the wrong
    answers it still samples, a shift a PRM trained on the same responses can share). Arguments as in
    `prm_rewards_and_metrics`.
    """
    label_mask = mask if labelled is None else mask * labelled.to(mask.dtype)[:, None]

    def ranking(scores: torch.Tensor) -> float:
        return prm_pairwise_accuracy(scores, labels, uid, label_mask, mixed_only=True).item()

    metrics = {
        "prm/token_log_ratio_mean": mean_token_log_ratio(prm_used, ref, label_mask).item(),
        "prm/length_pairwise_mixed": ranking(label_mask.sum(-1)),
        "prm/ref_likelihood_dpo_acc_mixed": ranking((ref * label_mask).sum(-1)),
    }
    if policy is not None:
        metrics["prm/policy_dpo_acc_mixed"] = ranking(prm_sequence_logits(policy, ref, label_mask, beta))
    return metrics


def process_spread_metrics(process_rewards, mask, uid, options, estimator: str) -> dict[str, float]:
    """The spread σ_g of the PRM's rewards per prompt group (`core_algos.process_group_spread`), over groups of at
    least two responses: `prm/process_group_std/{mean,max}` (0 while the PRM equals its reference) and, for
    `prime_grpo`, `prm/process_groups_on`, the share of groups whose σ_g reaches
    `algorithm.prime.process_std_threshold`, i.e. that get a process term at all."""
    spread, size = process_group_spread(process_rewards, mask, uid, options.process_norm)
    spread = spread[size > 1]
    if not spread.numel():
        return {}
    metrics = {"prm/process_group_std/mean": spread.mean().item(), "prm/process_group_std/max": spread.max().item()}
    if estimator == "prime_grpo":
        metrics["prm/process_groups_on"] = (spread >= options.process_std_threshold).float().mean().item()
    return metrics


def advantage_part_metrics(returns, outcome_returns, response_mask) -> dict[str, float]:
    """What reached the actor, by part: the mean |A| over response tokens of the outcome part (c_o·A^o) and of the
    process part (w·c_p·A^p, the estimator's unwhitened advantage minus its outcome-only one)."""
    mask = response_mask.to(returns.dtype)
    tokens = mask.sum().clamp_min(1)
    return {
        "prm/advantage/outcome_abs_mean": ((outcome_returns.abs() * mask).sum() / tokens).item(),
        "prm/advantage/process_abs_mean": (((returns - outcome_returns).abs() * mask).sum() / tokens).item(),
    }


def prime_advantages(
    algorithm: AlgorithmView, token_level_rewards, response_mask, uid, process_rewards, process_scale=1.0
):
    """The estimator named by `algorithm.adv_estimator`, called with the process rewards and the gate's weight (and,
    as veRL calls an estimator, with the `algorithm` section as its config)."""
    estimator = get_adv_estimator_fn(algorithm.adv_estimator)
    return estimator(
        token_level_rewards=token_level_rewards,
        response_mask=response_mask,
        index=uid,
        config=algorithm.node,
        process_rewards=process_rewards.to(token_level_rewards.dtype),
        process_scale=process_scale,
    )


def process_reward_stats(process_rewards: torch.Tensor, mask: torch.Tensor, labels: torch.Tensor) -> dict[str, float]:
    """Token and sequence statistics of the implicit process rewards over valid (non-padding) rows."""
    valid_rows = mask.sum(-1) > 0
    tokens = process_rewards[mask.bool()]
    seq = process_rewards.sum(-1)[valid_rows]
    lab = labels[valid_rows]
    stats = {
        "prm/process_reward/token_mean": tokens.mean().item() if tokens.numel() else 0.0,
        "prm/process_reward/token_max": tokens.max().item() if tokens.numel() else 0.0,
        "prm/process_reward/token_min": tokens.min().item() if tokens.numel() else 0.0,
        "prm/process_reward/seq_mean": seq.mean().item() if seq.numel() else 0.0,
        "prm/label_mean": lab.mean().item() if lab.numel() else 0.0,
    }
    for name, sel in (("correct", lab > 0.5), ("incorrect", lab <= 0.5)):
        if sel.any():
            stats[f"prm/process_reward/seq_mean_{name}"] = seq[sel].mean().item()
    return stats


@register_trainer("prime_sync")
class PrimeTrainerSync(PrimeTrainerMixin, PPOTrainerSync):
    """PRIME on veRL's colocated `sync` trainer."""

    _BASE_MODE = "sync"


@register_trainer("prime_separate_async")
class PrimeTrainerSeparateAsync(PrimeTrainerMixin, PPOTrainerSeparateAsync):
    """PRIME on veRL's `separate_async` trainer (split placement with hybrid_engine=false)."""

    _BASE_MODE = "separate_async"
