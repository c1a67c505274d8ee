"""The lab's shared library: the study runner and its statistics, run files, checkpointed runs as models, the arms,
and the chain-credit helpers (step labels, the credit controls)."""
