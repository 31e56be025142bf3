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
from idt_desk.recordings.files import FORMAT_VERSION, RecordingError, json_safe
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
    follows and lists as any (see :func:`_as_recording`).
    """
    if not isinstance(rec, Recording):
        rec = load_recording(rec)
    if fmt not in ("csv", "parquet", "recording"):
        raise ValueError(f"format must be csv, parquet or recording, got {fmt!r}")
    out = Path(out)
    if fmt == "recording":
        return _as_recording(rec, out)
    out.mkdir(parents=True, exist_ok=True)
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
        if fmt == "csv":
            df.to_csv(p, index=False)
        else:
            df.to_parquet(p, index=False)
        paths.append(p)
    cfg = out / "config.json"
    # Said in the copy of config.json: a reader then tells an export from a recording, and
    # what to do with it (replay the recording; analyze the exported transitions).
    exported = {**rec.config, "exported_from": str(rec.path) if rec.path else None,
                "export_format": fmt}
    cfg.write_text(json.dumps(exported, indent=2) + "\n")
    paths.append(cfg)
    return paths


def _as_recording(rec: Recording, out: Path) -> list[Path]:
    """``rec`` written again as a recording of the current format into the new folder ``out``.

    The transitions go into the transitions log (a format-1 recording's transitions.csv takes
    about a quarter of the room as transitions.arrows, every value the same); windows.csv,
    events.jsonl, turns.jsonl and status.json are copied byte for byte; config.json says the
    format and where it came from. What the source recording lacked (a killed session's rows)
    it lacks still, and says so the same way.
    """
    out.mkdir(parents=True, exist_ok=True)
    if (out / "config.json").exists():
        raise RecordingError(f"{out}: already holds a recording; choose a new path")
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
    for name in ("windows.csv", "events.jsonl", "turns.jsonl", "status.json"):
        if (rec.path / name).is_file():
            (out / name).write_bytes((rec.path / name).read_bytes())
            paths.append(out / name)
    config = {**rec.config, "format_version": FORMAT_VERSION, "converted_from": str(rec.path)}
    (out / "config.json").write_text(json.dumps(json_safe(config), indent=2) + "\n")
    return [*paths, out / "config.json"]
