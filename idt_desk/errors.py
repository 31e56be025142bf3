"""The error every layer raises for unusable user input: a file, an argument, a setting."""

from __future__ import annotations

__all__ = ["InputError"]


class InputError(ValueError):
    """A file or argument the user gave cannot be used; the message says why in one line."""
