"""Fixtures shared by the unit and the end-to-end tests."""

import contextlib
import hashlib
import io
import os
import shutil
from pathlib import Path

import pytest
from hypothesis import settings
from hypothesis.internal.conjecture import providers as hypothesis_providers
from hypothesis.internal.constants_ast import Constants

from verl_prime_lora.demo import chain_task, sft, warm_start
from verl_prime_lora.tools import tiny

# Hypothesis draws the same examples on every run and every machine (derandomised: each test's examples follow from
# the test itself) and keeps no example database, so CI checks what a developer checked and a failure reproduces
# from the test's name; the failing example is printed with the blob that replays it. Loaded here, before the test
# modules import: their own `@settings(max_examples=..., deadline=None)` inherit the rest from it. For a random
# search: `pytest --hypothesis-profile=explore`.
settings.register_profile("derandomized", derandomize=True, database=None, print_blob=True)
settings.register_profile("explore", derandomize=False, database=None, print_blob=True)
settings.load_profile("derandomized")
# Derandomised is not enough by itself: Hypothesis also mixes in constants it reads from the project's modules
# imported so far (`providers._get_local_constants`), and which those are depends on the tests a worker ran before
# (pytest-xdist spreads them differently each run). Drawn without them, a test's examples depend on the test alone
# (tests/project/test_hypothesis_profile.py checks it). Hypothesis is pinned (setup.py), this private name with it.
_NO_LOCAL_CONSTANTS = Constants()
hypothesis_providers._get_local_constants = lambda: _NO_LOCAL_CONSTANTS


def _published_warm_start(config) -> Path | None:
    """Where a test session leaves its warm-start build for later ones, in pytest's cache folder (None when pytest
    runs without it: `-p no:cacheprovider`); keyed by the builder's source, so a changed builder is rebuilt."""
    if getattr(config, "cache", None) is None:
        return None
    source = b"".join(Path(module.__file__).read_bytes() for module in (chain_task, sft, warm_start, tiny))
    return Path(config.cache.mkdir("warm_assets")) / hashlib.sha256(source).hexdigest()[:16]


@pytest.fixture(scope="session")
def warm_assets(request, tmp_path_factory) -> dict:
    """The main job's warm start and RL data, built in this session with the demo's arguments (seed 0, the
    defaults): `warm_start.write_warm_assets`'s result, plus `out` (the folder) and `printed` (what the build
    printed). tests/demo/test_chain_task.py checks the build, on the demo's xdist worker; the build is published for
    the demo and for later sessions (`published_warm_assets`)."""
    out = tmp_path_factory.mktemp("warm") / "assets"
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        result = warm_start.write_warm_assets(out, seed=0)
    published = _published_warm_start(request.config)
    if published is not None and not published.exists():
        staging = published.with_name(f"{published.name}.{os.getpid()}")
        shutil.copytree(out, staging)
        try:
            os.replace(staging, published)
        except OSError:  # another session published the same build first
            shutil.rmtree(staging, ignore_errors=True)
    return {**result, "out": out, "printed": printed.getvalue()}


@pytest.fixture(scope="session")
def published_warm_assets(request) -> Path:
    """A folder holding the demo's warm start: the published build of this session or an earlier one from the same
    builder source, else this session's own (`warm_assets`). tests/e2e/test_demo.py hands a copy to the demo
    script, which finds it complete and reuses it (about a minute of SFT saved)."""
    published = _published_warm_start(request.config)
    if published is not None and published.is_dir():
        return published
    return request.getfixturevalue("warm_assets")["out"]


@pytest.fixture(autouse=True)
def _no_ray_cluster_to_join(request, monkeypatch):
    """The unit tests' configs pass `checks.inputs`, which looks for a Ray cluster that `ray.init` would join:
    one that `ray start` left on this machine (another test session's, say) is not theirs. The e2e runs get
    the same from their launcher (`cpu.launch.run_env_defaults`)."""
    if request.node.get_closest_marker("e2e") is None:
        monkeypatch.setenv("RAY_ADDRESS", "local")


# The e2e tier's runs (xdist groups), longest first: `make test` hands them to its two workers in this order
# (`--dist loadgroup --no-loadscope-reorder`), so that the last run to start is a short one and neither worker
# waits long for the other at the end. By each run's time in one clean-clone e2e tier, 2026-12-06 (the order only
# matters; `rehearsal` holds two launches, the interrupted run and its resume).
E2E_RUNS_LONGEST_FIRST = (
    "demo", "rehearsal", "split", "first", "frozen_reference", "reward_failures", "plain_verl", "shutdown",
)  # fmt: skip


def _e2e_run_rank(item) -> int:
    order = E2E_RUNS_LONGEST_FIRST
    groups = [mark.args[0] if mark.args else mark.kwargs.get("name") for mark in item.iter_markers("xdist_group")]
    return next((order.index(group) for group in groups if group in order), len(order))


def pytest_collection_modifyitems(items):
    items.sort(key=_e2e_run_rank)  # stable: a run's tests, and every other test, keep their order
