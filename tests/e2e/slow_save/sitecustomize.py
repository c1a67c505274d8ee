"""Test-only: in a run started with this folder on PYTHONPATH and `SLOW_SAVE_PATTERN` set, every `torch.save` to a
path containing the pattern waits an hour first, so that a test can kill the run in the middle of that save
(tests/e2e/test_launch_rehearsal.py). Python imports `sitecustomize` at start-up in every process of the run."""

import importlib.abc
import importlib.util
import os
import sys
import time

PATTERN = os.environ.get("SLOW_SAVE_PATTERN")


class _SlowSave(importlib.abc.MetaPathFinder):
    """Wraps `torch.serialization.save` as torch imports it (before `torch/__init__` binds `torch.save`)."""

    def find_spec(self, name, path, target=None):
        if name != "torch.serialization":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        run_module = spec.loader.exec_module

        def exec_module(module):
            run_module(module)
            save = module.save

            def slow_save(obj, f, *args, **kwargs):
                if PATTERN in str(f):
                    time.sleep(3600)
                return save(obj, f, *args, **kwargs)

            module.save = slow_save

        spec.loader.exec_module = exec_module
        return spec


if PATTERN:
    sys.meta_path.insert(0, _SlowSave())
