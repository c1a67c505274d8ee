"""The rows of a PRIME step's batch, as the accounting finds them: each row's PRM label, whether it has one, its
response length, and what the PRM's loss reads of them.

A row has no PRM label when it is one of veRL's padding rows, when its reward function raised (a failed row,
`reward_failures`), or when the reward could not decide the outcome (`reward_info.label_unknown`: a verifier
timeout, an unusable ground truth), whose 0 says nothing about the response. Such a row gets process rewards and
advantages like any other, but weight 0 in the PRM's loss and no part in a `prm/*` metric.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from verl_prime_lora.algo.implicit_prm import balanced_label_weights
from verl_prime_lora.prime.prm_loss import PRM_LABEL_FIELD, PRM_REF_FIELD, PRM_ROW_FIELD, PRM_WEIGHT_FIELD
from verl_prime_lora.rewards.reward_info import label_unknown, reward_extra_info

# reward_extra_info key of the outcome accuracy, as veRL's validation reads it (`val-core/<source>/acc`)
OUTCOME_KEY = "acc"


@dataclass(frozen=True)
class StepRows:
    """Per row of a step's batch: the PRM label acc_i (0/1), whether the row is labelled (a response with a decided
    reward: the PRM trains and is measured on it), the response length, the reward's extra info and the outcome
    the PRM's rankings are measured against."""

    labels: torch.Tensor  # (B,)
    labelled: torch.Tensor  # (B,) 1.0 / 0.0
    lengths: list[int]
    reward_infos: list[dict]  # each row's reward_extra_info (for `prime.process_rewards_fn`)
    outcomes: torch.Tensor  # (B,) `outcome_labels`

    @classmethod
    def from_rewards(
        cls, extra_fields: list[Any], unlabelled: list[bool], lengths: list[int], label_key: str
    ) -> StepRows:
        """The rows of a batch from each row's `extra_fields` (its reward's), the `unlabelled` rows
        (`unlabelled_rows`), the response lengths and `prime.prm.label_key`."""
        labels = labels_from_extra_fields(extra_fields, unlabelled, label_key)
        return cls(
            labels=labels,
            labelled=labelled_rows(lengths, unlabelled),
            lengths=lengths,
            reward_infos=[reward_extra_info(fields) for fields in extra_fields],
            outcomes=outcome_labels(extra_fields, unlabelled, labels),
        )

    def prm_loss_inputs(
        self, ref_log_probs: torch.Tensor, balance_labels: bool, with_row_index: bool
    ) -> dict[str, torch.Tensor]:
        """The TransferQueue fields the PRM's loss reads (`prm_loss`), nested (B, T_i): log π_ref, and per response
        token its row's label acc_i and loss weight w_i: 1 on a labelled row and 0 on the others, or with
        `balance_labels` n/(2·n_c) on a labelled row of class c (`implicit_prm.balanced_label_weights`); with
        `with_row_index` the row's index in the batch too (to place the log-probs the update captures)."""
        if balance_labels:
            weights = balanced_label_weights(self.labels, self.labelled[:, None])
        else:
            weights = self.labelled
        fields = {
            PRM_REF_FIELD: ref_log_probs,
            PRM_LABEL_FIELD: nested_rows(self.labels, self.lengths),
            PRM_WEIGHT_FIELD: nested_rows(weights, self.lengths),
        }
        if with_row_index:
            fields[PRM_ROW_FIELD] = nested_rows(torch.arange(len(self.lengths), dtype=torch.float32), self.lengths)
        return fields


def unlabelled_rows(is_padding: list[bool], failed_rows: list[bool], extra_fields: list[Any]) -> list[bool]:
    """Rows the PRM has no label for: veRL's padding rows, failed rows and rows whose outcome is unknown."""
    return [
        pad or failed or label_unknown(fields)
        for pad, failed, fields in zip(is_padding, failed_rows, extra_fields, strict=True)
    ]


def labels_from_extra_fields(extra_fields: list[Any], unlabelled: list[bool], label_key: str) -> torch.Tensor:
    """The PRM label per row: `reward_extra_info[label_key]` (the 0/1 accuracy), 0 on `unlabelled` rows
    (`unlabelled_rows`: their weight in the PRM loss is 0)."""
    labels = []
    for i, (fields, skip) in enumerate(zip(extra_fields, unlabelled, strict=True)):
        if skip:
            labels.append(0.0)
            continue
        info = reward_extra_info(fields)
        if label_key not in info:
            raise KeyError(
                f"prime.prm.label_key: row {i} has no reward_extra_info[{label_key!r}] (keys: {sorted(info)}); "
                "the reward function must return the outcome accuracy under this key "
                "(reward.custom_reward_function.path=pkg://verl_prime_lora.rewards.math_format returns `acc`)."
            )
        labels.append(float(info[label_key]))
    return torch.tensor(labels, dtype=torch.float32)


def outcome_labels(extra_fields: list[Any], unlabelled: list[bool], labels: torch.Tensor) -> torch.Tensor:
    """The outcome per row that the PRM's rankings are measured against: `reward_extra_info["acc"]` where every
    labelled row has it, else the PRM's own labels. With the default `prime.prm.label_key=acc` the two are one;
    with another label key the rankings (and the gate and the alarm that read them) still ask whether the PRM
    orders right answers above wrong ones."""
    infos = [reward_extra_info(fields) for fields, skip in zip(extra_fields, unlabelled, strict=True) if not skip]
    if not all(OUTCOME_KEY in info for info in infos):
        return labels
    return labels_from_extra_fields(extra_fields, unlabelled, OUTCOME_KEY)


def labelled_rows(lengths: list[int], unlabelled: list[bool]) -> torch.Tensor:
    """(B,) 1.0 for the rows the PRM trains on and is measured on (a response and a label), else 0.0."""
    return torch.tensor([float(n > 0 and not skip) for n, skip in zip(lengths, unlabelled, strict=True)])


def refuse_multi_output_sessions(keys, is_padding) -> None:
    """Stop (before any update) on agent loops that return several outputs per session.

    veRL's keys are `{uid}_{session}_{index}`; index > 0 means a session produced several trajectories
    (e.g. one per turn), which veRL's own GRPO scores by each session's final output and broadcasts
    (`compute_advantage_for_multi_trajectories`). PRIME's estimators and PRM would instead treat every
    output as a response of its own in the prompt's group, so such runs are refused, not mis-trained.
    Loops annotated to return a list are refused before Ray (`checks.inputs.agent_loops`); this
    catches the others at their first step.
    """
    for key, pad in zip(keys, is_padding, strict=True):
        if not pad and int(key.rsplit("_", 2)[2]) > 0:
            raise NotImplementedError(
                f"trainer.v1.trainer_mode: PRIME trainers take one output per session, but the agent loop "
                f"returned several (trajectory key {key!r}); multi-output sessions are not supported by "
                "prime_sync / prime_separate_async: use an agent loop that returns the whole session as one "
                "response (multi-turn with a response mask is fine), or veRL's own trainer with grpo."
            )


def nested_rows(values: torch.Tensor, lengths: list[int]) -> torch.Tensor:
    """Nested (B, T_i) tensor with row i = values[i] repeated over T_i tokens (or `values` (B,T) cut)."""
    rows = []
    for i, length in enumerate(lengths):
        rows.append(values[i].expand(length).clone() if values.dim() == 1 else values[i, :length])
    return torch.nested.as_nested_tensor(rows, layout=torch.jagged)


def pad_nested(nested: torch.Tensor, width: int) -> torch.Tensor:
    """(B, T_i) nested → (B, width) dense, zero padded."""
    rows = nested.unbind()
    out = torch.zeros(len(rows), width, dtype=rows[0].dtype if rows else torch.float32)
    for i, row in enumerate(rows):
        n = min(row.shape[0], width)
        out[i, :n] = row[:n]
    return out
