"""The one typed-config mechanism: a section of the composed config as a frozen dataclass, read once.

A `Section` subclass declares the settings it reads as fields. A field's key is its name or, where the config's
key is not a Python name or lies deeper, `key("checkpoint.load_contents", default)`: dotted, relative to the
section's node. A field typed as a `Section` is a nested section at its key; a `node()` field holds the section's
node itself (for veRL's dataclass builders and functions that take the config, and the few writes the plugin
makes to it).

`read_section(cls, node, root)` reads a section from its node (a DictConfig, a dict, a dataclass such as veRL's
`AlgoConfig`, or None): each field gets the value at its key, converted to the field's type as OmegaConf converts
a structured config (`int`, `float`, `bool`, `str`, each possibly `Optional`; a field of any other type holds the
value as the config has it, interpolations resolved), or its default when the key is absent. The section
remembers `root`, the full key of its node, so `key_of(section, "name")` is a field's full key and every error
names it. Two kinds of section, by who owns the keys:

* `STRICT` sections are the plugin's own settings (`prime.*`, `algorithm.prime.*`: config.prime): a key the
  class does not declare is refused (a typo is not silently ignored), so is null where the field is not
  `Optional`, and `__post_init__` checks the values. `FOREIGN` names sub-sections that other schemas type.
* The others read veRL's keys (config.verl_view): veRL owns those sections and their other keys, and a null
  falls back on the default that veRL's code uses.

Every error is a `PrimeConfigError` whose message starts with the full key. Nothing here imports veRL, torch or
Ray.
"""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from omegaconf import OmegaConf, open_dict
from omegaconf.errors import OmegaConfBaseException
from omegaconf.nodes import BooleanNode, FloatNode, IntegerNode, StringNode

_KEY = "key"
_ABSENT = object()
_SCALAR_NODES = {int: IntegerNode, float: FloatNode, bool: BooleanNode, str: StringNode}
_IN_WORDS = {int: "an integer", float: "a number", bool: "true or false", str: "a string"}


class PrimeConfigError(ValueError):
    """A config problem of a PRIME run; the message starts with the offending key."""


def key(name: str, default: Any = None) -> Any:
    """A field read at `name` (dotted, relative to its section's node); `default` when absent."""
    return field(default=default, metadata={_KEY: name})


def node() -> Any:
    """A field holding its section's node as the config has it."""
    return field(default=None, repr=False, compare=False, metadata={_KEY: ""})


def _lookup(config: Any, path: str) -> Any:
    """`config.<path>` (dotted) for a DictConfig, dict or dataclass, interpolations resolved; `_ABSENT` when a key
    on the way is absent, None when the value is null or missing (`???`)."""
    if OmegaConf.is_config(config):
        return OmegaConf.select(config, path, default=_ABSENT, throw_on_missing=False)  # missing: None
    value = config
    for name in path.split("."):
        if value is None:
            return _ABSENT
        if isinstance(value, Mapping) or hasattr(value, "get"):
            value = value.get(name, _ABSENT)
        else:
            value = getattr(value, name, _ABSENT)
        if value is _ABSENT:
            return _ABSENT
    return value


def config_value(config: Any, path: str, default: Any = None) -> Any:
    """``config.<path>`` (dotted) for a DictConfig, dict or dataclass; ``default`` when absent, None or
    missing (``???``)."""
    value = _lookup(config, path)
    return default if value is _ABSENT or value is None else value


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _join(root: str, name: str) -> str:
    return f"{root}.{name}" if root and name else root or name


def _unwrap(hint: Any) -> tuple[Any, bool]:
    """A field type as (its type without `Optional`, whether it is `Optional`)."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType) and type(None) in typing.get_args(hint):
        rest = [arg for arg in typing.get_args(hint) if arg is not type(None)]
        return (rest[0] if len(rest) == 1 else Any), True
    return hint, False


def _is_section(hint: Any) -> bool:
    return isinstance(hint, type) and issubclass(hint, Section)


def _convert(hint: Any, value: Any, full_key: str) -> Any:
    """`value` as a field of type `hint` holds it (`int`, `float`, `bool`, `str`: OmegaConf's conversions)."""
    base, optional = _unwrap(hint)
    if value is None or base not in _SCALAR_NODES:
        return value
    try:
        return _SCALAR_NODES[base](value=value)._value()
    except OmegaConfBaseException:
        words = _IN_WORDS[base] + (" or null" if optional else "")
        raise PrimeConfigError(f"{full_key}: is {value!r}; expected {words}.") from None


@dataclass(frozen=True)
class Section:
    """A typed, read-only section of the composed config (see the module docstring).

    `KEY` is where a section of its class is read when no other root is given (the plugin's own sections live at
    one key; a veRL view such as the model's is read at several). `root` is the full key of the node it was read
    from.
    """

    KEY: ClassVar[str] = ""
    STRICT: ClassVar[bool] = False
    FOREIGN: ClassVar[tuple[str, ...]] = ()

    @property
    def root(self) -> str:
        return getattr(self, "_root", "") or self.KEY

    def _fail(self, name: str, message: str) -> None:
        raise PrimeConfigError(f"{key_of(self, name)}: is {getattr(self, name)!r}; {message}")

    def _set(self, name: str, value: Any) -> None:
        """Normalises a field while `__post_init__` runs (the section is read-only afterwards)."""
        object.__setattr__(self, name, value)


def _field_key(item: dataclasses.Field) -> str:
    return item.metadata.get(_KEY, item.name)


def _refuse_unknown_keys(cls: type, section_node: Any, root: str) -> None:
    if section_node is None:
        return
    if not isinstance(section_node, Mapping):
        raise PrimeConfigError(f"{root}: is {section_node!r}; expected a mapping of its settings.")
    names = {_field_key(item).split(".")[0] for item in dataclasses.fields(cls)}
    for name in section_node:
        if name not in names and name not in cls.FOREIGN:
            raise PrimeConfigError(f"{_join(root, name)}: is not a setting of {root} (known: {sorted(names)}).")


def read_section(cls: type, section_node: Any, root: str | None = None) -> Any:
    """The section `cls` read from `section_node` (DictConfig, dict, dataclass, an instance of `cls` (returned
    as is) or None: every default), whose full key is `root` (default: `cls.KEY`)."""
    if isinstance(section_node, cls):
        return section_node
    root = cls.KEY if root is None else root
    if cls.STRICT:
        if root != cls.KEY:  # its checks in `__post_init__` run before `root` is set and name keys under `KEY`
            raise ValueError(f"{cls.__name__} is read at {cls.KEY!r}, not {root!r}")
        _refuse_unknown_keys(cls, section_node, root)
    hints, values = _hints(cls), {}
    for item in dataclasses.fields(cls):
        name, hint = _field_key(item), hints[item.name]
        full_key = _join(root, name)
        if not name:
            values[item.name] = section_node
            continue
        try:
            value = _ABSENT if section_node is None else _lookup(section_node, name)
        except OmegaConfBaseException as err:
            raise PrimeConfigError(f"{full_key}: {str(err).splitlines()[0]}") from None
        if _is_section(hint):
            values[item.name] = read_section(hint, None if value is _ABSENT else value, full_key)
        elif value is _ABSENT:
            continue
        elif value is None and not _unwrap(hint)[1]:
            if cls.STRICT:
                raise PrimeConfigError(f"{full_key}: is null; expected {_IN_WORDS.get(hint, 'a value')}.")
        else:
            values[item.name] = _convert(hint, value, full_key)
    section = cls(**values)
    object.__setattr__(section, "_root", root)
    return section


def _fields_along(cls: type, path: str) -> list[dataclasses.Field]:
    """The fields a dotted field path (`reward.custom_fn_path`) passes through, from `cls` down."""
    items = []
    for part in path.split("."):
        item = next((item for item in dataclasses.fields(cls) if item.name == part), None)
        if item is None:
            raise KeyError(f"{cls.__name__} has no field {part!r}")
        items.append(item)
        cls = _hints(cls)[part]
    return items


def key_of(where: Any, path: str) -> str:
    """The full key of a field: `where` a section or a section class (a class: read at its `KEY`), `path` the
    field's name, dotted through nested sections (`key_of(VerlView, "reward.custom_fn_path")` is
    `reward.custom_reward_function.path`)."""
    full = where.KEY if isinstance(where, type) else where.root
    for item in _fields_along(where if isinstance(where, type) else type(where), path):
        full = _join(full, _field_key(item))
    return full


def default_of(cls: type, path: str) -> Any:
    """The default of the field at `path` (as `key_of` takes it) in section class `cls`."""
    return _fields_along(cls, path)[-1].default


def write(section: Section, name: str, value: Any) -> None:
    """Set the key of field `name` in the section's node (a DictConfig) to `value`, for veRL to read."""
    item = next(item for item in dataclasses.fields(section) if item.name == name)
    with open_dict(section.node):
        OmegaConf.update(section.node, _field_key(item), value, merge=False)
