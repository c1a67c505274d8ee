"""The run's configuration, read once: every key the plugin reads, typed, in this package alone.

* `prime`: the typed PRIME sections (`prime.*`, `algorithm.prime.*`), their defaults and checks;
* `section`: the one typed-config mechanism (a section of the config as a frozen dataclass, its keys, its errors);
* `verl_view`: every veRL key the plugin reads, as one typed, read-only view (`VerlView`);
* `run`: what the configuration says about the run (a PRIME run?, ranks, pools, LoRA, the PRM's reference, the
  folder resumed), computed from the view.

`run_config(config)` builds a process's one `RunConfig`: in the driver's check (`checks.config_checks.
validate_prime_config` returns it), in the PRIME trainer's `__init__` (inside Ray, from the config the driver
checked) and in the preflight; the PRM worker, the checks and the guards are handed it or its parts. No module
outside this package reads a config key by name (tests/config/test_config_layer.py). Nothing here imports veRL, torch or
Ray at module level.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from verl_prime_lora.config.prime import AdvantageConfig, PrimeConfig, ProcessRewardsFn, advantage_config
from verl_prime_lora.config.section import PrimeConfigError, config_value, read_section
from verl_prime_lora.config.verl_view import VerlView, verl_view


@dataclass(frozen=True)
class RunConfig:
    """One run's configuration: veRL's keys (`verl`), `prime.*` (`prime`), `algorithm.prime.*` (`advantage`) and
    the function `prime.process_rewards_fn` names, loaded (None: the PRM's own rewards)."""

    verl: VerlView
    prime: PrimeConfig
    advantage: AdvantageConfig
    process_rewards_fn: Callable[..., Any] | None = None


def prime_config(view: VerlView) -> PrimeConfig:
    """The typed `prime` section of the config `view` was read from (every default when it has none).

    A null `prime.prm.mini_batch_size` becomes the actor's `ppo_mini_batch_size`.
    """
    prime = read_section(PrimeConfig, config_value(view.node, PrimeConfig.KEY))
    actor_mini = view.actor.ppo_mini_batch_size
    if prime.prm.mini_batch_size is None and actor_mini is not None:
        prime = dataclasses.replace(prime, prm=dataclasses.replace(prime.prm, mini_batch_size=int(actor_mini)))
    return prime


def load_process_rewards_fn(ref: ProcessRewardsFn) -> Callable[..., Any] | None:
    """The function `prime.process_rewards_fn` names, or None when its `path` is null (the PRM's own rewards)."""
    if not ref.path:
        return None
    from verl.utils.import_utils import load_extern_object

    try:
        return load_extern_object(ref.path, ref.name)
    except Exception as exc:  # noqa: BLE001 - missing file, import error, missing function
        raise PrimeConfigError(
            f"{ref.KEY}.path: cannot load {ref.name!r} from {ref.path}: {type(exc).__name__}: {exc}"
        ) from None


def run_config(config: Any, view: VerlView | None = None) -> RunConfig:
    """The `RunConfig` of a composed config (`view`: its view, when read already); raises `PrimeConfigError`
    naming the key of a `prime.*` or `algorithm.prime.*` setting that is wrong, or of a function that does not load.
    """
    view = verl_view(config) if view is None else view
    prime = prime_config(view)
    advantage = advantage_config(view.algorithm.node)
    return RunConfig(view, prime, advantage, load_process_rewards_fn(prime.process_rewards_fn))
