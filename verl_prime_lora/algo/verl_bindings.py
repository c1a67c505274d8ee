"""The veRL functions `core_algos` uses, bound when first called, so that importing it does not import veRL.

`import verl` loads this package's plugin (`plugin.plugin`), which imports `core_algos` and then the
trainer, which imports names from `core_algos`. Were `core_algos` to import veRL at its top, importing
it before veRL would run the plugin while `core_algos` is half-initialised, and the trainer's import
would fail. So `core_algos` imports only torch/numpy and this module:

* ``register_adv_est(name)`` records an advantage estimator here; ``register_recorded_estimators()``
  hands the records to veRL's registry. The plugin imports `core_algos` at `import verl` and calls it where
  veRL's registry (`verl.trainer.ppo.core_algos`) is imported: in every process that looks an estimator up,
  the estimators are registered once, whichever of veRL and `core_algos` was imported first. With veRL's
  plugin loading turned off (``VERL_USE_EXTERNAL_PLUGINS``), call it yourself.
* ``masked_whiten`` is veRL's, imported at its first call.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

_RECORDED_ESTIMATORS: dict[str, Callable[..., Any]] = {}


def register_adv_est(name: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorator: records ``fn`` as veRL advantage estimator ``name`` (see ``register_recorded_estimators``)."""

    def record(fn: Callable[..., Any]) -> Callable[..., Any]:
        _RECORDED_ESTIMATORS[name] = fn
        return fn

    return record


def register_recorded_estimators() -> None:
    """Registers every recorded estimator with veRL (veRL refuses a name already bound to another function)."""
    from verl.trainer.ppo.core_algos import register_adv_est as verl_register_adv_est

    for name, fn in _RECORDED_ESTIMATORS.items():
        verl_register_adv_est(name)(fn)


def masked_whiten(values: torch.Tensor, mask: torch.Tensor, shift_mean: bool = True) -> torch.Tensor:
    """veRL's masked whitening (`verl.utils.torch_functional.masked_whiten`)."""
    from verl.utils.torch_functional import masked_whiten as verl_masked_whiten

    return verl_masked_whiten(values, mask, shift_mean)
