"""Fixtures of the tests of `verl_prime_lora.prime`."""

import subprocess
import sys

import pytest


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory):
    """The tiny model of `tools.tiny` (its folder, as a string), built once for this folder's tests."""
    out = tmp_path_factory.mktemp("tiny")
    subprocess.run(
        [sys.executable, "-m", "verl_prime_lora.tools.tiny", "--out", str(out)], check=True, capture_output=True
    )
    return str(out / "model")
