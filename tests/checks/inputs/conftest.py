"""Fixtures of the tests of the input checks (`verl_prime_lora.checks.inputs`)."""

from pathlib import Path

import pytest

from verl_prime_lora.tools.tiny import write_assets


@pytest.fixture(scope="session")
def assets(tmp_path_factory) -> dict[str, Path]:
    """The tiny model and its train and test parquet files (`tools.tiny`), built once for this folder's tests."""
    return write_assets(tmp_path_factory.mktemp("tiny"), train_size=4, test_size=2)
