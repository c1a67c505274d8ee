"""The PRM's passes per step (`prime.prm_passes`): where the update's forward is the pre-update forward, the
dropout of the model and of a LoRA PRM's adapter, and the forwards and backwards per step against the minimum."""

import json

import pytest
from omegaconf import OmegaConf

from verl_prime_lora.config.prime import PrmConfig
from verl_prime_lora.config.verl_view import model_view
from verl_prime_lora.prime.prm_passes import model_dropout, update_forward_is_pre_update


@pytest.mark.parametrize(
    "update, dropout, rows, micro, fp32, exact",
    [
        ("after", 0.0, 16, (2, 4), True, True),  # one mini-batch of 8 prompts x 2: its first forward is pre-update
        ("before", 0.0, 16, (2, 4), True, True),
        ("after", 0.0, 32, (2, 4), True, False),  # two mini-batches: the second's forward follows an optimizer step
        ("after", 0.1, 16, (2, 4), True, False),  # dropout in the model or its LoRA adapter
        ("none", 0.0, 16, (2, 4), True, False),  # no update
        ("after", 0.0, 16, (2, 4), False, False),  # bf16: other micro-batches than the log-prob forward's round apart
        ("after", 0.0, 16, (4, 4), False, True),  # bf16 with the log-prob forward's micro-batches: the same numbers
    ],
)
def test_the_update_forward_is_the_pre_update_forward_only_where_exact(update, dropout, rows, micro, fp32, exact):
    train, infer = micro
    prm = PrmConfig(
        update=update, mini_batch_size=8, micro_batch_size_per_gpu=train, infer_micro_batch_size_per_gpu=infer
    )
    assert update_forward_is_pre_update(prm, dropout, rows, n=2, fp32_compute=fp32) is exact


def test_model_dropout_reads_the_config_and_its_overrides(tiny_model, tmp_path):
    model = OmegaConf.create({"path": tiny_model, "override_config": {}})
    assert model_dropout(model_view(model)) == 0.0  # Qwen2: attention_dropout 0
    model.override_config = {"attention_dropout": 0.1}
    assert model_dropout(model_view(model)) == 0.1
    assert model_dropout(model_view(OmegaConf.create({"path": str(tmp_path / "missing")}))) == 1.0  # unknown: not 0


def test_model_dropout_counts_a_lora_prm_adapters_dropout(tiny_model, tmp_path):
    model = OmegaConf.create({"path": tiny_model, "lora_rank": 8})
    assert model_dropout(model_view(model)) == 0.0  # veRL's LoraConfig has none; nothing asked for one
    model.lora = {"dropout": 0.05}  # applied by plugin.patches.install_lora_dropout
    assert model_dropout(model_view(model)) == 0.05
    adapter = tmp_path / "adapter"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text(json.dumps({"r": 8, "lora_dropout": 0.1}))
    loaded = OmegaConf.create({"path": tiny_model, "lora_adapter_path": str(adapter)})
    assert model_dropout(model_view(loaded)) == 0.1  # peft keeps a loaded adapter's own dropout
    loaded.lora = {"dropout": 0.02}
    assert model_dropout(model_view(loaded)) == 0.02  # ... unless model.lora.dropout replaces it
    loaded = OmegaConf.create({"path": tiny_model, "lora_adapter_path": str(tmp_path / "hdfs-only")})
    assert model_dropout(model_view(loaded)) == 1.0  # unreadable here: unknown, not 0


# --------------------------------------------------------------------------------------------------
# passes of the PRM per step, against the minimum
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "update, reference, today, minimum",
    [
        # (PRM forwards, PRM forward+backward, reference forwards)
        ("after", "actor_ref_log_prob", (1, 1, 0), (0, 1, 0)),  # veRL's ref log-probs reused
        ("before", "actor_ref_log_prob", (2, 1, 0), (1, 1, 0)),
        ("none", "actor_ref_log_prob", (1, 0, 0), (1, 0, 0)),
        ("after", "frozen_prm_copy", (1, 1, 1), (0, 1, 1)),
        ("before", "actor_policy_t1", (2, 1, 1), (1, 1, 1)),  # rollout temperature != 1: one actor forward
        ("after", "actor_old_log_probs", (1, 1, 0), (0, 1, 0)),
    ],
)
def test_prm_passes_per_step_and_their_minimum(update, reference, today, minimum):
    from verl_prime_lora.prime.prm_passes import PrmPasses, prm_passes

    assert prm_passes(update, reference) == (PrmPasses(*today), PrmPasses(*minimum))
    # only the pre-update PRM forward of a training mode is above the minimum
    now, least = prm_passes(update, reference)
    assert now.total() - least.total() == (update != "none")
    assert prm_passes(update, reference, epochs=2)[0].prm_train == (0 if update == "none" else 2)
    # with the pre-update log-probs taken from the update's first forward, a training mode makes the minimum
    if update != "none":
        assert prm_passes(update, reference, from_update=True) == (PrmPasses(*minimum), PrmPasses(*minimum))
