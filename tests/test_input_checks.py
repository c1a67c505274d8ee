"""Input checks before Ray starts (verl_prime_lora.checks.inputs): data files, model folders, a reward dry
run and the device layout, each failing with the config key and the path or row; correct configs pass."""

import functools
import json
import multiprocessing
import os
import re
import shutil
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
import verl
from hydra import compose, initialize_config_dir
from main_ppo_driver import main_ppo_stopped_before_ray

import verl_prime_lora.plugin.patches  # noqa: F401 - the driver-side hook under test (also loaded at `import verl`)
from verl_prime_lora.checks.inputs import InputCheckError, check_inputs
from verl_prime_lora.checks.inputs import devices as inputs_devices
from verl_prime_lora.config.verl_view import verl_view
from verl_prime_lora.tools.tiny import write_assets

VERL_CONFIG_DIR = str(Path(verl.__file__).parent / "trainer" / "config")
E2E = Path(__file__).parent / "e2e"
PARTIAL_CREDIT_REWARD = E2E / "partial_credit_reward.py"  # returns a float
PRIME_LABEL_REWARD = E2E / "prime_label_reward.py"  # returns {score, acc, format}
REWARD_FN = "reward.custom_reward_function.path"
GRPO = ("algorithm.adv_estimator=grpo", "trainer.v1.trainer_mode=sync")  # no PRIME trainer


@pytest.fixture(scope="module")
def assets(tmp_path_factory) -> dict[str, Path]:
    return write_assets(tmp_path_factory.mktemp("tiny"), train_size=4, test_size=2)


def compose_ppo(*overrides):
    with initialize_config_dir(config_dir=VERL_CONFIG_DIR, version_base=None):
        return compose(config_name="ppo_trainer", overrides=list(overrides))


def config(assets, *overrides, recipe="prime_lora_colocated,cpu"):
    """The CPU PRIME recipe on the tiny assets (as examples/run_cpu_smoke.sh), plus `overrides`."""
    return compose_ppo(
        f"+recipe=[{recipe}]",
        f"data.train_files={assets['train']}",
        f"data.val_files={assets['test']}",
        f"actor_rollout_ref.model.path={assets['model']}",
        *overrides,
    )


def fails(cfg, pattern: str) -> str:
    """check_inputs(cfg) raises InputCheckError whose message matches `pattern` (from its start); the message."""
    with pytest.raises(InputCheckError) as err:
        check_inputs(cfg)
    message = str(err.value)
    assert re.match(pattern, message, re.S), message
    return message


def esc(path) -> str:
    return re.escape(str(path))


def tiny_row(**changes) -> dict:
    row = {
        "data_source": "lighteval/MATH",
        "prompt": [{"role": "user", "content": "What is 1 + 1?"}],
        "ability": "math",
        "reward_model": {"style": "rule", "ground_truth": "2"},
        "extra_info": {"split": "train", "index": 0},
    }
    row.update(changes)
    return {key: value for key, value in row.items() if value is not None}


def write_parquet(path: Path, rows: list[dict]) -> Path:
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


def write_reward(path: Path, body: str) -> Path:
    path.write_text("def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):\n" + body)
    return path


# --------------------------------------------------------------------------------------------------
# correct configs pass (the e2e tests', the examples', the demo's)
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "recipe, overrides",
    [
        ("prime_lora_colocated,cpu", []),  # examples/run_cpu_smoke.sh: the project's reward (math-verify)
        ("prime_lora_colocated,cpu", [f"reward.custom_reward_function.path={PRIME_LABEL_REWARD}"]),  # test_prime_e2e
        (  # test_prime_e2e `split`: two fake GPUs, the standalone rollout on the second
            "prime_lora,cpu",
            ["ray_kwargs.ray_init.num_gpus=2", "actor_rollout_ref.rollout.checkpoint_engine.backend=cpu_zmq"],
        ),
        ("prime_lora_colocated,prompt_filter,cpu", []),  # the demo (learning_run.DEMO_RECIPES)
        (  # plain GRPO, a reward that returns a float
            "cpu",
            [
                "algorithm.adv_estimator=grpo",
                f"reward.custom_reward_function.path={PARTIAL_CREDIT_REWARD}",
                "reward.custom_reward_function.name=compute_score",
            ],
        ),
    ],
)
def test_correct_configs_pass(assets, recipe, overrides):
    check_inputs(config(assets, *overrides, recipe=recipe))


def test_chain_task_data_passes_the_reward_dry_run(assets, tmp_path):
    """The demo's data (verl_prime_lora.demo.chain_task) with the recipe's reward: the dry run's answer is right."""
    from verl_prime_lora.demo import chain_task

    chains = chain_task.make_splits(0, {"sft_eval": 1, "test": 2, "train": 3})
    paths = {}
    for split in ("train", "test"):
        rows = [chain_task.make_row(chain, i, split) for i, chain in enumerate(chains[split])]
        paths[split] = write_parquet(tmp_path / f"{split}.parquet", rows)
    check_inputs(config(assets, f"data.train_files={paths['train']}", f"data.val_files={paths['test']}"))


# --------------------------------------------------------------------------------------------------
# data files
# --------------------------------------------------------------------------------------------------


def test_missing_train_file_names_the_key_and_path(assets, tmp_path):
    missing = tmp_path / "nope.parquet"
    fails(config(assets, f"data.train_files={missing}"), rf"^data\.train_files: {esc(missing)} does not exist")


def test_list_entry_is_named_with_its_index(assets, tmp_path):
    missing = tmp_path / "val2.parquet"
    cfg = config(assets, f"data.val_files=[{assets['test']},{missing}]")
    fails(cfg, rf"^data\.val_files\[1\]: {esc(missing)} does not exist")


def test_unsupported_file_format(assets, tmp_path):
    csv = tmp_path / "train.csv"
    csv.write_text("prompt\nhi\n")
    fails(config(assets, f"data.train_files={csv}"), rf"^data\.train_files: {esc(csv)}: .*\.parquet")


def test_prompt_column_missing(assets, tmp_path):
    path = write_parquet(tmp_path / "train.parquet", [tiny_row(prompt=None, question="What is 1 + 1?")])
    message = fails(config(assets, f"data.train_files={path}"), r"^data\.prompt_key: is 'prompt'")
    assert str(path) in message and "question" in message  # the columns it has


def test_custom_prompt_key(assets, tmp_path):
    row = tiny_row(prompt=None, question=[{"role": "user", "content": "What is 1 + 1?"}])
    path = write_parquet(tmp_path / "train.parquet", [row])
    cfg = config(assets, f"data.train_files={path}", f"data.val_files={path}", "data.prompt_key=question")
    check_inputs(cfg)
    fails(config(assets, f"data.train_files={path}"), r"^data\.prompt_key: is 'prompt'")


def test_prompt_must_be_chat_messages(assets, tmp_path):
    path = write_parquet(tmp_path / "train.parquet", [tiny_row(prompt="What is 1 + 1?")])
    message = fails(config(assets, f"data.train_files={path}"), r"^data\.prompt_key: column 'prompt' of ")
    assert str(path) in message and "list of chat messages" in message


def test_ground_truth_missing(assets, tmp_path):
    path = write_parquet(tmp_path / "train.parquet", [tiny_row(reward_model={"style": "rule"})])
    pattern = rf"^data\.train_files: {esc(path)} has no reward_model\.ground_truth"
    message = fails(config(assets, f"data.train_files={path}"), pattern)
    assert "struct" in message


def test_reward_model_column_missing(assets, tmp_path):
    path = write_parquet(tmp_path / "train.parquet", [tiny_row(reward_model=None, answer="2")])
    pattern = rf"^data\.train_files: {esc(path)} has no reward_model\.ground_truth"
    fails(config(assets, f"data.train_files={path}"), pattern)


def test_data_source_missing(assets, tmp_path):
    path = write_parquet(tmp_path / "train.parquet", [tiny_row(data_source=None)])
    fails(config(assets, f"data.train_files={path}"), rf"^data\.train_files: {esc(path)} has no column data_source")


def test_val_files_are_checked_too(assets, tmp_path):
    path = write_parquet(tmp_path / "val.parquet", [tiny_row(reward_model={"style": "rule"})])
    fails(config(assets, f"data.val_files={path}"), rf"^data\.val_files: {esc(path)} has no reward_model\.ground_truth")


def test_custom_reward_manager_reads_what_it_likes(assets, tmp_path):
    """veRL's registered reward managers read data_source and ground_truth; an importlib one is not second-guessed."""
    path = write_parquet(tmp_path / "train.parquet", [tiny_row(data_source=None, reward_model=None)])
    base = (f"data.train_files={path}", f"data.val_files={path}")
    fails(config(assets, *base), r"^data\.train_files: .*has no column data_source")
    manager = ("reward.reward_manager.source=importlib", "reward.reward_manager.module.path=/x.py")
    check_inputs(config(assets, *base, *manager))


def test_json_lines_first_record_is_checked(assets, tmp_path):
    path = tmp_path / "train.jsonl"
    path.write_text(json.dumps(tiny_row(prompt=None, question="q")) + "\n")
    fails(config(assets, f"data.train_files={path}"), r"^data\.prompt_key: is 'prompt'")
    path.write_text(json.dumps(tiny_row()) + "\n")
    check_inputs(config(assets, f"data.train_files={path}"))


def test_empty_train_file(assets, tmp_path):
    path = tmp_path / "train.parquet"
    pq.write_table(pa.Table.from_pylist([tiny_row()]).slice(0, 0), path)
    fails(config(assets, f"data.train_files={path}"), rf"^data\.train_files: {esc(path)} has no rows")


def test_empty_pandas_parquet_has_no_rows(assets, tmp_path):
    """pandas writes a 0-row frame's object columns as type null: the file is empty, not mistyped."""
    path = tmp_path / "train.parquet"
    pd.DataFrame([tiny_row()]).iloc[:0].to_parquet(path)
    assert pq.read_schema(path).field("prompt").type == pa.null()
    fails(config(assets, f"data.train_files={path}"), rf"^data\.train_files: {esc(path)} has no rows\.$")


@pytest.mark.parametrize("name, text", [("train.jsonl", ""), ("train.jsonl", "\n  \n"), ("train.json", "[]\n")])
def test_empty_json_files_have_no_rows(assets, tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    fails(config(assets, f"data.train_files={path}"), rf"^data\.train_files: {esc(path)} has no rows\.$")


def test_an_empty_val_file_has_no_rows(assets, tmp_path):
    path = tmp_path / "val.parquet"
    pd.DataFrame([tiny_row()]).iloc[:0].to_parquet(path)
    fails(config(assets, f"data.val_files={path}"), rf"^data\.val_files: {esc(path)} has no rows\.$")


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


# --------------------------------------------------------------------------------------------------
# reward dry run
# --------------------------------------------------------------------------------------------------


def test_label_key_typo_fails_in_the_dry_run(assets):
    message = fails(config(assets, "prime.prm.label_key=accuracy"), r"^prime\.prm\.label_key: is 'accuracy'")
    assert "pkg://verl_prime_lora.rewards.math_format:compute_score" in message  # the reward function
    assert "'acc'" in message and "'format'" in message  # the keys it returned
    assert f"row 0 of {assets['train']}" in message


def test_label_key_of_a_float_reward(assets):
    """veRL records a plain number as `acc` only: `acc` works, anything else fails."""
    reward = f"reward.custom_reward_function.path={PARTIAL_CREDIT_REWARD}"
    check_inputs(config(assets, reward))
    message = fails(config(assets, reward, "prime.prm.label_key=correct"), r"^prime\.prm\.label_key: is 'correct'")
    assert "returned the number" in message


def test_label_key_is_only_required_by_prime_trainers(assets):
    check_inputs(config(assets, "prime.prm.label_key=accuracy", *GRPO))


def test_prompt_filter_accuracy_key(assets):
    recipe = "prime_lora_colocated,prompt_filter,cpu"
    cfg = config(assets, "trainer.v1.sampler.sampler_kwargs.accuracy_key=accuracy", recipe=recipe)
    fails(cfg, r"^trainer\.v1\.sampler\.sampler_kwargs\.accuracy_key: is 'accuracy'")


def test_reward_that_raises_names_the_row(assets, tmp_path):
    reward = write_reward(tmp_path / "reward.py", "    raise KeyError('solution')\n")
    message = fails(config(assets, f"{REWARD_FN}={reward}"), r"^reward\.custom_reward_function\.path: ")
    assert f"raised on row 0 of {assets['train']}" in message and "KeyError: 'solution'" in message


@pytest.mark.parametrize(
    "returned, problem",
    [
        ("float('nan')", "non-finite score nan"),
        ("float('inf')", "non-finite score inf"),
        ("float('-inf')", "non-finite score -inf"),
        ("'1.0'", "non-number score '1.0' (str)"),
        ("None", "non-number score None (NoneType)"),
    ],
)
def test_reward_that_returns_no_finite_number(assets, tmp_path, returned, problem):
    reward = write_reward(tmp_path / "reward.py", f"    return {returned}\n")
    message = fails(config(assets, f"{REWARD_FN}={reward}"), r"^reward\.custom_reward_function\.path: ")
    assert f"the reward function {reward}:compute_score returned a {problem} on row 0 of {assets['train']}" in message


def test_reward_dict_with_a_non_finite_score_or_label(assets, tmp_path):
    reward = write_reward(tmp_path / "reward.py", "    return {'score': float('nan'), 'acc': 1.0}\n")
    fails(
        config(assets, f"{REWARD_FN}={reward}"),
        r"^reward\.custom_reward_function\.path: .* returned a non-finite score nan",
    )
    reward = write_reward(tmp_path / "label.py", "    return {'score': 1.0, 'acc': float('inf')}\n")
    fails(
        config(assets, f"{REWARD_FN}={reward}"),
        r"^reward\.custom_reward_function\.path: .* returned a non-finite PRM label 'acc' inf on row 0",
    )


def test_reward_dict_needs_score(assets, tmp_path):
    reward = write_reward(tmp_path / "reward.py", "    return {'acc': 1.0}\n")
    fails(config(assets, f"{REWARD_FN}={reward}"), r"^reward\.custom_reward_function\.path: .*without 'score'")


def test_reward_file_missing(assets, tmp_path):
    missing = tmp_path / "no_reward.py"
    pattern = rf"^reward\.custom_reward_function\.path: cannot load 'compute_score' from {esc(missing)}"
    fails(config(assets, f"{REWARD_FN}={missing}"), pattern)


def test_default_reward_with_an_unknown_data_source(assets, tmp_path):
    path = write_parquet(tmp_path / "train.parquet", [tiny_row(data_source="my_data")])
    cfg = config(assets, f"data.train_files={path}", f"{REWARD_FN}=null", *GRPO)
    message = fails(cfg, r"^reward\.custom_reward_function\.path: the reward function veRL's default_compute_score")
    assert "NotImplementedError" in message and "my_data" in message and str(path) in message


# --------------------------------------------------------------------------------------------------
# devices
# --------------------------------------------------------------------------------------------------


ONE_RAY_GPU = "ray_kwargs.ray_init.num_gpus=1"  # the CPU preset otherwise gives Ray the layout's GPUs


def test_split_recipe_on_one_device(assets):
    message = fails(
        config(assets, ONE_RAY_GPU, recipe="prime_lora,cpu"), r"^trainer\.n_gpus_per_node: the layout needs 2 GPUs"
    )
    for key in ("actor_rollout_ref.rollout.n_gpus_per_node", "ray_kwargs.ray_init.num_gpus=1", "prime_lora_colocated"):
        assert key in message
    check_inputs(config(assets, recipe="prime_lora,cpu"))  # the preset's own count: 1 trainer + 1 rollout GPU


def test_trainer_pool_larger_than_ray_gpus(assets):
    pattern = r"^trainer\.n_gpus_per_node: the layout needs 2 GPUs.*num_gpus=1"
    fails(config(assets, "trainer.n_gpus_per_node=2", ONE_RAY_GPU), pattern)


def test_missing_devices_are_blamed_before_the_micro_batch_arithmetic(assets):
    """Four trainer ranks on one device: the driver says the devices are missing, not that the micro-batches
    do not divide over four ranks (what validate_prime_config alone would say)."""
    import verl.utils.config as verl_config

    from verl_prime_lora.checks.config_checks import validate_prime_config

    cfg = config(assets, "trainer.n_gpus_per_node=4", ONE_RAY_GPU)
    with pytest.raises(ValueError, match=r"4 (training )?ranks") as alone:
        validate_prime_config(cfg, check_tokenizers=False)
    assert "num_gpus" not in str(alone.value)
    with pytest.raises(InputCheckError) as err:
        verl_config.validate_config(cfg, use_reference_policy=False, use_critic=False)
    message = str(err.value)
    assert message.startswith("trainer.n_gpus_per_node: the layout needs 4 GPUs (4 for the trainer pool")
    assert "ray_kwargs.ray_init.num_gpus=1" in message


def test_storage_units_beyond_ray_cpus(assets):
    key = "transfer_queue.backend.SimpleStorage.num_data_storage_units"
    message = fails(config(assets, f"{key}=8"), rf"^{re.escape(key)}: is 8: the run holds 12 CPUs")
    assert "ray_kwargs.ray_init.num_cpus=8" in message and "Set it <= 4" in message
    check_inputs(config(assets, f"{key}=4"))  # 1 + 4 + 3 = 8: fits


def test_ray_cpus_below_the_placement_groups(assets):
    pattern = r"^ray_kwargs\.ray_init\.num_cpus: is 4: the run holds 5 CPUs"
    message = fails(config(assets, "ray_kwargs.ray_init.num_cpus=4"), pattern)
    assert "num_data_storage_units" in message


@pytest.fixture
def ray_start_record(tmp_path, monkeypatch):
    """A cluster that `ray start` recorded as this machine's current one (in a private Ray temp dir)."""
    monkeypatch.setenv("RAY_TMPDIR", str(tmp_path))
    monkeypatch.delenv("RAY_ADDRESS")
    (tmp_path / "ray").mkdir()
    (tmp_path / "ray" / "ray_current_cluster").write_text("127.0.0.1:6379")
    return tmp_path / "ray" / "ray_current_cluster"


def test_a_cluster_left_by_ray_start_is_not_joined_with_num_cpus(assets, ray_start_record):
    """The CPU preset gives ray.init num_cpus and num_gpus, which Ray refuses when it joins a running
    cluster; a bare ray.init() joins the one `ray start` recorded. The message names both ways out."""
    pattern = (
        r"^ray_kwargs\.ray_init\.num_cpus: is set, "
        r"but ray\.init would join the running Ray cluster at 127\.0\.0\.1:6379"
    )
    message = fails(config(assets), pattern)
    assert str(ray_start_record) in message and "RAY_ADDRESS=local" in message
    assert "ray_kwargs.ray_init.num_cpus=null ray_kwargs.ray_init.num_gpus=null" in message


def test_a_cluster_named_by_ray_address_is_blamed_on_it(assets, monkeypatch):
    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.7:6379")
    fails(config(assets), r"^ray_kwargs\.ray_init\.num_cpus: .* at 10\.0\.0\.7:6379 \(RAY_ADDRESS\)")


def test_joining_a_cluster_without_resources_or_starting_one_passes(assets, ray_start_record, monkeypatch):
    check_inputs(config(assets, "ray_kwargs.ray_init.num_cpus=null", "ray_kwargs.ray_init.num_gpus=null"))
    monkeypatch.setenv("RAY_ADDRESS", "local")
    check_inputs(config(assets))
    monkeypatch.delenv("RAY_ADDRESS")
    ray_start_record.unlink()  # `ray stop` removes the record
    check_inputs(config(assets))


def test_ray_joins_as_the_check_says(ray_start_record, monkeypatch):
    """Ray's own resolution (what ray.init runs) agrees: it joins the recorded cluster, and with
    RAY_ADDRESS=local (what `cpu.launch` gives every CPU run) it starts one."""
    from ray._private.services import canonicalize_bootstrap_address

    assert canonicalize_bootstrap_address(None).endswith(":6379")  # localhost as this node's IP
    monkeypatch.setenv("RAY_ADDRESS", "local")
    assert canonicalize_bootstrap_address(None) is None


def test_agent_workers_are_not_counted(assets):
    """AgentLoopWorkers are default Ray actors (1 CPU to place, 0 held): more of them than CPUs do not hang."""
    check_inputs(config(assets, "actor_rollout_ref.rollout.agent.num_workers=16"))


# -- with ray_kwargs.ray_init.num_cpus unset: the CPUs Ray counts on this machine ---------------------------------

SPLIT = ("+recipe=prime_lora", "actor_rollout_ref.model.path=/m")  # the GPU recipes leave num_cpus unset
COLOCATED = ("+recipe=prime_lora_colocated", "actor_rollout_ref.model.path=/m")
EIGHT_GPUS = (  # docs/operations.md's one-node 8-GPU example
    *SPLIT,
    "trainer.n_gpus_per_node=4",
    "actor_rollout_ref.rollout.n_gpus_per_node=4",
    "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=2",
)
UNITS = "transfer_queue.backend.SimpleStorage.num_data_storage_units"
# the files Ray reads under /sys/fs/cgroup: v1's quota, period and cpuset (v2's quota is cpu.max)
V1_QUOTA, V1_PERIOD, V1_CPUSET = "cpu/cpu.cfs_quota_us", "cpu/cpu.cfs_period_us", "cpuset/cpuset.cpus"


@pytest.fixture
def host(tmp_path, monkeypatch):
    """This machine as Ray counts its CPUs: 64 logical CPUs (`machine.logical`) and the cgroup files written by
    `machine.cgroup({path relative to /sys/fs/cgroup: text})` under a stand-in for /sys/fs/cgroup."""
    root = tmp_path / "cgroup"
    root.mkdir()
    monkeypatch.setattr(inputs_devices, "CGROUP_ROOT", root)
    monkeypatch.delenv("RAY_USE_MULTIPROCESSING_CPU_COUNT", raising=False)
    machine = type("Machine", (), {})()

    def logical(count):
        monkeypatch.setattr(multiprocessing, "cpu_count", lambda: count)

    def cgroup(files):
        for name, text in files.items():
            path = root / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text + "\n")

    machine.root, machine.logical, machine.cgroup = root, logical, cgroup
    logical(64)
    return machine


def check_host(*overrides: str) -> None:
    inputs_devices.check_host_cpus(verl_view(compose_ppo(*overrides)))


def test_the_split_recipe_in_a_container_of_8_cpus_is_refused(host):
    """`docker run --cpus=8` on a 64-CPU host: Ray counts 8 (cgroup v2 quota), the split recipe holds 14. The
    message names the storage units (8 -> 2 makes it fit), num_cpus and the quota it read; both ways out pass."""
    host.cgroup({"cpu.max": "800000 100000"})
    with pytest.raises(InputCheckError) as err:
        check_host(*SPLIT)
    message = str(err.value)
    assert message.startswith(f"{UNITS}: is 8: the run holds 14 CPUs (the TransferQueue controller (1), 8 storage")
    assert "more than the 8 CPUs Ray counts on this machine (the container's limit: a CPU quota of 8" in message
    assert f"{host.root / 'cpu.max'}: 800000 100000); the machine has 64 logical CPUs)" in message
    assert "Set it <= 2 or set ray_kwargs.ray_init.num_cpus=14" in message and "docker run --cpus=14" in message
    check_host(*SPLIT, f"{UNITS}=2")
    check_host(*SPLIT, "ray_kwargs.ray_init.num_cpus=14")
    inputs_devices.check_devices(verl_view(compose_ppo(*SPLIT, "ray_kwargs.ray_init.num_cpus=14")))
    host.cgroup({"cpu.max": "1400000 100000"})  # 14 CPUs: fits
    check_host(*SPLIT)
    host.cgroup({"cpu.max": "max 100000"})  # no quota: the 64 logical CPUs
    check_host(*EIGHT_GPUS)


def test_a_v1_cpuset_or_a_small_machine_is_counted_and_named(host):
    """cgroup v1 without a quota (-1) but a cpuset of 4 CPUs: the colocated recipe's 12 do not fit, and fewer
    storage units cannot make them (the placement group alone holds 3 + the controller 1 of 4): num_cpus is named."""
    host.cgroup({V1_QUOTA: "-1", V1_PERIOD: "100000", V1_CPUSET: "0-3"})
    pattern = r"^ray_kwargs\.ray_init\.num_cpus: is unset: the run holds 12 CPUs .* more than the 4 CPUs Ray counts"
    with pytest.raises(InputCheckError, match=pattern) as err:
        check_host(*COLOCATED)
    assert f"the cpuset 0-3 ({host.root / 'cpuset/cpuset.cpus'})" in str(err.value)
    assert "Set ray_kwargs.ray_init.num_cpus=12" in str(err.value)
    shutil.rmtree(host.root / "cpuset")
    host.logical(8)  # a VM of 8 CPUs, no container limit
    with pytest.raises(InputCheckError, match=r"more than the 8 CPUs Ray counts on this machine \(the machine's 8 "):
        check_host(*COLOCATED)
    host.logical(12)
    check_host(*COLOCATED)


def test_no_host_check_with_num_cpus_given_or_a_cluster_to_join(host, monkeypatch):
    """Given num_cpus, Ray counts nothing (check_devices compares with it); a joined cluster counted its CPUs when
    `ray start` ran, on its own nodes."""
    host.logical(1)
    check_host(*SPLIT, "ray_kwargs.ray_init.num_cpus=14")
    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.7:6379")
    check_host(*SPLIT)


def test_the_driver_checks_the_host_cpus(assets, host):
    """veRL's validate_config, as main_ppo calls it before Ray, and check_inputs run the check: the CPU preset with
    num_cpus unset holds 5 CPUs (TransferQueue 1 + 1, the placement group 3) on a machine of 4."""
    import verl.utils.config as verl_config

    host.logical(4)
    cfg = config(assets, "ray_kwargs.ray_init.num_cpus=null")
    pattern = r"^ray_kwargs\.ray_init\.num_cpus: is unset: the run holds 5 CPUs .* the 4 CPUs Ray counts"
    with pytest.raises(InputCheckError, match=pattern):
        verl_config.validate_config(cfg, use_reference_policy=False, use_critic=False)
    with pytest.raises(InputCheckError, match=pattern):
        check_inputs(cfg)
    host.logical(5)
    check_inputs(cfg)


@pytest.mark.parametrize(
    "files, counted",
    [
        ({}, 64),
        ({"cpu.max": "max 100000"}, 64),  # cgroup v2, no quota
        ({"cpu.max": "800000 100000"}, 8),
        ({"cpu.max": "750000 100000"}, 7),  # truncated
        ({"cpu.max": "50000 100000"}, 0),  # half a CPU: Ray counts none
        ({"cpu.max": "0 100000"}, 1),
        ({V1_QUOTA: "400000", V1_PERIOD: "100000"}, 4),
        ({V1_QUOTA: "-1", V1_PERIOD: "100000", V1_CPUSET: "0-3,8"}, 5),  # no quota; a cpuset of 5
        ({V1_QUOTA: "800000", V1_PERIOD: "100000", V1_CPUSET: "0-4"}, 5),  # the smaller
        ({V1_QUOTA: "200000", V1_PERIOD: "100000", "cpu.max": "800000 100000"}, 2),  # v1 first
        ({V1_CPUSET: "0-127"}, 128),  # a cpuset beyond the machine's count: Ray takes it
    ],
)
def test_the_count_is_rays_own(host, monkeypatch, files, counted):
    """`ray_cpu_count` counts what Ray's own `get_num_cpus` counts (the default num_cpus of a cluster that ray.init
    starts) with its cgroup files pointed at the same stand-ins, on a machine of 64 logical CPUs."""
    from ray._private import utils as ray_utils

    host.cgroup(files)
    docker_cpus = functools.partial(
        ray_utils._get_docker_cpus,
        cpu_quota_file_name=str(host.root / V1_QUOTA),
        cpu_period_file_name=str(host.root / V1_PERIOD),
        cpuset_file_name=str(host.root / V1_CPUSET),
        cpu_max_file_name=str(host.root / "cpu.max"),
    )
    monkeypatch.setattr(ray_utils, "_get_docker_cpus", docker_cpus)
    assert inputs_devices.ray_cpu_count()[0] == ray_utils.get_num_cpus(override_docker_cpu_warning=True) == counted
    monkeypatch.setenv("RAY_USE_MULTIPROCESSING_CPU_COUNT", "1")
    because = "the machine's 64 logical CPUs, as RAY_USE_MULTIPROCESSING_CPU_COUNT is set"
    assert inputs_devices.ray_cpu_count() == (ray_utils.get_num_cpus(), because)


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity") or (os.cpu_count() or 1) < 2, reason="needs 2 CPUs")
def test_ray_counts_cpus_that_the_affinity_excludes():
    """Restricted to one CPU (`taskset -c 0`), this process still gets the machine's count from Ray and from the
    check: Ray's default ignores the affinity, so an affinity alone makes no actor wait."""
    from ray._private import utils as ray_utils

    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {min(before)})
    try:
        counted, _ = inputs_devices.ray_cpu_count()
        assert counted == ray_utils.get_num_cpus(override_docker_cpu_warning=True) > len(os.sched_getaffinity(0))
    finally:
        os.sched_setaffinity(0, before)


def test_the_cpu_needs_install_md_quotes():
    """docs/install.md's prerequisites give the CPUs each layout holds; they are this accounting's."""
    needs = {
        name: inputs_devices.cpus_held(verl_view(compose_ppo(*layout))).held
        for name, layout in (("split", SPLIT), ("colocated", COLOCATED), ("8 GPUs", EIGHT_GPUS))
    }
    assert needs == {"split": 14, "colocated": 12, "8 GPUs": 29}
    install = (Path(__file__).resolve().parents[1] / "docs" / "install.md").read_text()
    for layout, held in needs.items():
        assert re.search(rf"^\| {re.escape(layout)}\b[^\n]*\| {held} \|", install, re.M), layout


# --------------------------------------------------------------------------------------------------
# the hook: veRL's validate_config in the driver
# --------------------------------------------------------------------------------------------------


def test_verl_validate_config_runs_the_input_checks(assets, tmp_path):
    import verl.utils.config as verl_config

    missing = tmp_path / "nope.parquet"
    with pytest.raises(InputCheckError, match=r"^data\.train_files: "):
        cfg = config(assets, f"data.train_files={missing}")
        verl_config.validate_config(cfg, use_reference_policy=False, use_critic=False)


def test_a_plain_verl_run_meets_no_prime_check_in_the_driver(assets, tmp_path):
    """With the plugin installed, a run with neither a PRIME trainer nor a PRIME estimator passes veRL's
    validate_config exactly as without it: no PRIME config check, no input check, no reward dry run. The
    config below fails all three (a missing data file, a reward function that does not exist, n=1)."""
    import verl.utils.config as verl_config

    cfg = config(
        assets,
        *GRPO,
        f"data.train_files={tmp_path / 'nope.parquet'}",
        f"{REWARD_FN}={tmp_path / 'no_reward.py'}",
        "actor_rollout_ref.rollout.n=1",
    )
    verl_alone = verl_config.validate_config.__wrapped__
    verl_alone(cfg, use_reference_policy=False, use_critic=False)
    verl_config.validate_config(cfg, use_reference_policy=False, use_critic=False)
    # the same config as a PRIME run is refused before Ray
    with pytest.raises(ValueError, match=r"^actor_rollout_ref\.rollout\.n: "):
        prime = config(assets, f"{REWARD_FN}={tmp_path / 'no_reward.py'}", "actor_rollout_ref.rollout.n=1")
        verl_config.validate_config(prime, use_reference_policy=False, use_critic=False)


def test_main_ppo_fails_before_ray_on_an_empty_model_folder(assets, tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    stderr = main_ppo_stopped_before_ray(
        tmp_path,
        "+recipe=[prime_lora_colocated,cpu]",
        f"data.train_files={assets['train']}",
        f"data.val_files={assets['test']}",
        f"actor_rollout_ref.model.path={empty}",
    )
    expected = f"InputCheckError: actor_rollout_ref.model.path: {empty} holds no config.json"
    assert expected in stderr, stderr[-3000:]


# --------------------------------------------------------------------------------------------------
# agent loops: one output per session for the PRIME trainers
# --------------------------------------------------------------------------------------------------

AGENT_KEY = "actor_rollout_ref.rollout.agent"
LOOPS = "turn_per_output_agent_loop"  # tests/e2e/turn_per_output_agent_loop.py


def write_agent_loops(path: Path, **targets: str) -> Path:
    path.write_text("".join(f"- name: {name}\n  _target_: {LOOPS}.{cls}\n" for name, cls in targets.items()))
    return path


@pytest.fixture
def loops_importable(monkeypatch):
    monkeypatch.syspath_prepend(str(E2E))


@pytest.mark.parametrize("cls", ["OutputPerTurnAgentLoop", "OptionalOutputsAgentLoop"])
def test_agent_loop_with_an_output_per_turn_is_refused(assets, tmp_path, loops_importable, cls):
    loops = write_agent_loops(tmp_path / "loops.yaml", per_turn=cls)
    cfg = config(assets, f"{AGENT_KEY}.agent_loop_config_path={loops}", f"{AGENT_KEY}.default_agent_loop=per_turn")
    message = fails(cfg, rf"{AGENT_KEY}\.agent_loop_config_path: agent loop 'per_turn' \({LOOPS}\.{cls}, used by ")
    assert "trainer.v1.trainer_mode=prime_sync takes one output per session" in message
    assert f"used by {AGENT_KEY}.default_agent_loop" in message


def test_agent_loop_named_by_a_data_row(assets, tmp_path, loops_importable):
    """A loop that only the data's agent_name column selects is found there, and the file is named."""
    loops = write_agent_loops(tmp_path / "loops.yaml", per_turn="OutputPerTurnAgentLoop", whole="WholeSessionAgentLoop")
    train = write_parquet(
        tmp_path / "train.parquet", [tiny_row(agent_name="single_turn_agent"), tiny_row(agent_name="per_turn")]
    )
    cfg = config(assets, f"{AGENT_KEY}.agent_loop_config_path={loops}", f"data.train_files={train}")
    fails(cfg, rf".*'per_turn' .*used by the agent_name column of {esc(train)} \(data\.train_files\)")


def test_loops_with_one_output_pass(assets, tmp_path, loops_importable):
    loops = write_agent_loops(tmp_path / "loops.yaml", whole="WholeSessionAgentLoop")
    check_inputs(config(assets, f"{AGENT_KEY}.agent_loop_config_path={loops}", f"{AGENT_KEY}.default_agent_loop=whole"))
    check_inputs(config(assets, f"{AGENT_KEY}.default_agent_loop=tool_agent"))


def test_agent_loops_are_only_checked_for_prime_trainers(assets, tmp_path, loops_importable):
    """veRL's own trainers score multi-output sessions themselves (compute_advantage_for_multi_trajectories)."""
    loops = write_agent_loops(tmp_path / "loops.yaml", per_turn="OutputPerTurnAgentLoop")
    check_inputs(
        config(assets, *GRPO, f"{AGENT_KEY}.agent_loop_config_path={loops}", f"{AGENT_KEY}.default_agent_loop=per_turn")
    )


def test_agent_loop_that_does_not_import(assets, tmp_path, loops_importable):
    loops = write_agent_loops(tmp_path / "loops.yaml", gone="NoSuchLoop")
    cfg = config(assets, f"{AGENT_KEY}.agent_loop_config_path={loops}")
    fails(cfg, rf"{AGENT_KEY}\.agent_loop_config_path: agent loop 'gone': cannot import {LOOPS}\.NoSuchLoop")


def test_agent_loop_config_that_is_not_a_list(assets, tmp_path):
    bad = tmp_path / "loops.yaml"
    bad.write_text("name: x\n")
    fails(
        config(assets, f"{AGENT_KEY}.agent_loop_config_path={bad}"),
        rf"{AGENT_KEY}\.agent_loop_config_path: {esc(bad)} is not",
    )


def test_main_ppo_refuses_an_output_per_turn_loop_before_ray(assets, tmp_path):
    loops = write_agent_loops(tmp_path / "loops.yaml", per_turn="OutputPerTurnAgentLoop")
    shutil.copy(E2E / f"{LOOPS}.py", tmp_path)  # importable from main_ppo's working directory
    stderr = main_ppo_stopped_before_ray(
        tmp_path,
        "+recipe=[prime_lora_colocated,cpu]",
        f"data.train_files={assets['train']}",
        f"data.val_files={assets['test']}",
        f"actor_rollout_ref.model.path={assets['model']}",
        f"{AGENT_KEY}.agent_loop_config_path={loops}",
        f"{AGENT_KEY}.default_agent_loop=per_turn",
    )
    assert f"InputCheckError: {AGENT_KEY}.agent_loop_config_path: agent loop 'per_turn'" in stderr, stderr[-3000:]


def fake_checkpoint(root: Path, step: int, actor_ranks: int, prm_ranks: int | None) -> Path:
    """A veRL checkpoint as PRIME writes it, each file a small torch.save archive: `root/global_step_N/{actor,prm}`
    with the model, optimizer and extra-state shard of every rank, `data.pt`, `prime_state.json`, and the tracker."""
    folder = root / f"global_step_{step}"
    for part, ranks in (("actor", actor_ranks), ("prm", prm_ranks)):
        if ranks is not None:
            (folder / part).mkdir(parents=True)
            for rank in range(ranks):
                for prefix in ("model", "optim", "extra_state"):
                    torch.save({"w": torch.zeros(4)}, folder / part / f"{prefix}_world_size_{ranks}_rank_{rank}.pt")
    torch.save({"dataloader": 0}, folder / "data.pt")
    (folder / "prime_state.json").write_text(json.dumps({"prm_pairwise_ema": 0.5}))
    (root / "latest_checkpointed_iteration.txt").write_text(str(step))
    return folder


def test_resume_from_a_checkpoint_of_another_world_size(assets, tmp_path):
    folder = fake_checkpoint(tmp_path / "ckpt", 3, actor_ranks=2, prm_ranks=2)
    resume = ("trainer.resume_mode=resume_path", f"trainer.resume_from_path={folder}")
    message = fails(config(assets, *resume), r"^trainer\.n_gpus_per_node: trainer\.resume_mode=resume_path resumes")
    assert "actor was saved by 2 ranks" in message and "this run has 1" in message
    ranks = ("trainer.n_gpus_per_node=2", "ray_kwargs.ray_init.num_gpus=2")
    check_inputs(config(assets, *resume, *ranks))  # the same 2 ranks: fine
    # auto mode finds the latest step under default_local_dir; the PRM is checked as the actor
    (folder / "actor" / "model_world_size_1_rank_0.pt").touch()
    auto = (f"trainer.default_local_dir={tmp_path / 'ckpt'}",)
    message = fails(config(assets, *auto), r"^trainer\.n_gpus_per_node: trainer\.resume_mode=auto resumes")
    assert "PRM was saved by 2 ranks" in message
    check_inputs(config(assets, *auto, "trainer.resume_mode=disable"))


def test_prime_resume_needs_the_prm_state(assets, tmp_path):
    folder = fake_checkpoint(tmp_path / "ckpt", 2, actor_ranks=1, prm_ranks=None)
    pattern = (
        rf"^trainer\.default_local_dir: trainer\.resume_mode=auto: the latest checkpoint, {esc(folder)}, holds no "
        r"PRM state .*, and no other step folder of .* is complete\. Nothing was deleted"
    )
    fails(config(assets, f"trainer.default_local_dir={tmp_path / 'ckpt'}"), pattern)
    fails(config(assets, *resume(folder)), rf"^trainer\.resume_from_path: .*{esc(folder)}, which holds no PRM state")
    # a plain veRL trainer has no PRM to restore
    check_inputs(
        config(
            assets,
            f"trainer.default_local_dir={tmp_path / 'ckpt'}",
            *GRPO,
            REWARD_FN + "=" + str(PARTIAL_CREDIT_REWARD),
        )
    )


def resume(folder: Path) -> tuple[str, str]:
    return "trainer.resume_mode=resume_path", f"trainer.resume_from_path={folder}"


def truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def test_a_whole_checkpoint_resumes(assets, tmp_path):
    check_inputs(config(assets, *resume(fake_checkpoint(tmp_path / "ckpt", 2, actor_ranks=1, prm_ranks=1))))


def test_a_truncated_prm_shard_is_named_before_ray(assets, tmp_path):
    folder = fake_checkpoint(tmp_path / "ckpt", 1, actor_ranks=1, prm_ranks=1)
    shard = folder / "prm" / "optim_world_size_1_rank_0.pt"
    truncate(shard)
    pattern = (
        rf"^trainer\.resume_from_path: trainer\.resume_mode=resume_path resumes from {esc(folder)}, which has 1 "
        rf"file the resume reads that cannot be opened: {esc(shard)} is not the zip archive torch\.save writes "
        r"\(\d+ bytes; BadZipFile"
    )
    message = fails(config(assets, *resume(folder)), pattern)
    assert "Nothing was deleted" in message and shard.exists()


def test_every_broken_file_of_the_resume_is_named(assets, tmp_path):
    """Missing shards of a rank, a truncated dataloader state: one message, each with its path."""
    folder = fake_checkpoint(tmp_path / "ckpt", 1, actor_ranks=2, prm_ranks=2)
    (folder / "actor" / "extra_state_world_size_2_rank_1.pt").unlink()
    truncate(folder / "data.pt")
    (folder / "prm" / "model_world_size_2_rank_1.pt").write_bytes(b"not a zip")
    ranks = ("trainer.n_gpus_per_node=2", "ray_kwargs.ray_init.num_gpus=2")
    message = fails(config(assets, *resume(folder), *ranks), r"^trainer\.resume_from_path: .*has 3 files the resume")
    assert f"{folder / 'actor' / 'extra_state_world_size_2_rank_1.pt'} is missing" in message
    assert f"{folder / 'data.pt'} is not the zip archive torch.save writes" in message
    assert f"{folder / 'prm' / 'model_world_size_2_rank_1.pt'} is not the zip archive torch.save writes" in message


def test_a_checkpoint_file_cut_inside_its_records(assets, tmp_path):
    """A zip whose central directory survived but whose last record reaches past the end of the file."""
    folder = fake_checkpoint(tmp_path / "ckpt", 1, actor_ranks=1, prm_ranks=1)
    shard = folder / "actor" / "model_world_size_1_rank_0.pt"
    data = shard.read_bytes()
    directory = data.index(b"PK\x01\x02")  # the central directory's first entry
    shard.write_bytes(data[: directory - 64] + data[directory:])  # 64 bytes of the last tensor's data lost
    fails(
        config(assets, *resume(folder)), rf"^trainer\.resume_from_path: .*{esc(shard)} is cut short or corrupt: record "
    )


def test_only_the_contents_the_resume_loads_are_checked(assets, tmp_path):
    folder = fake_checkpoint(tmp_path / "ckpt", 1, actor_ranks=1, prm_ranks=1)
    (folder / "prm" / "optim_world_size_1_rank_0.pt").unlink()
    fails(config(assets, *resume(folder)), r"^trainer\.resume_from_path: .*optim_world_size_1_rank_0\.pt is missing")
    check_inputs(config(assets, *resume(folder), "prime.prm.checkpoint.load_contents=[model,extra]"))


def test_prime_state_may_be_absent_but_not_corrupt(assets, tmp_path):
    folder = fake_checkpoint(tmp_path / "ckpt", 1, actor_ranks=1, prm_ranks=1)
    state = folder / "prime_state.json"
    state.write_text('{"prm_pairwise_ema": ')
    message = fails(config(assets, *resume(folder)), rf"^trainer\.resume_from_path: .*{esc(state)} does not hold")
    assert "JSONDecodeError" in message
    state.write_text('{"prm_pairwise_ema": NaN}')
    fails(config(assets, *resume(folder)), rf".*{esc(state)} holds prm_pairwise_ema = nan, not a finite number")
    state.unlink()  # a checkpoint older than the file: the trainer warns and restarts the gate at 1/2
    (folder / "data.pt").unlink()  # veRL too starts its dataloader afresh without it
    check_inputs(config(assets, *resume(folder)))


def auto_resume(assets, root: Path):
    return config(assets, f"trainer.default_local_dir={root}")


def test_auto_resume_steps_past_an_incomplete_latest_checkpoint(assets, tmp_path, caplog):
    """A crash while step 2 was saved (its PRM shard cut short) after the tracker had moved on: the newest complete
    step resumes instead, the config says so, one line names what was skipped, and nothing is deleted."""
    root = tmp_path / "ckpt"
    complete = fake_checkpoint(root, 1, actor_ranks=1, prm_ranks=1)
    broken = fake_checkpoint(root, 2, actor_ranks=1, prm_ranks=1)
    truncate(broken / "prm" / "model_world_size_1_rank_0.pt")
    cfg = auto_resume(assets, root)
    with caplog.at_level("WARNING"):
        check_inputs(cfg)
    assert (cfg.trainer.resume_mode, cfg.trainer.resume_from_path) == ("resume_path", str(complete))
    (line,) = [r.getMessage() for r in caplog.records if "trainer.resume_mode=auto" in r.getMessage()]
    assert f"the latest checkpoint, {broken}, has 1 file the resume reads that cannot be opened" in line
    assert f"Resuming from the newest complete checkpoint, {complete}" in line and "nothing was deleted" in line
    assert (broken / "prm" / "model_world_size_1_rank_0.pt").exists()


@pytest.mark.parametrize("tracker", ["", "2\x00", "7"])
def test_auto_resume_past_a_torn_tracker_or_a_missing_folder_takes_the_newest_complete_step(assets, tmp_path, tracker):
    root = tmp_path / "ckpt"
    fake_checkpoint(root, 1, actor_ranks=1, prm_ranks=1)
    newest = fake_checkpoint(root, 2, actor_ranks=1, prm_ranks=1)
    (root / "latest_checkpointed_iteration.txt").write_text(tracker)  # a torn write, or a step that is not there
    cfg = auto_resume(assets, root)
    check_inputs(cfg)
    assert (cfg.trainer.resume_mode, cfg.trainer.resume_from_path) == ("resume_path", str(newest))


def test_an_auto_resume_whose_checkpoint_is_whole_is_left_to_verl(assets, tmp_path):
    root = tmp_path / "ckpt"
    fake_checkpoint(root, 1, actor_ranks=1, prm_ranks=1)
    fake_checkpoint(root, 2, actor_ranks=1, prm_ranks=1)
    cfg = auto_resume(assets, root)
    check_inputs(cfg)
    assert cfg.trainer.resume_mode == "auto"
