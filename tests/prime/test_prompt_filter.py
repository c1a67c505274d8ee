"""Accuracy-band prompt filter: the verdict, and veRL's real V1 replay-buffer loop driven through it
over an in-memory stand-in for TransferQueue (evict → oversampled refill → batch of in-band groups)."""

import itertools

import pytest
import transfer_queue as tq

from verl_prime_lora.prime.prompt_filter import (
    METRIC_PREFIX,
    AccuracyBandReplayBuffer,
    AccuracyBandReplayBufferAsync,
    BandFilter,
    accuracy_band_replay_buffer,
)


class FakeTransferQueue:
    """Just the calls the replay buffer makes: kv_list / kv_batch_get / kv_clear."""

    def __init__(self):
        self.tags, self.extra, self.uids = {"train": {}}, {}, itertools.count()

    def add_group(self, accs, response_len=4):
        uid = f"g{next(self.uids)}"
        self.tags["train"][uid] = {"is_prompt": True, "status": "finished", "global_steps": 0}
        for k, acc in enumerate(accs):
            key = f"{uid}_{k}_0"
            self.tags["train"][key] = {"status": "success", "response_len": response_len}
            self.extra[key] = {"reward_extra_info": {"acc": acc, "score": 2.0 * acc}}
        return uid

    def kv_list(self):
        return {p: dict(items) for p, items in self.tags.items()}

    def kv_batch_get(self, keys, partition_id, select_fields):
        assert select_fields == ["extra_fields"]
        return {"extra_fields": [self.extra[k] for k in keys]}

    def kv_clear(self, keys, partition_id):
        for key in keys:
            self.tags[partition_id].pop(key, None)


@pytest.fixture
def fake_tq(monkeypatch):
    fake = FakeTransferQueue()
    for name in ("kv_list", "kv_batch_get", "kv_clear"):
        monkeypatch.setattr(tq, name, getattr(fake, name))
    return fake


def make_buffer(cls=AccuracyBandReplayBuffer, refill=None, **options):
    kwargs = {"train_batch_size": 2, "max_response_length": 8, **options}
    return cls(
        trainer_mode="sync",
        trainer_config={},
        max_off_policy_threshold=None,
        max_off_policy_strategy="drop",
        sampler_kwargs=kwargs,
        refill_fn=refill or (lambda n: n),
        poll_interval=0.0,
    )


def test_band_is_inclusive_and_checks_truncation():
    band = BandFilter(0.2, 0.8, drop_truncated=True, max_response_length=8)
    assert band.reason([1, 0, 0, 0, 0], [1] * 5) is None  # 0.2: kept (inclusive)
    assert band.reason([1, 1, 1, 1, 0], [1] * 5) is None  # 0.8: kept
    assert band.reason([0, 0, 0, 0, 0, 1, 0], [1] * 7) == "low"
    assert band.reason([1] * 6, [1] * 6) == "high"
    assert band.reason([1, 0], [3, 8]) == "truncated"
    assert BandFilter(0.2, 0.8, drop_truncated=False).reason([1, 0], [3, 8]) is None


def test_bad_bounds_name_the_key():
    with pytest.raises(ValueError, match="lower/upper"):
        BandFilter(0.9, 0.1)
    with pytest.raises(ValueError, match="max_response_length"):
        BandFilter(drop_truncated=True, max_response_length=None)
    with pytest.raises(ValueError, match="train_batch_size"):
        AccuracyBandReplayBuffer(
            trainer_mode="sync",
            trainer_config={},
            max_off_policy_threshold=None,
            max_off_policy_strategy="drop",
            sampler_kwargs={},
            refill_fn=lambda n: n,
        )


def test_sync_sampling_evicts_out_of_band_groups_and_refills(fake_tq):
    refills = []
    queue = [[1, 0, 1, 0], [1, 1, 1, 1], [0, 1, 0, 0], [0, 0, 0, 0]]

    def refill(n):
        refills.append(n)
        for accs in queue[:n]:
            fake_tq.add_group(accs)
        del queue[:n]
        return n

    kept = fake_tq.add_group([1, 1, 0, 0])
    fake_tq.add_group([1, 1, 1, 1])  # high
    fake_tq.add_group([0, 0, 0, 0])  # low
    truncated = fake_tq.add_group([1, 0, 1, 0], response_len=8)
    buffer = make_buffer(refill=refill)
    batch, metrics = buffer.sample(global_steps=1, partition_id="train", batch_size=2)

    assert refills and refills[0] == 2 * 3  # veRL's sync oversampling: 2 prompts per evicted group
    chosen = {key.split("_")[0] for key in batch.keys}
    in_band = {kept, "g4", "g6"}  # g4 = [1, 0, 1, 0] and g6 = [0, 1, 0, 0] came from the refill
    assert len(chosen) == 2 and chosen <= in_band and truncated not in chosen
    for uid in chosen:  # every sampled group is inside the band
        accs = [fake_tq.extra[k]["reward_extra_info"]["acc"] for k in batch.keys if k.startswith(uid + "_")]
        assert 0.2 <= sum(accs) / len(accs) <= 0.8
    assert metrics[f"{METRIC_PREFIX}/kept_ratio"] == pytest.approx(3 / 8)
    assert (
        metrics[f"{METRIC_PREFIX}/evicted_low"],
        metrics[f"{METRIC_PREFIX}/evicted_high"],
        metrics[f"{METRIC_PREFIX}/evicted_truncated"],
    ) == (2, 2, 1)


def test_async_buffer_evicts_and_refills_one_for_one(fake_tq):
    refills = []
    fake_tq.add_group([1, 1])
    keep = fake_tq.add_group([1, 0])

    def refill(n):
        refills.append(n)
        fake_tq.add_group([0, 1])
        return n

    buffer = make_buffer(AccuracyBandReplayBufferAsync, refill=refill)
    batch, metrics = buffer.sample(global_steps=1, partition_id="train", batch_size=2)
    assert refills == [1]
    assert keep in {key.split("_")[0] for key in batch.keys}
    assert metrics[f"{METRIC_PREFIX}/kept_ratio"] == pytest.approx(2 / 3)


def test_missing_accuracy_field_is_a_clear_error(fake_tq):
    uid = fake_tq.add_group([1, 0])
    fake_tq.extra[f"{uid}_0_0"] = {"reward_extra_info": {"score": 1.0}}
    buffer = make_buffer()
    buffer._sync_metadata_from_transfer_queue()
    with pytest.raises(RuntimeError, match="'acc'"):
        buffer._dapo_filtered_keys("train")


def test_factory_matches_the_trainer_mode():
    kwargs = dict(
        trainer_config={},
        max_off_policy_threshold=None,
        max_off_policy_strategy="drop",
        sampler_kwargs={"train_batch_size": 2, "max_response_length": 8},
        refill_fn=lambda n: n,
    )
    assert type(accuracy_band_replay_buffer(trainer_mode="sync", **kwargs)) is AccuracyBandReplayBuffer
    assert type(accuracy_band_replay_buffer(trainer_mode="separate_async", **kwargs)) is AccuracyBandReplayBufferAsync


def test_recipe_wires_the_filter_into_verl_sampler_config():
    from main_ppo_driver import compose_ppo

    cfg = compose_ppo("+recipe=[prime_lora,prompt_filter]")
    sampler = cfg.trainer.v1.sampler
    assert sampler.custom_sampler.path == "pkg://verl_prime_lora.prime.prompt_filter"
    assert sampler.custom_sampler.name == "accuracy_band_replay_buffer"
    assert (sampler.sampler_kwargs.lower, sampler.sampler_kwargs.upper) == (0.2, 0.8)
    assert sampler.sampler_kwargs.train_batch_size == cfg.data.train_batch_size
    assert cfg.data.gen_batch_size == 1
