"""Exporting a recording's tables to CSV or Parquet in one call, or as a recording.

``--format recording`` writes the recording in the current format: a format-1 recording's
transitions.csv rewritten as the transitions log.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd

from idt_desk.recordings.arrows import NAME, TransitionLog, transition_columns
from idt_desk.recordings.checks import check_regular
from idt_desk.recordings.files import (
    FORMAT_VERSION,
    create_new,
    json_safe,
    output_folder,
    read_lines,
)
from idt_desk.recordings.reader import Recording, load_recording

__all__ = ["export_recording"]


def _json_cell(v: object) -> str | None:
    """A cell of a column holding dicts or lists, as JSON text (missing: empty)."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return None
    return json.dumps(v)


def export_recording(
    rec: Recording | str | Path, out: str | Path, fmt: str = "parquet"
) -> list[Path]:
    """Write a recording's tables as CSV or Parquet files (plus config.json) into ``out``.

    ``fmt`` ``"recording"``: a recording of the current format instead, which replays,
    follows and lists as any (see :func:`_as_recording`). ``out`` is a new or an empty
    folder, and every file is created new there: an export never writes through a link, nor
    over a file it did not write (:func:`~idt_desk.recordings.files.output_folder`).
    """
    if not isinstance(rec, Recording):
        rec = load_recording(rec)
    if fmt not in ("csv", "parquet", "recording"):
        raise ValueError(f"format must be csv, parquet or recording, got {fmt!r}")
    out = output_folder(Path(out), "an export")
    if fmt == "recording":
        return _as_recording(rec, out)
    paths = []
    names = ["transitions", "windows", "events"] + (["turns"] if rec.turns is not None else [])
    for name in names:
        df = pd.DataFrame(rec.turns) if name == "turns" else getattr(rec, name)
        if not len(df.columns):
            continue  # a table the source of ``rec`` does not have (a session's transitions)
        p = out / f"{name}.{fmt}"
        if name in ("events", "turns"):
            # Parameters are nested dicts and lists: JSON text in either format (a CSV cell
            # of Python's repr, {'sigma': 0.1}, no other program reads).
            df = df.copy()
            for col in df.columns:
                if df[col].map(lambda v: isinstance(v, dict | list)).any():
                    df[col] = df[col].map(_json_cell)
        with _new(p) as f:
            if fmt == "csv":
                df.to_csv(f, index=False)
            else:
                df.to_parquet(f, index=False)
        paths.append(p)
    cfg = out / "config.json"
    # Said in the copy of config.json: a reader then tells an export from a recording, and
    # what to do with it (replay the recording; analyze the exported transitions).
    exported = {**rec.config, "exported_from": str(rec.path) if rec.path else None,
                "export_format": fmt}
    with _new(cfg) as f:
        f.write((json.dumps(json_safe(exported), indent=2) + "\n").encode())
    paths.append(cfg)
    return paths


def _new(path: Path):
    """``path`` created new for writing, as a binary file object (never through a link)."""
    return open(create_new(path), "wb", closefd=True)


def _as_recording(rec: Recording, out: Path) -> list[Path]:
    """``rec`` written again as a recording of the current format into the new folder ``out``.

    The transitions go into the transitions log (a format-1 recording's transitions.csv takes
    about a quarter of the room as transitions.arrows, every value the same); windows.csv,
    events.jsonl and turns.jsonl are copied byte for byte as the reader checks them (regular
    files of the recording, text); status.json is not copied (a listing folds the events
    where a run has none): nothing is copied that was not read as the format it claims.
    config.json says the format and where it came from. What the source recording lacked (a
    killed session's rows) it lacks still, and says so the same way.
    """
    n_s, n_a = len(rec.state_names), len(rec.action_names)
    columns = transition_columns(n_s, n_a)
    log = TransitionLog(out / NAME, columns, n_s, n_a)
    try:
        log.append(rec.transitions.reindex(columns=columns).to_numpy(np.float64))
        log.stage(log.take())
        log.write()
    finally:
        log.close()
    paths = [out / NAME]
    for name in ("windows.csv", "events.jsonl", "turns.jsonl"):
        source = rec.path / name
        if source.is_file() or source.is_symlink():
            check_regular(source)  # a link out of the recording is refused, never copied
            with _new(out / name) as f:
                f.write(read_lines(source))
            paths.append(out / name)
    config = {**rec.config, "format_version": FORMAT_VERSION, "converted_from": str(rec.path)}
    with _new(out / "config.json") as f:
        f.write((json.dumps(json_safe(config), indent=2) + "\n").encode())
    return [*paths, out / "config.json"]
