"""The packages the configured GPU path imports, checked in the driver before Ray starts.

veRL imports them only inside its Ray workers, minutes into start-up, and a missing one surfaces there as an
ImportError deep in a worker's traceback (or, for a checkpoint engine, as an unregistered backend). For a
PRIME run, each check below fails first, with the key that selects the path and the two ways out:

* attention: `flash_attention_2`, veRL's default `attn_implementation` for the actor (and the PRM, whose
  model keys follow the actor's), needs the `flash_attn` package: transformers refuses to build the model
  without it. flash-attn is installed by a command of its own (its build imports torch, so it cannot sit in
  the `gpu` extra: docs/install.md); the other way out is `sdpa` with padded batches.
* the split placement's `nccl` weight sync (`actor_rollout_ref.rollout.checkpoint_engine.backend`) imports
  `cupy` in the actor's rank 0 and in every vLLM worker.

The packages are looked up (`importlib.util.find_spec`), not imported: a CUDA library is never loaded here.
The versions named are the ones veRL 0.9.1's own extras pin (read from its installed metadata).
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import re

from verl_prime_lora.config.prime import PrimeConfigError
from verl_prime_lora.config.run import has_standalone_rollout
from verl_prime_lora.config.verl_view import VerlView, key_of

FLASH_ATTENTION = ("flash_attention_2", "flash_attention_3")
SDPA_OVERRIDES = (
    "++actor_rollout_ref.model.override_config.attn_implementation=sdpa "
    "actor_rollout_ref.model.use_remove_padding=false"
)
NCCL_CHECK = 'python -c "from cupy.cuda import nccl; print(nccl.get_version())"'


def _fail(key: str, message: str) -> None:
    raise PrimeConfigError(f"{key}: {message}")


def verl_pin(package: str) -> str:
    """`package==version` as one of veRL's extras pins it (its installed metadata), else the bare name."""
    pattern = re.compile(rf"^{re.escape(package)}\s*==\s*([^\s;]+)", re.IGNORECASE)
    try:
        requirements = importlib.metadata.requires("verl") or []
    except importlib.metadata.PackageNotFoundError:
        requirements = []
    for requirement in requirements:
        match = pattern.match(requirement)
        if match:
            return f"{package}=={match.group(1)}"
    return package


def installed(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def check_environment(view: VerlView) -> None:
    """Raise `PrimeConfigError` naming the key when the configured GPU path needs a package that is missing."""
    check_attention_package(view)
    check_weight_sync_package(view)


def check_attention_package(view: VerlView) -> None:
    """The models whose attention the run builds: the actor's (its reference and vLLM follow it) and the PRM's."""
    for model in (view.model, view.prm.model):
        if model.node is None:
            continue
        implementation = model.attn_implementation
        if implementation in FLASH_ATTENTION and not installed("flash_attn"):
            _fail(
                key_of(model, "attn_implementation"),
                f"is {implementation}{' (veRL default)' if implementation == 'flash_attention_2' else ''}, "
                "but the flash_attn package is not installed, and transformers builds no model without it. "
                "Install it after torch: `pip install wheel && pip install --no-build-isolation "
                f"{verl_pin('flash-attn')}` (docs/install.md), or run with PyTorch's attention: "
                f"`{SDPA_OVERRIDES}` (padded micro-batches; the PRM follows the actor's model keys).",
            )


def check_weight_sync_package(view: VerlView) -> None:
    if has_standalone_rollout(view) and view.rollout.sync_backend == "nccl" and not installed("cupy"):
        _fail(
            key_of(view.rollout, "sync_backend"),
            "is nccl (the split placement's weight sync from the actor to vLLM), which imports cupy in the actor "
            f"and in every vLLM worker, and cupy is not installed. Install veRL's pin: `pip install "
            f"{verl_pin('cupy-cuda13x')}` (a CUDA 13 build: NVIDIA driver >= 580), then check NCCL with "
            f"`{NCCL_CHECK}`.",
        )
