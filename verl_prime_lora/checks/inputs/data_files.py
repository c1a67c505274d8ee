"""Input check 3 of `checks.inputs`, before Ray starts: data files.

`check_data_files`: every `data.train_files` / `data.val_files` entry (a string or a list)
exists, is a file veRL's RLHFDataset reads (.parquet, .json, .jsonl), has rows (parquet: its metadata's
row count, whoever wrote it; JSON: a first record), and its schema (parquet: the schema and the first rows
only; json lines: the first record) has the column `data.prompt_key` as a list of chat
messages and, when rule-based rewards are computed (a custom reward function, or no reward model), the
`data_source` column and a `reward_model` struct with a `ground_truth` field: veRL's reward managers read
both for every sample. A custom dataset class (`data.custom_cls.path`) or reward manager
(`reward.reward_manager.source=importlib`) reads what it likes: their files are not checked.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, NoReturn

from omegaconf import ListConfig

from verl_prime_lora.checks.inputs.errors import fail
from verl_prime_lora.checks.inputs.model_folders import local_path
from verl_prime_lora.config.section import key_of
from verl_prime_lora.config.verl_view import DataView, VerlView

DATA_SUFFIXES = (".parquet", ".json", ".jsonl")  # what RLHFDataset._read_files_and_tokenize accepts
FIRST_ROWS = 4


def rule_reward(view: VerlView) -> bool:
    """Whether veRL's reward manager scores each sample from `data_source` and `reward_model.ground_truth`
    (reward_loop.py RewardLoopWorker.compute_score: a custom function, or no reward model)."""
    if view.reward.manager_source != "register":
        return False
    return bool(view.reward.custom_fn_path) or not view.reward.model_enable


def data_entries(data: DataView, name: str) -> list[tuple[str, str]]:
    """(key, path) of each file of `data.<name>` (`train_files`, `val_files`: a path or a list of them)."""
    value, key = getattr(data, name), key_of(data, name)
    if value is None:
        return []
    if isinstance(value, (list, tuple, ListConfig)):
        return [(f"{key}[{i}]", str(item)) for i, item in enumerate(value)]
    return [(key, str(value))]


def _no_rows(key: str, path: Path) -> NoReturn:
    fail(key, f"{path} has no rows.")


def _first_json_line(key: str, path: Path) -> str:
    """The first non-blank line of a JSON data file; refuses a file with none."""
    try:
        with path.open() as handle:
            line = next((line for line in handle if line.strip()), "")
    except (OSError, UnicodeDecodeError) as exc:
        fail(key, f"{path} is not a readable JSON file: {type(exc).__name__}: {exc}")
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
            fail(key, f"{path} is not a readable parquet file: {type(exc).__name__}: {exc}")
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


def check_data_files(view: VerlView) -> tuple[str, Path, dict] | None:
    """Check every train/val file; return (key, path, first row) of the first train file for the dry run."""
    if view.data.custom_cls_path is not None:
        return None
    prompt_key = view.data.prompt_key
    needs_reward = rule_reward(view)
    wanted = [prompt_key] + (["data_source", "reward_model", "extra_info"] if needs_reward else [])
    first: tuple[str, Path, dict] | None = None
    for name in ("train_files", "val_files"):
        for entry_key, value in data_entries(view.data, name):
            path = local_path(value)
            if path is None and "://" in value:
                continue  # hdfs:// and the like: veRL copies them in
            path = path or Path(value)
            if not path.is_file():
                fail(entry_key, f"{value} {'is not a file' if path.exists() else 'does not exist'}.")
            if path.suffix not in DATA_SUFFIXES:
                fail(entry_key, f"{value}: veRL's RLHFDataset reads only {', '.join(DATA_SUFFIXES)} files.")
            types, rows = _read_head(entry_key, path, wanted)
            if not types:
                continue
            found = ", ".join(sorted(types))
            if prompt_key not in types:
                fail(
                    key_of(view.data, "prompt_key"),
                    f"is {prompt_key!r}, but {path} ({entry_key}) has no such column (columns: {found}).",
                )
            sample = rows[0].get(prompt_key) if rows else None
            if not _is_list(types[prompt_key], sample):
                fail(
                    key_of(view.data, "prompt_key"),
                    f"column {prompt_key!r} of {path} ({entry_key}) is {types[prompt_key]}, not a list of chat "
                    "messages ({role, content}), which veRL's RLHFDataset passes to the chat template.",
                )
            if needs_reward:
                if "data_source" not in types:
                    fail(
                        entry_key,
                        f"{path} has no column data_source (columns: {found}); veRL's reward manager passes "
                        "it to the reward function for every sample.",
                    )
                if "reward_model" not in types or not _has_ground_truth(types["reward_model"], rows):
                    fail(
                        entry_key,
                        f"{path} has no reward_model.ground_truth (columns: {found}"
                        + (f"; reward_model is {types['reward_model']}" if "reward_model" in types else "")
                        + "); veRL's reward manager reads row['reward_model']['ground_truth'] for every sample: "
                        "make reward_model a struct column {ground_truth: ...}.",
                    )
            if name == "train_files" and first is None and rows:
                first = (entry_key, path, rows[0])
    return first
