"""Puts this package's Hydra config group `recipe/` on Hydra's search path.

`python -m verl.trainer.main_ppo +recipe=prime_lora` resolves the group `recipe` through every
registered `SearchPathPlugin`. If the group is missing, Hydra does not fail: `+recipe=prime_lora`
silently becomes a stray string key and plain PPO runs. So the plugin is registered twice over: at `import verl`
(our `verl.plugins` entry point imports this module before `@hydra.main` composes), and by Hydra's own scan of the
`hydra_plugins` namespace (`hydra_plugins/verl_prime_lora`), which every install form offers (a wheel, an editable
install: setup.py lists the namespace, and a checkout that is the working directory) whether or not veRL loaded the
entry point (the recipes then say so: `plugin_state`). Any working directory.

The group's files live in the data package `verl_prime_lora.recipe` (the repo's `recipe/`,
mapped by setup.py); the search-path entry is the directory that contains it.
"""

import importlib.resources
from pathlib import Path

from hydra.core.config_search_path import ConfigSearchPath
from hydra.core.plugins import Plugins
from hydra.plugins.search_path_plugin import SearchPathPlugin

import verl_prime_lora

RECIPE_GROUP = "recipe"
PROVIDER = "verl-prime-lora"


def config_root() -> Path:
    """Directory holding the `recipe/` config group (checkout root or installed package dir).

    Run from inside a checkout, Python imports the checkout's own `verl_prime_lora` (the working directory comes
    first on the path), where no `verl_prime_lora.recipe` exists unless the checkout is the editable install: the
    group is then the checkout's `recipe/`, beside the package."""
    try:
        group_dir = Path(str(importlib.resources.files("verl_prime_lora.recipe")))
    except ModuleNotFoundError:
        group_dir = Path(verl_prime_lora.__file__).resolve().parents[1] / RECIPE_GROUP
    if group_dir.name != RECIPE_GROUP or not any(group_dir.glob("*.yaml")):
        raise FileNotFoundError(
            f"verl-prime-lora: the Hydra config group '{RECIPE_GROUP}' is not installed at {group_dir}; "
            "reinstall the package (`pip install -e .` in a checkout, or its wheel: docs/install.md) so that "
            "`+recipe=prime_lora` resolves"
        )
    return group_dir.parent


class PrimeLoraSearchPathPlugin(SearchPathPlugin):
    def manipulate_search_path(self, search_path: ConfigSearchPath) -> None:
        search_path.append(provider=PROVIDER, path=f"file://{config_root()}")


Plugins.instance().register(PrimeLoraSearchPathPlugin)  # Hydra keys plugins by class: the scan adds no second
