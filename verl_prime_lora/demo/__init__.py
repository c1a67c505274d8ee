"""The main job: PRIME on chain arithmetic on CPU (`python -m verl_prime_lora.demo`): the task and its
warm start (`chain_task`), the learning-run launcher shared with the benchmarks (`learning_run`), the CLI.
"""
