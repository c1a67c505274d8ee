"""The mark every monkeypatch of this package leaves on what it installs, so that applying it again is a no-op.

`cpu/patches.py` (the CPU platform's) and `integration/patches.py` (the plugin's) both check a target with
`is_patched` before wrapping it and `mark` the wrapper they install.
"""

from typing import Any

_MARK = "_verl_prime_lora_patched"


def mark(fn: Any) -> Any:
    setattr(fn, _MARK, True)
    return fn


def is_patched(fn: Any) -> bool:
    return bool(getattr(fn, _MARK, False))
