"""PRIME on veRL's V1 trainers: the trainers (`trainer`), the step they own (`prime_step`) with its alarm
(`prm_alarm`), the PRM worker group and its loss (`prm_worker`, `prm_loss`, `prm_passes`), the step's rows and
write-back (`step_rows`, `advantage_writeback`) and the accuracy-band prompt filter (`prompt_filter`)."""
