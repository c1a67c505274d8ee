r"""Accuracy-band prompt filtering (PRIME §3.3) for veRL 0.9.1's V1 replay buffer.

A prompt's K responses form a group with mean accuracy ā = (1/K) Σ_k acc_k. The group is kept iff
``lower ≤ ā ≤ upper`` (inclusive; default [0.2, 0.8]) and, with ``drop_truncated``, none of its
responses hit the response-length limit. Groups that every response solves, or none does, carry no
outcome signal; the band also drops the nearly-solved and nearly-unsolved ones.

Where it hooks in: veRL's V1 trainers sample training batches from a `ReplayBuffer` that already
evicts "no-signal" groups (DAPO filtering) and refills the batch with fresh prompts
(``refill_fn``: sync mode dispatches 2 prompts per eviction while the batch is short —
oversampling — and discards the surplus). `AccuracyBandReplayBuffer` (sync trainers) and
`AccuracyBandReplayBufferAsync` (async trainers) replace only that group verdict, so an evicted
group is cleared from TransferQueue before any batch is drawn: it trains neither the PRM nor the
policy. `accuracy_band_replay_buffer` picks the one that matches the trainer. Turn it on with
``+recipe=[prime_lora,prompt_filter]`` (recipe/prompt_filter.yaml), which sets

    trainer.v1.sampler.custom_sampler.path=pkg://verl_prime_lora.prime.prompt_filter
    trainer.v1.sampler.custom_sampler.name=accuracy_band_replay_buffer
    trainer.v1.sampler.sampler_kwargs={lower: 0.2, upper: 0.8, drop_truncated: true, ...,
        train_batch_size: ${data.train_batch_size}, max_response_length: ${data.max_response_length}}
    data.gen_batch_size=1                                                  # exact refills

Metrics per step, under ``training/prompt_filter/``:
``kept_ratio`` (kept / judged groups), ``evicted_low``, ``evicted_high``, ``evicted_truncated``.
A group in which the reward function failed on a response (``reward_failed``, see
`verl_prime_lora.hardening.reward_failures`) is not judged and never evicted: the trainer counts it and applies
``prime.max_failed_rollout_ratio``.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import transfer_queue as tq
from verl.trainer.ppo.v1.replay_buffer import ReplayBuffer, ReplayBufferAsync

from verl_prime_lora.hardening.reward_failures import FAILED_KEY
from verl_prime_lora.rewards.reward_info import reward_extra_info

METRIC_PREFIX = "training/prompt_filter"


@dataclass(frozen=True)
class BandFilter:
    """The verdict on one group: which reason, if any, evicts it."""

    lower: float = 0.2
    upper: float = 0.8
    drop_truncated: bool = True
    max_response_length: int | None = None

    def __post_init__(self):
        if not 0.0 <= self.lower <= self.upper <= 1.0:
            raise ValueError(
                f"prompt filter: need 0 <= lower <= upper <= 1 (sampler_kwargs.lower/upper), "
                f"got [{self.lower}, {self.upper}]"
            )
        if self.drop_truncated and not self.max_response_length:
            raise ValueError("prompt filter: drop_truncated needs sampler_kwargs.max_response_length")

    def reason(self, accs: Sequence[float], response_lengths: Sequence[int]) -> str | None:
        """'low' / 'high' (mean accuracy outside [lower, upper]), 'truncated', or None (keep)."""
        mean_acc = sum(accs) / len(accs)
        if mean_acc < self.lower:
            return "low"
        if mean_acc > self.upper:
            return "high"
        if self.drop_truncated and any(length >= self.max_response_length for length in response_lengths):
            return "truncated"
        return None


def _accuracy(extra_fields: Any, key: str) -> float:
    info = reward_extra_info(extra_fields)
    if key not in info:
        raise RuntimeError(
            f"prompt filter: the reward function returned no '{key}' (reward_extra_info has {sorted(info)}); "
            "use a reward that returns a dict with an accuracy field, e.g. pkg://verl_prime_lora.rewards.math_format"
        )
    return float(info[key])


class AccuracyBandFilterMixin:
    """Turns veRL's DAPO eviction hook into the accuracy-band filter (see the module docstring)."""

    def __init__(self, *, sampler_kwargs: Mapping | None = None, **kwargs: Any):
        options = dict(sampler_kwargs or {})
        if "train_batch_size" not in options:
            raise ValueError("prompt filter: set trainer.v1.sampler.sampler_kwargs.train_batch_size")
        self.band = BandFilter(
            lower=float(options.get("lower", 0.2)),
            upper=float(options.get("upper", 0.8)),
            drop_truncated=bool(options.get("drop_truncated", True)),
            max_response_length=options.get("max_response_length"),
        )
        self.accuracy_key = str(options.get("accuracy_key", "acc"))
        self.filter_counts: Counter = Counter()
        super().__init__(
            sampler_kwargs=sampler_kwargs,
            filter_groups_metric=self.accuracy_key,
            train_batch_size=int(options["train_batch_size"]),
            gen_batch_size=1,
            max_inflight_gen_batches=int(options.get("max_inflight_gen_batches", 4)),
            **kwargs,
        )

    def _dapo_filtered_keys(self, partition_id: str) -> tuple[set[str], Counter]:
        """Groups to evict (outside the band or truncated) and a {mean accuracy: count} breakdown."""
        if partition_id == "val":
            return set(), Counter()
        finished = self.finished_keys[partition_id]
        cache = self._dapo_classification_cache[partition_id]  # uid -> mean acc if evicted, else None
        for uid in cache.keys() - finished:
            del cache[uid]
        new_uids = finished - cache.keys()
        keys = [key for key in self.partitions[partition_id] if key.split("_")[0] in new_uids]
        accs, lengths, reward_failed = defaultdict(list), defaultdict(list), set()
        if keys:
            extra = tq.kv_batch_get(keys=keys, partition_id=partition_id, select_fields=["extra_fields"])
            for key, fields in zip(keys, list(extra["extra_fields"]), strict=True):
                uid = key.split("_")[0]
                if reward_extra_info(fields).get(FAILED_KEY):
                    reward_failed.add(uid)
                    continue
                accs[uid].append(_accuracy(fields, self.accuracy_key))
                lengths[uid].append(int(self.partitions[partition_id][key].get("response_len", 0)))
        for uid in new_uids:
            # kept unjudged: a failed group without trajectories (veRL's own failure handling decides), and a
            # group with a failed reward, which the PRIME trainer must see to count it (hardening.reward_failures)
            if not accs[uid] or uid in reward_failed:
                cache[uid] = None
                continue
            reason = self.band.reason(accs[uid], lengths[uid])
            self.filter_counts["judged"] += 1
            self.filter_counts[reason or "kept"] += 1
            cache[uid] = round(sum(accs[uid]) / len(accs[uid]), 4) if reason else None
        evicted = {uid: value for uid, value in cache.items() if value is not None}
        return set(evicted), Counter(evicted.values())

    def sample(self, global_steps: int, partition_id: str, batch_size: int):
        batch, metrics = super().sample(global_steps, partition_id, batch_size)
        if partition_id != "val" and self.filter_counts["judged"]:
            counts, self.filter_counts = self.filter_counts, Counter()
            metrics[f"{METRIC_PREFIX}/kept_ratio"] = counts["kept"] / counts["judged"]
            for reason in ("low", "high", "truncated"):
                metrics[f"{METRIC_PREFIX}/evicted_{reason}"] = counts[reason]
        return batch, metrics


class AccuracyBandReplayBuffer(AccuracyBandFilterMixin, ReplayBuffer):
    """Accuracy-band filtering for veRL's V1 `sync` trainers."""


class AccuracyBandReplayBufferAsync(AccuracyBandFilterMixin, ReplayBufferAsync):
    """Accuracy-band filtering for veRL's V1 async trainers (`separate_async`, `colocate_async`)."""


def accuracy_band_replay_buffer(*, trainer_mode: str, **kwargs: Any) -> ReplayBuffer:
    """veRL's custom-sampler hook: the sync buffer for veRL's `sync` trainer mode, else the async one."""
    cls = AccuracyBandReplayBuffer if trainer_mode == "sync" else AccuracyBandReplayBufferAsync
    return cls(trainer_mode=trainer_mode, **kwargs)
