r"""The PRIME step: veRL's advantage hook (`PPOTrainer._compute_advantage`) as PRIME makes it, read top to bottom
in `PrimeStep.compute_advantage`, which the trainer calls from that hook, after the old and reference log-probs and
before the actor update.

With q = log π_φ − log π_ref per response token (both at temperature 1), the mask m and groups by `uid`:

0. the batch: failed and dropped rollouts counted (the run stops above `prime.max_failed_rollout_ratio`),
   multi-output sessions refused, each row's PRM label acc_i (`step_rows`); a batch stopped here costs no forward.
1. forward: log π_φ of the PRM before its update, then log π_ref (`prime.prm.reference`). In this order on
   purpose: FSDP2 fixes a parameter's mixed-precision dtypes at its first forward, and a LoRA PRM's reference
   forward disables its adapter (peft sets requires_grad=False on it), so a first forward in that state would
   leave bf16 gradients for fp32 adapter weights. Where it is exact, the pre-update log-probs come from the
   update's own first forward instead (`prm_passes.update_forward_is_pre_update`); never on a LoRA PRM's first
   step in a process, which makes a forward of its own.
2. PRM update (`prime.prm.update` before/after; none): `prime.prm.epochs` passes of
   mean_i w_i·BCEWithLogits(z_i, acc_i), z_i = β·Σ_t q[i,t]·m[i,t] (`prm_loss`); `before` then scores the batch
   with the updated PRM.
3. rewards: r[i,t] = β·q[i,t]·m[i,t] from the PRM after its update (`before`) or before it (`after`, `none`), or
   `prime.process_rewards_fn`'s, with the `prm/*` metrics (`algo.prm_metrics`).
4. advantage: veRL's reward pre-processing, the gate w = clip((ā − ½)/(process_gate − ½), 0, 1) on ā, the running
   mean of the PRM's pre-update pairwise accuracy, the estimator `algorithm.adv_estimator` with r and w, and veRL's
   write-back (`advantage_writeback`).

A NaN or an infinity in the PRM update's loss or grad norm, in r or in the advantages stops the run before
anything is written back (`step_guards`).
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass
from typing import Any

import torch
import transfer_queue as tq
from tensordict import TensorDict
from verl.protocol import DataProto
from verl.trainer.ppo.core_algos import get_adv_estimator_fn
from verl.utils.debug import marked_timer

from verl_prime_lora.algo.prm_metrics import (
    advantage_part_metrics,
    prm_diagnostics,
    prm_rewards_and_metrics,
    process_spread_metrics,
)
from verl_prime_lora.algo.process_gate import ProcessGate
from verl_prime_lora.config import RunConfig
from verl_prime_lora.config.prime import AdvantageConfig, PrmConfig, ProcessRewardsFn
from verl_prime_lora.config.run import (
    PRM_TEMPERATURE,
    REF_ACTOR_BASE,
    REF_ACTOR_REF,
    REF_POLICY_OLD,
    REF_POLICY_T1,
    reward_function_name,
)
from verl_prime_lora.config.section import PrimeConfigError, key_of
from verl_prime_lora.config.verl_view import AlgorithmView
from verl_prime_lora.hardening.reward_failures import account_rollouts
from verl_prime_lora.hardening.step_guards import check_finite, check_prm_update
from verl_prime_lora.prime.advantage_writeback import (
    STEP_FIELDS,
    preprocess_rewards,
    read_step_data,
    write_back,
)
from verl_prime_lora.prime.prm_alarm import PrmAlarm, ProcessSignals
from verl_prime_lora.prime.prm_passes import update_forward_is_pre_update
from verl_prime_lora.prime.prm_worker import (
    ImplicitPRM,
    assemble_captured_log_probs,
    log_prob_meta,
    read_response_log_probs,
)
from verl_prime_lora.prime.step_rows import (
    StepRows,
    pad_nested,
    refuse_multi_output_sessions,
    unlabelled_rows,
)
from verl_prime_lora.rewards.reward_info import label_unknown

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class StepContext:
    """What the step reads of veRL's trainer at a step: the step number, the rollout batches per weight sync (the
    prompts a step expects: `data.train_batch_size` // it), the step's timing dict, the tokenizer, the actor's
    worker group (the PRM's reference forwards that use the actor) and the KL controller when the KL is in the
    reward."""

    global_step: int
    parameter_sync_step: int = 1
    timing: dict = dataclasses.field(default_factory=dict)  # veRL's timing_raw of the step, which marked_timer adds to
    tokenizer: Any = None
    actor_wg: Any = None
    kl_ctrl: Any = None


class PrimeStep:
    """The PRIME step (the module docstring) and the state it carries from step to step: the process gate
    (`ProcessGate`, checkpointed through `state_dict`), the alarm, and whether a LoRA PRM has made its first forward.
    The trainer builds it once its PRM worker group exists and calls `compute_advantage` at veRL's advantage hook.
    `reference` is where the PRM's reference log-probs come from (`config.run.reference_source`); `prm_dropout` and
    `prm_fp32` say whether the update's first forward can stand for the pre-update one (`prm_passes`)."""

    def __init__(self, run: RunConfig, prm: ImplicitPRM, reference: str, prm_dropout: float, prm_fp32: bool):
        self.run, self.prm, self.reference = run, prm, reference
        self.prm_dropout, self.prm_fp32 = prm_dropout, prm_fp32
        self.prm_adapter_forwarded = False  # a LoRA PRM's first forward in this process is done (1. below)
        advantage: AdvantageConfig = run.advantage
        self.gate = ProcessGate(advantage.process_gate)
        self.alarm = PrmAlarm(
            advantage.process_gate,
            advantage.process_std_threshold,
            advantage.process_coef,
            advantage.process_std_threshold_per_token,
        )

    def state_dict(self) -> dict:
        """What a checkpoint keeps of the step besides the PRM's weights: the gate's running mean."""
        return self.gate.state_dict()

    def load_state_dict(self, state: dict) -> None:
        self.gate.load_state_dict(state)

    def compute_advantage(self, batch, metrics: dict, context: StepContext):
        """veRL's advantage hook: the PRIME step, 0 to 4 as in the module docstring; veRL's batch with the advantages
        written back."""
        prime, timing = self.run.prime, context.timing
        # 0. the batch: its rows and labels, then veRL's step data, padded (B, T)
        rows = self._account_batch(batch, metrics, context)
        fields = [*STEP_FIELDS, "responses"] if self.run.process_rewards_fn is not None else list(STEP_FIELDS)
        data, response_mask_nested = read_step_data(batch, fields)
        mask, uid = data.batch["response_mask"].float(), data.non_tensor_batch["uid"]
        width = mask.shape[-1]

        # 1. forward: the PRM before its update, then its reference; what the PRM's loss reads, into TransferQueue
        capture = self._capture_pre_update(len(batch), metrics)
        prm_before = None
        if not capture or prime.diagnostics:
            with marked_timer("prm_forward", timing):
                prm_forward = self.prm.log_probs(batch)
            prm_before = pad_nested(prm_forward, width).float()
        with marked_timer("prm_ref", timing):
            ref = self._prm_reference_log_probs(batch, context)
        loss_inputs = rows.prm_loss_inputs(ref, prime.prm.balance_labels, with_row_index=capture)
        tq.kv_batch_put(
            keys=batch.keys, partition_id=batch.partition_id, fields=TensorDict(loss_inputs, batch_size=len(batch))
        )
        ref = pad_nested(ref, width).float()

        # 2. the PRM update
        prm_used, update_metrics = prm_before, {}
        if prime.prm.update != "none":
            prm_before, prm_used, update_metrics = self._update_prm(
                batch, rows, capture, prm_before, mask, metrics, context
            )

        # 3. the token process rewards and the prm/* metrics
        process_rewards, prm_metrics, held_out = prm_rewards_and_metrics(
            prm_before,
            prm_used,
            ref,
            mask,
            rows.labels,
            uid,
            prime.prm.beta,
            update_metrics,
            rows.labelled,
            outcomes=rows.outcomes,
        )
        check_finite(
            PrmConfig.KEY,
            "token process rewards β·(log π_φ − log π_ref)",
            process_rewards,
            mask,
            context.global_step,
            "Look for NaN/inf in the PRM's log-probs or in its reference's (prime.prm.reference).",
        )
        if self.run.process_rewards_fn is not None:
            process_rewards = self._replaced_process_rewards(data, rows, process_rewards, mask, context)
        estimator = str(self.run.verl.algorithm.adv_estimator)
        prm_metrics.update(process_spread_metrics(process_rewards, mask, uid, self.run.advantage, estimator))
        if prime.diagnostics:
            policy = self._policy_log_probs_t1(data)
            prm_metrics.update(
                prm_diagnostics(prm_used, ref, mask, rows.outcomes, uid, prime.prm.beta, rows.labelled, policy)
            )
        metrics.update(prm_metrics)

        # 4. the advantages, written back to TransferQueue
        return self._advantage_step(batch, data, response_mask_nested, process_rewards, held_out, metrics, context)

    # -------------------------------------------------------------------------------------------
    # 0. the batch
    # -------------------------------------------------------------------------------------------

    def _account_batch(self, batch, metrics: dict, context: StepContext) -> StepRows:
        """Failed and dropped rollouts counted (and the stop above `prime.max_failed_rollout_ratio`), multi-output
        sessions refused: a failed or refused batch stops here, before any PRM or reference forward."""
        info = tq.kv_batch_get(
            keys=batch.keys, partition_id=batch.partition_id, select_fields=["extra_fields", "response_mask"]
        )
        is_padding = [bool(tag.get("is_padding", False)) for tag in batch.tags]
        extra_fields = list(info["extra_fields"])
        verl = self.run.verl
        expected_prompts = verl.data.train_batch_size // context.parameter_sync_step
        account = account_rollouts(batch.keys, is_padding, extra_fields, verl.rollout.n, expected_prompts)
        metrics.update(account.metrics())
        account.check(self.run.prime.max_failed_rollout_ratio, context.global_step, reward_function_name(verl))
        refuse_multi_output_sessions(batch.keys, is_padding)
        metrics["prm/label_unknown_total"] = float(
            sum(label_unknown(fields) and not pad for fields, pad in zip(extra_fields, is_padding, strict=True))
        )
        unlabelled = unlabelled_rows(is_padding, account.failed_rows, extra_fields)
        lengths = info["response_mask"].offsets().diff().tolist()
        return StepRows.from_rewards(extra_fields, unlabelled, lengths, self.run.prime.prm.label_key)

    # -------------------------------------------------------------------------------------------
    # 1. forward
    # -------------------------------------------------------------------------------------------

    def pre_update_from_update(self, batch_rows: int) -> bool:
        """Whether the PRM update's first forward gives this step's pre-update log-probs exactly (`prm_passes`)."""
        n = self.run.verl.rollout.n
        return update_forward_is_pre_update(self.run.prime.prm, self.prm_dropout, batch_rows, n, self.prm_fp32)

    def _capture_pre_update(self, batch_rows: int, metrics: dict) -> bool:
        """Whether this step takes the PRM's pre-update log-probs from its update's first forward: where that is
        exact, and not on a LoRA PRM's first step in this process (whose first forward must be its own)."""
        first_lora_forward = self.prm.is_lora and not self.prm_adapter_forwarded
        capture = self.pre_update_from_update(batch_rows) and not first_lora_forward
        self.prm_adapter_forwarded = True
        metrics["prm/pre_update_from_update"] = float(capture and not self.run.prime.diagnostics)
        return capture

    def _prm_reference_log_probs(self, batch, context: StepContext) -> torch.Tensor:
        """log π_ref of the responses (nested), from the source `config.run.reference_source` chose."""
        source = self.reference
        if source in (REF_ACTOR_REF, REF_POLICY_OLD):
            field = "ref_log_prob" if source == REF_ACTOR_REF else "old_log_probs"
            return tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id, select_fields=[field])[field]
        if source in (REF_ACTOR_BASE, REF_POLICY_T1):
            context.actor_wg.compute_log_prob(log_prob_meta(batch, no_lora_adapter=source == REF_ACTOR_BASE))
            return read_response_log_probs(batch)
        return self.prm.reference_log_probs(batch)

    # -------------------------------------------------------------------------------------------
    # 2. the PRM update
    # -------------------------------------------------------------------------------------------

    def _update_prm(self, batch, rows: StepRows, capture: bool, prm_before, mask, metrics: dict, context: StepContext):
        """The PRM update, its loss and grad norm checked finite; (the PRM's log-probs before the update, those the
        rewards come from: after it in `before` mode, the same otherwise, the update's metrics), padded (B, T).

        With `capture` the pre-update log-probs are the update's first forward's; with `prime.diagnostics` the
        step's own forward's are kept, and their largest gap to the captured ones is logged."""
        with marked_timer("prm_update", context.timing):
            update_metrics, captured = self.prm.update(batch, capture=capture)
        check_prm_update(update_metrics, context.global_step)
        if capture:
            from_update = assemble_captured_log_probs(captured, rows.lengths, mask.shape[-1])
            if prm_before is None:
                prm_before = from_update
            else:
                gap = ((from_update - prm_before).abs() * mask).max()
                metrics["prm/pre_update_log_prob_max_abs_diff"] = gap.item()
        prm_used = prm_before
        if self.run.prime.prm.update == "before":
            with marked_timer("prm_forward_updated", context.timing):
                prm_used = pad_nested(self.prm.log_probs(batch), mask.shape[-1]).float()
        return prm_before, prm_used, update_metrics

    # -------------------------------------------------------------------------------------------
    # 3. the rewards
    # -------------------------------------------------------------------------------------------

    def _replaced_process_rewards(
        self, data: DataProto, rows: StepRows, process_rewards, mask, context: StepContext
    ) -> torch.Tensor:
        """`prime.process_rewards_fn`'s token rewards in place of the PRM's (its contract: `ProcessRewardsFn`),
        masked, and checked for shape and finiteness before any advantage reads them."""
        key = ProcessRewardsFn.KEY
        replaced = self.run.process_rewards_fn(
            process_rewards=process_rewards.clone(),
            response_mask=mask,
            responses=data.batch["responses"],
            reward_infos=rows.reward_infos,
            tokenizer=context.tokenizer,
        )
        if not isinstance(replaced, torch.Tensor) or replaced.shape != process_rewards.shape:
            got = tuple(replaced.shape) if isinstance(replaced, torch.Tensor) else type(replaced).__name__
            raise PrimeConfigError(
                f"{key}: {self.run.prime.process_rewards_fn.name} returned {got}; expected a tensor of shape "
                f"{tuple(process_rewards.shape)} (one reward per response token)."
            )
        check_finite(key, "replaced token process rewards", replaced, mask, context.global_step, "Fix the function.")
        # padding is set, not multiplied, to 0: a NaN there would reach the response's suffix sums
        return torch.where(mask > 0, replaced.to(process_rewards.dtype), 0.0)

    def _policy_log_probs_t1(self, data: DataProto) -> torch.Tensor | None:
        """veRL's old log-probs when they are the rollout policy's at temperature 1 and the PRM's reference is not
        the policy itself (then they would equal it): for the `prm/policy_dpo_acc_mixed` diagnostic."""
        if self.reference in (REF_POLICY_OLD, REF_POLICY_T1) or "old_log_probs" not in data.batch.keys():
            return None
        if self.run.verl.rollout.temperature != PRM_TEMPERATURE:
            return None
        return data.batch["old_log_probs"].float()

    # -------------------------------------------------------------------------------------------
    # 4. the advantages
    # -------------------------------------------------------------------------------------------

    def _advantage_step(
        self, batch, data: DataProto, response_mask_nested, process_rewards, held_out, metrics: dict, context
    ):
        """veRL's pre-processing of the rewards, the process gate's weight w, the estimator named by
        `algorithm.adv_estimator` with the process rewards and w, and veRL's write-back (`advantage_writeback`);
        advantages or returns that are NaN/inf on a response token stop the run before the write-back."""
        algorithm = self.run.verl.algorithm
        kl_ctrl = context.kl_ctrl if algorithm.use_kl_in_reward else None
        data, rollout_correction = preprocess_rewards(data, algorithm, kl_ctrl, metrics)
        gate = self._process_gate(held_out, metrics)
        advantage_inputs = (
            algorithm,
            data.batch["token_level_rewards"],
            data.batch["response_mask"],
            data.non_tensor_batch["uid"],
            process_rewards,
        )
        options = self.run.advantage
        data.batch["advantages"], data.batch["returns"] = prime_advantages(
            *advantage_inputs, options=options, process_scale=gate
        )
        _, outcome_returns = prime_advantages(*advantage_inputs, options=options, process_scale=0.0)
        metrics.update(advantage_part_metrics(data.batch["returns"], outcome_returns, data.batch["response_mask"]))
        for field in ("advantages", "returns"):
            check_finite(
                key_of(algorithm, "adv_estimator"),
                f"{field} of {algorithm.adv_estimator}",
                data.batch[field],
                data.batch["response_mask"],
                context.global_step,
                "Its inputs: the token-level rewards (finite when scored through the PRIME reward guard), the "
                "process rewards (checked at the PRM step), the KL penalty in the reward "
                "(algorithm.use_kl_in_reward) and algorithm.prime.*.",
            )
        return write_back(batch, data, response_mask_nested, algorithm, rollout_correction)

    def _process_gate(self, held_out, metrics: dict) -> float:
        """The gate's weight w, its running mean moved by this step's held-out ranking (`algo.process_gate`), and the
        alarm's check of the step (`prm_alarm`)."""
        gate = self.gate.update(held_out.pairwise_mixed)
        metrics["prm/dpo_acc_before_mixed_ema"] = self.gate.pairwise_ema
        metrics["prm/process_gate"] = gate
        signals = ProcessSignals(
            ranking_z_before=held_out.z,
            pairwise_ema=self.gate.pairwise_ema,
            gate=gate,
            groups_on=metrics.get("prm/process_groups_on"),
            group_std_max=metrics.get("prm/process_group_std/max"),
        )
        alarm_metrics, warnings = self.alarm.check(signals)
        metrics.update(alarm_metrics)
        for warning in warnings:
            logger.warning(warning)
        return gate


def prime_advantages(
    algorithm: AlgorithmView,
    token_level_rewards,
    response_mask,
    uid,
    process_rewards,
    options: AdvantageConfig | None = None,
    process_scale=1.0,
):
    """The estimator named by `algorithm.adv_estimator`, called with the process rewards, the gate's weight and the
    typed `algorithm.prime` options (the step's; None: the estimator reads them from the `algorithm` section, which
    it gets as its config, as veRL calls an estimator)."""
    estimator = get_adv_estimator_fn(algorithm.adv_estimator)
    return estimator(
        token_level_rewards=token_level_rewards,
        response_mask=response_mask,
        index=uid,
        config=algorithm.node,
        process_rewards=process_rewards.to(token_level_rewards.dtype),
        process_scale=process_scale,
        options=options,
    )
