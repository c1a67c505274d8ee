"""The main job: PRIME on chain arithmetic on CPU (`python -m verl_prime_lora.demo`): the task (`chain_task`), its
warm start (`warm_start`, fine-tuned by `sft`), the learning-run launcher shared with the benchmarks
(`learning_run`), the CLI.
"""
