"""The veRL integration: the `verl.plugins` entry point (`plugin`), the Hydra search path, the
PRIME trainers, the PRM worker, the accuracy-band prompt filter, reward-failure accounting and the few
monkeypatches of veRL (`patches`), which only a PRIME run's processes apply (`prime_run`).
"""
