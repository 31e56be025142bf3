"""Session recordings: written while running, append-only, read back in one line.

A recording is a directory::

    NAME/
      config.json        full configuration: source, settings, symbolisation, engine, seeds,
                         versions (rewritten atomically when it changes)
      transitions.csv    one row per transition: i, t, s_0.., a_0.., s_next_0.., reward, episode
      windows.csv        one row per metric window: start, end, P, H_f, H_b, dH, ... flags
      events.jsonl       one JSON object per event: perturbation/modulation on/off, alarms,
                         calibration, notes, errors
      turns.jsonl        a dialogue's texts, one JSON object per turn (``i``, ``turn``,
                         ``prompt``, ``reply``, ``next_prompt``, ``context_start``, whether
                         injected, backend, model, options); turns a recording started
                         mid-dialogue needs for later contexts come first with
                         ``history: true`` and no ``i`` (sources with ``metric_path = "turns"``)

Each table is plain CSV (``pd.read_csv(path / "transitions.csv")``) and the transitions use
the column names ``idt-desk analyze`` reads. Rows are appended in whole lines with one
``os.write`` per flush, at least every ``flush_seconds`` (0.5 s), so killing the process,
even with SIGKILL, loses at most the last flush interval and leaves every file readable.
Floats are written in their shortest round-trip form: they read back bit for bit, which is what
lets a replay reproduce the recorded windows exactly.

Closing a recording writes ``complete: true`` and the row counts ``n_transitions``,
``n_windows`` and ``n_events`` into config.json; the session's last event before closing is
``session_end`` (or ``recording_stop``). :func:`load_recording` checks the files against that:

- Damage it cannot read past raises :class:`RecordingError` naming the file and the line:
  bytes that are not UTF-8 text (or NUL) in any file, invalid JSON, a table line with the
  wrong number of fields or a non-numeric cell, an events line that is not a JSON event.
- Data missing or out of order is *reported, not raised*: the recording loads with
  ``complete`` False and one warning per file saying what is wrong, e.g.
  ``"transitions.csv: holds 8,000 rows but config.json promises 10,000"``. This covers a
  table or events file shorter than config.json promises, no ``session_end`` event, a torn
  (unterminated) last line (dropped, never misread), a gap in the transitions' ``i``, and a
  windows' ``start`` that goes back. A killed session's recording (no ``complete`` in
  config.json) loads the same way, with its own warning; only the row counts are not checked,
  since it promised none.
"""

from __future__ import annotations

import io
import json
import math
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

__all__ = [
    "FORMAT_VERSION",
    "Recorder",
    "Recording",
    "RecordingError",
    "RecordingTail",
    "export_recording",
    "load_recording",
    "newest_recording",
]

FORMAT_VERSION = 1
_FILES = ("config.json", "transitions.csv", "windows.csv", "events.jsonl")
#: The events a session writes just before it closes a recording.
_CLOSING_EVENTS = ("session_end", "recording_stop")


class RecordingError(ValueError):
    """A path that is not a readable recording; the message says what is wrong."""


def _json_safe(v: Any) -> Any:
    if isinstance(v, dict):
        return {str(k): _json_safe(x) for k, x in v.items()}
    if isinstance(v, list | tuple):
        return [_json_safe(x) for x in v]
    if isinstance(v, np.ndarray):
        return _json_safe(v.tolist())
    if isinstance(v, np.integer):
        return int(v)
    if isinstance(v, np.floating | float):
        f = float(v)
        return f if math.isfinite(f) else None
    if isinstance(v, np.bool_):
        return bool(v)
    if isinstance(v, Path):
        return str(v)
    return v


class _Table:
    """An append-only CSV file written in whole lines.

    Blocks are kept as arrays and formatted at flush time, all at once, by Arrow's CSV writer
    (C++; shortest round-trip digits, so every float reads back bit for bit): 5x less than
    numpy's savetxt per row, which matters when a session records at full speed.
    """

    def __init__(self, path: Path, columns: Sequence[str]) -> None:
        self.path = path
        self.columns = list(columns)
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)
        self._pending: list[np.ndarray] = []
        os.write(self._fd, (",".join(self.columns) + "\n").encode())

    def append(self, block: np.ndarray) -> None:
        if block.size:
            self._pending.append(np.array(block, dtype=np.float64))

    def flush(self) -> None:
        if self._pending:
            data = _csv_lines(np.vstack(self._pending))
            self._pending.clear()
            # One write of whole lines: a kill leaves the file ending at a line boundary.
            while data:
                n = os.write(self._fd, data)
                data = data[n:]

    def close(self) -> None:
        self.flush()
        os.close(self._fd)


class _JsonLines:
    """An append-only JSON-lines file written in whole lines (events, a dialogue's turns)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)
        self._pending: list[str] = []

    def append(self, row: Mapping[str, Any]) -> None:
        self._pending.append(json.dumps(_json_safe(dict(row))) + "\n")

    def flush(self) -> None:
        if self._pending:
            data = "".join(self._pending).encode()
            self._pending.clear()
            while data:
                data = data[os.write(self._fd, data):]

    def close(self) -> None:
        self.flush()
        os.close(self._fd)


def _csv_lines(block: np.ndarray) -> bytes:
    """Rows of floats as CSV lines without a header (``nan`` for NaN)."""
    import pyarrow as pa
    from pyarrow import csv

    table = pa.Table.from_arrays([pa.array(block[:, j]) for j in range(block.shape[1])],
                                 names=[str(j) for j in range(block.shape[1])])
    sink = pa.BufferOutputStream()
    csv.write_csv(table, sink, csv.WriteOptions(include_header=False))
    return sink.getvalue().to_pybytes()


class Recorder:
    """Writes a recording while a session runs.

    Parameters
    ----------
    path
        Recording directory (created; must not already hold a recording).
    config
        The session's full configuration (JSON-able).
    state_names, action_names
        Variable names, stored in the config; the table columns are ``s_j``/``a_j``.
    window_columns
        Columns of the windows table.
    flush_seconds
        Longest time between flushes to the operating system.
    turns
        Also write turns.jsonl (a dialogue's texts).
    """

    def __init__(
        self,
        path: str | Path,
        config: Mapping[str, Any],
        state_names: Sequence[str],
        action_names: Sequence[str],
        window_columns: Sequence[str],
        flush_seconds: float = 0.5,
        turns: bool = False,
    ) -> None:
        self.path = Path(path)
        if (self.path / "config.json").exists():
            raise RecordingError(f"{self.path}: already holds a recording; choose a new path")
        self.path.mkdir(parents=True, exist_ok=True)
        self.flush_seconds = float(flush_seconds)
        self._ds, self._da = len(state_names), len(action_names)
        cols = ["i", "t", *[f"s_{j}" for j in range(self._ds)],
                *[f"a_{j}" for j in range(self._da)],
                *[f"s_next_{j}" for j in range(self._ds)], "reward", "episode"]
        self.config = dict(config)
        self.config.update(
            format_version=FORMAT_VERSION,
            state_names=list(state_names),
            action_names=list(action_names),
            created=time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        )
        self.write_config()
        self._transitions = _Table(self.path / "transitions.csv", cols)
        self._windows = _Table(self.path / "windows.csv", window_columns)
        self._events = _JsonLines(self.path / "events.jsonl")
        self._turns = _JsonLines(self.path / "turns.jsonl") if turns else None
        self._last_flush = time.monotonic()
        self.n_transitions = 0
        self.n_windows = 0
        self.n_events = 0
        self.n_turns = 0
        self.closed = False

    @property
    def window_columns(self) -> list[str]:
        """Columns of the windows table."""
        return self._windows.columns

    def write_config(self, **updates: Any) -> None:
        """Rewrite config.json atomically (a reader never sees half a file)."""
        self.config.update(updates)
        tmp = self.path / "config.json.tmp"
        tmp.write_text(json.dumps(_json_safe(self.config), indent=2) + "\n")
        os.replace(tmp, self.path / "config.json")

    def add_transitions(
        self,
        i0: int,
        t: np.ndarray | None,
        s: np.ndarray,
        a: np.ndarray | None,
        s_next: np.ndarray,
        reward: np.ndarray | None,
        episode: np.ndarray | None,
    ) -> None:
        """Append a block of transitions starting at global index ``i0``."""
        n = s.shape[0]
        if n == 0:
            return
        nan = np.full((n, 1), np.nan)
        parts = [
            np.arange(i0, i0 + n, dtype=np.float64)[:, None],
            nan if t is None else np.asarray(t, dtype=np.float64)[:, None],
            s,
            *([] if self._da == 0 else [a]),
            s_next,
            nan if reward is None else np.asarray(reward, dtype=np.float64)[:, None],
            nan if episode is None else np.asarray(episode, dtype=np.float64)[:, None],
        ]
        self._transitions.append(np.hstack(parts))
        self.n_transitions += n
        self._maybe_flush()

    def add_windows(self, table: Mapping[str, np.ndarray]) -> None:
        """Append windows given as columns (missing columns are written as NaN)."""
        n = len(next(iter(table.values()))) if table else 0
        if n == 0:
            return
        block = np.column_stack([
            np.asarray(table[c], dtype=np.float64) if c in table else np.full(n, np.nan)
            for c in self._windows.columns
        ])
        self._windows.append(block)
        self.n_windows += n
        self._maybe_flush()

    def add_event(self, event: Mapping[str, Any]) -> None:
        """Append one event (a JSON object; ``kind`` required)."""
        if "kind" not in event:
            raise ValueError("an event needs a 'kind'")
        self._events.append(event)
        self.n_events += 1
        self._maybe_flush()

    def add_turns(self, turns: Sequence[Mapping[str, Any]]) -> None:
        """Append a dialogue's turns (their texts and settings) to turns.jsonl."""
        if self._turns is None:
            raise ValueError("this recording was opened without turns")
        for turn in turns:
            self._turns.append(turn)
            self.n_turns += not turn.get("history")
        self._maybe_flush()

    def _maybe_flush(self) -> None:
        if time.monotonic() - self._last_flush >= self.flush_seconds:
            self.flush()

    def flush(self) -> None:
        """Hand everything pending to the operating system.

        Events first: a reader that reads the transitions, then the events, finds every
        event logged before the transitions it has (a follower places each at its row).
        """
        self._events.flush()
        if self._turns is not None:
            self._turns.flush()
        self._transitions.flush()
        self._windows.flush()
        self._last_flush = time.monotonic()

    def close(self, **config_updates: Any) -> None:
        """Flush, record final counts in the config, and close the files."""
        if self.closed:
            return
        self.flush()
        self._transitions.close()
        self._windows.close()
        self._events.close()
        counts = {"n_turns": self.n_turns} if self._turns is not None else {}
        if self._turns is not None:
            self._turns.close()
        self.write_config(n_transitions=self.n_transitions, n_windows=self.n_windows,
                          n_events=self.n_events, complete=True, **counts, **config_updates)
        self.closed = True


@dataclass
class Recording:
    """A recording read back: three tables, the configuration and what the reader found.

    ``complete`` is True only when the session closed the recording and the files hold all it
    promised; then ``warnings`` is empty.
    """

    path: Path
    config: dict[str, Any]
    transitions: pd.DataFrame
    windows: pd.DataFrame
    events: pd.DataFrame
    warnings: list[str]
    complete: bool = False
    #: A dialogue's turns (turns.jsonl), oldest first; None when the recording has none.
    turns: list[dict[str, Any]] | None = None

    @property
    def state_names(self) -> list[str]:
        """Names of the state variables (columns ``s_0..``)."""
        return list(self.config.get("state_names", []))

    @property
    def action_names(self) -> list[str]:
        """Names of the action variables (columns ``a_0..``)."""
        return list(self.config.get("action_names", []))


def _read_lines(path: Path, issues: list[str] | None = None) -> bytes:
    """A file's bytes, checked to be text; with ``issues``, a torn last line is dropped.

    Bytes that are not UTF-8 text (or NUL) raise RecordingError naming the file and line.
    """
    raw = path.read_bytes()
    try:
        raw.decode("utf-8")
        bad = raw.find(b"\x00")
    except UnicodeDecodeError as exc:
        bad = exc.start
    if bad >= 0:
        line = raw.count(b"\n", 0, bad) + 1
        raise RecordingError(f"{path}: line {line}: garbage bytes {raw[bad:bad + 4]!r}...")
    if issues is not None and raw and not raw.endswith(b"\n"):
        # Only a torn last line can lack its newline; drop it rather than misread it.
        raw = raw[: raw.rfind(b"\n") + 1]
        line = raw.count(b"\n") + 1
        issues.append(f"dropped a partly written last line (line {line})")
    return raw


def _read_csv(path: Path, issues: list[str]) -> pd.DataFrame:
    raw = _read_lines(path, issues)
    if not raw.strip():
        raise RecordingError(f"{path}: empty (not even a header)")
    # Every line holds as many fields as the header: count the commas line by line.
    arr = np.frombuffer(raw, np.uint8)
    commas = np.searchsorted(np.flatnonzero(arr == ord(",")), np.flatnonzero(arr == ord("\n")))
    fields = np.diff(commas, prepend=0) + 1
    wrong = np.flatnonzero(fields != fields[0])
    if wrong.size:
        raise RecordingError(f"{path}: line {wrong[0] + 1}: {fields[wrong[0]]} fields, "
                             f"the header has {fields[0]}")
    try:
        df = pd.read_csv(io.BytesIO(raw))
    except (ValueError, pd.errors.ParserError) as exc:
        raise RecordingError(f"{path}: not a recording table: {exc}") from None
    # Line k + 2 holds row k (line 1 is the header; no blank lines passed the field count).
    bad_rows = [
        int(np.argmax(bad)) for col in df.columns
        if not pd.api.types.is_numeric_dtype(df[col])
        and (bad := (pd.to_numeric(df[col], errors="coerce").isna() & df[col].notna())).any()
    ]
    if bad_rows:
        k = min(bad_rows)
        cell = next(v for v in df.iloc[k] if isinstance(v, str)
                    and pd.isna(pd.to_numeric(v, errors="coerce")))
        raise RecordingError(f"{path}: line {k + 2}: non-numeric cell {cell!r}")
    return df


def _first_line(flags: np.ndarray) -> int | None:
    """The 0-based index of the first True in ``flags``, or None."""
    idx = np.flatnonzero(flags)
    return int(idx[0]) if idx.size else None


def load_recording(path: str | Path) -> Recording:
    """Read a recording directory and check it against what its config.json promises.

    Parameters
    ----------
    path
        The recording directory.

    Returns
    -------
    Recording
        The tables and configuration. ``complete`` is True only when the session closed the
        recording and every check passed; otherwise ``warnings`` says, file by file, what is
        missing or out of order (a killed session's recording loads this way too).

    Raises
    ------
    RecordingError
        Not a directory, missing files, files that are not a recording's, garbage bytes or
        non-numeric cells (the message names the file and the line).
    """
    path = Path(path)
    if not path.exists():
        raise RecordingError(f"{path}: no such recording")
    if not path.is_dir():
        raise RecordingError(f"{path}: a recording is a directory holding {', '.join(_FILES)}")
    missing = [f for f in _FILES if not (path / f).exists()]
    if missing:
        raise RecordingError(f"{path}: not a recording (missing {', '.join(missing)})")
    try:
        config = json.loads(_read_lines(path / "config.json"))
    except json.JSONDecodeError as exc:
        raise RecordingError(
            f"{path}/config.json: line {exc.lineno}: not valid JSON ({exc.msg})"
        ) from None
    if not isinstance(config, dict) or config.get("format_version") != FORMAT_VERSION:
        found = config.get("format_version") if isinstance(config, dict) else config
        raise RecordingError(
            f"{path}: not an IDT Desk recording of format {FORMAT_VERSION} "
            f"(config.json says format_version {found!r})"
        )
    issues: dict[str, list[str]] = {name: [] for name in _FILES[1:]}
    transitions = _read_csv(path / "transitions.csv", issues["transitions.csv"])
    windows = _read_csv(path / "windows.csv", issues["windows.csv"])
    if "i" not in transitions.columns or "start" not in windows.columns:
        raise RecordingError(f"{path}: tables lack their index columns (i / start)")
    i = transitions["i"].to_numpy(np.float64)
    if (k := _first_line(np.diff(i) != 1)) is not None:
        issues["transitions.csv"].append(
            f"line {k + 3}: i jumps from {i[k]:.17g} to {i[k + 1]:.17g} (rows missing)")
    start_index = config.get("start_index")
    if len(i) and isinstance(start_index, int) and i[0] != start_index:
        issues["transitions.csv"].append(
            f"line 2: starts at i = {i[0]:.17g} but config.json says start_index {start_index}")
    start = windows["start"].to_numpy(np.float64)
    if (k := _first_line(~(np.diff(start) >= 0))) is not None:
        issues["windows.csv"].append(
            f"line {k + 3}: start goes back from {start[k]:.17g} to {start[k + 1]:.17g}")
    for col in ("i", "episode"):
        if col in transitions and transitions[col].notna().all():
            transitions[col] = transitions[col].astype(np.int64)
    for col in ("start", "end"):
        if col in windows and windows[col].notna().all():
            windows[col] = windows[col].astype(np.int64)
    events = pd.DataFrame(_read_json_lines(path / "events.jsonl", issues["events.jsonl"],
                                           "kind", "a JSON event"))
    turns = None
    if (path / "turns.jsonl").exists():
        issues["turns.jsonl"] = []
        turns = _read_json_lines(path / "turns.jsonl", issues["turns.jsonl"], "turn",
                                 "a JSON turn")
        if config.get("complete"):
            got = sum(not t.get("history") for t in turns)
            promised = config.get("n_turns")
            if isinstance(promised, int) and got != promised:
                issues["turns.jsonl"].append(
                    f"holds {got:,} turns but config.json promises {promised:,}")
    closed = bool(config.get("complete", False))
    if closed:
        # What the closing Recorder promised: the row counts, and the session's last event.
        for name, table, key, what in (
            ("transitions.csv", transitions, "n_transitions", "rows"),
            ("windows.csv", windows, "n_windows", "rows"),
            ("events.jsonl", events, "n_events", "events"),
        ):
            promised = config.get(key)
            if not isinstance(promised, int) or isinstance(promised, bool):
                if key != "n_events":  # written by a Recorder that did not count events
                    issues[name].append(f"config.json gives no {key}")
            elif len(table) != promised:
                issues[name].append(
                    f"holds {len(table):,} {what} but config.json promises {promised:,}")
        kinds = set(events["kind"]) if len(events) else set()
        if not kinds & set(_CLOSING_EVENTS):
            issues["events.jsonl"].append(
                "no session_end event, which a closed recording ends with")
    warnings = [f"{name}: {'; '.join(found)}" for name, found in issues.items() if found]
    complete = closed and not warnings
    if not closed:
        warnings.append("the session did not close this recording (killed or crashed)")
    return Recording(path, config, transitions, windows, events, warnings, complete, turns)


def newest_recording(path: str | Path) -> Path | None:
    """The recording to follow at ``path``: itself, or the run inside it that started last.

    ``path`` itself if its config.json is there, else the recording directly inside it that
    started last, else None (nothing written yet). Runs are ordered by when they started,
    never by a file's modification time: a writer rewrites config.json when it closes, so a
    run that has just finished would look newer than one still being written. See
    :func:`_runs_by_start` for what "started" is read from.
    """
    path = Path(path)
    if (path / "config.json").is_file():
        return path
    runs = _runs_by_start(path)
    return runs[-1][1] if runs else None


#: Start times already read, by (run directory, events.jsonl's device and inode): a run's
#: start never changes, so polling a folder costs a listing and two stats a run.
_STARTED: dict[tuple[str, int, int], float] = {}


def _runs_by_start(folder: str | Path) -> list[tuple[float, Path]]:
    """The recordings directly inside ``folder`` as (start time, path), the latest last.

    The start time is the wall-clock time of the first event in events.jsonl (a writer logs
    ``recording_start`` as it opens the recording; exact, and written once). Until that line
    is out, config.json's ``created`` (whole seconds), else config.json's modification time.
    """
    folder = Path(folder)
    try:
        entries = list(folder.iterdir())
    except OSError:
        return []
    runs = []
    for d in entries:
        config = d / "config.json"
        try:
            if not config.is_file():
                continue
            ev = (d / "events.jsonl").stat()
        except OSError:
            ev = None
        key = None if ev is None else (str(d), ev.st_dev, ev.st_ino)
        started = _STARTED.get(key) if key is not None else None
        if started is None:
            started = _first_event_wall(d / "events.jsonl") if ev is not None else None
            if started is not None:
                _STARTED[key] = started  # type: ignore[index]
            else:
                started = _created(config)
        if started is not None:
            runs.append((started, d))
    return sorted(runs, key=lambda r: (r[0], r[1].name))


def _first_event_wall(events: Path) -> float | None:
    """The ``wall`` time of the first event in ``events`` (None until a whole line is there)."""
    try:
        with open(events, "rb") as f:
            head = f.read(1 << 16)
        line, newline, _ = head.partition(b"\n")
        if not newline:
            return None
        wall = json.loads(line).get("wall")
    except (OSError, ValueError, AttributeError):
        return None
    return float(wall) if isinstance(wall, int | float) and math.isfinite(wall) else None


def _created(config: Path) -> float | None:
    """config.json's ``created`` time (whole seconds), else its modification time."""
    import datetime as dt

    try:
        created = json.loads(config.read_bytes()).get("created")
        return dt.datetime.strptime(str(created), "%Y-%m-%dT%H:%M:%S%z").timestamp()
    except (OSError, ValueError, AttributeError):
        pass
    try:
        return config.stat().st_mtime
    except OSError:
        return None


class RecordingTail:
    """Read a recording while it is being written: each :meth:`poll` returns what is new.

    Only whole lines are taken (a writer appends whole lines per flush, but a reader can
    still catch a write half done: the rest comes with the next poll). Events are polled
    before transitions, as a writer flushes them first, so every event logged before a
    transition has arrived by the time that transition has.

    Parameters
    ----------
    path
        The recording directory (it may not exist yet: :meth:`ready` says when it does).
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.config: dict[str, Any] = {}
        self.columns: list[str] = []
        self._offset = {"transitions.csv": 0, "events.jsonl": 0}
        self._partial = {"transitions.csv": b"", "events.jsonl": b""}
        #: Monotonic time new bytes last arrived (or the tail was made).
        self.last_data = time.monotonic()
        #: A closing event (``session_end`` / ``recording_stop``) has been read.
        self.ended = False
        #: Transitions read so far.
        self.n_read = 0
        self._promised: int | None = None

    def ready(self) -> bool:
        """Whether config.json and the transitions' header are there (the writer started)."""
        if self.columns:
            return True
        try:
            self.config = json.loads((self.path / "config.json").read_bytes())
            with open(self.path / "transitions.csv", "rb") as f:
                header = f.readline()
        except (OSError, json.JSONDecodeError):
            return False
        if not header.endswith(b"\n"):
            return False
        if self.config.get("format_version") != FORMAT_VERSION:
            raise RecordingError(f"{self.path}: not an IDT Desk recording of format "
                                 f"{FORMAT_VERSION}")
        self.columns = header.decode().strip().split(",")
        self._offset["transitions.csv"] = len(header)
        return True

    def _new_lines(self, name: str) -> bytes:
        """The whole lines appended to ``name`` since the last call."""
        try:
            with open(self.path / name, "rb") as f:
                f.seek(self._offset[name])
                raw = f.read()
        except FileNotFoundError:
            raise RecordingError(f"{self.path}: {name} is gone (deleted or moved while "
                                 "followed)") from None
        if not raw:
            return b""
        self._offset[name] += len(raw)
        self.last_data = time.monotonic()
        raw = self._partial[name] + raw
        cut = raw.rfind(b"\n") + 1
        self._partial[name] = raw[cut:]
        return raw[:cut]

    def poll(self) -> tuple[np.ndarray, list[dict[str, Any]]]:
        """New transitions (rows × :attr:`columns`, float) and new events since the last poll."""
        if not self.ready():
            return np.empty((0, 0)), []
        events = []
        for line in self._new_lines("events.jsonl").split(b"\n"):
            if line.strip():
                ev = json.loads(line)
                events.append(ev)
                self.ended = self.ended or ev.get("kind") in _CLOSING_EVENTS
        raw = self._new_lines("transitions.csv")
        if not raw:
            return np.empty((0, len(self.columns))), events
        rows = pd.read_csv(io.BytesIO(raw), header=None, names=self.columns,
                           dtype=np.float64, engine="c").to_numpy()
        self.n_read += len(rows)
        return rows, events

    @property
    def finished(self) -> bool:
        """The writer closed the recording and every transition it wrote has been read.

        The closing event is written before the last transitions are flushed and config.json
        promises their count last of all: a follower that stopped at the event would miss
        the tail of the run.
        """
        if not self.ended:
            return False
        if self._promised is None:
            try:
                config = json.loads((self.path / "config.json").read_bytes())
            except (OSError, json.JSONDecodeError):
                return False  # being rewritten: ask again at the next poll
            if not config.get("complete") or not isinstance(config.get("n_transitions"), int):
                return False
            self._promised = int(config["n_transitions"])
        return self.n_read >= self._promised

    def silent_for(self) -> float:
        """Seconds since new bytes last arrived."""
        return time.monotonic() - self.last_data


def _read_json_lines(path: Path, issues: list[str], key: str, what: str) -> list[dict]:
    """The JSON objects of a JSON-lines file, each required to have ``key``."""
    rows = []
    for k, line in enumerate(_read_lines(path, issues).split(b"\n")):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError:
            row = None
        if not isinstance(row, dict) or key not in row:
            raise RecordingError(f"{path}: line {k + 1}: not {what}") from None
        rows.append(row)
    return rows


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
        if fmt == "csv":
            df.to_csv(p, index=False)
        else:
            if name in ("events", "turns"):
                # Parameters are nested dicts: store them as JSON text in Parquet.
                df = df.copy()
                for col in df.columns:
                    if df[col].map(lambda v: isinstance(v, dict | list)).any():
                        df[col] = df[col].map(lambda v: json.dumps(v) if v is not None else None)
            df.to_parquet(p, index=False)
        paths.append(p)
    cfg = out / "config.json"
    cfg.write_text(json.dumps(rec.config, indent=2) + "\n")
    paths.append(cfg)
    return paths
