"""The error every input check raises: its message starts with the config key, then names the path or the row."""

from __future__ import annotations

from typing import NoReturn


class InputCheckError(ValueError):
    """A run input (file, folder, device count) that cannot work; the message starts with the config key."""


def fail(key: str, message: str) -> NoReturn:
    raise InputCheckError(f"{key}: {message}")
