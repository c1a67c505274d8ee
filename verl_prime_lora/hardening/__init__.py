"""What keeps a long run honest and its failures named: reward failures counted, not dropped (`reward_failures`), dead
vLLM replicas (`rollout_health`), stalled steps (`step_watchdog`), non-finite losses and advantages
(`step_guards`). Imports nothing of `prime` or `plugin`."""
