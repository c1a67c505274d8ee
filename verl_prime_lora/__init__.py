"""verl-prime-lora: PRIME (arXiv 2502.01456) as a plugin for veRL 0.9.1, with a LoRA actor.

Its folders are its layers: `config` (the run's configuration, read once: the typed PRIME sections, one view of
every veRL key the plugin reads, what they say about the run), `algo` (the math), `checkpoints` (where a run's
checkpoints lie and how they are saved), `checks` (before Ray), `rewards`, `hardening` (what keeps a long run
honest: reward failures, rollout health, the step watchdog, finiteness guards), `prime` (the PRIME trainers, the
step, the PRM worker, the prompt filter), `plugin` (the `verl.plugins` entry point, the Hydra search path, the
PRIME-run mark, the patches of veRL, W&B continuity), `verl_surface` (the manifest of every veRL name the plugin
touches), `cpu` (the CPU platform), `preflight` (GPU memory), `tools` (eval, export, config reference, tiny models)
and `demo` (the CPU main job);
the Hydra config group is `recipe/`. veRL loads `verl_prime_lora.plugin.plugin` itself.

**The seed**, as the code and the docs use the word: the training run behind the Tina-PRIME LoRA adapters, as their
model card states it (DeepSeek-R1-Distill-Qwen-1.5B, LoRA r=32 α=128 on the seven projections, K=6 samples,
β=0.05, a full-parameter PRM; docs/card.md). `recipe/prime_lora.yaml` reproduces it; where it does not, the
Deviations table of the README says why.

Importing this package only sets up its logger, here and nowhere else: ``verl_prime_lora.*`` loggers log
from ``VERL_PRIME_LORA_LOGGING_LEVEL`` (default INFO), where the root logger's level (WARNING, set at
``import verl``) would hide the package's INFO lines.
"""

import logging
import os
import sys

__version__ = "0.1.0"

LOGGING_LEVEL_ENV = "VERL_PRIME_LORA_LOGGING_LEVEL"


class _StderrWhenRootDropsIt(logging.Handler):
    """Writes a record to stderr only when no handler of the root logger takes it.

    Once anything (``import verl``, an application, pytest) gives the root logger a handler at the
    record's level, the record reaches it through propagation instead, so no line is printed twice. A
    root handler above it (veRL's Ray workers hold one at ERROR) would drop it: then it is written here.
    """

    def emit(self, record: logging.LogRecord) -> None:
        if any(record.levelno >= handler.level for handler in logging.getLogger().handlers):
            return
        try:
            sys.stderr.write(self.format(record) + "\n")
        except Exception:  # noqa: BLE001 - logging's convention: report, never raise
            self.handleError(record)


def _configure_package_logger() -> None:
    """The ``verl_prime_lora`` logger: its level from the environment, and the stderr fallback handler."""
    package_logger = logging.getLogger(__name__)
    level = os.getenv(LOGGING_LEVEL_ENV, "INFO")
    try:
        package_logger.setLevel(level.upper())
    except ValueError:
        raise ValueError(
            f"{LOGGING_LEVEL_ENV}={level!r} is not a logging level (DEBUG, INFO, WARNING, ERROR)"
        ) from None
    handler = _StderrWhenRootDropsIt()
    handler.setFormatter(logging.Formatter("%(levelname)s:%(asctime)s:%(name)s:%(message)s"))
    package_logger.addHandler(handler)


_configure_package_logger()
