"""What a run's configuration says about the run, computed from its `VerlView` in one place.

Every other module asks these questions here: is this a PRIME run, does the rollout have a pool of its
own, how many ranks train, is the actor or the PRM LoRA, where do the PRM's reference log-probs come
from, which checkpoint folder is resumed. Nothing here imports veRL, torch or Ray at module level (the resume
lookup imports veRL's tracker-file reader when called).

**Which runs are PRIME runs** (`is_prime_run`): those whose `trainer.v1.trainer_mode` is a PRIME trainer
(`prime_sync`, `prime_separate_async`) or whose `algorithm.adv_estimator` is a PRIME estimator
(`prime_grpo`, `prime_rloo`). Only these get the plugin's checks before Ray, its reward dry
run and its reward-failure accounting. The plugin's patches follow the PRIME recipes' marker instead
(`plugin.prime_run`): a run not composed from a PRIME recipe is veRL's own.
"""

from __future__ import annotations

import os
from typing import Any

from verl_prime_lora.config.prime import PrimeConfig, PrmConfig
from verl_prime_lora.config.section import key_of, write
from verl_prime_lora.config.verl_view import ModelView, VerlView, raw_value

# trainer.v1.trainer_mode names registered by verl_prime_lora.prime.trainer, and the veRL mode each extends.
PRIME_TRAINERS = {"prime_sync": "sync", "prime_separate_async": "separate_async"}
# Estimators that take PRIME's process rewards (registered by verl_prime_lora.algo.core_algos).
PRIME_ESTIMATORS = ("prime_grpo", "prime_rloo")
MAX_RATIO_KEY = key_of(PrimeConfig, "max_failed_rollout_ratio")
REWARD_FN_KEY = key_of(VerlView, "reward.custom_fn_path")
# The temperature of every log-prob the PRM and its reference score (the PRM's training temperature).
PRM_TEMPERATURE = 1.0

# Where the PRM's reference log-probs come from (`reference_source`).
REF_PRM_ADAPTER_OFF = "prm_adapter_off"  # LoRA PRM, adapter disabled: its initial weights, no copy
REF_ACTOR_REF = "actor_ref_log_prob"  # veRL's own ref log-probs, reused (same init, temperature 1)
REF_ACTOR_BASE = "actor_adapter_off_t1"  # LoRA actor with adapter off at temperature 1 (= PRM init)
REF_FROZEN = "frozen_prm_copy"  # a forward-only copy of the PRM's initial weights
REF_POLICY_OLD = "actor_old_log_probs"  # `policy`: veRL's old log-probs, reused (temperature 1)
REF_POLICY_T1 = "actor_policy_t1"  # `policy`: the actor recomputed at temperature 1


def is_prime_trainer(view: VerlView) -> bool:
    return view.trainer.mode in PRIME_TRAINERS


def is_prime_estimator(view: VerlView) -> bool:
    return view.algorithm.adv_estimator in PRIME_ESTIMATORS


def is_prime_run(config: Any) -> bool:
    """A PRIME trainer or a PRIME estimator (see the module docstring): the runs the plugin acts on. Decided on the
    composed config from its two keys as they are, before any view is built: a run that is not PRIME gets none, so
    none of its values is converted or refused by the plugin."""
    mode, estimator = raw_value(config, "trainer.mode"), raw_value(config, "algorithm.adv_estimator")
    return mode in PRIME_TRAINERS or estimator in PRIME_ESTIMATORS


def base_trainer_mode(view: VerlView) -> str:
    """The veRL V1 mode the run's trainer is or extends (`sync`, `separate_async`, ...)."""
    return PRIME_TRAINERS.get(view.trainer.mode, view.trainer.mode)


def has_standalone_rollout(view: VerlView) -> bool:
    """Whether vLLM serves from a pool of its own (`actor_rollout_ref.rollout.{nnodes,n_gpus_per_node}`).

    veRL 0.9.1 builds standalone replicas in the V1 `separate_async` trainer only, whatever
    `actor_rollout_ref.hybrid_engine` says (with `hybrid_engine=true` it adds colocated ones; every other
    trainer requires `hybrid_engine=true`)."""
    return view.trainer.use_v1 and base_trainer_mode(view) == "separate_async"


def training_ranks(view: VerlView) -> int:
    """D = trainer.n_gpus_per_node x trainer.nnodes: the ranks the actor and the PRM are data-parallel over."""
    return view.trainer.n_gpus_per_node * view.trainer.nnodes


def rollout_pool_gpus(view: VerlView) -> int:
    """GPUs of the standalone rollout pool (0 when vLLM is colocated)."""
    if not has_standalone_rollout(view):
        return 0
    return view.rollout.n_gpus_per_node * view.rollout.nnodes


def reward_pool_gpus(view: VerlView) -> int:
    """GPUs of the reward model's own pool (0 without one)."""
    if not view.reward.model_pool:
        return 0
    return view.reward.model_n_gpus_per_node * view.reward.model_nnodes


def actor_lora_rank(view: VerlView) -> int:
    """`actor_rollout_ref.model.lora.rank`, else the older `lora_rank`; 0 for a full-parameter actor."""
    rank = view.model.lora_config_rank
    return rank if rank > 0 else view.model.lora_rank


def actor_uses_lora(view: VerlView) -> bool:
    """Mirrors veRL's `ref_in_actor` test (trainer_base.py)."""
    return actor_lora_rank(view) > 0 or view.model.lora_adapter_path is not None


def prm_is_lora(model: ModelView) -> bool:
    """Whether the PRM (its model, `prime.prm.model`) trains a LoRA adapter."""
    return model.lora_rank > 0 or model.lora_adapter_path is not None


def uses_reference_policy(view: VerlView) -> bool:
    """Whether veRL computes reference log-probs (a KL term in the reward or the loss), as its trainers decide
    (`verl.trainer.ppo.utils.need_reference_policy`)."""
    return view.algorithm.use_kl_in_reward or view.actor.use_kl_loss


def reference_source(view: VerlView, prm: PrmConfig, use_reference_policy: bool) -> str:
    """The cheapest correct source of log π_ref for the PRM's implicit reward (`prm`: `prime.prm`, typed).

    `init` — the PRM's initial weights: a LoRA PRM disables its adapter; a full-parameter PRM that
    starts from the (LoRA) actor's base borrows the actor with its adapter off (veRL's ref
    log-probs when they exist at temperature 1, else one extra actor forward at temperature 1);
    otherwise a frozen copy. `policy` — the rollout policy's old log-probs at temperature 1.
    veRL computes old/ref log-probs at the rollout temperature (trainer_base.py), so they
    are reused only when that temperature is 1.0.
    """
    t_is_one = view.rollout.temperature == PRM_TEMPERATURE
    if prm.reference == "policy":
        return REF_POLICY_OLD if t_is_one and not view.algorithm.bypass_mode else REF_POLICY_T1
    if prm_is_lora(view.prm.model):
        return REF_PRM_ADAPTER_OFF
    same_init = str(view.prm.model.path) == str(view.model.path)
    if same_init and actor_uses_lora(view):
        return REF_ACTOR_REF if use_reference_policy and t_is_one else REF_ACTOR_BASE
    return REF_FROZEN


# The PRIME recipes' mark on a run's Ray processes (plugin.prime_run says how it is set and read)
PRIME_RUN_ENV = "VERL_PRIME_LORA_PRIME_RUN"
PRIME_RUN_ENV_KEY = f"ray_kwargs.ray_init.runtime_env.env_vars.{PRIME_RUN_ENV}"  # where the PRIME recipes set it


def in_prime_run_process() -> bool:
    """This process belongs to a PRIME run's Ray job (the recipe's marker is in its environment)."""
    return os.environ.get(PRIME_RUN_ENV) == "1"


def trainer_loggers(view: VerlView) -> list[str]:
    """The backends of `trainer.logger` (one name or a list)."""
    logger = view.trainer.logger
    return [str(logger)] if isinstance(logger, str) else [str(name) for name in (logger or [])]


def resume_folder(view: VerlView) -> str | None:
    """The `global_step_N` folder veRL resumes from (mirrors PPOTrainer._load_checkpoint), or None."""
    if view.trainer.resume_mode == "auto":
        from verl.utils.checkpoint.checkpoint_manager import find_latest_ckpt_path

        return find_latest_ckpt_path(os.path.abspath(view.trainer.default_local_dir))
    if view.trainer.resume_mode == "resume_path":
        return os.path.abspath(str(view.trainer.resume_from_path))
    return None


def resume_from(view: VerlView, folder: str) -> None:
    """Make the run resume from `folder` (`trainer.resume_mode=resume_path`, `trainer.resume_from_path`), in the
    config itself, which veRL reads when it resumes (`view` keeps the values it was built with)."""
    write(view.trainer, "resume_mode", "resume_path")
    write(view.trainer, "resume_from_path", str(folder))


def reward_function_name(view: VerlView) -> str:
    """The run's reward function as errors name it: `path:name` of `reward.custom_reward_function`, else the
    reward model or veRL's default scorer (what veRL's reward loop calls, reward_loop.py compute_score)."""
    reward = view.reward
    if reward.custom_fn_path:
        return f"{reward.custom_fn_path}:{reward.custom_fn_name or 'compute_score'}"
    if reward.model_enable:
        return "the reward model (reward.reward_model)"
    return "veRL's default_compute_score"
