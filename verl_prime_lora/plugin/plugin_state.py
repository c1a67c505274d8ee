"""Whether veRL loaded this plugin in this process, as the PRIME recipes check it before Ray starts.

veRL imports the `verl.plugins` entry point at `import verl` and swallows a failing import (at DEBUG), and
`VERL_USE_EXTERNAL_PLUGINS` can turn that loading off. The `recipe` config group still composes: Hydra's own scan of
the `hydra_plugins` namespace registers it (`hydra_plugins/verl_prime_lora`) in every install form (editable or
wheel, any working directory), and so does a checkout that is the working directory. Without this check the run
would reach a misleading error of veRL's. So a PRIME recipe checks it twice, both in the driver before Ray:

* a real run: Hydra builds the recipe's callback (`prime_run.PrimeRunDriver`) before veRL's `main`, and building it
  calls `plugin_loaded`;
* `--cfg job --resolve` and Hydra's compose API: the recipe's `trainer.use_v1` is `${verl_prime_lora_plugin:true}`.

Either returns when the plugin registered everything in this process (`mark_registered`, from
`plugin.plugin`), else raises `PluginNotLoadedError` naming why (not installed, turned off by
`VERL_USE_EXTERNAL_PLUGINS`, its import failed with this error, among them a veRL it does not support) and how to
load it. Imports nothing of veRL.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import os
from typing import Any

from omegaconf import OmegaConf

RESOLVER = "verl_prime_lora_plugin"
ENTRY_POINT = "prime_lora"  # setup.py's `verl.plugins` entry point
PLUGIN_MODULE = "verl_prime_lora.plugin.plugin"
_registered = False


class PluginNotLoadedError(RuntimeError):
    """A PRIME recipe was composed in a process where veRL did not load this plugin."""


def mark_registered() -> None:
    global _registered
    _registered = True


def _import_plugin() -> None:
    importlib.import_module(PLUGIN_MODULE)


def _installed() -> bool:
    """This environment has the plugin's `verl.plugins` entry point (an installed distribution, editable or not)."""
    return any(
        entry.name == ENTRY_POINT and entry.value == PLUGIN_MODULE
        for entry in importlib.metadata.entry_points(group="verl.plugins")
    )


def why_not_registered() -> tuple[str, str]:
    """Why veRL did not load the plugin in this process, and how to load it."""
    if not _installed():
        return (
            "verl-prime-lora is not installed in this environment (no `verl.plugins` entry point "
            f"{ENTRY_POINT}; its modules were found on the path only)",
            "Install it: `pip install -e .` in its checkout, or its wheel (docs/install.md).",
        )
    policy = os.getenv("VERL_USE_EXTERNAL_PLUGINS", "auto").strip().lower()
    if policy == "none":
        return (
            "VERL_USE_EXTERNAL_PLUGINS=none turns veRL's plugin loading off",
            f"Unset VERL_USE_EXTERNAL_PLUGINS, or set it to name {ENTRY_POINT}.",
        )
    if policy != "auto" and ENTRY_POINT not in {name.strip() for name in policy.split(",")}:
        return (
            f"VERL_USE_EXTERNAL_PLUGINS={policy} does not name {ENTRY_POINT}",
            f"Add {ENTRY_POINT} to VERL_USE_EXTERNAL_PLUGINS, or unset it.",
        )
    try:
        _import_plugin()
    except Exception as exc:  # noqa: BLE001 - the reason, reported
        return (
            f"importing {PLUGIN_MODULE} failed: {type(exc).__name__}: {exc}",
            f"Fix that error: `python -c 'import {PLUGIN_MODULE}'` shows its traceback.",
        )
    return (
        "veRL was not imported before the config was composed",
        "Import verl first: `import verl` loads the plugin.",
    )


def plugin_loaded(value: Any = True) -> Any:
    """VALUE once the plugin is registered in this process, else `PluginNotLoadedError` naming why and how to load it
    (the recipes' `${verl_prime_lora_plugin:VALUE}`; `prime_run.PrimeRunDriver`)."""
    if _registered:
        return value
    reason, remedy = why_not_registered()
    raise PluginNotLoadedError(
        f"verl-prime-lora: a PRIME recipe (+recipe=prime_lora...) is composed, but veRL did not load the plugin "
        f"({reason}), so its trainers, advantage estimators and checks are registered neither here nor in any "
        f"worker. {remedy}"
    )


def register_resolver() -> None:
    if not OmegaConf.has_resolver(RESOLVER):
        OmegaConf.register_new_resolver(RESOLVER, plugin_loaded)
