"""Exporting a recording's tables to CSV or Parquet in one call."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd

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
    """Write a recording's tables as CSV or Parquet files (plus config.json) into ``out``."""
    if not isinstance(rec, Recording):
        rec = load_recording(rec)
    if fmt not in ("csv", "parquet"):
        raise ValueError(f"format must be csv or parquet, got {fmt!r}")
    out = Path(out)
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
