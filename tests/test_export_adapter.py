"""Exporting a veRL FSDP checkpoint's LoRA adapter to a PEFT folder that loads the way the seed
documents it (PeftModel.from_pretrained + merge_and_unload) and reproduces the trained model."""

import json

import pytest
import torch
from peft import LoraConfig, PeftModel, get_peft_model
from transformers import AutoModelForCausalLM, AutoTokenizer

from verl_prime_lora.export_adapter import export, main
from verl_prime_lora.tiny import write_assets


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A tiny LoRA model saved the way veRL's FSDP checkpoint manager lays out global_step_N/actor
    (shards, fsdp_config.json, huggingface/ config + tokenizer, lora_train_meta.json)."""
    root = tmp_path_factory.mktemp("ckpt")
    paths = write_assets(root / "tiny", train_size=4, test_size=2)
    torch.manual_seed(0)
    config = LoraConfig(r=8, lora_alpha=32, lora_dropout=0.05, init_lora_weights=False,
                        target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"])
    model = get_peft_model(AutoModelForCausalLM.from_pretrained(paths["model"]), config).eval()
    with torch.no_grad():  # veRL's merger stores weights in bf16: make the adapter exactly representable
        for name, param in model.named_parameters():
            if "lora_" in name:
                param.copy_(param.bfloat16().float())
    actor = root / "global_step_3" / "actor"
    (actor / "huggingface").mkdir(parents=True)
    torch.save(model.state_dict(), actor / "model_world_size_1_rank_0.pt")
    model.base_model.model.config.save_pretrained(actor / "huggingface")
    AutoTokenizer.from_pretrained(paths["model"]).save_pretrained(actor / "huggingface")
    (actor / "fsdp_config.json").write_text(json.dumps({"FSDP_version": 2, "world_size": 1}))
    (actor / "lora_train_meta.json").write_text(json.dumps({"r": 8, "lora_alpha": 32, "task_type": "CAUSAL_LM",
                                                                 "lora_dropout": 0.05}))
    tokens = torch.randint(0, model.config.vocab_size, (2, 9), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        logits = model(tokens).logits
    return root / "global_step_3", paths["model"], tokens, logits


def test_exported_adapter_reproduces_the_trained_model(trained, tmp_path):
    checkpoint, base_path, tokens, expected = trained
    paths = export(checkpoint, tmp_path / "out", merged=True, base_model=str(base_path))
    adapter_config = json.loads((paths["adapter"] / "adapter_config.json").read_text())
    # r/alpha from veRL's merger, dropout from the plugin's entry in lora_train_meta.json
    assert (adapter_config["r"], adapter_config["lora_alpha"], adapter_config["lora_dropout"]) == (8, 32, 0.05)
    assert adapter_config["base_model_name_or_path"] == str(base_path)
    assert set(adapter_config["target_modules"]) == {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj",
                                                     "up_proj", "down_proj"}

    base = AutoModelForCausalLM.from_pretrained(base_path)
    peft_model = PeftModel.from_pretrained(base, paths["adapter"]).eval()
    with torch.no_grad():
        torch.testing.assert_close(peft_model(tokens).logits, expected, rtol=1e-4, atol=1e-4)
        merged_in_memory = peft_model.merge_and_unload()
        torch.testing.assert_close(merged_in_memory(tokens).logits, expected, rtol=1e-4, atol=1e-4)
        merged = AutoModelForCausalLM.from_pretrained(paths["merged"]).eval()
        torch.testing.assert_close(merged(tokens).logits, expected, rtol=1e-4, atol=1e-4)
    assert (paths["merged"] / "tokenizer.json").is_file()


def test_not_a_checkpoint_is_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="not a veRL FSDP actor checkpoint"):
        main([str(tmp_path), "--out", str(tmp_path / "o")])
