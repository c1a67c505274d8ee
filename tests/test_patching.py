"""verl_prime_lora.patching.when_imported: a patch runs right after its module executes, or at once."""

import sys

import pytest

from verl_prime_lora.patching import when_imported


@pytest.fixture
def module_dir(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    for name in [name for name in sys.modules if name.startswith("vpl_watched")]:
        del sys.modules[name]


def _double(module):
    original = module.value
    module.value = lambda: 2 * original()


def test_a_patch_waits_for_the_import_and_runs_before_the_importer_binds_names(module_dir):
    (module_dir / "vpl_watched.py").write_text("def value():\n    return 21\n")
    (module_dir / "vpl_watched_user.py").write_text("from vpl_watched import value\n")
    when_imported("vpl_watched", _double)
    assert "vpl_watched" not in sys.modules  # nothing imported to patch it
    import vpl_watched_user

    assert vpl_watched_user.value() == 42
    assert sys.modules["vpl_watched"].__loader__.__class__.__name__ == "SourceFileLoader"  # its own loader


def test_a_patch_of_an_imported_module_runs_at_once_and_only_once(module_dir):
    (module_dir / "vpl_watched_now.py").write_text("def value():\n    return 5\n")
    import vpl_watched_now

    when_imported("vpl_watched_now", _double)
    assert vpl_watched_now.value() == 10
    del sys.modules["vpl_watched_now"]
    import vpl_watched_now as again  # a later import of the same name is not patched a second time

    assert again.value() == 5


def test_a_patch_of_a_package_runs_after_its_init(module_dir):
    package = module_dir / "vpl_watched_pkg"
    package.mkdir()
    (package / "__init__.py").write_text("from .inner import value\n")
    (package / "inner.py").write_text("def value():\n    return 3\n")
    seen = []
    when_imported("vpl_watched_pkg", lambda module: seen.append(module.value()))
    import vpl_watched_pkg  # noqa: F401

    assert seen == [3]


def test_a_module_still_being_imported_is_refused(module_dir):
    (module_dir / "vpl_watched_self.py").write_text(
        "from verl_prime_lora.patching import when_imported\nwhen_imported('vpl_watched_self', print)\n"
    )
    with pytest.raises(RuntimeError, match="still being imported"):
        import vpl_watched_self  # noqa: F401


class Owner:
    def method(self, x):
        """The original's docstring."""
        return x + 1


def test_wrap_replaces_a_name_once_keeping_the_originals_name_and_doc():
    """`wrap`, the one idiom of every patch: the wrapper sees the original, carries its name and docstring and the
    plugin's mark; wrapping the name again leaves it as it is."""
    from verl_prime_lora.patching import is_patched, wrap

    original = Owner.__dict__["method"]

    def doubled(inner):
        def method(self, x):
            return 2 * inner(self, x)

        return method

    assert wrap(Owner, "method", doubled) is True
    assert Owner().method(3) == 8 and is_patched(Owner.method)
    assert Owner.method.__name__ == "method" and Owner.method.__doc__ == "The original's docstring."
    assert Owner.method.__wrapped__ is original
    wrapped = Owner.method
    assert wrap(Owner, "method", doubled) is False and Owner.method is wrapped and Owner().method(3) == 8
