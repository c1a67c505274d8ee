"""The soak: one long CPU PRIME run on the demo's task, killed and resumed, with what might grow recorded per step.
`sample` reads, `analyse` fits, `report` writes, `run` launches (the CLI); recorded soaks in `results/`."""
