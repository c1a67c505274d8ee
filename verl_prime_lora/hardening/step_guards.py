"""A PRIME step never trains on a NaN or an infinity: the guards the trainer runs every step.

* `check_prm_update`, after the PRM update (`prime_step`, 2.): a NaN/inf ``prm/update_loss`` or
  ``prm/grad_norm`` stops the run before the actor's update.
* `check_actor_update`, after the actor's update (`trainer._update_actor`): a NaN/inf ``actor/pg_loss`` or
  ``actor/grad_norm`` stops it before the checkpoint.
* `check_finite`, on every response token, before the values are used or written back: the token process
  rewards (`prime_step`, 3., and those of `prime.process_rewards_fn`), the advantages and the returns
  (`prime_step`, 4.).

Nothing here imports torch, veRL or Ray: tensors are read through their own methods.
"""

from __future__ import annotations

import math
from typing import Any

from verl_prime_lora.config.prime import PrmConfig
from verl_prime_lora.config.section import key_of
from verl_prime_lora.config.verl_view import VerlView

MAX_ROWS_NAMED = 8

# What the PRM worker's update returns (`ImplicitPRM.update`) → the metric it is logged as.
PRM_UPDATE_METRICS = {"loss": "prm/update_loss", "grad_norm": "prm/grad_norm"}
# What veRL's actor update logs (trainer_base._update_actor), checked likewise.
ACTOR_UPDATE_METRICS = ("actor/pg_loss", "actor/grad_norm")


class NonFiniteError(RuntimeError):
    """A value a PRIME step would train on is NaN or infinite; the message starts with the config key."""


def _check_update(key: str, who: str, values: dict[str, float], grad_norm: str, step: int, hint: str) -> None:
    """Raise `NonFiniteError` when an update's mean loss or grad norm (`values`, by metric name) is NaN or ±inf.

    veRL's FSDP engine skips the optimizer step of a mini-batch whose grad norm is not finite
    (`FSDPEngine.optimizer_step`, workers/engine/fsdp/transformer_impl.py: zero_grad instead of step), so such
    a mini-batch leaves the weights unchanged; the run still stops, before anything else trains or is saved.
    """
    bad = {metric: value for metric, value in values.items() if not math.isfinite(float(value))}
    if not bad:
        return
    if grad_norm in bad:
        weights = (
            "veRL's FSDP engine skipped the optimizer step of each mini-batch whose grad norm was not finite "
            "(FSDPEngine.optimizer_step: weights unchanged by it)"
        )
    else:
        weights = "its grad norm was finite, so its optimizer steps were taken"
    listed = ", ".join(f"{metric} = {value}" for metric, value in bad.items())
    raise NonFiniteError(f"{key}: step {step}: the {who} update gave {listed}; {weights}. The run stops. {hint}")


def check_prm_update(update_metrics: dict[str, float], step: int) -> None:
    """The PRM update's mean loss and grad norm (`PRM_UPDATE_METRICS`) are finite, before the actor's update."""
    values = {metric: update_metrics[key] for key, metric in PRM_UPDATE_METRICS.items() if key in update_metrics}
    hint = (
        "Look for NaN/inf in what the PRM trains on (its reference log-probs, the rewards' labels) or lower "
        "prime.prm.optim.lr."
    )
    _check_update(PrmConfig.KEY, "PRM", values, "prm/grad_norm", step, hint)


def check_actor_update(metrics: dict[str, float], step: int) -> None:
    """The actor update's policy loss and grad norm (`ACTOR_UPDATE_METRICS`) are finite, before the step's
    checkpoint. Its advantages were finite (`check_finite`), so a NaN here comes from the policy's log-probs."""
    values = {metric: metrics[metric] for metric in ACTOR_UPDATE_METRICS if metric in metrics}
    hint = "The advantages were finite: look at the actor's log-probs, or lower actor_rollout_ref.actor.optim.lr."
    _check_update(key_of(VerlView, "actor"), "actor", values, "actor/grad_norm", step, hint)


def check_finite(key: str, quantity: str, values: Any, mask: Any, step: int, hint: str) -> None:
    """Raise `NonFiniteError` (starting with `key`, naming `quantity` and `step`) when the (B, T) tensor `values`
    holds a NaN or ±inf where the (B, T) `mask` is > 0 (the response tokens; padding is not read)."""
    bad = ~values.isfinite() & (mask > 0)
    if not bool(bad.any()):
        return
    rows = bad.any(-1).nonzero().flatten().tolist()
    first = values[bad][0].item()
    named = ", ".join(map(str, rows[:MAX_ROWS_NAMED])) + (", ..." if len(rows) > MAX_ROWS_NAMED else "")
    raise NonFiniteError(
        f"{key}: step {step}: the {quantity} are NaN or infinite on {int(bad.sum())} response tokens of "
        f"{len(rows)} rows (rows {named}; first value {first}); they are not written back and the run stops "
        f"before the actor's update. {hint}"
    )
