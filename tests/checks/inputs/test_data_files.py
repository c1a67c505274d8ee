"""Input checks before Ray starts (verl_prime_lora.checks.inputs), `data_files`: every train and validation
file exists, has rows and the columns veRL reads; each failure names the config key and the path."""

import json

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from input_configs import config, esc, fails, tiny_row, write_parquet

from verl_prime_lora.checks.inputs import check_inputs

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
