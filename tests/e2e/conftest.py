"""Fixtures of the end-to-end tests (helpers live in loop_runs.py)."""

from pathlib import Path

import pytest

from verl_prime_lora.tools.tiny import write_assets

# A peaky random policy (std 0.3 instead of 0.02), so that one update visibly changes what it samples.
PEAKY_INIT = 0.3


@pytest.fixture(scope="session")
def tiny_assets(tmp_path_factory) -> dict[str, Path]:
    return write_assets(tmp_path_factory.mktemp("tiny"), initializer_range=PEAKY_INIT)
