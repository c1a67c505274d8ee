"""vLLM's `vllm.general_plugins` entry point: the CPU patches in every vLLM process.

vLLM calls `load_general_plugins()` in its engine-core and worker processes, which it spawns without
importing veRL, so veRL's plugin loop (`cpu/register.py`) never runs there. This hook applies the patches a
vLLM process needs when the CPU platform is wanted (each on the import of the module it patches), and does
nothing on a host with an accelerator.
"""

from verl_prime_lora.cpu.detect import cpu_platform_wanted


def apply() -> None:
    if cpu_platform_wanted():
        from verl_prime_lora.cpu import patches

        patches.apply_all()
