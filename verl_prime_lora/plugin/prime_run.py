"""Which processes belong to a PRIME run: only those get the plugin's patches (`plugin.patches`).

A run is PRIME when it is composed from a PRIME recipe (`+recipe=prime_lora`, `+recipe=prime_lora_colocated`, or a
config whose defaults list one). The recipe marks the run twice, once for each kind of process, because the two
learn about the run at different moments:

* Ray processes (the TaskRunner, every worker, reward and rollout actor, and what they spawn): the recipe sets
  `ray_kwargs.ray_init.runtime_env.env_vars.VERL_PRIME_LORA_PRIME_RUN: "1"`. veRL's `run_ppo` passes that runtime
  env to `ray.init`, and Ray puts a job's env vars into every process of the job (merged per key with any an actor
  adds) before it starts, so the plugin, imported at that process's `import verl`, reads the marker
  (`config.run.in_prime_run_process`) and applies the patches there and then.
* The driver (`python -m verl.trainer.main_ppo`) imports veRL, and with it the plugin, before Hydra composes its
  config, so at `import verl` it cannot know. The recipe declares the Hydra callback `PrimeRunDriver`
  (`hydra.callbacks.verl_prime_lora`): Hydra builds it once the config is composed and calls it right before
  veRL's `main`; it imports `plugin.patches` then, which applies them, and points the name `validate_config`
  that `main_ppo` imported earlier at the patched one (`plugin.patches.apply_in_driver`).

Any other run (a plain veRL run, `+recipe=[cpu]` alone) carries neither mark: no process of it applies a patch, the
plugin only registers its names (estimators, trainers, the `recipe` config group, resolvers), which a run that does
not ask for them never meets. Imports nothing of veRL.
"""

from __future__ import annotations

from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from verl_prime_lora.plugin import plugin_state


class PrimeRunDriver(Callback):
    """The driver's side of a PRIME run, declared by the PRIME recipes (`hydra.callbacks.verl_prime_lora`).

    Hydra builds it after composing the config, before anything of veRL's `main` runs. Building it fails when veRL
    did not load the plugin in this process (`PluginNotLoadedError`, naming why and how to load it): Hydra stops on
    an error raised while it builds a callback, while one raised inside a callback's hook only becomes a warning.
    `on_job_start` then applies the plugin's patches to this driver, among them the PRIME checks that stop a bad
    config before Ray starts (`plugin.patches.install_driver_validation`).
    """

    def __init__(self) -> None:
        plugin_state.plugin_loaded()

    def on_job_start(self, config: DictConfig, *, task_function: Any, **kwargs: Any) -> None:
        from verl_prime_lora.plugin import patches

        patches.apply_in_driver(task_function)
