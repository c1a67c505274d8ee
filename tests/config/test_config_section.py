"""verl_prime_lora.config.section, the one typed-config mechanism: both kinds of section (the plugin's strict
settings, the lenient views of veRL's keys) are read by the same reader, with the same conversions and key names."""

import dataclasses
import importlib
import inspect
from dataclasses import dataclass
from typing import Any, ClassVar, Optional

import pytest
from omegaconf import OmegaConf

from verl_prime_lora.config import prime
from verl_prime_lora.config.section import PrimeConfigError, Section, default_of, key, key_of, node, read_section

verl_view = importlib.import_module("verl_prime_lora.config.verl_view")  # the package exports a function of its name


@dataclass(frozen=True)
class Inner(Section):
    depth: int = key("deep.depth", 3)


@dataclass(frozen=True)
class Lenient(Section):
    node: Any = node()
    count: int = 1
    ratio: Optional[float] = key("ratio", 0.5)
    flag: bool = key("opts.flag", False)
    name: Any = None
    inner: Inner = key("inner")


@dataclass(frozen=True)
class Strict(Section):
    KEY: ClassVar[str] = "plugin.part"
    STRICT: ClassVar[bool] = True
    FOREIGN: ClassVar[tuple[str, ...]] = ("model",)
    count: int = 1
    ratio: Optional[float] = 0.5

    def __post_init__(self) -> None:
        if self.count < 0:
            self._fail("count", "it must be >= 0.")


def test_every_section_of_the_config_layer_is_one_kind_of_class():
    classes = [
        cls
        for module in (prime, verl_view)
        for _, cls in inspect.getmembers(module, inspect.isclass)
        if dataclasses.is_dataclass(cls) and cls.__module__ == module.__name__
    ]
    assert len(classes) >= 16 and all(issubclass(cls, Section) for cls in classes), classes
    assert all(cls.STRICT for cls in classes if cls.__module__ == prime.__name__)
    assert not any(cls.STRICT for cls in classes if cls.__module__ == verl_view.__name__)


@pytest.mark.parametrize("as_omegaconf", [False, True])
def test_both_kinds_convert_alike_and_fall_back_on_absent_keys(as_omegaconf):
    raw = {"count": "3", "ratio": 1, "opts": {"flag": "true"}, "inner": {"deep": {"depth": "7"}}, "other": [1]}
    config = OmegaConf.create(raw) if as_omegaconf else raw
    lenient = read_section(Lenient, config, "veRL.sec")
    assert (lenient.count, lenient.ratio, lenient.flag, lenient.inner.depth) == (3, 1.0, True, 7)
    assert type(lenient.ratio) is float and lenient.name is None and lenient.node is config
    strict = read_section(Strict, {"count": "3", "ratio": 1})
    assert (strict.count, strict.ratio, type(strict.ratio)) == (3, 1.0, float)
    assert read_section(Lenient, None) == Lenient(inner=Inner()) and read_section(Strict, None) == Strict()
    assert read_section(Strict, strict) is strict


def test_key_names_follow_the_root_and_the_declared_keys():
    lenient = read_section(Lenient, {}, "veRL.sec")
    assert key_of(lenient, "flag") == "veRL.sec.opts.flag"
    assert key_of(lenient.inner, "depth") == key_of(lenient, "inner.depth") == "veRL.sec.inner.deep.depth"
    assert key_of(Strict, "count") == key_of(Strict(), "count") == "plugin.part.count"
    assert key_of(verl_view.VerlView, "reward.custom_fn_path") == "reward.custom_reward_function.path"
    assert default_of(Lenient, "inner.depth") == 3
    with pytest.raises(KeyError, match="no field 'nope'"):
        key_of(Strict, "nope")


@pytest.mark.parametrize(
    "cls, raw, message",
    [
        (Lenient, {"count": 1.5}, "veRL.sec.count: is 1.5; expected an integer."),
        (Lenient, {"opts": {"flag": "sometimes"}}, "veRL.sec.opts.flag: is 'sometimes'; expected true or false."),
        (Lenient, {"ratio": "high"}, "veRL.sec.ratio: is 'high'; expected a number or null."),
        (Strict, {"count": "abc"}, "plugin.part.count: is 'abc'; expected an integer."),
        (Strict, {"count": None}, "plugin.part.count: is null; expected an integer."),
        (Strict, {"cuont": 2}, "plugin.part.cuont: is not a setting of plugin.part"),
        (Strict, {"count": -1}, "plugin.part.count: is -1; it must be >= 0."),
        (Strict, [1, 2], "plugin.part: is [1, 2]; expected a mapping"),
    ],
)
def test_each_error_names_its_full_key(cls, raw, message):
    with pytest.raises(PrimeConfigError) as err:
        read_section(cls, raw, None if cls is Strict else "veRL.sec")
    assert str(err.value).startswith(message), str(err.value)


def test_only_the_strict_kind_refuses_unknown_keys_and_null():
    assert read_section(Lenient, {"count": None, "unknown": 1}).count == 1  # veRL's null: veRL's default
    assert read_section(Strict, {"ratio": None, "model": {"path": "/m"}}).ratio is None  # Optional; foreign key


def test_a_strict_section_is_read_only_at_its_key():
    with pytest.raises(ValueError, match="Strict is read at 'plugin.part', not 'elsewhere'"):
        read_section(Strict, {}, "elsewhere")


def test_an_interpolation_that_fails_names_its_key():
    config = OmegaConf.create({"count": "${missing.key}"})
    with pytest.raises(PrimeConfigError, match=r"^plugin\.part\.count: "):
        read_section(Strict, config)
