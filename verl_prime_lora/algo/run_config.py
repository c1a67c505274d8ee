"""What a composed veRL config says about a run, read in one place.

Every other module asks these questions here: is this a PRIME run, does the rollout have a pool of its
own, how many ranks train, is the actor or the PRM LoRA, where do the PRM's reference log-probs come
from, which checkpoint folder is resumed and where the PRM's state sits in it. Nothing here imports
veRL, torch or Ray at module level (the resume lookup imports veRL's tracker-file reader when called).

**Which runs are PRIME runs** (`is_prime_run`): those whose `trainer.v1.trainer_mode` is a PRIME trainer
(`prime_sync`, `prime_separate_async`) or whose `algorithm.adv_estimator` is a PRIME estimator
(`prime_grpo`, `prime_rloo`). Only these get the plugin's checks before Ray, its reward dry
run and its reward-failure accounting; every other run sees veRL as it is.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from verl_prime_lora.algo.prime_config import config_value, prime_config

# trainer.v1.trainer_mode names registered by verl_prime_lora.integration.trainer, and the veRL mode each extends.
PRIME_TRAINERS = {"prime_sync": "sync", "prime_separate_async": "separate_async"}
# Estimators that take PRIME's process rewards (registered by verl_prime_lora.algo.core_algos).
PRIME_ESTIMATORS = ("prime_grpo", "prime_rloo")
MAX_RATIO_KEY = "prime.max_failed_rollout_ratio"
REWARD_FN_KEY = "reward.custom_reward_function.path"
# The temperature of every log-prob the PRM and its reference score (the PRM's training temperature).
PRM_TEMPERATURE = 1.0

# Where the PRM's reference log-probs come from (`reference_source`).
REF_PRM_ADAPTER_OFF = "prm_adapter_off"  # LoRA PRM, adapter disabled: its initial weights, no copy
REF_ACTOR_REF = "actor_ref_log_prob"  # veRL's own ref log-probs, reused (same init, temperature 1)
REF_ACTOR_BASE = "actor_adapter_off_t1"  # LoRA actor with adapter off at temperature 1 (= PRM init)
REF_FROZEN = "frozen_prm_copy"  # a forward-only copy of the PRM's initial weights
REF_POLICY_OLD = "actor_old_log_probs"  # `policy`: veRL's old log-probs, reused (temperature 1)
REF_POLICY_T1 = "actor_policy_t1"  # `policy`: the actor recomputed at temperature 1


def get(config: Any, key: str, default: Any = None) -> Any:
    """`config.<key>` (dotted), `default` when absent or None."""
    return config_value(config, key, default)


def trainer_mode(config: Any) -> str:
    return str(get(config, "trainer.v1.trainer_mode", "sync"))


def is_prime_trainer(config: Any) -> bool:
    return trainer_mode(config) in PRIME_TRAINERS


def is_prime_estimator(config: Any) -> bool:
    return get(config, "algorithm.adv_estimator") in PRIME_ESTIMATORS


def is_prime_run(config: Any) -> bool:
    """A PRIME trainer or a PRIME estimator (see the module docstring): the runs the plugin acts on."""
    return is_prime_trainer(config) or is_prime_estimator(config)


def base_trainer_mode(config: Any) -> str:
    """The veRL V1 mode the run's trainer is or extends (`sync`, `separate_async`, ...)."""
    mode = trainer_mode(config)
    return PRIME_TRAINERS.get(mode, mode)


def has_standalone_rollout(config: Any) -> bool:
    """Whether vLLM serves from a pool of its own (`actor_rollout_ref.rollout.{nnodes,n_gpus_per_node}`).

    veRL 0.9.1 builds standalone replicas in the V1 `separate_async` trainer only, whatever
    `actor_rollout_ref.hybrid_engine` says (with `hybrid_engine=true` it adds colocated ones; every other
    trainer requires `hybrid_engine=true`)."""
    return bool(get(config, "trainer.use_v1", True)) and base_trainer_mode(config) == "separate_async"


def training_ranks(config: Any) -> int:
    """D = trainer.n_gpus_per_node x trainer.nnodes: the ranks the actor and the PRM are data-parallel over."""
    return int(get(config, "trainer.n_gpus_per_node", 1)) * int(get(config, "trainer.nnodes", 1))


def rollout_pool_gpus(config: Any) -> int:
    """GPUs of the standalone rollout pool (0 when vLLM is colocated)."""
    if not has_standalone_rollout(config):
        return 0
    return int(get(config, "actor_rollout_ref.rollout.n_gpus_per_node", 0)) * int(
        get(config, "actor_rollout_ref.rollout.nnodes", 0)
    )


def reward_pool_gpus(config: Any) -> int:
    """GPUs of the reward model's own pool (0 without one)."""
    if not get(config, "reward.reward_model.enable_resource_pool", False):
        return 0
    return int(get(config, "reward.reward_model.n_gpus_per_node", 0)) * int(
        get(config, "reward.reward_model.nnodes", 0)
    )


def actor_lora_rank(config: Any) -> int:
    """`actor_rollout_ref.model.lora.rank`, else the older `lora_rank`; 0 for a full-parameter actor."""
    rank = int(get(config, "actor_rollout_ref.model.lora.rank", 0) or 0)
    return rank if rank > 0 else int(get(config, "actor_rollout_ref.model.lora_rank", 0) or 0)


def actor_uses_lora(config: Any) -> bool:
    """Mirrors veRL's `ref_in_actor` test (trainer_base.py)."""
    return actor_lora_rank(config) > 0 or get(config, "actor_rollout_ref.model.lora_adapter_path") is not None


def prm_is_lora(prm_cfg: Any) -> bool:
    """Whether the PRM (`prime.prm`) trains a LoRA adapter."""
    model = get(prm_cfg, "model")
    return int(get(model, "lora_rank", 0) or 0) > 0 or get(model, "lora_adapter_path") is not None


def lora_dropout(model_config: Any) -> float:
    """`model.lora.dropout` of a veRL model config (dict, DictConfig or HFModelConfig), 0.0 when unset."""
    return float(get(model_config, "lora.dropout", 0.0) or 0.0)


def uses_reference_policy(config: Any) -> bool:
    """Whether veRL computes reference log-probs (a KL term in the reward or the loss), as its trainers decide
    (`verl.trainer.ppo.utils.need_reference_policy`)."""
    return bool(get(config, "algorithm.use_kl_in_reward", False)) or bool(
        get(config, "actor_rollout_ref.actor.use_kl_loss", False)
    )


def reference_source(config: Any, use_reference_policy: bool) -> str:
    """The cheapest correct source of log π_ref for the PRM's implicit reward.

    `init` — the PRM's initial weights: a LoRA PRM disables its adapter; a full-parameter PRM that
    starts from the (LoRA) actor's base borrows the actor with its adapter off (veRL's ref
    log-probs when they exist at temperature 1, else one extra actor forward at temperature 1);
    otherwise a frozen copy. `policy` — the rollout policy's old log-probs at temperature 1.
    veRL computes old/ref log-probs at the rollout temperature (trainer_base.py), so they
    are reused only when that temperature is 1.0.
    """
    t_is_one = float(get(config, "actor_rollout_ref.rollout.temperature", 1.0)) == PRM_TEMPERATURE
    bypass = bool(get(config, "algorithm.rollout_correction.bypass_mode", False))
    if prime_config(config).prm.reference == "policy":
        return REF_POLICY_OLD if t_is_one and not bypass else REF_POLICY_T1
    if prm_is_lora(get(config, "prime.prm")):
        return REF_PRM_ADAPTER_OFF
    same_init = str(get(config, "prime.prm.model.path")) == str(get(config, "actor_rollout_ref.model.path"))
    if same_init and actor_uses_lora(config):
        return REF_ACTOR_REF if use_reference_policy and t_is_one else REF_ACTOR_BASE
    return REF_FROZEN


def resume_folder(config: Any) -> str | None:
    """The `global_step_N` folder veRL resumes from (mirrors PPOTrainer._load_checkpoint, 850-876), or None."""
    mode = get(config, "trainer.resume_mode", "auto")
    if mode == "auto":
        from verl.utils.checkpoint.checkpoint_manager import find_latest_ckpt_path

        return find_latest_ckpt_path(os.path.abspath(str(get(config, "trainer.default_local_dir", "."))))
    if mode == "resume_path":
        return os.path.abspath(str(get(config, "trainer.resume_from_path")))
    return None


# veRL's tracker of the last published checkpoint step, in `trainer.default_local_dir`
CHECKPOINT_TRACKER = "latest_checkpointed_iteration.txt"
_STEP_FOLDER = re.compile(r"global_step_(\d+)")


def tracker_text(root: str | os.PathLike) -> str | None:
    """What veRL's tracker in `root` holds, stripped (a step, or whatever a torn write left); None without one."""
    tracker = Path(root) / CHECKPOINT_TRACKER
    return tracker.read_text(errors="replace").strip() if tracker.is_file() else None


def step_folders(root: str | os.PathLike) -> list[tuple[int, Path]]:
    """(N, folder) of every `global_step_N` folder under `root` (veRL's checkpoint folders), by step."""
    root = Path(root)
    if not root.is_dir():
        return []
    found = [(int(match.group(1)), path) for path in root.iterdir() if (match := _STEP_FOLDER.fullmatch(path.name))]
    return sorted(found)


def prm_checkpoint_dir(global_step_folder: str) -> str:
    """The PRM nests inside veRL's step folder: `<default_local_dir>/global_step_N/prm`."""
    return os.path.join(global_step_folder, "prm")


def prime_state_file(global_step_folder: str) -> str:
    """The PRIME trainer's own state (the process gate's running mean) beside veRL's:
    `<default_local_dir>/global_step_N/prime_state.json`."""
    return os.path.join(global_step_folder, "prime_state.json")


def reward_function_name(config: Any) -> str:
    """The run's reward function as errors name it: `path:name` of `reward.custom_reward_function`, else the
    reward model or veRL's default scorer (what veRL's reward loop calls, reward_loop.py compute_score)."""
    path = get(config, REWARD_FN_KEY)
    if path:
        return f"{path}:{get(config, 'reward.custom_reward_function.name') or 'compute_score'}"
    if get(config, "reward.reward_model.enable", False):
        return "the reward model (reward.reward_model)"
    return "veRL's default_compute_score"
