"""The one error the preflight raises for a config it cannot estimate."""


class PreflightConfigError(ValueError):
    """A config the preflight cannot estimate (or that main_ppo would refuse); the message names the key."""
