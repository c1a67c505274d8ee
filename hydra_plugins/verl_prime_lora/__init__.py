"""Hydra's own plugin scan finds this package (the `hydra_plugins` namespace) whenever a config is composed: it
puts the `recipe` config group on the search path (`PrimeLoraSearchPathPlugin`) and registers the recipes' check
that veRL loaded the plugin (`verl_prime_lora.plugin.plugin_state`), whether or not veRL did. It imports neither
veRL nor the plugin, so that a plugin whose import fails is still named by the recipes, with its error."""

from verl_prime_lora.plugin import plugin_state
from verl_prime_lora.plugin.hydra_search_path import PrimeLoraSearchPathPlugin

__all__ = ["PrimeLoraSearchPathPlugin"]

plugin_state.register_resolver()
