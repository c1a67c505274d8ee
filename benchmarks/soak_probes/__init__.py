"""The soak's side probes (`benchmarks/soak.py` is the soak): each a small experiment that named one process's growth,
its data and README in `benchmarks/results/soak/<folder>/`. Run from the repository root as
`python -m benchmarks.soak_probes.<name> ...` (the README of each results folder has the commands)."""
