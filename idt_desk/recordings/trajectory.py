"""Reading (S, A, S') trajectories from CSV or Parquet files, or a transitions log."""

from __future__ import annotations

import io
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from idt_desk.errors import InputError
from idt_desk.recordings.files import text_head_problem

__all__ = ["Trajectory", "load_trajectory", "read_table"]


@dataclass
class Trajectory:
    """Continuous transitions read from a file, one row per transition."""

    s: np.ndarray
    s_next: np.ndarray
    a: np.ndarray | None
    reward: np.ndarray | None
    episode: np.ndarray | None
    state_names: list[str]
    action_names: list[str]
    rows: int
    #: What reading the file had to do (a torn last line dropped), for the report.
    notes: list[str] = field(default_factory=list)

    @property
    def n(self) -> int:
        """Number of transitions."""
        return int(self.s.shape[0])


def read_table(path: str | Path) -> pd.DataFrame:
    """Read a CSV or Parquet file into a DataFrame, with one-line errors."""
    path = Path(path)
    if not path.exists():
        raise InputError(f"{path}: no such file")
    if path.is_dir():
        raise InputError(f"{path}: is a directory, not a trajectory file")
    suffix = path.suffix.lower()
    if suffix in (".csv", ".txt") and (problem := text_head_problem(path)) is not None:
        raise InputError(f"{path}: cannot read as {suffix[1:]}: {problem}")
    try:
        if suffix in (".parquet", ".pq"):
            return pd.read_parquet(path)
        if suffix in (".csv", ".txt"):
            raw, note = _drop_torn_line(path.read_bytes())
            df = pd.read_csv(io.BytesIO(raw))
            df.attrs["notes"] = [f"{path.name}: {note}"] if note else []
            return df
        if suffix == ".gz":
            return pd.read_csv(path)
        if suffix == ".arrows":  # a recording's transitions log
            from idt_desk.recordings.arrows import read_transitions

            notes: list[str] = []
            df = read_transitions(path, None, notes)
            df.attrs["notes"] = [f"{path.name}: {note}" for note in notes]
            return df
    except (ValueError, OSError, pd.errors.ParserError, UnicodeDecodeError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise InputError(f"{path}: cannot read as {suffix[1:]}: {first}") from None
    raise InputError(f"{path}: unknown file type {suffix!r} (expected .csv, .parquet or "
                     ".arrows)")


def _drop_torn_line(raw: bytes) -> tuple[bytes, str | None]:
    """Drop a last line cut off while it was written (a killed session's CSV).

    A torn line lacks its newline and has fewer fields than the header; a last line that
    merely lacks a newline but is whole is kept.
    """
    if not raw or raw.endswith(b"\n") or b"\n" not in raw:
        return raw, None
    start = raw.rfind(b"\n") + 1
    header = raw[: raw.find(b"\n")]
    if raw[start:].count(b",") >= header.count(b","):
        return raw, None
    line = raw.count(b"\n") + 1
    return raw[:start], f"dropped a partly written last line (line {line})"


def _numbered(columns: Sequence[str], prefix: str) -> list[str]:
    pat = re.compile(rf"^{re.escape(prefix)}(\d+)$")
    found = [(int(m.group(1)), c) for c in columns if (m := pat.match(str(c)))]
    return [c for _, c in sorted(found)]


def _numeric(df: pd.DataFrame, cols: Sequence[str], path: Path) -> np.ndarray:
    out = np.empty((len(df), len(cols)), dtype=np.float64)
    for j, c in enumerate(cols):
        col = pd.to_numeric(df[c], errors="coerce")
        bad = col.isna() & df[c].notna()
        if bad.any():
            row = int(np.flatnonzero(bad.to_numpy())[0])
            raise InputError(
                f"{path}: column {c!r} is not numeric (row {row}: {df[c].iloc[row]!r})"
            )
        out[:, j] = col.to_numpy(dtype=np.float64)
    return out


def load_trajectory(
    path: str | Path,
    *,
    s_prefix: str = "s_",
    a_prefix: str = "a_",
    s_next_prefix: str = "s_next_",
    state_columns: Sequence[str] | None = None,
    action_columns: Sequence[str] | None = None,
    passive: bool = False,
) -> Trajectory:
    """Read a trajectory file.

    Columns ``{s_prefix}0, 1, ...`` are S, ``{a_prefix}0, ...`` A and ``{s_next_prefix}0, ...``
    S' (or explicit ``state_columns`` / ``action_columns``). Without S' columns the next
    row's S is used, dropping the last row and, with an ``episode`` column, every transition
    that crosses an episode boundary. Without A columns (or with ``passive``) the system is
    passive. Optional ``reward`` and ``episode`` columns are carried along.
    """
    path = Path(path)
    df = read_table(path)
    cols = [str(c) for c in df.columns]
    if state_columns:
        missing = [c for c in state_columns if c not in cols]
        if missing:
            raise InputError(f"{path}: missing state columns {missing} (found: {cols})")
        s_cols = list(state_columns)
    else:
        s_cols = _numbered(cols, s_prefix)
        if not s_cols:
            raise InputError(
                f"{path}: no state columns {s_prefix}0, {s_prefix}1, ... (found: {cols}); "
                "use --s-prefix or --state-columns"
            )
    if passive:
        a_cols: list[str] = []
    elif action_columns:
        missing = [c for c in action_columns if c not in cols]
        if missing:
            raise InputError(f"{path}: missing action columns {missing} (found: {cols})")
        a_cols = list(action_columns)
    else:
        a_cols = _numbered(cols, a_prefix)
    n_cols = [] if state_columns else _numbered(cols, s_next_prefix)
    if n_cols and len(n_cols) != len(s_cols):
        raise InputError(
            f"{path}: {len(s_cols)} state columns but {len(n_cols)} next-state columns"
        )

    s = _numeric(df, s_cols, path)
    a = _numeric(df, a_cols, path) if a_cols else None
    reward = _numeric(df, ["reward"], path)[:, 0] if "reward" in cols else None
    episode = _numeric(df, ["episode"], path)[:, 0] if "episode" in cols else None
    if n_cols:
        s_next = _numeric(df, n_cols, path)
    else:
        keep = np.ones(max(len(df) - 1, 0), dtype=bool)
        if episode is not None:
            keep &= episode[1:] == episode[:-1]
        s_next = s[1:][keep]
        s = s[:-1][keep]
        a = a[:-1][keep] if a is not None else None
        reward = reward[:-1][keep] if reward is not None else None
        episode = episode[:-1][keep] if episode is not None else None
    return Trajectory(s, s_next, a, reward, episode, s_cols, a_cols, len(df),
                      list(df.attrs.get("notes", [])))
