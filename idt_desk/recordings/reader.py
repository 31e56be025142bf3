"""Reading a recording back: checked against what its config promises, damage named."""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from idt_desk.recordings.arrows import read_transitions, transition_columns
from idt_desk.recordings.checks import (
    check_columns,
    check_event,
    check_regular,
    check_turn,
    read_config,
)
from idt_desk.recordings.files import (
    CLOSING_EVENTS,
    FILES,
    FORMAT_VERSION,
    TRANSITIONS,
    RecordingError,
    first_line,
    in_transition_order,
    read_csv,
    read_json_lines,
)
from idt_desk.recordings.fs import CONFIG_BYTES, LocalFiles, within
from idt_desk.words import shown

if TYPE_CHECKING:  # imported where a recording is loaded: following a folder needs none
    import pandas as pd

__all__ = ["Recording", "load_recording", "newest_recording", "recording_size",
           "runs_by_start"]


@dataclass
class Recording:
    """A recording read back: three tables, the configuration and what the reader found.

    ``complete`` is True only when the session closed the recording, the files hold all it
    promised and it did not end in error; then ``warnings`` is empty.
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
    #: Why the session ended in error (its ``session_end`` event says so), or None.
    error: str | None = None
    #: What the reader says that is no damage: a log written before its blocks had
    #: checksums, which loads as before and cannot be verified.
    notes: list[str] = field(default_factory=list)

    @property
    def state_names(self) -> list[str]:
        """Names of the state variables (columns ``s_0..``)."""
        return list(self.config.get("state_names", []))

    @property
    def action_names(self) -> list[str]:
        """Names of the action variables (columns ``a_0..``)."""
        return list(self.config.get("action_names", []))


def _not_a_recording(path: Path, missing: list[str]) -> str:
    """Why ``path`` is not a recording, and, for an export of one, what to do instead."""
    try:
        config = json.loads((path / "config.json").read_text())
    except (OSError, ValueError):
        config = None
    if isinstance(config, dict) and config.get("export_format"):
        src = config.get("exported_from")
        fmt = config["export_format"]
        return (f"{path}: an export of a recording ({fmt} tables), not a recording: replay "
                + (f"the recording it was exported from, {src}" if src else "its recording")
                + (f", or analyze its transitions: idt-desk analyze {path}/transitions.csv "
                   "--out DIR" if fmt == "csv" else ", or read its tables with pandas"))
    return f"{path}: not a recording (missing {', '.join(missing)})"


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
    try:
        os.stat(path)
    except FileNotFoundError:
        raise RecordingError(f"{shown(path, 300)}: no such recording") from None
    except OSError as exc:  # a name too long, a folder not to be looked in
        raise RecordingError(f"{shown(path, 300)}: cannot be read "
                             f"({exc.strerror or exc})") from None
    if not path.is_dir():
        raise RecordingError(f"{path}: a recording is a directory holding config.json, "
                             f"{TRANSITIONS[FORMAT_VERSION]}, windows.csv and events.jsonl")
    missing = [f for f in FILES if not (path / f).exists()]
    if not any((path / f).exists() for f in TRANSITIONS.values()):
        missing.insert(1, TRANSITIONS[FORMAT_VERSION])
    if missing:
        raise RecordingError(_not_a_recording(path, missing))
    for name in FILES:
        check_regular(path / name)
    config = read_config(path)
    name = TRANSITIONS[config["format_version"]]
    if not (path / name).exists():
        raise RecordingError(f"{path}: a recording of format {config['format_version']} "
                             f"without its {name}")
    check_regular(path / name)
    if (path / "turns.jsonl").exists():
        check_regular(path / "turns.jsonl")
    issues: dict[str, list[str]] = {name: [], "windows.csv": [], "events.jsonl": []}
    notes: list[str] = []
    transitions = read_table_of(path / name, config, issues[name], notes)
    windows = read_csv(path / "windows.csv", issues["windows.csv"])
    if "i" not in transitions.columns or "start" not in windows.columns:
        raise RecordingError(f"{path}: tables lack their index columns (i / start)")
    i = transitions["i"].to_numpy(np.float64)
    if (k := first_line(np.diff(i) != 1)) is not None:
        issues[name].append(f"{row_place(name, k + 1)}: i jumps from {i[k]:.17g} to "
                            f"{i[k + 1]:.17g} (rows missing)")
    start_index = config.get("start_index")
    if len(i) and isinstance(start_index, int) and i[0] != start_index:
        issues[name].append(f"{row_place(name, 0)}: starts at i = {i[0]:.17g} but "
                            f"config.json says start_index {start_index}")
    start = windows["start"].to_numpy(np.float64)
    if (k := first_line(~(np.diff(start) >= 0))) is not None:
        issues["windows.csv"].append(
            f"line {k + 3}: start goes back from {start[k]:.17g} to {start[k + 1]:.17g}")
    for file, table, cols in ((name, transitions, ("i", "episode")),
                              ("windows.csv", windows, ("start", "end"))):
        for col in cols:
            if col not in table or not table[col].notna().all():
                continue
            x = table[col].to_numpy(np.float64)
            # Whole numbers a float holds exactly are counts; anything else is kept as read.
            if (k := first_line((x != np.round(x)) | (np.abs(x) > 2.0**53))) is not None:
                issues[file].append(f"{row_place(file, k)}: {col} {x[k]:.17g} is not a "
                                    "whole number (the column is kept as read)")
            else:
                table[col] = x.astype(np.int64)
    import pandas as pd

    events = pd.DataFrame(in_transition_order(read_json_lines(
        path / "events.jsonl", issues["events.jsonl"], "kind", "a JSON event", check_event)))
    turns = None
    if (path / "turns.jsonl").exists():
        issues["turns.jsonl"] = []
        turns = read_json_lines(path / "turns.jsonl", issues["turns.jsonl"], "turn",
                                 "a JSON turn", check_turn)
        if config.get("complete"):
            got = sum(not t.get("history") for t in turns)
            promised = config.get("n_turns")
            if isinstance(promised, int) and got != promised:
                issues["turns.jsonl"].append(
                    f"holds {got:,} turns but config.json promises {promised:,}")
    closed = bool(config.get("complete", False))
    if closed:
        # What the closing writer promised: the row counts, and the session's last event.
        for file, table, key, what in (
            (name, transitions, "n_transitions", "rows"),
            ("windows.csv", windows, "n_windows", "rows"),
            ("events.jsonl", events, "n_events", "events"),
        ):
            promised = config.get(key)
            if not isinstance(promised, int) or isinstance(promised, bool):
                if key != "n_events":  # written by a writer that did not count events
                    issues[file].append(f"config.json gives no {key}")
            elif len(table) != promised:
                issues[file].append(
                    f"holds {len(table):,} {what} but config.json promises {promised:,}")
        kinds = set(events["kind"]) if len(events) else set()
        if not kinds & set(CLOSING_EVENTS):
            issues["events.jsonl"].append(
                "no session_end event, which a closed recording ends with")
    error = _ended_in_error(events)
    warnings = [f"{file}: {'; '.join(found)}" for file, found in issues.items() if found]
    complete = closed and not warnings and error is None
    if not closed:
        warnings.append("the session did not close this recording (killed or crashed)")
    if error is not None:
        warnings.append(f"the session ended in error: {error}")
    return Recording(path, config, transitions, windows, events, warnings, complete, turns,
                     error, [f"{name}: {note}" for note in notes])


def row_place(file: str, k: int) -> str:
    """Where row ``k`` (0-based) of a recording's table is: a CSV's line, a log's row."""
    return f"line {k + 2}" if file.endswith(".csv") else f"row {k + 1:,}"


def read_table_of(path: Path, config: dict[str, Any], issues: list[str],
                  notes: list[str] | None = None) -> pd.DataFrame:
    """A recording's transitions, from its Arrow log or its CSV table, columns checked.

    ``notes`` takes what is no damage (blocks that cannot be verified; None: ``issues``).
    """
    if path.suffix == ".csv":
        table = read_csv(path, issues)
        check_columns(list(table.columns), config, str(path))
    else:
        n_s, n_a = len(config.get("state_names", [])), len(config.get("action_names", []))
        table = read_transitions(path, transition_columns(n_s, n_a), issues, notes)
    _check_values(table, config, path)
    return table


def _check_values(table: pd.DataFrame, config: dict[str, Any], path: Path) -> None:
    """S, A and S' finite, as every reader needs them (a replay refuses them at their row)."""
    n_s, n_a = len(config.get("state_names", [])), len(config.get("action_names", []))
    cols = [*[f"s_{j}" for j in range(n_s)], *[f"a_{j}" for j in range(n_a)],
            *[f"s_next_{j}" for j in range(n_s)]]
    values = table[cols].to_numpy(np.float64)
    bad = ~np.isfinite(values)
    if bad.any():
        row, col = (int(x) for x in np.argwhere(bad)[0])
        raise RecordingError(f"{path}: {row_place(path.name, row)}: {cols[col]} is "
                             f"{values[row, col]}; "
                             "the IDT metrics need finite numbers")


def _ended_in_error(events: pd.DataFrame) -> str | None:
    """The error a recording's ``session_end`` reports (state ``error``), or None."""
    if not len(events) or "state" not in events:
        return None
    end = events[events["kind"] == "session_end"]
    if not len(end) or end["state"].iloc[-1] != "error":
        return None
    msg = end["error"].iloc[-1] if "error" in end else None
    return str(msg) if isinstance(msg, str) and msg else "no reason given"


def recorded_speed(path: str | Path) -> float | None:
    """The speed a recording's session started at: a multiple of real time, None for max.

    A replay defaults to it (a session recorded at 10× replays at 10×). Raises
    :class:`RecordingError` (one line) when ``path`` is no readable recording.
    """
    session = read_config(Path(path)).get("session")
    speed = session.get("speed", 1.0) if isinstance(session, dict) else 1.0
    if speed is None:
        return None
    if not isinstance(speed, int | float) or isinstance(speed, bool) or \
            not math.isfinite(speed) or speed <= 0:
        raise RecordingError(f"{path}: config.json's session speed {speed!r} is not a "
                             "positive multiple of real time")
    return float(speed)


def recording_size(path: str | Path) -> tuple[int, str]:
    """Bytes a recording's files take on disk so far, and the same in words ("47.6 MB").

    A recording at maximum speed grows fast (the pendulum: about 19 MB a second of wall
    time), so the window and ``idt-desk run`` say how large it is.
    """
    total = 0
    try:
        with os.scandir(path) as entries:
            for entry in entries:
                if entry.is_file(follow_symlinks=False):
                    total += entry.stat(follow_symlinks=False).st_size
    except OSError:
        pass
    size = float(total)
    for unit in ("bytes", "kB", "MB", "GB"):
        if size < 1000 or unit == "GB":
            return total, (f"{total:,} bytes" if unit == "bytes" else f"{size:,.1f} {unit}")
        size /= 1000
    return total, f"{total:,} bytes"  # not reached


def newest_recording(path: str | Path, outside: list[str] | None = None) -> Path | None:
    """The recording to follow at ``path``: itself, or the run inside it that started last.

    ``outside`` takes the names of links leading outside ``path``, never followed
    (:func:`runs_by_start`).

    ``path`` itself if its config.json is there, else the recording directly inside it that
    started last, else None (nothing written yet). Runs are ordered by when they started,
    never by a file's modification time: a writer rewrites config.json when it closes, so a
    run that has just finished would look newer than one still being written. See
    :func:`runs_by_start` for what "started" is read from.
    """
    path = Path(path)
    if (path / "config.json").is_file():
        return path
    runs = runs_by_start(path, outside)
    return runs[-1][1] if runs else None


#: Start times already read, by (run directory, events.jsonl's device and inode): a run's
#: start never changes, so polling a folder costs a listing and two stats a run.
_STARTED: dict[tuple[str, int, int], float] = {}


def runs_by_start(folder: str | Path, outside: list[str] | None = None
                  ) -> list[tuple[float, Path]]:
    """The recordings directly inside ``folder`` as (start time, path), the latest last.

    The start time is the wall-clock time of the first event in events.jsonl (a writer logs
    ``recording_start`` as it opens the recording; exact, and written once). Until that line
    is out, config.json's ``created`` (whole seconds), else config.json's modification time.
    A link leading outside ``folder`` is not followed, nor anything in it opened (its name
    goes into ``outside``), as ``idt-desk runs`` does: watching a folder watches that folder.
    """
    folder = Path(folder)
    try:
        entries = list(folder.iterdir())
        real = os.path.realpath(folder)
    except OSError:
        return []
    runs = []
    for d in entries:
        if d.is_symlink() and not within(os.path.realpath(d), real):
            if outside is not None:
                outside.append(d.name)
            continue
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
    try:  # a FIFO would hang the listing, a link leading out read another's file: refused
        head = LocalFiles(events.parent).read(str(events), 0, 1 << 16)
        line, newline, _ = head.partition(b"\n")
        if not newline:
            return None
        wall = json.loads(line).get("wall")
    except (OSError, ValueError, AttributeError, RecursionError):
        return None
    return float(wall) if isinstance(wall, int | float) and math.isfinite(wall) else None


def _created(config: Path) -> float | None:
    """config.json's ``created`` time (whole seconds), else its modification time."""
    import datetime as dt

    try:
        created = json.loads(LocalFiles(config.parent).read(str(config), 0, CONFIG_BYTES)
                             ).get("created")
        return dt.datetime.strptime(str(created), "%Y-%m-%dT%H:%M:%S%z").timestamp()
    except (OSError, ValueError, AttributeError, RecursionError):
        pass
    try:
        return config.stat().st_mtime
    except OSError:
        return None
