"""The `verl.plugins` entry point: registers everything this package adds to veRL.

veRL imports every entry point of the group `verl.plugins` at `import verl`, in every process
(driver, TaskRunner, Ray workers), and swallows a failing import at DEBUG level — which would leave
the PRIME estimators or trainers silently unregistered and surface much later as "unknown
estimator/trainer". So each registering module is imported here under our own guard that logs the
cause at ERROR, and the import of this module then fails with the list of what did not register.
"""

import functools
import importlib
import logging
import warnings

from verl_prime_lora.algo.verl_bindings import register_recorded_estimators
from verl_prime_lora.integration import plugin_state
from verl_prime_lora.patching import when_imported

logger = logging.getLogger(__name__)

# veRL's engine package warns once per process for every optional training backend it cannot import
# ("torchtitan engine is not available: ModuleNotFoundError(...)", likewise veomni, automodel,
# mindspeed, megatron; verl/workers/engine/__init__.py) — five lines in every Ray worker. veRL loads this
# plugin at `import verl`, before anything imports that package, so this filter (exact message, that
# module only) is in place in time; every other warning still shows.
warnings.filterwarnings(
    "ignore", message=r"\w+ engine is not available: ", category=UserWarning, module=r"verl\.workers\.engine\Z"
)

# Each module registers its pieces with veRL / Hydra as an import side effect, except `core_algos`: it
# imports without veRL and only records its estimators, which `register_all` then hands to veRL.
REGISTERING_MODULES = (
    # first: modules below import veRL engines that read the platform at import time
    "verl_prime_lora.cpu.register",  # `cpu` platform + its patches (no-op where CUDA is present)
    "verl_prime_lora.integration.hydra_search_path",  # `+recipe=prime_lora` config group
    "verl_prime_lora.algo.core_algos",  # records the `prime_grpo` / `prime_rloo` / `prime` advantage estimators
    "verl_prime_lora.integration.patches",  # PRIME config checks before Ray starts; LoRA dropout on FSDP
)
# `prime_sync` / `prime_separate_async` register with veRL's V1 trainers, where those are imported (the TaskRunner
# looks them up there): importing the trainer imports veRL's whole V1 trainer, which most processes never use.
TRAINERS_MODULE = "verl_prime_lora.integration.trainer"
VERL_ESTIMATORS = "verl.trainer.ppo.core_algos"  # where veRL's estimator registry lives
VERL_TRAINERS = "verl.trainer.ppo.v1"


def register_trainers(verl_trainers) -> None:
    """Imports `TRAINERS_MODULE` (its `@register_trainer` classes) once `verl_trainers` is, naming it on failure."""
    try:
        importlib.import_module(TRAINERS_MODULE)
    except Exception as exc:
        raise ImportError(f"verl-prime-lora could not register its trainers ({TRAINERS_MODULE}): {exc!r}") from exc


def register_all() -> None:
    """Imports every registering module; registers the recorded advantage estimators where veRL's estimator
    registry is imported, and the trainers where veRL's V1 trainers are.

    Each failure is logged at ERROR with its traceback; then one ImportError lists them all.
    """
    steps = [(name, functools.partial(importlib.import_module, name)) for name in REGISTERING_MODULES]
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
