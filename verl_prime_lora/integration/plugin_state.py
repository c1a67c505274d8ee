"""Whether veRL loaded this plugin in this process, as the recipes check it before Ray starts.

veRL imports the `verl.plugins` entry point at `import verl` and swallows a failing import (at DEBUG), and
`VERL_USE_EXTERNAL_PLUGINS` can turn that loading off. The `recipe` config group still composes: a failed import
has registered it before failing, and an installed package's `hydra_plugins/verl_prime_lora` registers it through
Hydra's own plugin scan (`integration.hydra_search_path`). Without this check the run would reach a misleading
error of veRL's. The recipe's `trainer.use_v1` is therefore
`${verl_prime_lora_plugin:true}`: the resolver returns the value when the plugin registered everything in this
process (`mark_registered`, from `integration.plugin`), else raises `PluginNotLoadedError` with the reason.
`main_ppo` reads that key in the driver before Ray starts. Imports nothing of veRL.
"""

from __future__ import annotations

import importlib
import os
from typing import Any

from omegaconf import OmegaConf

RESOLVER = "verl_prime_lora_plugin"
ENTRY_POINT = "prime_lora"  # setup.py's `verl.plugins` entry point
PLUGIN_MODULE = "verl_prime_lora.integration.plugin"
_registered = False


class PluginNotLoadedError(RuntimeError):
    """A PRIME recipe was composed in a process where veRL did not load this plugin."""


def mark_registered() -> None:
    global _registered
    _registered = True


def _import_plugin() -> None:
    importlib.import_module(PLUGIN_MODULE)


def why_not_registered() -> str:
    """Why veRL did not load the plugin in this process: its plugin policy, or the import error."""
    policy = os.getenv("VERL_USE_EXTERNAL_PLUGINS", "auto").strip().lower()
    if policy == "none":
        return "VERL_USE_EXTERNAL_PLUGINS=none turns veRL's plugin loading off"
    if policy != "auto" and ENTRY_POINT not in {name.strip() for name in policy.split(",")}:
        return f"VERL_USE_EXTERNAL_PLUGINS={policy} does not name {ENTRY_POINT}"
    try:
        _import_plugin()
    except Exception as exc:  # noqa: BLE001 - the reason, reported
        return f"importing {PLUGIN_MODULE} failed: {type(exc).__name__}: {exc}"
    return "veRL was not imported before the config was composed"


def plugin_loaded(value: Any = True) -> Any:
    """The recipes' `${verl_prime_lora_plugin:VALUE}`: VALUE once the plugin is registered, else the error."""
    if _registered:
        return value
    raise PluginNotLoadedError(
        f"verl-prime-lora: a PRIME recipe (+recipe=prime_lora...) is composed, but veRL did not load the plugin "
        f"({why_not_registered()}), so its trainers, advantage estimators and checks are registered neither here "
        f"nor in any worker. Unset VERL_USE_EXTERNAL_PLUGINS or name {ENTRY_POINT} in it, or fix the import error "
        f"(`python -c 'import {PLUGIN_MODULE}'` shows it)."
    )


def register_resolver() -> None:
    if not OmegaConf.has_resolver(RESOLVER):
        OmegaConf.register_new_resolver(RESOLVER, plugin_loaded)
