"""veRL patches of the plugin (`plugin.patches`) without Ray: the driver-side validation hook on veRL's
`validate_config`, the `flush` keyword of the split trainer's logger, and LoRA dropout on veRL's FSDP engine."""

import json
from types import SimpleNamespace

import pytest
import torch
from main_ppo_driver import compose_ppo

import verl_prime_lora.plugin.patches  # noqa: F401 - applies the patches under test (also loaded at `import verl`)
from verl_prime_lora.checks.config_checks import PrimeConfigError
from verl_prime_lora.patching import is_patched


def colocated(*overrides):
    return compose_ppo("+recipe=prime_lora_colocated", "actor_rollout_ref.model.path=/m", *overrides)


def test_driver_validation_wraps_verl_validate_config():
    import verl.utils.config as verl_config

    assert is_patched(verl_config.validate_config)
    with pytest.raises(PrimeConfigError, match=r"^actor_rollout_ref\.rollout\.n:"):
        verl_config.validate_config(
            colocated("actor_rollout_ref.rollout.n=1"), use_reference_policy=False, use_critic=False
        )


def test_separate_async_logger_accepts_flush(caplog):
    """veRL's split trainer logs with `flush=True` (trainer_separate_async.py:181); it must not crash."""
    from verl.trainer.ppo.v1 import trainer_separate_async

    with caplog.at_level("INFO", logger=trainer_separate_async.__name__):
        trainer_separate_async.logger.info("weights synced to %s", "rollout", flush=True)
    assert "weights synced to rollout" in caplog.text


# --------------------------------------------------------------------------------------------------
# LoRA dropout on veRL's FSDP engine
# --------------------------------------------------------------------------------------------------


def _tiny_causal_lm():
    from transformers import Qwen2Config, Qwen2ForCausalLM

    cfg = Qwen2Config(
        vocab_size=64,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=32,
    )
    torch.manual_seed(0)
    return Qwen2ForCausalLM(cfg)


def _engine_stub(dropout):
    model_config = SimpleNamespace(
        lora_rank=4,
        lora_alpha=8,
        target_modules="all-linear",
        target_parameters=None,
        exclude_modules=None,
        lora_adapter_path=None,
        use_shm=False,
        lora={"dropout": dropout, "merge": False},
    )
    return SimpleNamespace(model_config=model_config)


@pytest.mark.parametrize("dropout", [0.05, 0.0])
def test_fsdp_engine_lora_gets_dropout(dropout, tmp_path):
    import torch.nn as nn
    from verl.workers.engine.fsdp.transformer_impl import FSDPEngine

    assert is_patched(FSDPEngine._build_lora_module)
    peft_model = FSDPEngine._build_lora_module(_engine_stub(dropout), _tiny_causal_lm())
    layers = [
        m.lora_dropout["default"]
        for m in peft_model.modules()
        if isinstance(getattr(m, "lora_dropout", None), nn.ModuleDict)
    ]
    assert layers
    if dropout > 0:
        assert all(isinstance(d, nn.Dropout) and d.p == pytest.approx(dropout) for d in layers)
    else:
        assert all(isinstance(d, nn.Identity) for d in layers)
    assert peft_model.peft_config["default"].lora_dropout == pytest.approx(dropout)

    # the saved adapter says so, and so does veRL's checkpoint metadata
    peft_model.save_pretrained(tmp_path / "adapter")
    saved = json.loads((tmp_path / "adapter" / "adapter_config.json").read_text())
    assert saved["lora_dropout"] == pytest.approx(dropout)
    from verl.utils.checkpoint.fsdp_checkpoint_manager import FSDPCheckpointManager

    meta = FSDPCheckpointManager._get_lora_train_meta(None, peft_model)
    assert meta["lora_dropout"] == pytest.approx(dropout) and meta["r"] == 4


def test_lora_dropout_is_active_in_train_mode_only():
    from verl.workers.engine.fsdp.transformer_impl import FSDPEngine

    peft_model = FSDPEngine._build_lora_module(_engine_stub(0.5), _tiny_causal_lm())
    for m in peft_model.modules():  # make the adapter non-zero so dropout shows in the output
        if hasattr(m, "lora_B") and "default" in m.lora_B:
            torch.nn.init.normal_(m.lora_B["default"].weight)
    ids = torch.arange(10).unsqueeze(0)
    peft_model.eval()
    a, b = peft_model(input_ids=ids).logits, peft_model(input_ids=ids).logits
    assert torch.equal(a, b)
    peft_model.train()
    torch.manual_seed(1)
    c = peft_model(input_ids=ids).logits
    assert not torch.allclose(a, c)
