"""PRIME trainers for veRL 0.9.1's V1 loop, registered with `@register_trainer`.

* `prime_sync` — veRL's `sync` trainer (actor, vLLM and PRM colocated; one or more GPUs).
* `prime_separate_async` — veRL's `separate_async` trainer; with `actor_rollout_ref.hybrid_engine=false`
  the actor and the PRM train on the trainer pool (GPU 0) and vLLM serves from its own GPU (GPU 1).

Each is the veRL trainer plus `PrimeTrainerMixin`, which owns the PRIME step (`prime_step.PrimeStep`, with its
state) and overrides these hooks of `PPOTrainer` (verl/trainer/ppo/v1/trainer_base.py):

* `_load_checkpoint` (called at the end of `_setup`, once every pool exists): builds the
  PRM worker group on the actor's pool and the step around it, then veRL's resume, then the PRM's resume from
  `global_step_N/prm` and the step's state (`PrimeStep.load_state_dict`) from `global_step_N/prime_state.json`.
* `_save_checkpoint`: the PRM (weights, optimizer, scheduler, via veRL's FSDP checkpoint
  manager) into `global_step_N/prm` and the step's state first, then veRL's own save, whose tracker file
  `latest_checkpointed_iteration.txt` is written last — a checkpoint is never marked complete
  without its PRM — and only then old checkpoints removed (`checkpoints`).
* `_compute_advantage` (runs after old/ref log-probs, before the actor update): `PrimeStep.compute_advantage`
  (the batch's accounting → PRM forward → reference forward → PRM update → token process rewards → gate → the
  estimator named by `algorithm.adv_estimator`, called with the process rewards), given what it reads of the
  trainer as a `StepContext`.
* `_update_actor`: veRL's update, its loss and grad norm checked finite (`step_guards`).
* `fit`: stopped, with the reason, when a vLLM engine dies (`rollout_health`); `init` and the `on_*` hooks
  tell the step watchdog (`step_watchdog`) which phase runs.

The veRL mode name (`sync` / `separate_async`) is what the base classes see as `self.trainer_mode`
(it selects the replay buffer, TQ checkpointing and `trainer.v1.<mode>.*`), so both PRIME trainers
behave exactly like the veRL trainer they extend apart from the hooks above.
"""

from __future__ import annotations

import json
import logging
import os

from omegaconf import DictConfig
from verl.trainer.ppo.utils import Role
from verl.trainer.ppo.v1.trainer_base import register_trainer
from verl.trainer.ppo.v1.trainer_separate_async import PPOTrainerSeparateAsync
from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync
from verl.utils.debug import marked_timer

from verl_prime_lora.checkpoints import (
    checkpoints_to_keep,
    no_space_left,
    prime_state_file,
    prm_checkpoint_dir,
    remove_old_checkpoints,
    saving_without_removal,
    space_error,
)
from verl_prime_lora.checks.config_checks import compute_precision, step_batch_rows, validate_prime_config
from verl_prime_lora.config import RunConfig
from verl_prime_lora.config.run import (
    PRIME_RUN_ENV_KEY,
    PRIME_TRAINERS,
    REF_FROZEN,
    in_prime_run_process,
    reference_source,
    resume_folder,
    reward_function_name,
)
from verl_prime_lora.config.section import PrimeConfigError
from verl_prime_lora.hardening.rollout_health import EngineMonitor, dead_replicas, engine_error
from verl_prime_lora.hardening.step_guards import check_actor_update
from verl_prime_lora.hardening.step_watchdog import StepWatchdog
from verl_prime_lora.prime.prime_step import PrimeStep, StepContext
from verl_prime_lora.prime.prm_passes import model_dropout, prm_passes
from verl_prime_lora.prime.prm_worker import ImplicitPRM

logger = logging.getLogger(__name__)


class PrimeTrainerMixin:
    """The PRIME hooks of a veRL V1 trainer (see the module docstring); the step itself is `PrimeStep`'s."""

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
        if not in_prime_run_process():
            raise PrimeConfigError(
                f"{PRIME_RUN_ENV_KEY}: a PRIME trainer runs in a Ray job without the PRIME recipes' marker, so its "
                "workers would train without the plugin's patches (LoRA dropout, the reward guard, atomic "
                "checkpoints). An override replaced `ray_kwargs.ray_init.runtime_env.env_vars`: add to it instead."
            )
        self.run: RunConfig = validate_prime_config(config)  # this process's one view of the run's configuration
        super().__init__(config)
        self.prm: ImplicitPRM | None = None  # built with the step once the pools exist (`_load_checkpoint`)
        self.prime_step: PrimeStep | None = None
        self.prm_reference = reference_source(self.run.verl, self.run.prime.prm, self.use_reference_policy)
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
        self.prime_step = PrimeStep(
            self.run,
            self.prm,
            self.prm_reference,
            prm_dropout=model_dropout(verl.prm.model),
            prm_fp32=compute_precision(verl.prm.engine) == "fp32",
        )
        made, minimum = prm_passes(
            prm.update,
            self.prm_reference,
            prm.epochs,
            from_update=self.prime_step.pre_update_from_update(step_batch_rows(verl)[0])
            and not self.run.prime.diagnostics,
        )
        logger.info(
            "PRIME: PRM on the actor pool; reference=%s (%s), update=%s, beta=%s; passes per step %s (minimum %s)",
            prm.reference,
            self.prm_reference,
            prm.update,
            prm.beta,
            made,
            minimum,
        )

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
        """What the next step reads besides the weights (`PrimeStep.state_dict`: the process gate's running mean)."""
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            json.dump(self.prime_step.state_dict(), f)

    def _load_prime_state(self, path: str) -> None:
        if not os.path.exists(path):
            logger.warning("PRIME: %s is missing (a checkpoint older than the file); the gate restarts at 1/2", path)
            return
        with open(path) as f:
            state = json.load(f)
        self.prime_step.load_state_dict(state)
        logger.info("PRIME: restored %s from %s", state, path)

    def _save_checkpoint(self):
        """The PRM and the gate's state into `global_step_N`, then veRL's own save, which publishes the step in its
        tracker last; nothing is removed before that, and then the step folders beyond `max_actor_ckpt_to_keep`
        (`checkpoints`). Out of disk: `CheckpointSpaceError`, the previous checkpoint still published."""
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
    # the step's phases, for the watchdog (each hook runs veRL's own, or the PRIME step)
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

    def _compute_advantage(self, batch, metrics: dict):
        """The PRIME step (`PrimeStep.compute_advantage`), with what it reads of veRL's trainer this step."""
        self.watchdog.enter("the PRM step", "the PRM worker group (log-probs, update) and its reference's forward")
        context = StepContext(
            global_step=self.global_steps,
            parameter_sync_step=self.parameter_sync_step,
            timing=getattr(self, "timing_raw", {}),
            tokenizer=self.tokenizer,
            actor_wg=self.actor_rollout_wg,
            kl_ctrl=getattr(self, "kl_ctrl_in_reward", None),
        )
        return self.prime_step.compute_advantage(batch, metrics, context)

    def _update_actor(self, batch, metrics: dict):
        """veRL's actor update, then its loss and grad norm checked finite (`step_guards.check_actor_update`)."""
        self.watchdog.enter("the actor update", "the actor worker group")
        batch = super()._update_actor(batch, metrics)
        check_actor_update(metrics, self.global_steps)
        return batch


@register_trainer("prime_sync")
class PrimeTrainerSync(PrimeTrainerMixin, PPOTrainerSync):
    """PRIME on veRL's colocated `sync` trainer."""

    _BASE_MODE = PRIME_TRAINERS["prime_sync"]


@register_trainer("prime_separate_async")
class PrimeTrainerSeparateAsync(PrimeTrainerMixin, PPOTrainerSeparateAsync):
    """PRIME on veRL's `separate_async` trainer (split placement with hybrid_engine=false)."""

    _BASE_MODE = PRIME_TRAINERS["prime_separate_async"]
