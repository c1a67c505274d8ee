"""How the plugin enters a veRL run: the `verl.plugins` entry point (`plugin`, `plugin_state`), the Hydra search path
of the `recipe` group, the mark that makes a run PRIME (`prime_run`), the patches of veRL that only a PRIME run's
processes apply (`patches`), and one W&B run across resumes (`wandb_run`)."""
