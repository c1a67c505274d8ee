"""The configuration reference (`verl_prime_lora.tools.config_reference`): docs/configuration.md's copy is the table the
typed dataclasses of `verl_prime_lora.config.prime` generate, and every dataclass field has its docstring
entry (the table's "meaning")."""

import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from verl_prime_lora.config.prime import (
    PRM_VERL_SECTIONS,
    AdvantageConfig,
    PrimeConfig,
    PrmConfig,
    ProcessRewardsFn,
)
from verl_prime_lora.tools import config_reference
from verl_prime_lora.tools.config_reference import (
    END_MARKER,
    REGENERATE,
    START_MARKER,
    VERL_SCHEMAS,
    between_markers,
    docstring_args,
    render,
    replace_between_markers,
    rows,
)

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = ROOT / "docs" / "configuration.md"
SECTIONS = (PrimeConfig, PrmConfig, AdvantageConfig)


def test_the_configuration_doc_holds_the_generated_table():
    block = between_markers(REFERENCE.read_text(encoding="utf-8"))
    assert block is not None, f"docs/configuration.md lacks the {START_MARKER} ... {END_MARKER} block"
    assert block == render(), (
        "docs/configuration.md's configuration reference and the dataclasses of verl_prime_lora/config/prime.py "
        f"disagree: regenerate the table with `{REGENERATE}`"
    )


@pytest.mark.parametrize("cls", SECTIONS, ids=lambda c: c.KEY)
def test_every_field_has_a_docstring_entry_and_every_entry_a_field(cls):
    fields = [f.name for f in dataclasses.fields(cls)]
    entries = docstring_args(cls)
    missing = [name for name in fields if not entries.get(name)]
    assert not missing, f"{cls.__name__}: fields without an `Args:` entry in its docstring: {missing}"
    stale = sorted(set(entries) - set(fields))
    assert not stale, f"{cls.__name__}: `Args:` entries for fields it does not have: {stale}"


def test_one_row_per_key_nested_sections_expanded_and_verl_sections_pointed_to():
    keys = [key for cls in config_reference.SECTIONS for key, _, _ in rows(cls)]
    assert len(keys) == len(set(keys))
    expected = (
        [f"prime.{f.name}" for f in dataclasses.fields(PrimeConfig) if f.name not in ("prm", "process_rewards_fn")]
        + [f"prime.prm.{f.name}" for f in dataclasses.fields(PrmConfig)]
        + [f"prime.process_rewards_fn.{f.name}" for f in dataclasses.fields(ProcessRewardsFn)]
        + [f"prime.prm.{section}" for section in PRM_VERL_SECTIONS]
        + [f"algorithm.prime.{f.name}" for f in dataclasses.fields(AdvantageConfig)]
    )
    assert sorted(keys) == sorted(expected)
    assert "prime.prm" not in keys  # the nested section is its rows, not a row of its own
    assert set(VERL_SCHEMAS) == set(PRM_VERL_SECTIONS)


def test_verl_sections_name_the_groups_the_recipe_composes():
    """The rows of prime.prm.{model,engine,optim} point to the veRL groups recipe/prime_lora.yaml takes them from."""
    recipe = yaml.safe_load((ROOT / "recipe" / "prime_lora.yaml").read_text(encoding="utf-8"))
    groups = {}
    for entry in recipe["defaults"]:
        if isinstance(entry, dict):
            ((target, group),) = entry.items()
            groups[target.split("@", 1)[1]] = (target.split("@", 1)[0].strip("/"), group)
    for section in ("model", "engine", "optim"):
        kind, group = groups[f"prime.prm.{section}"]
        default, meaning = VERL_SCHEMAS[section]
        assert f"`{group}`" in default, (section, default)
        assert f"verl/trainer/config/{kind}/{group}.yaml" in meaning, (section, meaning)


def test_defaults_are_written_as_in_yaml():
    table = {key: default for cls in config_reference.SECTIONS for key, default, _ in rows(cls)}
    assert table["prime.prm.beta"] == "`0.05`"
    assert table["prime.prm.update"] == "`before`"
    assert table["prime.prm.mini_batch_size"] == "`null`"
    assert table["prime.diagnostics"] == "`false`"
    assert table["algorithm.prime.epsilon"] == "`1e-6`"


def test_docstring_args_reads_continuation_lines_and_stops_at_the_section_end():
    class Example:
        """Title.

        Args:
            first: one line.
            second: starts here
                and continues here,
                    even deeper.
            third: a value with a colon: kept.

        Returns:
            nothing: not an entry.
        """

    assert docstring_args(Example) == {
        "first": "one line.",
        "second": "starts here and continues here, even deeper.",
        "third": "a value with a colon: kept.",
    }


def test_write_replaces_only_the_block(tmp_path):
    doc = tmp_path / "doc.md"
    doc.write_text(f"before\n{START_MARKER}\nold table\n{END_MARKER}\nafter\n", encoding="utf-8")
    assert config_reference.main(["--write", str(doc)]) == 0
    text = doc.read_text(encoding="utf-8")
    assert text.startswith(f"before\n{START_MARKER}\n") and text.endswith(f"{END_MARKER}\nafter\n")
    assert between_markers(text) == render()
    assert replace_between_markers(text, render()) == text  # idempotent
    with pytest.raises(ValueError):
        replace_between_markers("no markers", render())


def test_the_module_prints_the_table():
    out = subprocess.run(
        [sys.executable, "-m", "verl_prime_lora.tools.config_reference"],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    )
    assert out.stdout == render()
