"""Reward failures in PRIME runs: counted every step, logged once, and a stop above a chosen ratio.

What veRL 0.9.1 does on its own (V1 trainer, rewards computed by the reward-loop workers while the
agent loop runs): a reward function that raises inside `RewardLoopWorker.compute_score`
(experimental/reward_loop/reward_loop.py, `NaiveRewardManager.run_single` naive.py)
propagates through the Ray call in `AgentLoopWorker._compute_score` (experimental/agent_loop/
agent_loop.py) and `AgentLoopWorkerTQ._agent_loop_postprocess` (trainer/ppo/v1/agent_loop_tq.py)
to `_run_prompt` (agent_loop_tq.py), which logs one traceback per failed rollout, never writes
that rollout to TransferQueue and tags its prompt `failure`. The sync replay buffer still samples the
group without it (replay_buffer.py, `sync_refill_failed_groups=False`), `_balance_batch` pads
the batch with `is_padding` rows (trainer_base.py, ppo/padding_utils.py), and no metric says so.

For the PRIME trainers (`trainer.v1.trainer_mode` `prime_sync` / `prime_separate_async`) instead:

* Reward-loop workers (`guarded_score`, installed on `RewardLoopWorker.compute_score` by
  `plugin.patches`): an exception while scoring one rollout, a call that runs past `prime.reward_timeout_s`
  (veRL would wait on it for ever), or a score or PRM label that is NaN, ±inf or not a number
  (`reward_values.result_problem`), becomes a row with reward 0 and
  ``reward_extra_info`` = {``reward_failed``: 1.0, ``reward_error``: "Type: message" or the value problem
  ("non-finite score nan"), the PRM label key: 0.0, every other key this process has seen on a scored
  row, zeroed}: veRL's colocated reward path takes a batch's key set from its first row, so every row
  needs the same keys. Every scored row gets ``reward_failed`` 0.0 and ``reward_error`` "". The first
  failure of each process is logged (with its traceback when it raised); later ones are only counted.
  `complete_key_sets` (on `compute_score_batch`, veRL's colocated reward path) also fills a failed row
  that came before any scored row of its process.
  Plain veRL runs keep veRL's behaviour.
* The step (`account_rollouts`, called first in `PrimeStep.compute_advantage`): per step,
  ``reward/failed_total`` and ``reward/failed_ratio`` (rollouts whose reward raised, ran past its time or was
  not a finite number), ``reward/timed_out_total``,
  ``prime/dropped_rollouts_total`` (rollouts veRL lost before training: rollout.n per prompt of the
  batch, minus the rollouts present), ``prime/padding_rows_total``, ``prime/group_size_min`` /
  ``_mean`` (rollouts per prompt, 0 for a prompt whose every rollout was lost), and
  ``prime/failed_rollout_ratio`` = (failed + dropped) / expected. Above
  ``prime.max_failed_rollout_ratio`` (default 0.0: any failure) the step raises `RolloutFailureError`
  with the counts, the reward function and the first reward error, and ``main_ppo`` exits non-zero; so
  does a step whose every rollout's reward was not a finite number, whatever the ratio allows (nothing
  would be left to train on). At or below it a failed rollout keeps its 0 reward for the actor and has
  no PRM label: the PRM neither trains on it nor counts it in its ``prm/*`` metrics, exactly as a
  padding row.

Nothing here imports veRL, torch or Ray.
"""

from __future__ import annotations

import asyncio
import logging
import numbers
import os
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from verl_prime_lora.config import prime_config
from verl_prime_lora.config.prime import PrimeConfig
from verl_prime_lora.config.run import MAX_RATIO_KEY, REWARD_FN_KEY, is_prime_trainer
from verl_prime_lora.config.section import key_of
from verl_prime_lora.config.verl_view import VerlView
from verl_prime_lora.rewards.reward_info import reward_extra_info
from verl_prime_lora.rewards.reward_values import is_value_problem, result_problem

TIMEOUT_KEY = key_of(PrimeConfig, "reward_timeout_s")

logger = logging.getLogger(__name__)

FAILED_KEY = "reward_failed"  # reward_extra_info: 1.0 when the row's reward failed (raised, or no finite number)
ERROR_KEY = "reward_error"  # reward_extra_info: "ExceptionType: message" or the value problem, else ""
MAX_ERROR_CHARS = 500

# Per process: a zero value for each reward_extra_info key seen on a scored row (failed rows carry them all).
_ZEROED_KEYS: dict[str, Any] = {}
_FIRST_FAILURE_LOGGED = False


class RolloutFailureError(RuntimeError):
    """A training step lost more rollouts than `prime.max_failed_rollout_ratio` allows, or got no finite reward."""


# ---------------------------------------------------------------------------------------------------
# reward-loop workers
# ---------------------------------------------------------------------------------------------------


def _zero_like(value: Any) -> Any:
    if isinstance(value, numbers.Number):
        return 0.0
    if isinstance(value, str):
        return ""
    return None


def scored_result(result: dict) -> dict:
    """A reward-loop result ({"reward_score", "reward_extra_info"}) marked as scored; remembers its keys."""
    info = dict(result.get("reward_extra_info") or {})
    for key, value in info.items():
        if key not in (FAILED_KEY, ERROR_KEY):
            _ZEROED_KEYS.setdefault(key, _zero_like(value))
    info[FAILED_KEY] = 0.0
    info[ERROR_KEY] = ""
    return {**result, "reward_extra_info": info}


def failed_result(error: str, label_key: str | None) -> dict:
    """The reward-loop result of a rollout whose reward failed with `error`: reward 0, label 0, marked failed."""
    info = dict(_ZEROED_KEYS)
    if label_key:
        info[label_key] = 0.0
    info[FAILED_KEY] = 1.0
    info[ERROR_KEY] = error[:MAX_ERROR_CHARS]
    return {"reward_score": 0.0, "reward_extra_info": info}


def _log_first_failure(error: str, exc: BaseException | None = None) -> None:
    """Log the first failed reward of this process (`exc`: the exception it raised, for its traceback)."""
    global _FIRST_FAILURE_LOGGED
    if _FIRST_FAILURE_LOGGED:
        return
    _FIRST_FAILURE_LOGGED = True
    logger.error(
        "reward: scoring a rollout failed (%s). It gets reward 0 and no PRM label; this is the first "
        "failure in process %d, later ones are not logged: the trainer counts them every step "
        "(reward/failed_total) and stops above %s.",
        error,
        os.getpid(),
        MAX_RATIO_KEY,
        exc_info=exc,
    )


@dataclass(frozen=True)
class RewardGuard:
    """How a PRIME run's reward-loop workers guard each reward call: the PRM label key (`prime.prm.label_key`)
    and the call's time limit (`prime.reward_timeout_s`, None: none)."""

    label_key: str
    timeout_s: float | None


def reward_guard(view: VerlView) -> RewardGuard | None:
    """The `RewardGuard` when the config of `view` runs a PRIME trainer, whose reward failures are guarded and
    counted; None for any other trainer, which keeps veRL's own handling."""
    if not is_prime_trainer(view):
        return None
    prime = prime_config(view)
    return RewardGuard(prime.prm.label_key, prime.reward_timeout_s)


TIMEOUT_ERROR = "TimeoutError: the reward call timed out"


def timeout_error(timeout_s: float) -> str:
    """The `reward_error` of a row whose reward call ran past its time limit."""
    return f"{TIMEOUT_ERROR} after {timeout_s:g} s ({TIMEOUT_KEY})"


async def guarded_score(
    score: Callable[[], Awaitable[dict]], label_key: str | None, timeout_s: float | None = None
) -> dict:
    """`await score()` (one rollout's reward-loop result), turning an exception, a call that runs past `timeout_s`
    seconds, or a score or PRM label that is not a finite number (`reward_values.result_problem`), into
    `failed_result`. A call past its time is abandoned, not stopped: veRL runs the reward function in a thread."""
    try:
        result = await asyncio.wait_for(score(), timeout_s)
    except asyncio.TimeoutError:
        error = timeout_error(timeout_s)
        _log_first_failure(error)
        return failed_result(error, label_key)
    except Exception as exc:  # noqa: BLE001 - counted by the trainer, logged once per process
        error = f"{type(exc).__name__}: {exc}"
        _log_first_failure(error, exc)
        return failed_result(error, label_key)
    problem = result_problem(result, label_key)
    if problem is not None:
        _log_first_failure(problem)
        return failed_result(problem, label_key)
    return scored_result(result)


def complete_key_sets(outputs: list[dict]) -> list[dict]:
    """One batch's reward-loop results with every failed row given each reward_extra_info key of the
    batch's scored rows (zeroed); for veRL's colocated path, which takes the key set from row 0
    (`RewardLoopManager.compute_rm_score`, reward_loop.py), even when a row failed before this
    process had scored any."""
    zeroed: dict[str, Any] = {}
    for output in outputs:
        info = output["reward_extra_info"]
        if not info.get(FAILED_KEY):
            for key, value in info.items():
                zeroed.setdefault(key, _zero_like(value))
    return [
        {**output, "reward_extra_info": {**zeroed, **output["reward_extra_info"]}}
        if output["reward_extra_info"].get(FAILED_KEY)
        else output
        for output in outputs
    ]


# ---------------------------------------------------------------------------------------------------
# the trainer
# ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RolloutAccount:
    """What one training batch holds against what it asked for (see `account_rollouts`)."""

    expected: int  # rollouts asked for: rollout.n per prompt
    failed: int  # rollouts present whose reward failed: it raised, ran past its time, or was not a finite number
    unusable: int  # of those, the rollouts whose reward was not a finite number (reward_values.value_problem)
    timed_out: int  # of those, the rollouts whose reward call ran past prime.reward_timeout_s
    dropped: int  # rollouts asked for and absent
    padding: int  # veRL's padding rows
    group_sizes: tuple[int, ...]  # rollouts present per prompt (0 for a prompt with none left)
    failed_rows: tuple[bool, ...]  # per row of the batch
    first_error: str  # the reward error of the first failed row, "" if none

    @property
    def failed_ratio(self) -> float:
        return (self.failed + self.dropped) / max(self.expected, 1)

    def metrics(self) -> dict[str, float]:
        sizes = self.group_sizes or (0,)
        return {
            "reward/failed_total": float(self.failed),
            "reward/failed_ratio": self.failed / max(self.expected, 1),
            "reward/timed_out_total": float(self.timed_out),
            "prime/dropped_rollouts_total": float(self.dropped),
            "prime/padding_rows_total": float(self.padding),
            "prime/group_size_min": float(min(sizes)),
            "prime/group_size_mean": sum(sizes) / len(sizes),
            "prime/failed_rollout_ratio": self.failed_ratio,
        }

    def check(self, max_ratio: float, step: int, reward_fn: str) -> None:
        """Raise `RolloutFailureError` when every rollout present got a reward that is not a finite number, or when
        more than `max_ratio` of the expected rollouts failed or were dropped. `reward_fn` names the reward
        function (`reward_function_name`)."""
        present = self.expected - self.dropped
        if present > 0 and self.unusable == present:
            raise RolloutFailureError(
                f"{REWARD_FN_KEY}: step {step}: the reward function {reward_fn} gave every one of the {present} "
                f"rollouts a reward that is not a finite number (first: {self.first_error}): nothing is left to "
                f"train on, whatever {MAX_RATIO_KEY} allows. Make it return a finite number as the score and as "
                "the PRM label (prime.prm.label_key)."
            )
        if self.failed_ratio <= max_ratio:
            return
        lost = self.failed + self.dropped
        raised = self.failed - self.unusable
        if not self.unusable:
            how = "raised"
        elif not raised:
            how = "returned no finite number"
        else:
            how = f"raised ({raised}) or returned no finite number ({self.unusable})"
        parts = [f"{self.failed} scored 0 because the reward function {reward_fn} {how}"]
        if self.first_error:
            parts[0] += f" (first error: {self.first_error})"
        if self.dropped:
            parts.append(
                f"{self.dropped} dropped by veRL before training "
                "(its log has one 'Error in _run_prompt' per dropped rollout)"
            )
        raise RolloutFailureError(
            f"{MAX_RATIO_KEY}: step {step} lost {lost} of {self.expected} rollouts "
            f"({self.failed_ratio:.1%} > {max_ratio:.1%}): {'; '.join(parts)}. Fix the cause, or raise "
            f"{MAX_RATIO_KEY} (at 1.0 a failed rollout trains the actor with reward 0 and is left out of the "
            "PRM's loss and metrics; only a step without one finite reward still stops)."
        )


def account_rollouts(
    keys: Sequence[str],
    is_padding: Sequence[bool],
    extra_fields: Sequence[Any],
    rollout_n: int,
    expected_prompts: int,
) -> RolloutAccount:
    """Count a training batch's failed, dropped and padding rollouts.

    `keys` are veRL's TransferQueue keys ``{uid}_{session}_{index}`` (one prompt per uid, one rollout per
    session), `extra_fields` the rows' veRL extra fields, `expected_prompts` the prompts the batch was
    sampled for (a prompt whose every rollout was lost leaves no key). A rollout counts as failed when
    any of its rows carries ``reward_failed``, and as unusable when that row's ``reward_error`` is a value
    problem (`reward_values.is_value_problem`).
    """
    sessions: dict[str, set[str]] = {}
    failed_sessions: set[tuple[str, str]] = set()
    unusable_sessions: set[tuple[str, str]] = set()
    timed_out_sessions: set[tuple[str, str]] = set()
    failed_rows, first_error = [], ""
    for key, pad, fields in zip(keys, is_padding, extra_fields, strict=True):
        info = {} if pad else reward_extra_info(fields)
        failed = float(info.get(FAILED_KEY, 0.0)) > 0
        failed_rows.append(failed)
        if pad:
            continue
        uid, session, _ = key.rsplit("_", 2)  # as veRL splits them (a uid may hold underscores)
        sessions.setdefault(uid, set()).add(session)
        if failed:
            error = str(info.get(ERROR_KEY, ""))
            failed_sessions.add((uid, session))
            if is_value_problem(error):
                unusable_sessions.add((uid, session))
            if error.startswith(TIMEOUT_ERROR):
                timed_out_sessions.add((uid, session))
            first_error = first_error or error
    prompts = max(int(expected_prompts), len(sessions))
    group_sizes = tuple(sorted(len(s) for s in sessions.values())) + (0,) * (prompts - len(sessions))
    return RolloutAccount(
        expected=prompts * int(rollout_n),
        failed=len(failed_sessions),
        unusable=len(unusable_sessions),
        timed_out=len(timed_out_sessions),
        dropped=sum(max(int(rollout_n) - size, 0) for size in group_sizes),
        padding=sum(bool(pad) for pad in is_padding),
        group_sizes=group_sizes,
        failed_rows=tuple(failed_rows),
        first_error=first_error,
    )
