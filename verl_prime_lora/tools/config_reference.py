"""The configuration reference of `prime.*`, `prime.prm.*` and `algorithm.prime.*` as a markdown table.

    python -m verl_prime_lora.tools.config_reference                 # print the table
    python -m verl_prime_lora.tools.config_reference --write docs/configuration.md   # replace its copy

The table is generated from the typed dataclasses of `verl_prime_lora.config.prime`, which hold every
PRIME setting's default and checks: `PrimeConfig` (`prime.*`), `PrmConfig` (`prime.prm.*`, expanded in
place of the `prime.prm` field) and `AdvantageConfig` (`algorithm.prime.*`). A row per dataclass field:
its full key, its default and its meaning, the field's entry in its class's `Args:` docstring section.
`prime.prm.{model,engine,optim,checkpoint}` are veRL's own schemas, which the recipe composes and the PRM
worker types with veRL's dataclasses: one row each, pointing to veRL's config.

docs/configuration.md holds a copy between `<!-- config-reference:start -->` and `<!-- config-reference:end -->`;
tests/tools/test_config_reference.py fails when that copy and the dataclasses disagree. Imports neither veRL,
torch nor Ray.
"""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import re
import sys
from pathlib import Path
from typing import Any

from verl_prime_lora.config.prime import PRM_VERL_SECTIONS, AdvantageConfig, PrimeConfig, PrmConfig

START_MARKER = "<!-- config-reference:start -->"
END_MARKER = "<!-- config-reference:end -->"
REGENERATE = "python -m verl_prime_lora.tools.config_reference --write docs/configuration.md"

# The sections of the reference, in order: (typed class, its key). A field whose type is one of these
# classes is expanded as that section's rows at its place.
SECTIONS: tuple[type, ...] = (PrimeConfig, AdvantageConfig)

# prime.prm sections typed by veRL (prm_worker.build_prm_worker_config): (default, meaning) of each row.
VERL_SCHEMAS: dict[str, tuple[str, str]] = {
    "model": (
        "veRL `hf_model`",
        "veRL's `HFModelConfig` (verl/trainer/config/model/hf_model.yaml). Recipe: `path` = the actor's base, "
        "`lora_rank: 0` (full-parameter; > 0: a LoRA PRM whose reference is its adapter off).",
    ),
    "engine": (
        "veRL `fsdp` engine",
        "veRL's `FSDPEngineConfig` (verl/trainer/config/engine/fsdp.yaml). Recipe: fp32 `model_dtype`, bf16 "
        "`mixed_precision.param_dtype` (the compute dtype veRL reads); offload as the actor's.",
    ),
    "optim": (
        "veRL `fsdp` optimizer",
        "veRL's `FSDPOptimizerConfig` (verl/trainer/config/optim/fsdp.yaml). Recipe: `lr: 1e-6`, "
        "`clip_grad: 1.0`, constant schedule.",
    ),
    "checkpoint": (
        "veRL `CheckpointConfig`",
        "veRL's `CheckpointConfig`: what `global_step_N/prm` saves and loads (recipe: model, optimizer, extra).",
    ),
}


def docstring_args(cls: type) -> dict[str, str]:
    """The entries of the `Args:` section of `cls`'s docstring: {name: text on one line}.

    An entry starts with `name:` one level below `Args:`; deeper-indented lines continue it; the section
    ends at the first line indented no deeper than `Args:` itself.
    """
    lines = (inspect.getdoc(cls) or "").splitlines()
    entries: dict[str, list[str]] = {}
    start = next((i for i, line in enumerate(lines) if line.strip() == "Args:"), None)
    if start is None:
        return {}
    base = len(lines[start]) - len(lines[start].lstrip())
    entry_indent, name = None, None
    for line in lines[start + 1 :]:
        if not line.strip():
            continue
        indent = len(line) - len(line.lstrip())
        if indent <= base:
            break
        if entry_indent is None:
            entry_indent = indent
        match = re.match(r"(\w+):\s*(.*)", line.strip())
        if indent == entry_indent and match:
            name = match.group(1)
            entries[name] = [match.group(2)]
        elif name is not None:
            entries[name].append(line.strip())
    return {key: " ".join(part for part in parts if part) for key, parts in entries.items()}


def format_default(value: Any) -> str:
    """A default as it is written in YAML: `null`, `true`, `0.05`, `1e-6`, `before`."""
    if value is None:
        return "`null`"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, float):
        text = repr(value)
        text = re.sub(r"e([+-])0*(\d)", lambda m: f"e{'-' if m.group(1) == '-' else ''}{m.group(2)}", text)
        return f"`{text}`"
    return f"`{value}`"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").strip()


def rows(cls: type = PrimeConfig) -> list[tuple[str, str, str]]:
    """(key, default, meaning) for every field of the section `cls`, nested sections expanded in place."""
    meanings = docstring_args(cls)
    out: list[tuple[str, str, str]] = []
    defaults = cls()
    for field in dataclasses.fields(cls):
        key = f"{cls.KEY}.{field.name}"
        value = getattr(defaults, field.name)
        if dataclasses.is_dataclass(value):
            out.extend(rows(type(value)))
            if type(value) is PrmConfig:
                out.extend(
                    (f"{PrmConfig.KEY}.{section}", VERL_SCHEMAS[section][0], VERL_SCHEMAS[section][1])
                    for section in PRM_VERL_SECTIONS
                )
            continue
        raw_default = field.default if field.default is not dataclasses.MISSING else value
        out.append((key, format_default(raw_default), meanings.get(field.name, "")))
    return out


def render() -> str:
    """The configuration reference: one markdown table, one row per key."""
    lines = [
        f"<!-- generated from verl_prime_lora/config/prime.py by `{REGENERATE}` -->",
        "| key | default | meaning |",
        "|---|---|---|",
    ]
    for section in SECTIONS:
        for key, default, meaning in rows(section):
            lines.append(f"| `{key}` | {_cell(default)} | {_cell(meaning)} |")
    return "\n".join(lines) + "\n"


def between_markers(text: str) -> str | None:
    """What a document holds between the markers (None when it lacks them)."""
    start, end = text.find(START_MARKER), text.find(END_MARKER)
    if start < 0 or end < start:
        return None
    return text[start + len(START_MARKER) : end].strip("\n") + "\n"


def replace_between_markers(text: str, table: str) -> str:
    """`text` with the block between the markers replaced by `table`."""
    start, end = text.find(START_MARKER), text.find(END_MARKER)
    if start < 0 or end < start:
        raise ValueError(f"no {START_MARKER} ... {END_MARKER} block")
    return text[: start + len(START_MARKER)] + "\n" + table + text[end:]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m verl_prime_lora.tools.config_reference",
        description="Print the PRIME configuration reference (markdown) generated from config/prime.py.",
    )
    parser.add_argument("--write", type=Path, default=None, help="replace the block between the markers in FILE")
    args = parser.parse_args(argv)
    table = render()
    if args.write is None:
        sys.stdout.write(table)
        return 0
    text = args.write.read_text(encoding="utf-8")
    try:
        new = replace_between_markers(text, table)
    except ValueError as err:
        print(f"{args.write}: {err}", file=sys.stderr)
        return 1
    if new != text:
        args.write.write_text(new, encoding="utf-8")
        print(f"{args.write}: configuration reference updated")
    else:
        print(f"{args.write}: configuration reference already up to date")
    return 0


if __name__ == "__main__":
    sys.exit(main())
