"""The algorithm: PRIME's pure-tensor math (`core_algos`) and the lazy bindings to veRL's estimator registry
(`verl_bindings`). Importable without veRL.
"""
