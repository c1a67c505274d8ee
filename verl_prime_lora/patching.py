"""What every monkeypatch of this package shares: the mark it leaves, and the moment it is applied.

`cpu/patches.py` (the CPU platform's) and `plugin/patches.py` (the plugin's) wrap a veRL (or torch, vLLM)
name with `wrap`, the one idiom: the wrapper carries the original's name and docstring and the plugin's `mark`, and
a name that already holds the plugin's wrapper is left alone, so applying a patch twice is a no-op.

`when_imported(module, patch)` applies `patch(module)` as soon as `module` has executed: at once when it is
already imported, else right after its first import finishes, before the importing code can bind any of its
names. The plugin runs in every process that imports veRL (driver, TaskRunner, every Ray worker, vLLM's
processes); patching a module only where something imports it keeps a process from importing veRL's trainer,
FSDP engine or vLLM just to patch them (that doubled the cost of `import verl`).
"""

from __future__ import annotations

import functools
import importlib.abc
import sys
import threading
from collections.abc import Callable
from types import ModuleType
from typing import Any, NamedTuple

_MARK = "_verl_prime_lora_patched"


def mark(fn: Any) -> Any:
    setattr(fn, _MARK, True)
    return fn


def is_patched(fn: Any) -> bool:
    return bool(getattr(fn, _MARK, False))


def wrap(owner: Any, name: str, wrapper_of: Callable[[Any], Any]) -> bool:
    """`owner.name` becomes `wrapper_of(original)`, with the original's name and docstring (`functools.wraps`) and
    the plugin's mark, unless it holds the plugin's wrapper already. True when it wrapped."""
    original = getattr(owner, name)
    if is_patched(original):
        return False
    setattr(owner, name, mark(functools.wraps(original)(wrapper_of(original))))
    return True


_PENDING: dict[str, list[Callable[[ModuleType], None]]] = {}
_LOCK = threading.RLock()


def when_imported(name: str, patch: Callable[[ModuleType], None]) -> None:
    """`patch(module)` once the module `name` has executed: now if it has, else right after its first import."""
    module = sys.modules.get(name)
    if module is not None:
        if _initialising(module):
            raise RuntimeError(f"verl-prime-lora: {name} is still being imported, so its patch cannot wait for it")
        patch(module)
        return
    with _LOCK:
        _PENDING.setdefault(name, []).append(patch)
        if not any(isinstance(finder, _PatchOnImport) for finder in sys.meta_path):
            sys.meta_path.insert(0, _PatchOnImport())


class ModulePatch(NamedTuple):
    """A patch of one module, as the patch tables (`MODULE_PATCHES` of `cpu/patches.py` and
    `plugin/patches.py`) declare it."""

    apply: Callable[[ModuleType], None]  # patches the module, once it has executed
    replaces: tuple[str, ...]  # what it sets in the module: `name` or `Class.attribute`


def when_each_imported(module_patches: dict[str, ModulePatch]) -> None:
    """`when_imported` for the patch of every module of a patch table."""
    for name, patch in module_patches.items():
        when_imported(name, patch.apply)


def _initialising(module: ModuleType) -> bool:
    return bool(getattr(getattr(module, "__spec__", None), "_initializing", False))


def _run_pending(module: ModuleType) -> None:
    with _LOCK:
        patches = _PENDING.pop(module.__name__, [])
    for patch in patches:
        patch(module)


class _PatchOnImport(importlib.abc.MetaPathFinder):
    """Finds a watched module with the finders after it and runs its patches right after it executes."""

    def find_spec(self, fullname, path, target=None):
        if fullname not in _PENDING:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                break
        else:
            return None
        if spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        spec.loader = _PatchingLoader(spec.loader)
        return spec


class _PatchingLoader(importlib.abc.Loader):
    """The module's own loader, then its patches; the module keeps its own loader afterwards."""

    def __init__(self, loader):
        self.loader = loader

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        module.__loader__ = self.loader
        if module.__spec__ is not None:
            module.__spec__.loader = self.loader
        self.loader.exec_module(module)
        _run_pending(module)
