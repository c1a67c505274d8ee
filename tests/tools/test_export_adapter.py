"""Exporting a veRL FSDP checkpoint's LoRA adapter to a PEFT folder that loads the way the seed
documents it (PeftModel.from_pretrained + merge_and_unload) and reproduces the trained model."""

import json

import pytest
import torch
from peft import LoraConfig, PeftModel, get_peft_model
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM, AutoTokenizer

from verl_prime_lora.tools.export_adapter import export, main
from verl_prime_lora.tools.tiny import write_assets


def write_checkpoint(root, update_size=None):
    """A tiny float32 LoRA model saved the way veRL's FSDP checkpoint manager lays out global_step_N/actor
    (shards, fsdp_config.json, huggingface/ config + tokenizer, lora_train_meta.json). `update_size`:
    scale lora_B so that the largest |ΔW| of the adapter is about that. Returns (checkpoint, base path,
    tokens, the trained model's logits on them, the trained model)."""
    paths = write_assets(root / "tiny", train_size=4, test_size=2)
    torch.manual_seed(0)
    config = LoraConfig(
        r=8,
        lora_alpha=32,
        lora_dropout=0.05,
        init_lora_weights=False,
        target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
    )
    model = get_peft_model(AutoModelForCausalLM.from_pretrained(paths["model"]), config).eval()
    with torch.no_grad():
        if update_size is not None:
            q_proj = model.base_model.model.model.layers[0].self_attn.q_proj
            scale = update_size / q_proj.get_delta_weight("default").abs().max()
            for name, param in model.named_parameters():
                if "lora_B" in name:
                    param.mul_(scale)
    actor = root / "global_step_3" / "actor"
    (actor / "huggingface").mkdir(parents=True)
    torch.save(model.state_dict(), actor / "model_world_size_1_rank_0.pt")
    model.base_model.model.config.save_pretrained(actor / "huggingface")
    AutoTokenizer.from_pretrained(paths["model"]).save_pretrained(actor / "huggingface")
    (actor / "fsdp_config.json").write_text(json.dumps({"FSDP_version": 2, "world_size": 1}))
    (actor / "lora_train_meta.json").write_text(
        json.dumps({"r": 8, "lora_alpha": 32, "task_type": "CAUSAL_LM", "lora_dropout": 0.05})
    )
    tokens = torch.randint(0, model.config.vocab_size, (2, 9), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        logits = model(tokens).logits
    return root / "global_step_3", paths["model"], tokens, logits, model


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    return write_checkpoint(tmp_path_factory.mktemp("ckpt"))[:4]


def test_exported_adapter_reproduces_the_trained_model(trained, tmp_path):
    checkpoint, base_path, tokens, expected = trained
    paths = export(checkpoint, tmp_path / "out", merged=True, base_model=str(base_path))
    adapter_config = json.loads((paths["adapter"] / "adapter_config.json").read_text())
    # r, alpha and the dropout from lora_train_meta.json (veRL writes r and alpha, the plugin the dropout)
    assert (adapter_config["r"], adapter_config["lora_alpha"], adapter_config["lora_dropout"]) == (8, 32, 0.05)
    assert adapter_config["base_model_name_or_path"] == str(base_path)
    assert set(adapter_config["target_modules"]) == {
        "q_proj",
        "k_proj",
        "v_proj",
        "o_proj",
        "gate_proj",
        "up_proj",
        "down_proj",
    }

    base = AutoModelForCausalLM.from_pretrained(base_path)
    peft_model = PeftModel.from_pretrained(base, paths["adapter"]).eval()
    with torch.no_grad():
        torch.testing.assert_close(peft_model(tokens).logits, expected, rtol=1e-4, atol=1e-4)
        merged_in_memory = peft_model.merge_and_unload()
        torch.testing.assert_close(merged_in_memory(tokens).logits, expected, rtol=1e-4, atol=1e-4)
        merged = AutoModelForCausalLM.from_pretrained(paths["merged"]).eval()
        torch.testing.assert_close(merged(tokens).logits, expected, rtol=1e-4, atol=1e-4)
    assert (paths["merged"] / "tokenizer.json").is_file()


def test_an_export_cut_short_leaves_no_weights_file(trained, tmp_path, monkeypatch):
    """The weights are written under a temporary name, then renamed: a folder holding adapter_model.safetensors is a
    finished export (examples/eval_checkpoints.sh skips those), one cut short while writing holds none."""
    import safetensors.torch

    def write_part_then_die(tensors, filename, metadata=None):
        with open(filename, "wb") as file:
            file.write(b"partial")
        raise KeyboardInterrupt

    checkpoint, base_path, _, _ = trained
    monkeypatch.setattr(safetensors.torch, "save_file", write_part_then_die)
    with pytest.raises(KeyboardInterrupt):
        export(checkpoint, tmp_path / "out", base_model=str(base_path))
    assert not (tmp_path / "out" / "adapter" / "adapter_model.safetensors").exists()
    monkeypatch.undo()
    adapter = export(checkpoint, tmp_path / "out", base_model=str(base_path))["adapter"]
    assert sorted(path.name for path in adapter.iterdir()) == ["adapter_config.json", "adapter_model.safetensors"]


def test_not_a_checkpoint_is_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="not a veRL FSDP actor checkpoint"):
        main([str(tmp_path), "--out", str(tmp_path / "o")])


def test_merged_keeps_the_float32_base_so_an_update_below_bf16_resolution_survives(tmp_path):
    """Without --base_model the merged weights are float32 (the actor's dtype) and the base is the checkpoint's own
    fp32 copy: a ~3e-6 update (bf16's step at these weights is ~1e-4) is in them, on top of the exact base."""
    checkpoint, base_path, _, _, model = write_checkpoint(tmp_path / "ckpt", update_size=3e-6)
    q_proj = model.base_model.model.model.layers[0].self_attn.q_proj
    base_weight, update = q_proj.base_layer.weight.detach().clone(), q_proj.get_delta_weight("default").detach()
    assert ((base_weight + update).bfloat16() == base_weight.bfloat16()).float().mean() > 0.9  # bf16 loses it

    paths = export(checkpoint, tmp_path / "out", merged=True)
    weights = load_file(paths["merged"] / "model.safetensors")
    assert {w.dtype for w in weights.values()} == {torch.float32}
    assert json.loads((paths["merged"] / "config.json").read_text())["dtype"] == "float32"
    merged_update = weights["model.layers.0.self_attn.q_proj.weight"] - base_weight
    torch.testing.assert_close(merged_update, update, rtol=0, atol=2e-8)

    main([str(checkpoint), "--out", str(tmp_path / "out_bf16"), "--merged", "--dtype", "bfloat16"])
    weights = load_file(tmp_path / "out_bf16" / "merged" / "model.safetensors")
    assert {w.dtype for w in weights.values()} == {torch.bfloat16}


def test_help_says_which_dtype_merged_weights_get(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert "--dtype {float32,bfloat16,float16}" in help_text and "in the base's dtype" in help_text
