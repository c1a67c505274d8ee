"""verl-prime-lora: PRIME (arXiv 2502.01456) as a plugin for veRL 0.9.1, with a LoRA actor.

Layers (see README): `core_algos` (pure-tensor math), the PRM worker and PRIME trainers (veRL glue),
the task (rewards, prompt filtering), the CPU platform, and the Hydra config group `recipe/`.
veRL loads `verl_prime_lora.verl_plugin` itself. Importing this package only sets up its logger, here and
nowhere else: ``verl_prime_lora.*`` loggers log from ``VERL_PRIME_LORA_LOGGING_LEVEL`` (default INFO),
where the root logger's level (WARNING, set at ``import verl``) would hide the package's INFO lines.
"""

import logging
import os
import sys

__version__ = "0.1.0"

LOGGING_LEVEL_ENV = "VERL_PRIME_LORA_LOGGING_LEVEL"


class _StderrWhileRootHasNoHandler(logging.Handler):
    """Writes records to stderr only while the root logger has no handler.

    Once anything (``import verl``, an application, pytest) configures the root logger, records reach
    its handlers through propagation instead, so no line is printed twice.
    """

    def emit(self, record: logging.LogRecord) -> None:
        if logging.getLogger().handlers:
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
    handler = _StderrWhileRootHasNoHandler()
    handler.setFormatter(logging.Formatter("%(levelname)s:%(asctime)s:%(name)s:%(message)s"))
    package_logger.addHandler(handler)


_configure_package_logger()
