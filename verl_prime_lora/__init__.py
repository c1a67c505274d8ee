"""verl-prime-lora: PRIME (arXiv 2502.01456) as a plugin for veRL 0.9.1, with a LoRA actor.

Layers (see README): `core_algos` (pure-tensor math), the PRM worker and PRIME trainers (veRL glue),
the task (rewards, prompt filtering), the CPU platform, and the Hydra config group `recipe/`.
Importing this package has no side effects; veRL loads `verl_prime_lora.verl_plugin` itself.
"""

__version__ = "0.1.0"
