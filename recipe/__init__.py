"""Hydra config group `recipe` of verl-prime-lora (installed as the data package `verl_prime_lora.recipe`)."""
