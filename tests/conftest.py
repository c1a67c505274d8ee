"""Fixtures shared by the unit and the end-to-end tests."""

import contextlib
import io

import pytest

from verl_prime_lora.demo import chain_task


@pytest.fixture(scope="session")
def warm_assets(tmp_path_factory) -> dict:
    """The main job's warm start and RL data, built once per test session with the demo's arguments (seed 0,
    the defaults): `chain_task.write_warm_assets`'s result, plus `out` (the folder) and `printed` (what the
    build printed). tests/test_chain_task.py checks the build; tests/e2e/test_demo.py hands a copy to the
    demo script, which finds it complete and reuses it (about a minute of SFT saved)."""
    out = tmp_path_factory.mktemp("warm") / "assets"
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        result = chain_task.write_warm_assets(out, seed=0)
    return {**result, "out": out, "printed": printed.getvalue()}


@pytest.fixture(autouse=True)
def _no_ray_cluster_to_join(request, monkeypatch):
    """The unit tests' configs pass `checks.inputs`, which looks for a Ray cluster that `ray.init` would join:
    one that `ray start` left on this machine (another test session's, say) is not theirs. The e2e runs get
    the same from their launcher (`cpu.launch.run_env_defaults`)."""
    if request.node.get_closest_marker("e2e") is None:
        monkeypatch.setenv("RAY_ADDRESS", "local")
