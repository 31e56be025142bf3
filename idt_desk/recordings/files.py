"""The recording format: its files, its version, and reading and writing its lines.

Session recordings: written while running, append-only, read back in one line.

A recording is a directory::

    NAME/
      config.json        full configuration: source, settings, symbolisation, engine, seeds,
                         versions (rewritten atomically when it changes)
      transitions.arrows one row per transition: i, t, s_0.., a_0.., s_next_0.., reward,
                         episode; an Arrow IPC stream (:mod:`idt_desk.recordings.arrows`);
                         format 1 (before) held them as text in transitions.csv
      windows.csv        one row per metric window: start, end, P, H_f, H_b, dH, ... flags
      events.jsonl       one JSON object per event: perturbation/modulation on/off, alarms,
                         calibration, notes, errors
      turns.jsonl        a dialogue's texts, one JSON object per turn (``i``, ``turn``,
                         ``prompt``, ``reply``, ``next_prompt``, ``context_start``, whether
                         injected, backend, model, options); turns a recording started
                         mid-dialogue needs for later contexts come first with
                         ``history: true`` and no ``i`` (sources with ``metric_path = "turns"``)

Each other table is plain CSV (``pd.read_csv(path / "windows.csv")``) and the transitions use
the column names ``idt-desk analyze`` reads. Rows are appended in whole lines (the
transitions log: whole blocks) by the writer's
flusher thread at least every ``flush_seconds`` (0.5 s), whatever the loop is doing, so
killing the process, even with SIGKILL, loses at most the last flush interval and leaves
every file readable. A write that fails (a full disk) is cut back to the file's last whole
line and its rows are kept to be written again.
Floats are stored as float64 (text: their shortest round-trip form): they read back bit for bit,
which is what lets a replay reproduce the recorded windows exactly.

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

import contextlib
import json
import math
import os
import re
import secrets
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:  # imported where a table is read: a listing of runs reads none
    import pandas as pd

__all__ = [
    "CLOSING_EVENTS",
    "FILES",
    "FORMAT_VERSION",
    "HEAD_BYTES",
    "MAX_LINES",
    "NEW_FILE",
    "TRANSITIONS",
    "WINDOW_EVENTS",
    "AppendFile",
    "JsonLines",
    "RecordingError",
    "Table",
    "create_new",
    "first_line",
    "in_transition_order",
    "json_line",
    "json_safe",
    "nonblank_lines",
    "output_folder",
    "parse_json",
    "read_csv",
    "read_json_lines",
    "read_lines",
    "replace_whole",
    "text_head_problem",
]

#: How every writer opens a file: a new one (never a name that is there: a file it did not
#: write, or a link planted in its place, which a plain open would write through), never
#: through a link, not inherited by a child process.
NEW_FILE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


def create_new(path: Path, append: bool = False, mode: int = 0o644) -> int:
    """A descriptor of the new file ``path``, opened for writing (:data:`NEW_FILE`).

    ``append``: every write at the end (a file cut back after a failed write goes on from
    its new end).

    Raises
    ------
    FileExistsError
        Something is there already (a file, or a link, dangling or not).
    """
    return os.open(path, NEW_FILE | (os.O_APPEND if append else 0), mode)


def replace_whole(path: Path, data: bytes) -> None:
    """Replace ``path`` whole with ``data``: a reader sees the old file or the new, never half.

    The bytes go into a new file beside it under a name of its own (random, created
    exclusively: a planted temporary name is never written through), which is then renamed
    over ``path``. A rename replaces the name itself, so a link put in its place is replaced,
    not followed (a status rewritten through a link once overwrote the system's table of
    users).
    """
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(8)}.tmp")
    fd = create_new(tmp)
    try:
        with open(fd, "wb", closefd=True) as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def output_folder(path: Path, what: str) -> Path:
    """The folder a writer fills: made if missing; refused if a link or holding anything.

    ``what`` names the writer in the refusal ("export"). A folder that exists must be empty:
    a writer never writes beside files it did not write (a shared or unpacked folder may hold
    links aimed anywhere).

    Raises
    ------
    RecordingError
        It is a link, not a folder, not empty, or cannot be made (one line, naming it).
    """
    path = Path(path)
    try:
        path.mkdir(parents=True)
    except FileExistsError:
        if path.is_symlink() or not path.is_dir():
            raise RecordingError(f"{path}: not a folder of its own (a link or a file): "
                                 f"{what} writes into a new or an empty folder") from None
        try:
            with os.scandir(path) as entries:
                held = next(entries, None)
        except OSError as exc:
            raise RecordingError(f"{path}: cannot be read ({exc.strerror or exc})") from None
        if held is not None:
            raise RecordingError(f"{path}: holds {held.name!r} and maybe more: {what} writes "
                                 "into a new or an empty folder; choose another") from None
    except OSError as exc:
        raise RecordingError(f"{path}: cannot be made ({exc.strerror or exc})") from None
    return path


#: 2: transitions in an Arrow IPC stream (transitions.arrows); 1: in transitions.csv.
FORMAT_VERSION = 2


#: The transitions file of each format version: a text table (1), an Arrow IPC stream (2).
TRANSITIONS = {1: "transitions.csv", 2: "transitions.arrows"}

#: A recording's files besides its transitions (one of :data:`TRANSITIONS`).
FILES = ("config.json", "windows.csv", "events.jsonl")


#: The events a session writes just before it closes a recording.
CLOSING_EVENTS = ("session_end", "recording_stop")

#: Events a window's verdict makes, stamped at that window's end (Auto's switches too): their
#: ``i`` is the window's end, which on a dialogue's turn path is the turn itself.
WINDOW_EVENTS = frozenset({"baseline", "alarm_on", "alarm_off", "attributed", "detected",
                           "not_detected", "symbols_out_of_range", "symbols_in_range",
                           "symbols_recheck", "profile_check"})


def in_transition_order(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Events ordered by their transition ``i``; at one ``i``, the windows' events first.

    A session logs its loop's events (switches, notes) as they happen and a window's events
    when the window is judged, which waits for the detector's thresholds while they are
    fitted off the loop's thread: the file's order follows the wall clock. This is the
    order a loop that waited for its thresholds logs them in, whatever the timing (a
    window's events come before the loop's events at the transition where it ends). An
    event without an integer ``i`` keeps its place after the one before it.
    """
    keyed = []
    last = -1
    for pos, ev in enumerate(events):
        i = ev.get("i")
        if isinstance(i, int) and not isinstance(i, bool):
            last = i
        kind = ev.get("kind")
        window = kind in WINDOW_EVENTS or (
            str(kind).startswith("modulation_") and ev.get("auto") is True
            and "window_start" in ev)
        keyed.append(((last, 0 if window else 1, pos), ev))
    return [ev for _key, ev in sorted(keyed, key=lambda k: k[0])]


class RecordingError(ValueError):
    """A path that is not a readable recording; the message says what is wrong."""


def json_safe(v: Any) -> Any:
    """``v`` as JSON can hold it: NumPy numbers and arrays as Python's, paths as text."""
    if isinstance(v, dict):
        return {str(k): json_safe(x) for k, x in v.items()}
    if isinstance(v, list | tuple):
        return [json_safe(x) for x in v]
    if isinstance(v, np.ndarray):
        return json_safe(v.tolist())
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


class AppendFile:
    """An append-only file written in whole lines: rows are taken, then written on a flush.

    :meth:`take` (under the writer's lock: a swap, so the loop's appends never wait long)
    hands over what was appended; :meth:`stage` formats it into :attr:`carry`; :meth:`write`
    hands the carry to the operating system. A write that fails (a full disk) keeps the whole
    lines that fit, cuts the file back to the last of them, so it never ends in a torn line,
    and keeps the rest of the carry to write again: nothing taken is dropped.
    """

    def __init__(self, path: Path, header: bytes = b"") -> None:
        self.path = path
        try:  # a new file, or none: never through a name planted in the folder
            self._fd = create_new(path, append=True)
        except FileExistsError:
            raise RecordingError(f"{path}: is there already (a file this recording did not "
                                 "write, or a link): the recording is refused") from None
        #: Bytes taken from the pending rows but not yet written.
        self.carry = header
        self.write()  # a table's header at once: a follower can start reading

    @property
    def fd(self) -> int:
        """The file's descriptor (a heartbeat touches it)."""
        return self._fd

    @property
    def pending(self) -> bool:
        """Rows appended and not yet taken."""
        return bool(self._pending)

    def take(self) -> list[Any]:
        """What was appended since the last take (the caller holds the writer's lock)."""
        taken, self._pending = self._pending, []
        return taken

    def stage(self, taken: list[Any]) -> None:
        """Format ``taken`` onto :attr:`carry` (outside the lock; one flush at a time)."""
        raise NotImplementedError

    def write(self) -> None:
        """Write :attr:`carry` in whole lines, as many as fit.

        On an OSError (a full disk) the file is cut back to the last whole line written,
        that much of the carry is done, the rest kept for the next write, and the error
        re-raised: a backlog larger than the free space goes out as room appears.
        """
        data = self.carry
        if not data:
            return
        end = os.fstat(self._fd).st_size
        done = 0
        try:
            # Whole lines only: a kill leaves the file ending at a line boundary.
            while done < len(data):
                done += os.write(self._fd, data[done:])
        except OSError:
            whole = self.whole(data, done)
            with contextlib.suppress(OSError):  # a reader drops a torn last record anyway
                os.ftruncate(self._fd, end + whole)
            self.carry = data[whole:]
            raise
        self.carry = b""
        self.written()

    def whole(self, data: bytes, done: int) -> int:
        """Bytes of ``data`` up to the end of the last whole record within ``done``: a line."""
        return data.rfind(b"\n", 0, done) + 1

    def written(self) -> None:
        """The whole carry went out (a binary file forgets its records' ends)."""

    def kept(self) -> int:
        """Whole records the carry holds (lines)."""
        return self.carry.count(b"\n")

    def close(self) -> None:
        """Close the file (what was not written stays in :attr:`carry`)."""
        os.close(self._fd)


class Table(AppendFile):
    """An append-only CSV file written in whole lines.

    Blocks are kept as arrays and formatted when taken, all at once, by Arrow's CSV writer
    (C++; shortest round-trip digits, so every float reads back bit for bit): 5x less than
    numpy's savetxt per row, which matters when a session records at full speed.
    """

    def __init__(self, path: Path, columns: Sequence[str]) -> None:
        self.columns = list(columns)
        self._pending: list[np.ndarray] = []
        super().__init__(path, (",".join(self.columns) + "\n").encode())

    def append(self, block: np.ndarray) -> None:
        """Keep a block of rows for the next take (copied: the caller may reuse its array)."""
        if block.size:
            self._pending.append(np.array(block, dtype=np.float64))

    def stage(self, taken: list[Any]) -> None:
        """Format the taken blocks as CSV lines onto :attr:`carry`."""
        if taken:
            self.carry += _csv_lines(np.vstack(taken))


class JsonLines(AppendFile):
    """An append-only JSON-lines file written in whole lines (events, a dialogue's turns)."""

    def __init__(self, path: Path) -> None:
        self._pending: list[str] = []
        super().__init__(path)

    def append(self, row: Mapping[str, Any]) -> None:
        """Keep one object as its JSON line for the next take."""
        self._pending.append(json_line(row))

    def stage(self, taken: list[Any]) -> None:
        """Put the taken lines onto :attr:`carry`."""
        if taken:
            self.carry += "".join(taken).encode()


def json_line(row: Mapping[str, Any]) -> str:
    """One JSON object as a line; raises TypeError naming what JSON cannot hold."""
    try:
        return json.dumps(json_safe(dict(row)), allow_nan=False) + "\n"
    except (TypeError, ValueError) as exc:
        raise TypeError(f"not JSON: {exc}") from None


def _csv_lines(block: np.ndarray) -> bytes:
    """Rows of floats as CSV lines without a header (``nan`` for NaN)."""
    import pyarrow as pa
    from pyarrow import csv

    table = pa.Table.from_arrays([pa.array(block[:, j]) for j in range(block.shape[1])],
                                 names=[str(j) for j in range(block.shape[1])])
    sink = pa.BufferOutputStream()
    csv.write_csv(table, sink, csv.WriteOptions(include_header=False))
    return sink.getvalue().to_pybytes()


#: A table's first line (its header) is shorter than this; the head read to check it.
HEAD_BYTES = 1 << 20


def text_head_problem(path: Path) -> str | None:
    """What makes ``path`` no text table, read from its first MiB alone; None: nothing yet.

    Every reader asks before it reads a whole file: NUL bytes, or a first line longer than
    a MiB, end it in one line at the cost of a MiB (a 2 GB file of zeros was read whole, and
    grew tenfold in a parser). A file larger than half the memory now available is refused
    too, with its size: reading it would take the machine's memory, not the reader's.
    """
    import psutil

    with open(path, "rb") as f:
        head = f.read(HEAD_BYTES)
        size = os.fstat(f.fileno()).st_size
    if (bad := head.find(b"\x00")) >= 0:
        line = head.count(b"\n", 0, bad) + 1
        return f"line {line}: garbage bytes {head[bad:bad + 4]!r}... (not text)"
    if size > HEAD_BYTES and b"\n" not in head:
        return f"its first line is longer than {HEAD_BYTES // 2**20} MiB: not a table"
    free = psutil.virtual_memory().available
    if size > free // 2:
        return (f"{size / 2**30:.1f} GiB, more than half the memory available "
                f"({free / 2**30:.1f} GiB): too large to read")
    return None


def read_lines(path: Path, issues: list[str] | None = None) -> bytes:
    """A file's bytes, checked to be text; with ``issues``, a torn last line is dropped.

    Bytes that are not UTF-8 text (or NUL) raise RecordingError naming the file and line;
    the head is checked first (:func:`text_head_problem`), so a file that is no table is
    refused before it is read whole.
    """
    if (problem := text_head_problem(path)) is not None:
        raise RecordingError(f"{path}: {problem}")
    raw = path.read_bytes()
    try:
        if not raw.isascii():  # a table is ASCII: checked without decoding a copy
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


def read_csv(path: Path, issues: list[str]) -> pd.DataFrame:
    """A recording's table, every field of every line checked; one line naming a bad one."""
    import pandas as pd

    raw = read_lines(path, issues)
    if not raw or raw.isspace():
        raise RecordingError(f"{path}: empty (not even a header)")
    _check_fields(raw, path)
    # The checked lines are parsed from the file, the bytes let go first: holding both took
    # 2.5x the table's size. A writer may have added lines since: nrows stops at those read.
    rows = raw.count(b"\n") - 1
    del raw
    try:
        df = pd.read_csv(path, nrows=rows)
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


#: Bytes of a table checked at a time for its fields: the check's own arrays stay small
#: (a whole file's took more memory than the table it was reading).
_CHUNK = 1 << 20


def _check_fields(raw: bytes, path: Path) -> None:
    """Every line holds as many fields as the header: commas counted line by line."""
    want = None
    line = 1  # the file's line number of the chunk's first line
    pos = 0
    while pos < len(raw):
        end = raw.rfind(b"\n", pos, pos + _CHUNK) + 1
        if end <= pos:  # a line longer than a chunk: it ends at the next newline
            end = raw.find(b"\n", pos) + 1 or len(raw)
        arr = np.frombuffer(raw, np.uint8, count=end - pos, offset=pos)
        newlines = np.flatnonzero(arr == ord("\n"))
        fields = np.diff(np.searchsorted(np.flatnonzero(arr == ord(",")), newlines),
                         prepend=0) + 1
        if want is None:
            want = int(fields[0])
        wrong = np.flatnonzero(fields != want)
        if wrong.size:
            raise RecordingError(f"{path}: line {line + wrong[0]}: {fields[wrong[0]]} fields, "
                                 f"the header has {want}")
        line += len(newlines)
        pos = end


def first_line(flags: np.ndarray) -> int | None:
    """The 0-based index of the first True in ``flags``, or None."""
    idx = np.flatnonzero(flags)
    return int(idx[0]) if idx.size else None


def parse_json(raw: bytes | str, where: str) -> Any:
    """JSON a recording holds, or RecordingError naming ``where``, in one line.

    Not valid JSON (with its line), nesting too deep for the parser (a crafted
    ``[[[[…]]]]``) and integers too long for Python to convert (over 4,300 digits) are all
    the file's fault, said as such rather than raised as a parser's own error.
    """
    try:
        return json.loads(raw)
    except json.JSONDecodeError as exc:
        raise RecordingError(f"{where}: line {exc.lineno}: not valid JSON ({exc.msg})") from None
    except RecursionError:
        raise RecordingError(f"{where}: JSON nested too deeply to read") from None
    except ValueError as exc:  # an integer longer than int() converts
        raise RecordingError(f"{where}: {str(exc).splitlines()[0]}") from None


def read_json_lines(path: Path, issues: list[str], key: str, what: str,
                     check: Callable[[dict, str], None] | None = None) -> list[dict]:
    """The JSON objects of a JSON-lines file, each required to have ``key``.

    ``check(row, where)`` may refuse a row's fields (RecordingError naming ``where``, the
    file and line).
    """
    rows = []
    raw = read_lines(path, issues)
    if (n := raw.count(NEWLINE)) > MAX_LINES:
        raise RecordingError(f"{path}: {n:,} lines, more than the {MAX_LINES:,} a recording's "
                             f"{what.split()[-1]}s are read to: not read (a session's are its "
                             "switches, alarms and notes)")

    counted = [0, 1]  # (offset, its line number): lines counted once, front to back

    def where(at: int) -> str:
        counted[1] += raw.count(NEWLINE, counted[0], at)
        counted[0] = at
        return f"{path}: line {counted[1]}"

    for at, line in nonblank_lines(raw):
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            row = None  # said below: not ``what``
        except (RecursionError, ValueError):  # too deep, or a number too long
            parse_json(line, where(at))  # raises, saying which
        if not isinstance(row, dict) or key not in row:
            raise RecordingError(f"{where(at)}: not {what}") from None
        if check is not None:
            check(row, where(at))
        rows.append(row)
    return rows


#: A line holding something other than white space.
_NONBLANK = re.compile(rb"[^\n]*\S[^\n]*")


NEWLINE = b"\n"
#: Most lines of a JSON-lines file read (events, turns): a day of an RL session logs a few
#: thousand events; a million made every reader hang for minutes.
MAX_LINES = 200_000


def nonblank_lines(raw: bytes) -> Iterator[tuple[int, bytes]]:
    """(offset, line) of each line of ``raw`` that is not blank, found in C.

    64 MiB of blank lines (which a crafted events file held) are passed over without a
    Python step each.
    """
    for m in _NONBLANK.finditer(raw):
        yield m.start(), m.group()
