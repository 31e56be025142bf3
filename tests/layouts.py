"""Writing recordings in the layout before format 2, for the tests of what still reads them."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

from idt_desk.recordings.arrows import Frames


@contextlib.contextmanager
def csv_layout() -> Iterator[None]:
    """Sessions and Recorders made inside write format 1: transitions.csv, as before 2.

    In this process only (a child ``idt-desk run`` writes the current format).
    """
    from idt_desk.recordings import writer

    old, writer.TRANSITIONS_LAYOUT = writer.TRANSITIONS_LAYOUT, "csv"
    try:
        yield
    finally:
        writer.TRANSITIONS_LAYOUT = old


def transitions_path(run: str | Path) -> Path:
    """A recording's transitions file: transitions.arrows, or transitions.csv before 2."""
    run = Path(run)
    for name in ("transitions.arrows", "transitions.csv"):
        if (run / name).exists() or (run / name).is_symlink():
            return run / name
    return run / "transitions.arrows"


def header_bytes(path: Path) -> bytes:
    """The bytes a transitions file starts with: a CSV's header line, or the log's schema."""
    data = path.read_bytes()
    if path.suffix == ".csv":
        return data[:data.index(b"\n") + 1]
    frames = Frames(str(path))
    frames.feed(data)
    return frames.schema_bytes


def disk_rows(run: str | Path) -> int:
    """Whole transitions a recording's file holds now."""
    path = transitions_path(run)
    data = path.read_bytes()
    if path.suffix == ".csv":
        return max(data.count(b"\n") - 1, 0)
    frames = Frames(str(path))
    frames.feed(data)
    return frames.rows


def disk_table(run: str | Path):
    """The transitions a recording's file holds now, as a table (a torn end left out)."""
    import pandas as pd

    from idt_desk.recordings.arrows import read_transitions

    path = transitions_path(run)
    if path.suffix == ".csv":
        data = path.read_bytes()
        return pd.read_csv(path, nrows=max(data.count(b"\n") - 1, 0))
    return read_transitions(path, None, [])
