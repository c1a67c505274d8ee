"""The Hypothesis profile every test runs under (tests/conftest.py): the same examples on every run, whatever the
machine, the example database or the modules other tests imported first."""

import importlib.util
import sys

from hypothesis import given, settings
from hypothesis import strategies as st


def _examples() -> list:
    """The examples one fixed property test draws (integers and floats, where Hypothesis mixes in constants)."""
    drawn = []

    @settings(max_examples=200, deadline=None)
    @given(st.integers(-(10**6), 10**6), st.floats(-1e3, 1e3))
    def record(number, real):
        drawn.append((number, real))

    record()
    return drawn


def test_examples_are_derandomised_and_kept_nowhere():
    assert settings.default.derandomize and settings.default.database is None
    assert _examples() == _examples()


def test_examples_do_not_depend_on_the_modules_imported_before(tmp_path):
    """A module of the project imported between two runs (here one holding distinctive constants, as a test that
    imports a module lazily would add) does not change what the next run draws."""
    before = _examples()
    source = tmp_path / "late_module.py"
    source.write_text("LIMITS = (987654, -424242, 3.25, 777.5, 123456)\n")
    spec = importlib.util.spec_from_file_location("late_module", source)
    module = importlib.util.module_from_spec(spec)
    sys.modules["late_module"] = module
    try:
        spec.loader.exec_module(module)
        assert _examples() == before
    finally:
        del sys.modules["late_module"]
