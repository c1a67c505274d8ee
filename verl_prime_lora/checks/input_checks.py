"""Checks of a run's inputs in the driver, before Ray starts: the files, folders and devices a config names.

`check_inputs(config)` raises `InputCheckError` (a `ValueError` whose message starts with the config key,
and names the path or row) for inputs that veRL 0.9.1 would otherwise reject only minutes later inside a
Ray actor, or on which it hangs. It runs for every PRIME `main_ppo` run with this plugin, from the driver-side
wrapper of veRL's `validate_config` (`integration.patches.install_driver_validation`), in two parts: `check_devices`
before the config checks of `config_checks.validate_prime_config` (whose micro-batch arithmetic assumes the
devices are there, so a missing device is blamed as such), `check_files_and_code` (2-6) after them. In order:

1. devices (`check_devices`), config only:
   - with `ray_kwargs.ray_init.num_cpus` or `.num_gpus` set: `ray.init` must start a cluster, not join one.
     Ray joins the cluster `RAY_ADDRESS` names, else `ray_kwargs.ray_init.address`, else (no address, or
     `auto`) the last one `ray start` left on this machine (`ray_current_cluster` in Ray's temp dir), and
     refuses both keys when it joins;
   - with `ray_kwargs.ray_init.num_gpus` set: the GPUs the layout asks Ray for fit in it. That is the
     trainer pool (`trainer.n_gpus_per_node` x `trainer.nnodes`), plus the standalone rollout pool of the
     split trainers (`separate_async`, `prime_separate_async`: `actor_rollout_ref.rollout.n_gpus_per_node`
     x `.nnodes`), plus the reward-model pool when `reward.reward_model.enable_resource_pool`;
   - with `ray_kwargs.ray_init.num_cpus` set: the CPUs that actors hold for the whole run fit in it, else
     one of them stays pending and veRL hangs without a message. The holders are the TransferQueue (V1
     trainer): its controller (1) and `transfer_queue.backend.SimpleStorage.num_data_storage_units` storage
     actors (1 each); and the placement groups: 3 CPUs per trainer-pool and reward-pool GPU
     (`ResourcePoolManager`'s `max_colocate_count`), 2 per standalone-rollout GPU. Agent-loop and
     reward-loop workers are default Ray actors, which need no free CPU, so
     `actor_rollout_ref.rollout.agent.num_workers` is not counted.
2. model folders (`check_model_paths`): `actor_rollout_ref.model.path` and, for a PRIME trainer,
   `prime.prm.model.path` hold a `config.json` and weights (`*.safetensors`, `pytorch_model*.bin`, or the
   index of either); they (or the `tokenizer_path` next to them, when set) hold a tokenizer
   (`tokenizer.json`, a vocabulary file, or a `tokenizer_config.json` with remote code); one message names
   everything a folder lacks. Hub ids
   (`org/name` that is not a local folder) and remote URLs are skipped: nothing is downloaded. For a PRIME
   trainer the PRM tokenizer must then equal the policy's (`config_checks.check_prm_tokenizer`).
3. data files (`check_data_files`): every `data.train_files` / `data.val_files` entry (a string or a list)
   exists, is a file veRL's RLHFDataset reads (.parquet, .json, .jsonl), has rows (parquet: its metadata's
   row count, whoever wrote it; JSON: a first record), and its schema (parquet: the schema and the first rows
   only; json lines: the first record) has the column `data.prompt_key` as a list of chat
   messages and, when rule-based rewards are computed (a custom reward function, or no reward model), the
   `data_source` column and a `reward_model` struct with a `ground_truth` field: veRL's reward managers read
   both for every sample. A custom dataset class (`data.custom_cls.path`) or reward manager
   (`reward.reward_manager.source=importlib`) reads what it likes: their files are not checked.
4. reward dry run (`dry_run_reward`): the configured reward function (`reward.custom_reward_function.path`
   / `.name` with its `reward_kwargs`, loaded as veRL loads it; else veRL's default scorer) scores the
   first row of the first train file, with the row's ground truth as the response
   (`<think>...</think> \\boxed{GT}`). It must not raise; a dict result must hold `score` (veRL reads it)
   and, for a PRIME trainer, `prime.prm.label_key`; with the prompt filter, its `accuracy_key`. (veRL
   stores a plain number as `acc`.) The score and those keys' values must be finite numbers
   (`rewards.reward_values.value_problem`: not NaN, ±inf, a string or None).
5. agent loops (`check_agent_loops`), PRIME trainers only: every loop the run can use (`actor_rollout_ref.
   rollout.agent.default_agent_loop`, the `agent_name` column of parquet data files, the entries of
   `.agent_loop_config_path`) returns one output per session. veRL's V1 trainers accept loops whose `run`
   returns a list (one output per turn, keys `{uid}_{session}_{index}`) and score GRPO by each session's
   last output; the PRIME trainers do not support that (`trainer.refuse_multi_output_sessions`). veRL's
   own loops return one (a canary test pins it); a configured loop is imported and refused when its
   `run` is annotated to return a list. An unannotated one is left to the step-time refusal, and a name
   neither here nor in the config file (registered by an import) to veRL.
6. the checkpoint a run resumes from (`check_resume_checkpoint`), with `trainer.resume_mode` auto (the
   latest `global_step_N` under `trainer.default_local_dir`, if any) or `resume_path`: veRL's FSDP
   checkpoints hold one shard per rank (`model_world_size_W_rank_R.pt`) and reload only on W ranks, the
   actor's as the PRM's; a checkpoint of another W is refused, naming both. For a PRIME trainer the step
   folder must hold the PRM's state (`prm/`), else the PRM would restart from its init while the policy
   resumes. Then every file the resume reads is opened (`_resume_file_problems`): for each FSDP part
   (actor, PRM) and rank R < W the `model_` / `optim_` / `extra_state_world_size_W_rank_R.pt` its
   `checkpoint.load_contents` names, the dataloader state `data.pt` when present, and `prime_state.json`
   when present (older checkpoints lack it). A `.pt` file must be a torch.save zip archive whose central
   directory reads (a truncated file loses it) and whose records fit in the file; its tensor data is not
   read. All broken files are named in one message; nothing is deleted. With `resume_mode=auto`, a latest
   checkpoint that cannot resume (a torn tracker, the step folder it names missing, or any problem above but
   the rank count) gives way to the newest complete `global_step_N`: the config is set to `resume_path` of it
   and one line names what was skipped.

Nothing here imports torch or Ray at module level; all but the reward dry run take well under a second.
"""

from __future__ import annotations

import asyncio
import collections.abc
import inspect
import json
import logging
import math
import os
import re
import struct
import types
import typing
import zipfile
from pathlib import Path
from typing import Any, NoReturn

from omegaconf import DictConfig, ListConfig, OmegaConf

from verl_prime_lora.algo.prime_config import prime_config
from verl_prime_lora.algo.run_config import (
    CHECKPOINT_TRACKER,
    MAX_RATIO_KEY,
    get,
    has_standalone_rollout,
    is_prime_trainer,
    prime_state_file,
    prm_checkpoint_dir,
    resume_folder,
    reward_function_name,
    reward_pool_gpus,
    rollout_pool_gpus,
    step_folders,
    tracker_text,
    trainer_mode,
    training_ranks,
)
from verl_prime_lora.checks.config_checks import check_prm_tokenizer
from verl_prime_lora.rewards.reward_values import label_quantity, value_problem

logger = logging.getLogger(__name__)

# veRL 0.9.1: V1 ResourcePoolManager's max_colocate_count (single_controller/ray/base.py) and the
# standalone rollout's (workers/rollout/replica.py): CPUs of each GPU's placement-group bundle.
CPUS_PER_POOL_GPU = 3
CPUS_PER_STANDALONE_ROLLOUT_GPU = 2
DATA_SUFFIXES = (".parquet", ".json", ".jsonl")  # what RLHFDataset._read_files_and_tokenize accepts
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "vocab.txt", "spiece.model")
# What transformers' from_pretrained loads weights from (an index names the shards).
WEIGHT_PATTERNS = (
    "*.safetensors",
    "pytorch_model*.bin",
    "model.safetensors.index.json",
    "pytorch_model.bin.index.json",
)
# veRL's default scorer runs the response as code for these sources: no dry run of code here.
CODE_DATA_SOURCES = ("codecontests", "apps", "codeforces", "taco")
PROMPT_FILTER_SAMPLER = "verl_prime_lora.integration.prompt_filter"
FIRST_ROWS = 4
_HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*(/[\w.-]+)?")


class InputCheckError(ValueError):
    """A run input (file, folder, device count) that cannot work; the message starts with the config key."""


def _fail(key: str, message: str) -> NoReturn:
    raise InputCheckError(f"{key}: {message}")


def check_inputs(config: Any) -> None:
    """Run every check of this module (see the module docstring); raise `InputCheckError` on the first failure."""
    check_devices(config)
    check_files_and_code(config)


def check_files_and_code(config: Any) -> None:
    """Checks 2-6 of the module docstring: model folders, data files, reward dry run, agent loops, the resumed
    checkpoint."""
    if not isinstance(config, DictConfig):
        return
    check_model_paths(config)
    if is_prime_trainer(config):
        check_prm_tokenizer(config)
    first_row = check_data_files(config)
    if first_row is not None:
        dry_run_reward(config, *first_row)
    if is_prime_trainer(config):
        check_agent_loops(config)
    check_resume_checkpoint(config)


# ---------------------------------------------------------------------------------------------------
# 1. devices
# ---------------------------------------------------------------------------------------------------


def check_devices(config: Any) -> None:
    """The GPUs and CPUs the layout holds fit in what Ray is given (check 1 of the module docstring)."""
    if not isinstance(config, DictConfig):
        return
    _check_no_cluster_to_join(config)
    mode = trainer_mode(config)
    split = has_standalone_rollout(config)
    trainer_gpus = training_ranks(config)
    rollout_gpus = rollout_pool_gpus(config)
    reward_gpus = reward_pool_gpus(config)
    parts = [f"{trainer_gpus} for the trainer pool (trainer.n_gpus_per_node x trainer.nnodes)"]
    if split:
        parts.append(
            f"{rollout_gpus} for the standalone rollout of trainer.v1.trainer_mode={mode} "
            "(actor_rollout_ref.rollout.n_gpus_per_node x actor_rollout_ref.rollout.nnodes)"
        )
    if reward_gpus:
        parts.append(f"{reward_gpus} for the reward-model pool (reward.reward_model.n_gpus_per_node x nnodes)")

    num_gpus = get(config, "ray_kwargs.ray_init.num_gpus")
    total_gpus = trainer_gpus + rollout_gpus + reward_gpus
    if num_gpus is not None and total_gpus > float(num_gpus):
        _fail(
            "trainer.n_gpus_per_node",
            f"the layout needs {total_gpus} GPUs ({' + '.join(parts)}), but Ray gets "
            f"ray_kwargs.ray_init.num_gpus={num_gpus}. Lower trainer.n_gpus_per_node"
            + (" or actor_rollout_ref.rollout.n_gpus_per_node" if split else "")
            + f", or raise ray_kwargs.ray_init.num_gpus to {total_gpus} (on CPU each 'GPU' is one process, "
            "not a device)"
            + ("; one device fits the colocated recipe (+recipe=prime_lora_colocated)." if split else "."),
        )

    num_cpus = get(config, "ray_kwargs.ray_init.num_cpus")
    if num_cpus is None:
        return
    pool_cpus = CPUS_PER_POOL_GPU * (trainer_gpus + reward_gpus) + CPUS_PER_STANDALONE_ROLLOUT_GPU * rollout_gpus
    units_key = "transfer_queue.backend.SimpleStorage.num_data_storage_units"
    v1_queue = bool(get(config, "trainer.use_v1", True)) or bool(get(config, "transfer_queue.enable", False))
    simple = get(config, "transfer_queue.backend.storage_backend", "SimpleStorage") == "SimpleStorage"
    units = int(get(config, units_key, 0)) if v1_queue and simple else 0
    held = (1 + units if v1_queue else 0) + pool_cpus
    if held <= float(num_cpus):
        return
    holders = (f"the TransferQueue controller (1), {units} storage units ({units_key}), " if v1_queue else "") + (
        f"the placement groups' {pool_cpus} ({CPUS_PER_POOL_GPU} per trainer/reward-pool GPU, "
        f"{CPUS_PER_STANDALONE_ROLLOUT_GPU} per standalone rollout GPU)"
    )
    problem = (
        f"the run holds {held} CPUs ({holders}), more than ray_kwargs.ray_init.num_cpus={num_cpus}: one actor "
        "would stay pending and veRL hang without a message."
    )
    room = int(float(num_cpus)) - (held - units)
    if units > 1 and room >= 1:
        _fail(units_key, f"is {units}: {problem} Set it <= {room} or raise ray_kwargs.ray_init.num_cpus to {held}.")
    _fail("ray_kwargs.ray_init.num_cpus", f"is {num_cpus}: {problem} Raise it to {held}.")


def _check_no_cluster_to_join(config: DictConfig) -> None:
    """Resources given to `ray.init` need a cluster of its own: Ray refuses them when it joins a running one."""
    given = [key for key in ("num_cpus", "num_gpus") if get(config, f"ray_kwargs.ray_init.{key}") is not None]
    joined = _cluster_to_join(config) if given else None
    if joined is None:
        return
    address, source = joined
    _fail(
        f"ray_kwargs.ray_init.{given[0]}",
        f"is set, but ray.init would join the running Ray cluster at {address} ({source}), and Ray refuses "
        "num_cpus and num_gpus when it joins one. Start this run on a cluster of its own with RAY_ADDRESS=local "
        "in the environment, or join that cluster with "
        + " ".join(f"ray_kwargs.ray_init.{key}=null" for key in given)
        + ".",
    )


def _cluster_to_join(config: DictConfig) -> tuple[str, str] | None:
    """(address, where it comes from) of the Ray cluster `ray.init` would join, in Ray's own order; None
    when it would start one."""
    from_env = os.environ.get("RAY_ADDRESS") or None
    address = from_env or get(config, "ray_kwargs.ray_init.address")
    if address == "local":
        return None
    if address not in (None, "auto"):
        return str(address), "RAY_ADDRESS" if from_env else "ray_kwargs.ray_init.address"
    from ray._common.utils import get_ray_address_file

    record = Path(get_ray_address_file(get(config, "ray_kwargs.ray_init._temp_dir")))
    recorded = record.read_text().strip() if record.is_file() else ""
    return (recorded, f"recorded by `ray start` in {record}") if recorded else None


# ---------------------------------------------------------------------------------------------------
# 2. model folders
# ---------------------------------------------------------------------------------------------------


def _local_path(value: Any) -> Path | None:
    """The local path `value` names, or None for a hub id or a remote URL (those are not checked)."""
    text = str(value)
    if "://" in text and not text.startswith("file://"):
        return None
    text = text.removeprefix("file://")
    path = Path(text).expanduser()
    if not path.exists() and _HUB_ID.fullmatch(text):
        return None
    return path


def _has_tokenizer(folder: Path) -> bool:
    if any((folder / name).is_file() for name in TOKENIZER_FILES) or any(folder.glob("*.tiktoken")):
        return True
    try:  # a tokenizer shipped as remote code
        return "auto_map" in json.loads((folder / "tokenizer_config.json").read_text())
    except (OSError, ValueError):
        return False


def _has_weights(folder: Path) -> bool:
    return any(any(folder.glob(pattern)) for pattern in WEIGHT_PATTERNS)


def _check_folder(key: str, value: Any, need_model: bool, need_tokenizer: bool) -> None:
    """`value` is a folder holding, with `need_model`, a config.json and weights, and with `need_tokenizer` a
    tokenizer; one message names all it lacks."""
    path = _local_path(value)
    if path is None:
        return
    if not path.is_dir():
        _fail(key, f"{value} is not a folder (it {'is a file' if path.exists() else 'does not exist'}).")
    no_config = need_model and not (path / "config.json").is_file()
    no_weights = need_model and not _has_weights(path)
    no_tokenizer = need_tokenizer and not _has_tokenizer(path)
    missing = [
        text
        for absent, text in (
            (no_config, "config.json"),
            (no_weights, f"weights (none of {', '.join(WEIGHT_PATTERNS)})"),
            (
                no_tokenizer,
                f"tokenizer (none of {', '.join(TOKENIZER_FILES)}, *.tiktoken, or a tokenizer_config.json "
                "with auto_map)",
            ),
        )
        if absent
    ]
    if not missing:
        return
    advice = []
    if no_config or no_weights:
        advice.append("a Hugging Face model folder holds what the model's save_pretrained writes")
    if no_tokenizer:
        advice.append("save the tokenizer next to the model or set the tokenizer_path")
    _fail(key, f"{value} holds no {', no '.join(missing)}: {'; '.join(advice)}.")


def check_model_paths(config: Any) -> None:
    prefixes = ["actor_rollout_ref.model"]
    if is_prime_trainer(config) and get(config, "prime.prm") is not None:
        prefixes.append("prime.prm.model")
    seen: set[tuple[str, bool, bool]] = set()
    for prefix in prefixes:
        model, tokenizer = get(config, f"{prefix}.path"), get(config, f"{prefix}.tokenizer_path")
        checks = [(f"{prefix}.path", model, True, tokenizer is None)]
        if tokenizer is not None:
            checks.append((f"{prefix}.tokenizer_path", tokenizer, False, True))
        for key, value, need_config, need_tokenizer in checks:
            if value is None or (str(value), need_config, need_tokenizer) in seen:
                continue
            seen.add((str(value), need_config, need_tokenizer))
            _check_folder(key, value, need_config, need_tokenizer)


# ---------------------------------------------------------------------------------------------------
# 3. data files
# ---------------------------------------------------------------------------------------------------


def _rule_reward(config: Any) -> bool:
    """Whether veRL's reward manager scores each sample from `data_source` and `reward_model.ground_truth`
    (reward_loop.py RewardLoopWorker.compute_score: a custom function, or no reward model)."""
    if get(config, "reward.reward_manager.source", "register") != "register":
        return False
    custom_fn = bool(get(config, "reward.custom_reward_function.path"))
    return custom_fn or not get(config, "reward.reward_model.enable", False)


def _entries(config: Any, key: str) -> list[tuple[str, str]]:
    value = get(config, key)
    if value is None:
        return []
    if isinstance(value, (list, tuple, ListConfig)):
        return [(f"{key}[{i}]", str(item)) for i, item in enumerate(value)]
    return [(key, str(value))]


def _no_rows(key: str, path: Path) -> NoReturn:
    _fail(key, f"{path} has no rows.")


def _first_json_line(key: str, path: Path) -> str:
    """The first non-blank line of a JSON data file; refuses a file with none."""
    try:
        with path.open() as handle:
            line = next((line for line in handle if line.strip()), "")
    except (OSError, UnicodeDecodeError) as exc:
        _fail(key, f"{path} is not a readable JSON file: {type(exc).__name__}: {exc}")
    if not line:
        _no_rows(key, path)
    return line


def _read_head(key: str, path: Path, columns_wanted: list[str]) -> tuple[dict[str, Any], list[dict]]:
    """({column: type}, first rows) of a data file, from its schema and a few rows only ({} when unreadable
    as one JSON object per line: such .json files are not checked); refuses a file without rows."""
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        try:
            parquet = pq.ParquetFile(path)
            schema = parquet.schema_arrow
            rows = parquet.metadata.num_rows
            columns = [name for name in columns_wanted if name in schema.names]
            batch = next(parquet.iter_batches(batch_size=FIRST_ROWS, columns=columns), None) if columns else None
        except Exception as exc:  # noqa: BLE001 - any unreadable file
            _fail(key, f"{path} is not a readable parquet file: {type(exc).__name__}: {exc}")
        if rows == 0:  # a 0-row frame's columns carry no type (pandas writes them as null)
            _no_rows(key, path)
        return {field.name: field.type for field in schema}, batch.to_pylist() if batch is not None else []
    line = _first_json_line(key, path)
    try:
        first = json.loads(line)
    except ValueError:
        return {}, []
    if first == []:  # a JSON array with no element
        _no_rows(key, path)
    if not isinstance(first, dict):
        return {}, []
    return {name: type(value).__name__ for name, value in first.items()}, [first]


def _is_list(column_type: Any, sample: Any) -> bool:
    if sample is not None:
        return isinstance(sample, list)
    import pyarrow as pa

    return isinstance(column_type, pa.DataType) and (
        pa.types.is_list(column_type) or pa.types.is_large_list(column_type)
    )


def _has_ground_truth(column_type: Any, rows: list[dict]) -> bool:
    """A struct column with a `ground_truth` field (parquet), or a dict with that key (JSON lines)."""
    import pyarrow as pa

    if isinstance(column_type, pa.DataType):
        return pa.types.is_struct(column_type) and column_type.get_field_index("ground_truth") >= 0
    return all(isinstance(row.get("reward_model"), dict) and "ground_truth" in row["reward_model"] for row in rows)


def check_data_files(config: Any) -> tuple[str, Path, dict] | None:
    """Check every train/val file; return (key, path, first row) of the first train file for the dry run."""
    if get(config, "data.custom_cls.path") is not None:
        return None
    prompt_key = str(get(config, "data.prompt_key", "prompt"))
    needs_reward = _rule_reward(config)
    wanted = [prompt_key] + (["data_source", "reward_model", "extra_info"] if needs_reward else [])
    first: tuple[str, Path, dict] | None = None
    for key in ("data.train_files", "data.val_files"):
        for entry_key, value in _entries(config, key):
            path = _local_path(value)
            if path is None and "://" in value:
                continue  # hdfs:// and the like: veRL copies them in
            path = path or Path(value)
            if not path.is_file():
                _fail(entry_key, f"{value} {'is not a file' if path.exists() else 'does not exist'}.")
            if path.suffix not in DATA_SUFFIXES:
                _fail(entry_key, f"{value}: veRL's RLHFDataset reads only {', '.join(DATA_SUFFIXES)} files.")
            types, rows = _read_head(entry_key, path, wanted)
            if not types:
                continue
            found = ", ".join(sorted(types))
            if prompt_key not in types:
                _fail(
                    "data.prompt_key",
                    f"is {prompt_key!r}, but {path} ({entry_key}) has no such column (columns: {found}).",
                )
            sample = rows[0].get(prompt_key) if rows else None
            if not _is_list(types[prompt_key], sample):
                _fail(
                    "data.prompt_key",
                    f"column {prompt_key!r} of {path} ({entry_key}) is {types[prompt_key]}, not a list of chat "
                    "messages ({role, content}), which veRL's RLHFDataset passes to the chat template.",
                )
            if needs_reward:
                if "data_source" not in types:
                    _fail(
                        entry_key,
                        f"{path} has no column data_source (columns: {found}); veRL's reward manager passes "
                        "it to the reward function for every sample.",
                    )
                if "reward_model" not in types or not _has_ground_truth(types["reward_model"], rows):
                    _fail(
                        entry_key,
                        f"{path} has no reward_model.ground_truth (columns: {found}"
                        + (f"; reward_model is {types['reward_model']}" if "reward_model" in types else "")
                        + "); veRL's reward manager reads row['reward_model']['ground_truth'] for every sample: "
                        "make reward_model a struct column {ground_truth: ...}.",
                    )
            if key == "data.train_files" and first is None and rows:
                first = (entry_key, path, rows[0])
    return first


# ---------------------------------------------------------------------------------------------------
# 4. reward dry run
# ---------------------------------------------------------------------------------------------------


def _reward_function(config: Any, data_source: Any) -> tuple[Any, str, str] | None:
    """(callable, its name, the config key that selects it) as veRL's reward loop would call it; None to skip."""
    path = get(config, "reward.custom_reward_function.path")
    key = "reward.custom_reward_function.path"
    if path:
        name = get(config, "reward.custom_reward_function.name", "compute_score")
        from verl.trainer.ppo.reward import get_custom_reward_fn

        try:
            return get_custom_reward_fn(config), reward_function_name(config), key
        except Exception as exc:  # noqa: BLE001 - missing file, import error, missing function
            _fail(key, f"cannot load {name!r} from {path}: {type(exc).__name__}: {exc}")
    if get(config, "reward.sandbox_fusion.url") or str(data_source) in CODE_DATA_SOURCES:
        return None
    from verl.utils.reward_score import default_compute_score

    return default_compute_score, reward_function_name(config), key


def _required_info_keys(config: Any) -> list[tuple[str, str, str]]:
    """(config key, the reward_extra_info key it names, what the value is) for each key the run reads."""
    required = []
    if is_prime_trainer(config):
        label_key = prime_config(config).prm.label_key
        required.append(("prime.prm.label_key", label_key, label_quantity(label_key)))
    if PROMPT_FILTER_SAMPLER in str(get(config, "trainer.v1.sampler.custom_sampler.path", "")):
        key = "trainer.v1.sampler.sampler_kwargs.accuracy_key"
        accuracy_key = str(get(config, key, "acc"))
        required.append((key, accuracy_key, f"prompt-filter accuracy {accuracy_key!r}"))
    return required


def dry_run_reward(config: Any, entry_key: str, path: Path, row: dict) -> None:
    """Score `row` (row 0 of `path`) with the configured reward function, as veRL's reward manager would."""
    if not _rule_reward(config):
        return
    data_source = row.get("data_source")
    selected = _reward_function(config, data_source)
    if selected is None:
        return
    fn, name, fn_key = selected
    ground_truth = (row.get("reward_model") or {}).get("ground_truth")
    response = f"<think>x</think> \\boxed{{{ground_truth}}}"
    extra_info = dict(row.get("extra_info") or {})
    extra_info.update(num_turns=2, rollout_reward_scores={})  # what veRL's reward managers add
    where = f"row 0 of {path} ({entry_key})"
    try:
        result = fn(data_source=data_source, solution_str=response, ground_truth=ground_truth, extra_info=extra_info)
        if inspect.isawaitable(result):
            result = asyncio.run(result)
    except Exception as exc:  # noqa: BLE001 - reported with the row
        _fail(
            fn_key,
            f"the reward function {name} raised on {where} (data_source={data_source!r}, "
            f"ground_truth={ground_truth!r}): {type(exc).__name__}: {exc}",
        )
    if isinstance(result, dict):
        keys = sorted(result)
        if "score" not in result:
            _fail(fn_key, f"the reward function {name} returned a dict without 'score' (keys: {keys}) on {where}.")
        returned = f"returned the keys {keys}"
        values = [("score", result["score"])]
    else:
        keys = ["acc"]
        returned = f"returned the number {result!r}, which veRL records as 'acc' only"
        values = [("score", result)]
    for key, needed, quantity in _required_info_keys(config):
        if needed not in keys:
            _fail(key, f"is {needed!r}, but the reward function {name} {returned} on {where}.")
        if isinstance(result, dict):
            values.append((quantity, result[needed]))
    for quantity, value in values:
        problem = value_problem(quantity, value)
        if problem is not None:
            _fail(
                fn_key,
                f"the reward function {name} returned a {problem} on {where}: the run would count every such "
                f"row as failed (reward 0, no PRM label; {MAX_RATIO_KEY}). Return a finite number.",
            )


# ---------------------------------------------------------------------------------------------------
# 5. agent loops
# ---------------------------------------------------------------------------------------------------


def _admits_list(hint: Any) -> bool:
    """Whether a return annotation allows a list of outputs (list[...], Sequence[...], a union with one)."""
    if isinstance(hint, str):  # an annotation get_type_hints could not resolve
        return re.search(r"\b(list|List|Sequence)\b", hint) is not None
    origin = typing.get_origin(hint) or hint
    if origin in (typing.Union, types.UnionType):
        return any(_admits_list(arg) for arg in typing.get_args(hint))
    return origin in (list, collections.abc.Sequence, collections.abc.Iterable)


def _run_returns_list(cls: type) -> bool:
    run = getattr(cls, "run", None)
    if run is None:
        return False
    try:
        hint = typing.get_type_hints(run).get("return")
    except Exception:  # noqa: BLE001 - a forward reference that does not resolve here
        hint = getattr(run, "__annotations__", {}).get("return")
    return hint is not None and _admits_list(hint)


def _agent_names_in_data(config: Any) -> list[tuple[str, str]]:
    """(name, where) for each distinct `agent_name` in the parquet data files (that one column is read)."""
    import pyarrow.parquet as pq

    found = []
    for key in ("data.train_files", "data.val_files"):
        for entry_key, value in _entries(config, key):
            path = _local_path(value)
            if path is None or path.suffix != ".parquet" or not path.is_file():
                continue
            if "agent_name" not in pq.ParquetFile(path).schema_arrow.names:
                continue
            names = pq.read_table(path, columns=["agent_name"]).column("agent_name").unique().to_pylist()
            found += [(str(name), f"the agent_name column of {path} ({entry_key})") for name in names if name]
    return found


def check_agent_loops(config: Any) -> None:
    """Refuse, for a PRIME trainer, an agent loop that returns several outputs per session (see module doc)."""
    key = "actor_rollout_ref.rollout.agent"
    config_path = get(config, f"{key}.agent_loop_config_path")
    if not config_path:
        return  # only veRL's own loops (one output each) or ones registered by an import elsewhere
    from hydra.utils import get_class
    from verl.utils.import_utils import resolve_config_path

    try:
        entries = OmegaConf.load(resolve_config_path(str(config_path)))
        targets = {str(entry["name"]): str(entry["_target_"]) for entry in entries}
    except Exception as exc:  # noqa: BLE001 - missing file, not a list of {name, _target_}
        _fail(
            f"{key}.agent_loop_config_path",
            f"{config_path} is not a readable list of agent loops ({{name, _target_}}): {type(exc).__name__}: {exc}",
        )
    used = [(str(get(config, f"{key}.default_agent_loop", "single_turn_agent")), f"{key}.default_agent_loop")]
    used += _agent_names_in_data(config)
    used += [(name, f"{key}.agent_loop_config_path ({config_path})") for name in targets]
    first_use: dict[str, str] = {}
    for name, where in used:
        first_use.setdefault(name, where)
    for name, where in first_use.items():
        if name not in targets:
            continue  # veRL's own (one output each) or registered by an import elsewhere
        try:
            cls = get_class(targets[name])
        except Exception as exc:  # noqa: BLE001 - the import error, named
            _fail(
                f"{key}.agent_loop_config_path",
                f"agent loop {name!r}: cannot import {targets[name]}: {type(exc).__name__}: {exc}",
            )
        if _run_returns_list(cls):
            _fail(
                f"{key}.agent_loop_config_path",
                f"agent loop {name!r} ({targets[name]}, used by {where}) returns a list of outputs per session "
                f"(its run() is annotated so), and trainer.v1.trainer_mode={get(config, 'trainer.v1.trainer_mode')} "
                "takes one output per session: PRIME's PRM and estimators would score each turn as a response of "
                "its own in the prompt's group, where veRL's GRPO scores each session by its last output. Return "
                "the whole session as one output (multi-turn with a response mask is fine), or use veRL's own "
                "trainer (trainer.v1.trainer_mode=sync) with algorithm.adv_estimator=grpo.",
            )


# ---------------------------------------------------------------------------------------------------
# 6. the checkpoint being resumed
# ---------------------------------------------------------------------------------------------------

_SHARD = re.compile(r"model_world_size_(\d+)_rank_0\.pt")
# veRL's FSDPCheckpointManager.load_checkpoint: the file each `checkpoint.load_contents` entry reads, per rank.
FSDP_FILES = {"model": "model", "optimizer": "optim", "extra": "extra_state"}
FSDP_STRATEGIES = ("fsdp", "fsdp2")
# Each part of a checkpoint that the trainer reloads: its config section (with `checkpoint.load_contents`) and
# the key of its engine's strategy.
CHECKPOINT_PARTS = {
    "actor": ("actor_rollout_ref.actor", "actor_rollout_ref.actor.strategy"),
    "PRM": ("prime.prm", "prime.prm.engine.strategy"),
}
ZIP_LOCAL_HEADER_BYTES = 30  # a zip record's fixed local header, before its name, extra field and data
ZIP_LOCAL_HEADER_MAGIC = b"PK\x03\x04"
MAX_FILES_NAMED = 8


def _shard_world_sizes(folder: Path) -> list[int]:
    """The world sizes W of the `model_world_size_W_rank_0.pt` shards in a veRL FSDP checkpoint folder."""
    if not folder.is_dir():
        return []
    return sorted(int(match.group(1)) for name in os.listdir(folder) if (match := _SHARD.fullmatch(name)))


def _record_problem(handle: Any, record: zipfile.ZipInfo, size: int) -> str | None:
    """Why one record of a zip archive is not where its central directory says, whole; None if it is. Reads the
    record's local header only (Python's zipfile shifts the offsets of an archive that lost bytes before its
    directory, so a record may then point before the file's start or at other bytes)."""
    offset = record.header_offset
    header = b""
    if offset >= 0:
        handle.seek(offset)
        header = handle.read(ZIP_LOCAL_HEADER_BYTES)
    if len(header) < ZIP_LOCAL_HEADER_BYTES or header[:4] != ZIP_LOCAL_HEADER_MAGIC:
        return f"is cut short or corrupt: record {record.filename} has no header at byte {offset}"
    name_bytes, extra_bytes = struct.unpack("<HH", header[26:30])
    end = offset + ZIP_LOCAL_HEADER_BYTES + name_bytes + extra_bytes + record.compress_size
    if end > size:
        return f"is cut short: record {record.filename} ends at byte {end}, the file has {size}"
    return None


def _torch_archive_problem(path: Path) -> str | None:
    """Why `path` is not a torch.save archive that torch.load can open, from its zip central directory and the
    records' headers only (no tensor data is read): missing, not a zip archive (a truncated file loses the
    directory at its end), no `data.pkl` record, or a record not whole in the file. None when none of these."""
    if not path.is_file():
        return "is missing"
    size = path.stat().st_size
    try:
        with zipfile.ZipFile(path) as archive:
            records = archive.infolist()
            if not any(record.filename.rsplit("/", 1)[-1] == "data.pkl" for record in records):
                return "is a zip archive without data.pkl, not a torch.save archive"
            with path.open("rb") as handle:
                return next((problem for record in records if (problem := _record_problem(handle, record, size))), None)
    except (zipfile.BadZipFile, OSError, ValueError, EOFError) as exc:
        return f"is not the zip archive torch.save writes ({size} bytes; {type(exc).__name__}: {exc})"


def _prime_state_problem(path: Path) -> str | None:
    """Why a present `prime_state.json` cannot be read as the trainer reads it (`_load_prime_state`); None if it can."""
    try:
        value = float(json.loads(path.read_text())["prm_pairwise_ema"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return f"does not hold a JSON object with a number prm_pairwise_ema ({type(exc).__name__}: {exc})"
    if not math.isfinite(value):
        return f"holds prm_pairwise_ema = {value}, not a finite number"
    return None


def _resume_file_problems(config: Any, folder: str, parts: list[tuple[str, Path]]) -> list[tuple[Path, str]]:
    """(path, problem) for each file of `folder` that the resume reads and cannot open (see module doc).

    `parts`: (name in `CHECKPOINT_PARTS`, folder) of the checkpoints the trainer reloads on `training_ranks`
    ranks."""
    ranks = training_ranks(config)
    files = []
    for name, shards in parts:
        section, strategy = CHECKPOINT_PARTS[name]
        if get(config, strategy, "fsdp") not in FSDP_STRATEGIES:
            continue  # another engine's checkpoint layout
        contents = get(config, f"{section}.checkpoint.load_contents", list(FSDP_FILES))
        for content in contents:
            if content in FSDP_FILES:
                prefix = FSDP_FILES[content]
                files += [shards / f"{prefix}_world_size_{ranks}_rank_{rank}.pt" for rank in range(ranks)]
    data = Path(folder) / "data.pt"  # veRL's dataloader state: read when present (trainer_base._load_checkpoint)
    if data.exists():
        files.append(data)
    problems = [(path, problem) for path in files if (problem := _torch_archive_problem(path)) is not None]
    state = Path(prime_state_file(folder))
    if is_prime_trainer(config) and state.exists() and (problem := _prime_state_problem(state)) is not None:
        problems.append((state, problem))
    return problems


def _checkpoint_problems(config: Any, folder: str, mode: str) -> list[str]:
    """What keeps `folder` from resuming this run, each a phrase after "`folder` ...": its PRM state missing, or the
    files the resume reads that do not open. A checkpoint written by another rank count fails at once, naming both
    counts: no other checkpoint of the run would load either."""
    ranks = training_ranks(config)
    parts = [("actor", Path(folder) / "actor")]
    problems = []
    if is_prime_trainer(config):
        prm = Path(prm_checkpoint_dir(folder))
        if not prm.is_dir():
            problems.append(
                f"holds no PRM state ({prm}): the PRM would restart from its initial weights while the policy resumes"
            )
        parts.append(("PRM", prm))
    for name, shards in parts:
        sizes = _shard_world_sizes(shards)
        if sizes and ranks not in sizes:
            _fail(
                "trainer.n_gpus_per_node",
                f"trainer.resume_mode={mode} resumes from {folder}, whose {name} was saved by "
                f"{' or '.join(map(str, sizes))} ranks ({shards}/model_world_size_{sizes[0]}_rank_*.pt); this run has "
                f"{ranks} (trainer.n_gpus_per_node x trainer.nnodes). veRL's FSDP checkpoints reload only on the "
                f"ranks that wrote them: resume with trainer.n_gpus_per_node x trainer.nnodes = {sizes[0]}, or "
                "start afresh from merged weights (python -m verl.model_merger; trainer.resume_mode=disable).",
            )
    files = _resume_file_problems(config, folder, parts)
    if files:
        named = [f"{path} {problem}" for path, problem in files[:MAX_FILES_NAMED]]
        if len(files) > MAX_FILES_NAMED:
            named.append(f"and {len(files) - MAX_FILES_NAMED} more")
        problems.append(
            f"has {len(files)} file{'s' if len(files) > 1 else ''} the resume reads that cannot be opened: "
            + "; ".join(named)
        )
    return problems


def _published_folder(local_dir: str, text: str) -> tuple[int | None, str | None, str | None]:
    """(the step veRL's tracker, holding `text`, publishes, and its folder, or None, None; why it names no folder
    that exists, or None)."""
    tracker = Path(local_dir) / CHECKPOINT_TRACKER
    if not text.isdigit():
        return None, None, f"{tracker} holds {text!r}, not a step (a save that stopped while publishing)"
    folder = Path(local_dir) / f"global_step_{int(text)}"
    if not folder.is_dir():
        return None, None, f"{tracker} names step {text}, and {folder} is missing"
    return int(text), str(folder), None


def _fall_back_to_a_complete_checkpoint(config: Any, local_dir: str, skipped: str, below: int | None) -> None:
    """`trainer.resume_mode=auto` whose latest checkpoint cannot resume: resume from the newest complete step
    folder before step `below` (any, when the tracker names none) instead (the config is set to `resume_path` of
    it), with one line naming what was skipped; nothing is deleted. Fails when no folder is complete."""
    from omegaconf import open_dict

    for step, folder in reversed(step_folders(local_dir)):
        if (below is not None and step >= below) or _checkpoint_problems(config, str(folder), "auto"):
            continue
        with open_dict(config.trainer):
            config.trainer.resume_mode = "resume_path"
            config.trainer.resume_from_path = str(folder)
        logger.warning(
            "trainer.resume_mode=auto: %s. Resuming from the newest complete checkpoint, %s, instead "
            "(trainer.resume_from_path); nothing was deleted.",
            skipped,
            folder,
        )
        return
    _fail(
        "trainer.default_local_dir",
        f"trainer.resume_mode=auto: {skipped}, and no other step folder of {local_dir} is complete. Nothing was "
        "deleted. Resume from a checkpoint of your own (trainer.resume_mode=resume_path "
        "trainer.resume_from_path=.../global_step_N), or start afresh (trainer.resume_mode=disable).",
    )


def check_resume_checkpoint(config: Any) -> None:
    """Refuse a resume whose checkpoint cannot load on this run's ranks, lacks the PRM, or has a file the resume
    reads that does not open (see module doc). Under `trainer.resume_mode=auto`, a latest checkpoint that cannot
    resume (a torn tracker, a folder it names that is missing or incomplete) gives way to the newest complete one."""
    mode = get(config, "trainer.resume_mode", "auto")
    if mode == "auto":
        local_dir = os.path.abspath(str(get(config, "trainer.default_local_dir", ".")))
        text = tracker_text(local_dir)
        if text is None:
            return  # a fresh start (veRL's lookup would print that the tracker is missing)
        step, folder, why = _published_folder(local_dir, text)
        if folder is None:
            _fall_back_to_a_complete_checkpoint(config, local_dir, why, below=None)
        elif problems := _checkpoint_problems(config, folder, mode):
            skipped = f"the latest checkpoint, {folder}, {problems[0]}"
            _fall_back_to_a_complete_checkpoint(config, local_dir, skipped, below=step)
        return
    folder = resume_folder(config)
    if folder is None or not os.path.isdir(folder):
        return  # a fresh start, or a resume_path veRL itself refuses
    problems = _checkpoint_problems(config, folder, mode)
    if problems:
        _fail(
            "trainer.resume_from_path",
            f"trainer.resume_mode={mode} resumes from {folder}, which {'; and '.join(problems)}. Nothing was "
            "deleted. Resume from another checkpoint (trainer.resume_from_path=.../global_step_N), or start afresh "
            "(trainer.resume_mode=disable).",
        )
