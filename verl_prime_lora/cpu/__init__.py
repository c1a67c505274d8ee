"""veRL 0.9.1 on a machine without a GPU: the `cpu` platform, its patches, the install step, a launcher.

- `register`: imported by our `verl.plugins` entry point (verl_prime_lora/plugin/plugin.py) in every
  process that imports verl; registers the `cpu` platform and applies `patches.apply_all()` when
  `VERL_PLATFORM=cpu` or the host has no accelerator, and does nothing on a CUDA machine.
- `platform`: the `PlatformCPU` class; `patches`: every monkeypatch, each naming what it works around.
- `install`: `python -m verl_prime_lora.cpu.install`, the post-install step of the `cpu` extra.
- `vllm_plugin`: vLLM's `vllm.general_plugins` entry point; the vLLM patches in vLLM's engine-core and worker
  processes, which never import verl.
- `launch`: `python -m verl_prime_lora.cpu.launch`, main_ppo under a timeout with full cleanup; it prints the
  start-up's phases at step 1 (`startup_phases`).

This `__init__` has no side effects on purpose: registration must run inside veRL's own plugin
loop (so the platform exists before veRL's engine modules resolve it at import), and the CLIs
above must not pay for importing veRL.
"""
