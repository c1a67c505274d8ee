"""The config, composed and checked as `main_ppo` composes and checks it before Ray starts."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any


def compose_config(overrides: list[str]) -> Any:
    """veRL's `ppo_trainer` config from veRL's config dir with `overrides`, as `main_ppo`'s @hydra.main."""
    import verl
    from hydra import compose, initialize_config_dir

    config_dir = str(Path(verl.__file__).parent / "trainer" / "config")
    with initialize_config_dir(config_dir=config_dir, version_base=None):
        return compose(config_name="ppo_trainer", overrides=list(overrides))


def check_config(cfg: Any) -> None:
    """What main_ppo checks before Ray starts, minus the files, in its order: the layout vs
    `ray_kwargs.ray_init.num_gpus`, PRIME's config checks, and veRL's `validate_config` (the original, not the
    plugin's wrapper, which also reads data files and dry-runs the reward)."""
    import verl.utils.config as verl_config
    from verl.trainer.ppo.utils import need_critic, need_reference_policy

    from verl_prime_lora.checks.config_checks import validate_prime_config
    from verl_prime_lora.checks.input_checks import check_devices

    check_devices(cfg)
    validate_prime_config(cfg, check_tokenizers=False)
    validate = getattr(verl_config.validate_config, "__wrapped__", verl_config.validate_config)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "Disabled critic as algorithm.adv_estimator != gae"
        validate(config=cfg, use_reference_policy=need_reference_policy(cfg), use_critic=need_critic(cfg))


# veRL's messages for keys it has no default for (the recipes set them; an override may unset them), and what to set
HINTS = {
    "ppo_micro_batch_size": "set actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=N (responses per actor "
    "forward/backward) and actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=N (responses per actor "
    "log-prob forward); veRL has no default; the recipes set 2 and 4, as the PRM's",
    "log_prob_micro_batch_size": "set actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=N (responses per "
    "actor log-prob forward); veRL has no default; the recipes set 4, as the PRM's infer_micro_batch_size_per_gpu",
}


def hint_for(message: str) -> str:
    """A `hint: …` line for a veRL message about a key in `HINTS` ("" for any other)."""
    hints = [text for needle, text in HINTS.items() if needle in message]
    return f"\nhint: {hints[0]}" if hints else ""
