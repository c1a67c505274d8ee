"""The packages and the machine the configured GPU path needs, checked in the driver before Ray starts.

veRL imports them only inside its Ray workers, minutes into start-up, and a missing one surfaces there as an
ImportError deep in a worker's traceback (or, for a checkpoint engine, as an unregistered backend). For a
PRIME run, each check below fails first, with the key that selects the path and the two ways out:

* attention: `flash_attention_2`, veRL's default `attn_implementation` for the actor (and the PRM, whose
  model keys follow the actor's), needs the `flash_attn` package: transformers refuses to build the model
  without it. flash-attn is installed by a command of its own (its build imports torch, so it cannot sit in
  the `gpu` extra: docs/install.md); the other way out is `sdpa` with padded batches.
* the split placement's `nccl` weight sync (`actor_rollout_ref.rollout.checkpoint_engine.backend`) imports
  `cupy` in the actor's rank 0 and in every vLLM worker.

The packages are looked up (`importlib.util.find_spec`), not imported: a CUDA library is never loaded in the
driver. What only loading them shows is probed in a fresh interpreter (`run_probe`), whose crash, missing symbol
or hang is reported, never inherited by the driver:

* a flash-attn that is installed must import with its CUDA extension (`flash_attn_2_cuda`) against the installed
  torch: one built for another torch or CUDA fails only when the workers build the model;
* cupy must load NCCL (`nccl.get_version()`) and Ray's collective must report NCCL available: with cupy present
  but no loadable libnccl, the split placement fails at its first weight sync, inside Ray;
* on one machine with CUDA, the GPUs visible (`torch.cuda.device_count()`) must hold the layout (the trainer pool
  plus the standalone rollout pool); a split layout on a 1-GPU host otherwise waits for its rollout pool;
* wandb in `trainer.logger` needs credentials (`WANDB_API_KEY`, a `.netrc` entry for the wandb host, an API key in
  wandb's settings file) or `WANDB_MODE=offline`/`disabled`: without them `wandb.init` fails in the trainer,
  after the models load.

Each is a no-op where its path is not taken (sdpa, a sync other than nccl, `trainer.device=cpu`, no wandb), so CPU
runs never probe. The versions named are the ones veRL 0.9.1's own extras pin (read from its installed metadata).
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import re
import subprocess
import sys

from verl_prime_lora.config.run import (
    has_standalone_rollout,
    reward_pool_gpus,
    rollout_pool_gpus,
    trainer_loggers,
    training_ranks,
)
from verl_prime_lora.config.section import PrimeConfigError, key_of
from verl_prime_lora.config.verl_view import VerlView

FLASH_ATTENTION = ("flash_attention_2", "flash_attention_3")
SDPA_OVERRIDES = (
    "++actor_rollout_ref.model.override_config.attn_implementation=sdpa "
    "actor_rollout_ref.model.use_remove_padding=false"
)
NCCL_CHECK = 'python -c "from cupy.cuda import nccl; print(nccl.get_version())"'
NCCL_LIBRARY_PATH = (
    "export LD_LIBRARY_PATH=\"$(python -c 'import nvidia.nccl as n; print(n.__path__[0])')/lib:$LD_LIBRARY_PATH\""
)
PROBE_TIMEOUT_S = 180.0
# What each probe runs in a fresh interpreter; exit 0 is a pass.
FLASH_ATTN_PROBE = "import torch, flash_attn, flash_attn_2_cuda; from flash_attn import flash_attn_varlen_func"
NCCL_PROBE = (
    "from cupy.cuda import nccl; print(nccl.get_version()); import ray.util.collective as c; "
    "assert c.nccl_available(), 'ray.util.collective reports NCCL unavailable'"
)
GPU_COUNT_PROBE = "import torch; print(torch.cuda.device_count() if torch.cuda.is_available() else 0)"
# wandb's own lookup, in its order (wandb.sdk.lib.wbauth): the environment, the .netrc entry of the host, the API
# key of its settings file; offline and disabled runs need none. The standard library only: no wandb import.
WANDB_PROBE = r"""
import configparser, netrc, os, sys, urllib.parse
mode = os.environ.get("WANDB_MODE", "").lower()
if mode in ("offline", "dryrun", "disabled") or os.environ.get("WANDB_DISABLED", "").lower() in ("1", "true"):
    sys.exit(0)
if os.environ.get("WANDB_API_KEY") or os.environ.get("WANDB_IDENTITY_TOKEN_FILE"):
    sys.exit(0)
host = urllib.parse.urlparse(os.environ.get("WANDB_BASE_URL") or "https://api.wandb.ai").hostname
path = os.environ.get("NETRC") or os.path.expanduser("~/.netrc")
try:
    if netrc.netrc(path).authenticators(host):
        sys.exit(0)
except netrc.NetrcParseError:
    if host in open(path).read():
        sys.exit(0)
except OSError:
    pass
settings = configparser.ConfigParser()
settings.read(os.path.join(os.environ.get("WANDB_CONFIG_DIR") or os.path.expanduser("~/.config/wandb"), "settings"))
if settings.get("default", "api_key", fallback=""):
    sys.exit(0)
sys.exit(f"no credentials for {host}: WANDB_API_KEY is unset, {path} has no entry for it, WANDB_MODE={mode or 'unset'}")
"""


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


def run_probe(code: str, timeout_s: float = PROBE_TIMEOUT_S) -> tuple[bool, str]:
    """Run `code` in a fresh interpreter with the driver's environment: (it exited 0, its stdout), or (False, the
    tail of its output) when it failed, crashed or ran past `timeout_s`. Nothing it loads reaches the driver."""
    try:
        run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return False, f"did not finish in {timeout_s:.0f} s"
    if run.returncode == 0:
        return True, run.stdout.strip()
    tail = " | ".join((run.stderr.strip() or run.stdout.strip()).splitlines()[-3:])
    return False, f"exit {run.returncode}: {tail}"


def check_environment(view: VerlView) -> None:
    """Raise `PrimeConfigError` naming the key when the configured GPU path needs a package that is missing or
    does not load, more GPUs than this machine shows, or wandb credentials that are not there."""
    check_attention_package(view)
    check_weight_sync_package(view)
    check_visible_gpus(view)
    check_wandb_credentials(view)


def check_attention_package(view: VerlView) -> None:
    """The models whose attention the run builds: the actor's (its reference and vLLM follow it) and the PRM's."""
    probed = None
    for model in (view.model, view.prm.model):
        if model.node is None:
            continue
        implementation = model.attn_implementation
        if implementation not in FLASH_ATTENTION:
            continue
        if installed("flash_attn"):
            probed = run_probe(FLASH_ATTN_PROBE) if probed is None else probed
            loads, detail = probed
            if not loads:
                _fail(
                    key_of(model, "attn_implementation"),
                    f"is {implementation}, and flash_attn is installed but does not load with its CUDA extension "
                    f"against this torch (`{FLASH_ATTN_PROBE}`: {detail}); the workers would fail building the model. "
                    "Rebuild it for this torch: `pip uninstall -y flash-attn && pip install --no-build-isolation "
                    f"--no-cache-dir {verl_pin('flash-attn')}` (docs/install.md), or run with PyTorch's attention: "
                    f"`{SDPA_OVERRIDES}`.",
                )
            continue
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
    if has_standalone_rollout(view) and view.rollout.sync_backend == "nccl":
        loads, detail = run_probe(NCCL_PROBE)
        if not loads:
            _fail(
                key_of(view.rollout, "sync_backend"),
                f"is nccl (the split placement's weight sync), but NCCL does not load through cupy and Ray's "
                f"collective ({detail}); the first weight sync would fail inside Ray. Point the loader at the NCCL "
                f"that torch's wheels bring (`{NCCL_LIBRARY_PATH}`), check with `{NCCL_CHECK}` (docs/install.md), "
                "or run on one GPU: +recipe=prime_lora_colocated (no NCCL).",
            )


def _joins_a_cluster(view: VerlView) -> bool:
    from verl_prime_lora.checks.inputs.devices import _cluster_to_join

    return _cluster_to_join(view) is not None


def check_visible_gpus(view: VerlView) -> None:
    """One machine with CUDA, and Ray given no GPU count: the layout's GPUs must be among the visible ones (with
    `ray_kwargs.ray_init.num_gpus` set, or several nodes, or a cluster to join, `checks.inputs.devices` or Ray
    counts them)."""
    if str(view.trainer.device).lower() == "cpu" or view.ray.num_gpus is not None:
        return
    if view.trainer.nnodes > 1 or (has_standalone_rollout(view) and view.rollout.nnodes > 1):
        return
    if _joins_a_cluster(view):
        return
    counted, detail = run_probe(GPU_COUNT_PROBE)
    visible = int(detail) if counted and detail.isdigit() else 0
    if visible == 0:
        return  # no CUDA here: a CPU machine composing a GPU recipe (the preflight, the tests)
    trainer, rollout, reward = training_ranks(view), rollout_pool_gpus(view), reward_pool_gpus(view)
    needed = trainer + rollout + reward
    if needed <= visible:
        return
    parts = f"{trainer} for the trainer pool (trainer.n_gpus_per_node x trainer.nnodes)" + (
        f" + {rollout} for the standalone rollout (actor_rollout_ref.rollout.n_gpus_per_node)" if rollout else ""
    )
    parts += f" + {reward} for the reward-model pool" if reward else ""
    _fail(
        key_of(view.trainer, "n_gpus_per_node"),
        f"the layout needs {needed} GPUs ({parts}), but this machine shows {visible} "
        f"(CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', 'unset')}); Ray would wait for the missing "
        "ones. Lower the pools, free the GPUs"
        + (", or run on one GPU: +recipe=prime_lora_colocated." if rollout else "."),
    )


def check_wandb_credentials(view: VerlView) -> None:
    """`trainer.logger` with wandb: credentials, or an offline or disabled wandb."""
    if "wandb" not in trainer_loggers(view):
        return
    found, detail = run_probe(WANDB_PROBE)
    if not found:
        _fail(
            key_of(view.trainer, "logger"),
            f"includes wandb, which has no credentials here ({detail}); wandb.init would fail in the trainer once "
            "the models are loaded. Run `wandb login` (or set WANDB_API_KEY), or log offline with WANDB_MODE=offline "
            "(`wandb sync` later), or drop it: trainer.logger=[console].",
        )
