"""Waiting, in the tests, for something another thread or process makes happen."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path


def until(cond: Callable[[], bool], seconds: float = 30.0) -> bool:
    """Whether ``cond()`` came true within ``seconds`` (polled; nothing else is called).

    A deadline, not a speed claim: it only keeps a broken test from hanging.
    """
    deadline = time.monotonic() + seconds
    while not cond():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def rows_on_disk(path: Path) -> int:
    """Whole rows a recording's transitions file holds now."""
    from tests.layouts import disk_rows

    return disk_rows(path)
