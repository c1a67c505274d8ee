"""Performance: step time against GRPO and TRL, the PRIME step's phases, GPU memory, CPU by process, the advantage
estimators; results in `results/`."""
