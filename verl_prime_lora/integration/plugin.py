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

logger = logging.getLogger(__name__)

# veRL's engine package warns once per process for every optional training backend it cannot import
# ("torchtitan engine is not available: ModuleNotFoundError(...)", likewise veomni, automodel,
# mindspeed, megatron; verl/workers/engine/__init__.py) — five lines in every Ray worker. Its
# first import in any process comes from the modules below, so this filter (exact message, that
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
    "verl_prime_lora.integration.trainer",  # `prime_sync` / `prime_separate_async` V1 trainers
)


def register_all() -> None:
    """Imports every registering module, then registers the recorded advantage estimators with veRL.

    Each failure is logged at ERROR with its traceback; then one ImportError lists them all.
    """
    steps = [(name, functools.partial(importlib.import_module, name)) for name in REGISTERING_MODULES]
    steps.append(("the advantage estimators", register_recorded_estimators))
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
