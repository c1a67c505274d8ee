"""The passes over a step's batch that the PRM part of a PRIME step makes, decided from the run's configuration.

The one decision that needs more than the config keys: whether the PRM update's first forward of each row gives
exactly the pre-update log-probs (`update_forward_is_pre_update`), which saves the PRM a forward of its own; it
depends on the PRM's dropout (`model_dropout`, read from its Hugging Face config and its adapter's).
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass

from omegaconf import OmegaConf

from verl_prime_lora.config.prime import PrmConfig
from verl_prime_lora.config.run import REF_ACTOR_REF, REF_POLICY_OLD
from verl_prime_lora.config.verl_view import ModelView

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class PrmPasses:
    """Passes over a step's batch that the PRM part of a PRIME step makes (each a whole-batch pass)."""

    prm_forward: int  # forward-only passes of the PRM
    prm_train: int  # forward + backward passes of the PRM (its update: one per epoch)
    reference_forward: int  # forwards for log π_ref outside veRL's own log-probs (PRM copy, adapter off, actor)

    def total(self) -> int:
        return self.prm_forward + self.prm_train + self.reference_forward


def prm_passes(update: str, reference: str, epochs: int = 1, from_update: bool = False) -> tuple[PrmPasses, PrmPasses]:
    """(what a step makes, the minimum) for `prime.prm.update`, a `reference_source`, and whether the
    pre-update log-probs come `from_update` (`update_forward_is_pre_update`).

    A step makes: the PRM's pre-update log-probs (the `after` rewards, and `prm/dpo_acc_before`, the
    held-out ranking, in every mode) from a forward of their own unless `from_update`, `epochs`
    forward/backward passes unless `none`, one more forward after the update in `before` mode, and one
    reference forward unless veRL's ref/old log-probs are reused.
    Minimum: `after` = reference + the forward/backward passes (the first one's forward gives the
    pre-update log-probs); `before` = the same + one forward; `none` = reference + one forward. With
    `from_update` a step makes the minimum; without (several PRM mini-batches, dropout, or
    `prime.diagnostics`) one forward more. A LoRA PRM makes one forward more on the
    first step of a process only (`prime_step`, the forward).
    """
    reference_forward = 0 if reference in (REF_ACTOR_REF, REF_POLICY_OLD) else 1
    train = 0 if update == "none" else epochs
    made = PrmPasses((not from_update) + (update == "before"), train, reference_forward)
    minimum = PrmPasses({"none": 1, "after": 0, "before": 1}[update], train, reference_forward)
    return made, minimum


def update_forward_is_pre_update(prm: PrmConfig, dropout: float, batch_rows: int, n: int, fp32_compute: bool) -> bool:
    """Whether the PRM update's first forward of each row gives exactly the pre-update log-probs.

    It does when the whole batch is one mini-batch (no optimizer step before any row's first forward), and
    the training forward computes what the log-prob forward does: no dropout anywhere in the PRM
    (`dropout`: `model_dropout`, the model's and, for a LoRA PRM, its adapter's) and, outside fp32 compute
    (`fp32_compute`: the PRM's `engine.mixed_precision.param_dtype`), the same fixed micro-batches in both, as
    bf16 results depend on the shapes a kernel is given (docs/findings.md, "The compute precision"). A LoRA PRM
    also needs one forward with its adapter on before its first reference forward (`prime_step`, the forward),
    so the step makes its process's first step with a forward of its own.
    """
    same_shapes = fp32_compute or (
        not prm.use_dynamic_bsz and prm.micro_batch_size_per_gpu == prm.infer_micro_batch_size_per_gpu
    )
    return prm.update != "none" and dropout == 0 and batch_rows == prm.mini_batch_size * n and same_shapes


def model_dropout(model: ModelView) -> float:
    """The largest dropout probability in the PRM (`model`: its `prime.prm.model`): a `*dropout*` or `*_pdrop`
    number of its Hugging Face config (with `override_config`), and for a LoRA PRM its adapter's (`model.lora.dropout`,
    which `plugin.patches.install_lora_dropout` applies, else the `lora_dropout` of the adapter loaded from
    `lora_adapter_path`). 1.0 when a config cannot be read here (then nothing counts on 0)."""
    from transformers import AutoConfig

    try:
        hf_config = AutoConfig.from_pretrained(str(model.path), trust_remote_code=model.trust_remote_code)
    except (OSError, ValueError) as exc:
        logger.info("PRM: cannot read %s's config (%s); its dropout is taken as unknown", model.path, exc)
        return 1.0
    values = {**hf_config.to_dict(), **OmegaConf.to_container(model.override_config or OmegaConf.create())}
    base = max(
        (
            float(value)
            for key, value in values.items()
            if ("dropout" in key or key.endswith("_pdrop"))
            and isinstance(value, (int, float))
            and not isinstance(value, bool)
        ),
        default=0.0,
    )
    adapter = model.lora_dropout
    if adapter == 0 and model.lora_adapter_path is not None:
        adapter = saved_adapter_dropout(str(model.lora_adapter_path))
    return max(base, adapter)


def saved_adapter_dropout(adapter_path: str) -> float:
    """`lora_dropout` of a saved peft adapter (its `adapter_config.json`); 1.0 when it cannot be read here."""
    try:
        with open(os.path.join(adapter_path, "adapter_config.json")) as f:
            return float(json.load(f).get("lora_dropout") or 0.0)
    except (OSError, ValueError) as exc:
        logger.info("PRM: cannot read %s/adapter_config.json (%s); its dropout is taken as unknown", adapter_path, exc)
        return 1.0
