"""The `verl.plugins` entry point: registers everything this package adds to veRL.

veRL imports every entry point of the group `verl.plugins` at `import verl`, in every process
(driver, TaskRunner, Ray workers), and swallows a failing import at DEBUG level — which would leave
the PRIME estimators or trainers silently unregistered and surface much later as "unknown
estimator/trainer". So each registering module is imported here under our own guard that logs the
cause at ERROR, and the import of this module then fails with the list of what did not register.

Under any veRL but the one this plugin is built for (`VERL_VERSION`, setup.py's pin) it registers nothing: its import
fails with one line that names both versions (logged at ERROR, as veRL would hide it).

Every process gets the registrations, names that a run uses only when it asks for them. The plugin's patches
(`plugin.patches`) are applied in the Ray processes of a PRIME run only (`config.run.in_prime_run_process`);
a PRIME run's driver gets them from the recipe's Hydra callback (`prime_run.PrimeRunDriver`).
"""

import functools
import importlib
import logging

from verl_prime_lora import __version__
from verl_prime_lora.plugin import plugin_state

logger = logging.getLogger(__name__)

VERL_VERSION = "0.9.1"  # the veRL release this plugin overrides private hooks of: setup.py pins `verl==` it


class UnsupportedVerlError(ImportError):
    """The installed veRL is not `VERL_VERSION`: the plugin registers nothing."""


def check_verl_version(installed: str) -> None:
    """Raise `UnsupportedVerlError` (and log its line at ERROR) unless `installed` is `VERL_VERSION`."""
    if installed != VERL_VERSION:
        message = (
            f"verl-prime-lora {__version__} supports veRL {VERL_VERSION} only, and this environment has veRL "
            f"{installed}: the plugin registers nothing (install veRL {VERL_VERSION}: pip install verl=={VERL_VERSION})"
        )
        logger.error(message)
        raise UnsupportedVerlError(message)


# `verl` is mid-import when veRL loads this module; its `__version__` is set before veRL loads any plugin.
check_verl_version(importlib.import_module("verl").__version__)

from verl_prime_lora.algo.verl_bindings import register_recorded_estimators  # noqa: E402 - veRL's version first
from verl_prime_lora.config.run import in_prime_run_process  # noqa: E402
from verl_prime_lora.patching import when_imported  # noqa: E402

# Each module registers its pieces with veRL / Hydra as an import side effect, except `core_algos`: it
# imports without veRL and only records its estimators, which `register_all` then hands to veRL.
REGISTERING_MODULES = (
    # first: modules below import veRL engines that read the platform at import time
    "verl_prime_lora.cpu.register",  # `cpu` platform + its patches (no-op where CUDA is present)
    "verl_prime_lora.plugin.hydra_search_path",  # `+recipe=prime_lora` config group
    "verl_prime_lora.algo.core_algos",  # records the `prime_grpo` / `prime_rloo` advantage estimators
)
# Imported, and so applied, in the Ray processes of a PRIME run only: the plugin's patches and warnings filter.
PRIME_RUN_MODULES = ("verl_prime_lora.plugin.patches",)
# `prime_sync` / `prime_separate_async` register with veRL's V1 trainers, where those are imported (the TaskRunner
# looks them up there): importing the trainer imports veRL's whole V1 trainer, which most processes never use.
TRAINERS_MODULE = "verl_prime_lora.prime.trainer"
VERL_ESTIMATORS = "verl.trainer.ppo.core_algos"  # where veRL's estimator registry lives
VERL_TRAINERS = "verl.trainer.ppo.v1"


def register_trainers(verl_trainers) -> None:
    """Imports `TRAINERS_MODULE` (its `@register_trainer` classes) once `verl_trainers` is, naming it on failure."""
    try:
        importlib.import_module(TRAINERS_MODULE)
    except Exception as exc:
        raise ImportError(f"verl-prime-lora could not register its trainers ({TRAINERS_MODULE}): {exc!r}") from exc


def register_all() -> None:
    """Imports every registering module (and, in a PRIME run's Ray process, `PRIME_RUN_MODULES`); registers the
    recorded advantage estimators where veRL's estimator registry is imported, and the trainers where veRL's V1
    trainers are.

    Each failure is logged at ERROR with its traceback; then one ImportError lists them all.
    """
    modules = REGISTERING_MODULES + (PRIME_RUN_MODULES if in_prime_run_process() else ())
    steps = [(name, functools.partial(importlib.import_module, name)) for name in modules]
    for what, module, register in (
        ("the advantage estimators", VERL_ESTIMATORS, lambda module: register_recorded_estimators()),
        ("the trainers", VERL_TRAINERS, register_trainers),
    ):
        steps.append((f"{what}, on the import of {module}", functools.partial(when_imported, module, register)))
    failed = []
    for what, step in steps:
        try:
            step()
        except Exception as exc:  # noqa: BLE001 - reported loudly, then re-raised below
            logger.exception("verl-prime-lora: registering %s failed: %r", what, exc)
            failed.append(f"{what}: {exc!r}")
    if failed:
        raise ImportError("verl-prime-lora could not register: " + "; ".join(failed))
    plugin_state.mark_registered()  # what the recipes check before Ray starts (`${verl_prime_lora_plugin:...}`)


plugin_state.register_resolver()  # the recipes resolve it in every process that reads their config
register_all()
