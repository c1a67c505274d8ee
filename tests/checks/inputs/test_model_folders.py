"""Input checks before Ray starts (verl_prime_lora.checks.inputs), `model_folders`: the actor's and the PRM's
model folders hold a config, weights and a tokenizer; each failure names the config key and what the folder lacks."""

import shutil

from input_configs import GRPO, config, esc, fails

from verl_prime_lora.checks.inputs import check_inputs

# --------------------------------------------------------------------------------------------------
# model folders
# --------------------------------------------------------------------------------------------------


def test_empty_model_folder(assets, tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    message = fails(config(assets, f"actor_rollout_ref.model.path={empty}"), r"^actor_rollout_ref\.model\.path: ")
    assert f"{empty} holds no config.json, no weights (none of *.safetensors, " in message
    assert ", no tokenizer (none of tokenizer.json" in message and "save_pretrained" in message


def test_model_folder_with_only_a_config_names_what_it_lacks(assets, tmp_path):
    folder = tmp_path / "config_only"
    folder.mkdir()
    shutil.copy(assets["model"] / "config.json", folder)
    message = fails(config(assets, f"actor_rollout_ref.model.path={folder}"), r"^actor_rollout_ref\.model\.path: ")
    assert f"{folder} holds no weights (none of *.safetensors, pytorch_model*.bin, " in message
    assert ", no tokenizer (" in message and "config.json" not in message.split("holds no")[1].split("(")[0]
    # the weights alone: only the tokenizer is missing
    for weights in assets["model"].glob("*.safetensors"):
        shutil.copy(weights, folder)
    message = fails(
        config(assets, f"actor_rollout_ref.model.path={folder}"),
        rf"^actor_rollout_ref\.model\.path: {esc(folder)} holds no tokenizer \(",
    )
    assert "weights" not in message


def test_missing_model_folder(assets, tmp_path):
    missing = tmp_path / "no_model"
    pattern = rf"^actor_rollout_ref\.model\.path: {esc(missing)} is not a folder \(it does not exist"
    fails(config(assets, f"actor_rollout_ref.model.path={missing}"), pattern)


def test_model_folder_without_tokenizer(assets, tmp_path):
    folder = tmp_path / "weights_only"
    folder.mkdir()
    shutil.copy(assets["model"] / "config.json", folder)
    for weights in assets["model"].glob("*.safetensors"):
        shutil.copy(weights, folder)
    message = fails(config(assets, f"actor_rollout_ref.model.path={folder}"), r"^actor_rollout_ref\.model\.path: ")
    assert f"{folder} holds no tokenizer" in message
    # A separate tokenizer folder makes it whole, for the policy and for the PRM (which starts from the same path).
    paths = (f"actor_rollout_ref.model.path={folder}", f"actor_rollout_ref.model.tokenizer_path={assets['model']}")
    fails(config(assets, *paths), rf"^prime\.prm\.model\.path: {esc(folder)} holds no tokenizer")
    check_inputs(config(assets, *paths, f"prime.prm.model.tokenizer_path={assets['model']}"))


def test_hub_ids_are_not_checked(assets):
    check_inputs(config(assets, "actor_rollout_ref.model.path=Qwen/Qwen2.5-0.5B-Instruct"))


def test_prm_folders(assets, tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    pattern = rf"^prime\.prm\.model\.path: {esc(empty)} holds no config\.json"
    fails(config(assets, f"prime.prm.model.path={empty}"), pattern)
    pattern = rf"^prime\.prm\.model\.tokenizer_path: {esc(empty)} holds no tokenizer"
    fails(config(assets, f"prime.prm.model.tokenizer_path={empty}"), pattern)
    # A PRM that no trainer uses (plain GRPO on the PRIME recipe) is not checked.
    check_inputs(config(assets, f"prime.prm.model.path={empty}", *GRPO))
