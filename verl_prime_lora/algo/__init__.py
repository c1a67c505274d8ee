"""The algorithm: PRIME's pure-tensor math (`core_algos`), its typed configuration (`prime_config`) and
the lazy bindings to veRL's estimator registry (`verl_bindings`). Importable without veRL.
"""
