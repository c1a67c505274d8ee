"""The plugin's veRL surface: every veRL (and vLLM) name it patches, overrides or relies on, in one manifest.

Each `Entry` names one function, method or class (`module:qualified.name`), says how the plugin touches it
(`kinds`: patched at run time, overridden by the PRIME trainers, or relied on: its logic repeated, what it sets
read, what it does counted on), where in the plugin, what to re-check when it changes, and the hash of its source as
the pinned release has it. tests/verl_surface/test_verl_canaries.py recomputes every hash against the installed veRL
(and the CPU set's vLLM) and checks that the manifest covers every name the two patch tables replace and every veRL
method the PRIME trainers override; docs/development.md shows the manifest as a table
(`python -m verl_prime_lora.verl_surface --write docs/development.md`). A veRL upgrade starts from the entries
whose hash changed. Imports neither veRL nor vLLM.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib
import inspect
import re
import sys
import textwrap
from pathlib import Path

from verl_prime_lora.verl_surface.kinds import KINDS, Entry
from verl_prime_lora.verl_surface.trainer import TRAINER
from verl_prime_lora.verl_surface.workers import VLLM, WORKERS

VERL = TRAINER + WORKERS
START_MARKER, END_MARKER = "<!-- verl-surface:start -->", "<!-- verl-surface:end -->"


def resolve(name: str):
    """The object `module:qualified.name` names, unwrapped from any patch of the plugin's."""
    module_name, qualname = name.split(":")
    obj = importlib.import_module(module_name)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return inspect.unwrap(obj)


def source_hash(obj) -> str:
    """sha256 of the source with blank lines dropped and runs of whitespace in each line collapsed
    (indentation, which is syntax, is kept)."""
    lines = textwrap.dedent(inspect.getsource(obj)).splitlines()
    normalised = [line[: len(line) - len(line.lstrip())] + " ".join(line.split()) for line in lines if line.strip()]
    return hashlib.sha256("\n".join(normalised).encode()).hexdigest()[:16]


def table() -> str:
    """The manifest as a markdown table: name, kind, plugin place."""
    rows = ["| veRL / vLLM name | how | plugin place |", "|---|---|---|"]
    for entry in [*VERL, *VLLM]:
        place = re.sub(r"\s+", " ", entry.plugin_place).replace("|", "\\|")
        rows.append(f"| `{entry.name}` | {entry.kind} | {place} |")
    counts = ", ".join(f"{sum(e.kind == kind for e in [*VERL, *VLLM])} {kind}" for kind in KINDS)
    return "\n".join(rows) + f"\n\n{len(VERL) + len(VLLM)} names: {counts}.\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", type=Path, help="replace the block between the markers in FILE")
    parser.add_argument("--hashes", action="store_true", help="print each name's hash in the installed release")
    args = parser.parse_args(argv)
    if args.hashes:
        for entry in [*VERL, *VLLM]:
            print(source_hash(resolve(entry.name)), entry.name)
        return 0
    if args.write is None:
        sys.stdout.write(table())
        return 0
    text = args.write.read_text(encoding="utf-8")
    if START_MARKER not in text or END_MARKER not in text:
        print(f"{args.write}: no {START_MARKER} ... {END_MARKER} block", file=sys.stderr)
        return 1
    head, rest = text.split(START_MARKER, 1)
    _, tail = rest.split(END_MARKER, 1)
    args.write.write_text(f"{head}{START_MARKER}\n{table()}{END_MARKER}{tail}", encoding="utf-8")
    return 0


__all__ = ["VERL", "VLLM", "Entry", "resolve", "source_hash", "table"]
