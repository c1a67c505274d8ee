"""What a manifest entry is: one veRL (or vLLM) name, how the plugin touches it, and its source hash."""

from __future__ import annotations

from typing import NamedTuple

PATCHED = "patched"  # the plugin replaces it at run time (a `ModulePatch` of cpu/ or plugin/patches.py)
OVERRIDDEN = "overridden"  # the PRIME trainers define a method of that name over veRL's
RELIED = "relied on"  # the plugin repeats its logic, reads what it sets, or counts on what it does
KINDS = (PATCHED, OVERRIDDEN, RELIED)


class Entry(NamedTuple):
    name: str  # "module:qualified.name"
    kind: str  # one of KINDS
    sha: str  # first 16 hex digits of sha256 over its normalised source, as the pinned release has it
    plugin_place: str  # the plugin code that depends on it
    recheck: str  # what to compare when its source changes
