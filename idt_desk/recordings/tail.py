"""Following a recording another process is writing: whole lines only, events first.

The recording may be on this machine or on a server (``ssh://[user@]host[:port]/path``, over
SFTP: :mod:`idt_desk.recordings.remote`); either way its files are read from the last byte
read on, through a :class:`~idt_desk.recordings.fs.Files`.
"""

from __future__ import annotations

import io
import json
import posixpath
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from idt_desk.recordings.arrows import Frames, decode_rows, transition_columns
from idt_desk.recordings.checks import check_columns, check_event, parse_config
from idt_desk.recordings.files import (
    CLOSING_EVENTS,
    FORMAT_VERSION,
    HEAD_BYTES,
    MAX_LINES,
    TRANSITIONS,
    RecordingError,
    parse_json,
)
from idt_desk.recordings.fs import CONFIG_BYTES, Files, LocalFiles, Outside
from idt_desk.recordings.runs import open_files
from idt_desk.words import shown

__all__ = ["RecordingTail"]


#: The most bytes of a file one poll reads (a long finished run is taken in several polls).
POLL_BYTES = 64 << 20

#: Bytes before the offset read again at each poll: were they to differ from those read
#: before, the file was truncated or replaced under the follower (said, never misread).
OVERLAP = 64


class RecordingTail:
    """Read a recording while it is being written: each :meth:`poll` returns what is new.

    Only whole lines, or whole Arrow messages of a transitions log, are taken (a writer
    appends whole ones per flush, but a reader can still catch a write half done: the rest
    comes with the next poll). Events are polled
    before transitions, as a writer flushes them first, so every event logged before a
    transition has arrived by the time that transition has. A writer with nothing to write
    touches its transitions file once a second (its heartbeat): :meth:`silent_for` counts from
    the latest data or heartbeat, :meth:`idle_for` from the latest data.

    A file truncated or replaced while followed (its bytes before the offset changed, or it
    is shorter than the offset) ends the follower with one line saying so: rows read from a
    stale offset would be another run's, or torn. Every file is read through
    :class:`~idt_desk.recordings.fs.Files`: a link leading outside the recording, even one
    swapped in after the first poll, is refused, never read.

    Parameters
    ----------
    path
        The recording directory (it may not exist yet: :meth:`ready` says when it does), or
        ``ssh://[user@]host[:port]/path`` (it must exist: the connection is opened here, and
        :class:`~idt_desk.errors.InputError` says in one line why it could not be).
    files
        The files to read it through (default: this machine's, or the server's for a URL).
    """

    def __init__(self, path: str | Path, files: Files | None = None) -> None:
        remote = isinstance(path, str) and path.startswith("ssh://")
        #: What the recording is called in messages (its path, or its URL).
        self.path: Path | str = path if remote else Path(path)
        self.files: Files = files if files is not None else \
            open_files(path) if remote else LocalFiles(path)
        self.config: dict[str, Any] = {}
        self.columns: list[str] = []
        #: The transitions file: transitions.arrows (format 2) or transitions.csv (1).
        self.table = TRANSITIONS[FORMAT_VERSION]
        self._frames: Frames | None = None  # the Arrow log's messages (format 2)
        #: The ``i`` the next row read must have (None: before the first).
        self._next_i: float | None = None
        self._offset = {"events.jsonl": 0}
        self._partial = {"events.jsonl": b""}
        self._before = {"events.jsonl": b""}  # the OVERLAP bytes
        #: Monotonic time new bytes last arrived (or the tail was made).
        self.last_data = time.monotonic()
        #: Monotonic time the writer was last seen alive (data or a heartbeat).
        self.last_beat = self.last_data
        self._mtime: float | None = None
        #: A closing event (``session_end`` / ``recording_stop``) has been read.
        self.ended = False
        #: Transitions read so far.
        self.n_read = 0
        self._promised: int | None = None
        self._n_events = 0  # events lines read (to name a bad one)
        #: Why a server's files could not be read at the last poll (None: they could).
        self.connection_problem: str | None = None
        #: When the connection was found lost (monotonic), None while it is up.
        self.lost_since: float | None = None

    def ready(self) -> bool:
        """Whether config.json and the transitions' header are there (the writer started).

        Raises
        ------
        RecordingError
            One of its files is a link leading outside the recording, or not a regular
            file, or its config or header is not a recording's.
        """
        if self.columns:
            return True
        names = [self._file(n) for n in ("config.json", "events.jsonl")]
        if None in self.files.stat_many(names):
            return False  # not all written yet
        try:
            raw = self.files.read(names[0], 0, CONFIG_BYTES)
            self.files.read(names[1], 0, 0)  # a link or a FIFO in its place: said now
            json.loads(raw)
        except Outside as exc:
            raise RecordingError(f"{exc}: a recording's files must be its own; copy the file "
                                 "in instead") from None
        except FileNotFoundError:
            return False  # not all written yet
        except json.JSONDecodeError:
            return False  # being written
        except OSError as exc:
            raise RecordingError(f"{shown(self.path)}: cannot be read ({exc})") from None
        except (ValueError, RecursionError):
            pass  # the config's check says what is wrong with it
        config = parse_config(raw, str(self.path))
        table = TRANSITIONS[config["format_version"]]
        try:
            head = self.files.read(self._file(table), 0, HEAD_BYTES)
        except Outside as exc:
            raise RecordingError(f"{exc}: a recording's files must be its own; copy the file "
                                 "in instead") from None
        except FileNotFoundError:
            return False  # not written yet
        except OSError as exc:
            raise RecordingError(f"{shown(self.path)}: cannot be read ({exc})") from None
        where = f"{self.path}/{table}"
        if table.endswith(".csv"):
            header = head[:head.find(b"\n") + 1] or head
            if not header.endswith(b"\n"):
                if len(header) >= HEAD_BYTES:
                    raise RecordingError(f"{shown(self.path)}/{table}: its first line is "
                                         f"longer than {HEAD_BYTES // 2**20} MiB: not a table")
                return False
            columns = header.decode(errors="replace").strip().split(",")
            check_columns(columns, config, where)
        else:
            probe = Frames(where)
            probe.feed(head)
            if not probe.schema_bytes:
                return False  # the schema is being written
            header = probe.schema_bytes
            columns = transition_columns(len(config.get("state_names", [])),
                                         len(config.get("action_names", [])))
            self._frames = Frames(where)
            self._frames.feed(header)
        # The header (a CSV's first line, the log's schema) is read: the rows start after it.
        self.config, self.columns, self.table = config, columns, table
        self._offset[table], self._partial[table] = len(header), b""
        self._before[table] = header[-OVERLAP:]
        return True

    def _file(self, name: str) -> str:
        return posixpath.join(self.files.root, name)

    def _new_lines(self, name: str) -> bytes:
        """The whole lines appended to ``name`` since the last call (the log's: all bytes).

        Raises
        ------
        RecordingError
            The file was truncated or replaced, is gone, or became a link leading out.
        """
        before = self._before[name]
        start = self._offset[name] - len(before)
        try:
            raw = self.files.read(self._file(name), start, POLL_BYTES + len(before))
            self.connection_problem = self.lost_since = None
        except ConnectionError as exc:
            # A server's connection went away: nothing new this poll; the next connects
            # again (the follower ends if it stays gone: ReplaySource.LOST_GRACE).
            self._lost(exc)
            return b""
        except FileNotFoundError:
            raise RecordingError(f"{shown(self.path)}: {name} is gone (deleted or moved while "
                                 "followed)") from None
        except Outside as exc:
            raise RecordingError(f"{exc}: a recording's files must be its own") from None
        except OSError as exc:
            raise RecordingError(f"{shown(self.path)}/{name}: cannot be read ({exc})") from None
        if raw[:len(before)] != before:
            raise RecordingError(
                f"{shown(self.path)}/{name}: the recording was truncated or replaced while "
                f"followed (its bytes before byte {self._offset[name]:,} changed); the "
                f"{self.n_read:,} transitions read before are kept, nothing after is read")
        raw = raw[len(before):]
        if not raw:
            return b""
        self._offset[name] += len(raw)
        self._before[name] = (before + raw)[-OVERLAP:]
        self.last_data = time.monotonic()
        if name == self.table and self._frames is not None:
            return raw  # whole messages are the log's Frames' to find
        raw = self._partial[name] + raw
        cut = raw.rfind(b"\n") + 1
        self._partial[name] = raw[cut:]
        return raw[:cut]

    def poll(self) -> tuple[np.ndarray, list[dict[str, Any]]]:
        """New transitions (rows × :attr:`columns`, float) and new events since the last poll."""
        if not self.ready():
            return np.empty((0, 0)), []
        if self._frames is not None and self._frames.broken is not None:
            # A block failed its checksum: the rows before it were handed on at the last
            # poll; the follow ends here, saying which block (never a wait for more).
            raise RecordingError(f"{shown(self.path)}: {self._frames.broken}")
        self._beat()
        events = []
        for line in self._new_lines("events.jsonl").split(b"\n"):
            if line.strip():
                self._n_events += 1
                where = f"{self.path}/events.jsonl: line {self._n_events}"
                if self._n_events > MAX_LINES:
                    raise RecordingError(f"{where}: more than the {MAX_LINES:,} events a "
                                         "recording's are read to: read no further")
                ev = parse_json(line, where)
                if not isinstance(ev, dict):
                    raise RecordingError(f"{where}: not a JSON event")
                check_event(ev, where)
                events.append(ev)
                self.ended = self.ended or ev.get("kind") in CLOSING_EVENTS
        raw = self._new_lines(self.table)
        if self._frames is not None and raw:
            raw = self._frames.feed(raw)  # its whole messages
        if not raw:
            return np.empty((0, len(self.columns))), events
        if self._frames is not None:
            rows = decode_rows(self._frames, raw, self.columns).to_numpy(np.float64)
        else:
            try:
                rows = pd.read_csv(io.BytesIO(raw), header=None, names=self.columns,
                                   dtype=np.float64, engine="c").to_numpy()
            except (ValueError, pd.errors.ParserError) as exc:
                raise RecordingError(f"{self.path}/{self.table}: rows after transition "
                                     f"{self.n_read:,}: not numbers ({exc})") from None
        if len(rows):
            # The rows go on from the last ones read, one transition each: a log whose
            # blocks were reordered, duplicated or spliced from another run (``i`` starting
            # again at 0) is refused where it jumps, as load_recording flags it.
            i = rows[:, 0]
            first = self._next_i if self._next_i is not None else i[0]
            jump = np.flatnonzero(np.diff(np.concatenate([[first - 1], i])) != 1)
            if jump.size:
                k = int(jump[0])
                before = first - 1 if k == 0 else i[k - 1]
                raise RecordingError(
                    f"{shown(self.path)}/{self.table}: transition i jumps from "
                    f"{before:.17g} to {i[k]:.17g} (rows reordered, repeated or from another "
                    f"run): the {self.n_read + k:,} transitions read before are kept, nothing "
                    "after is read")
            self._next_i = float(i[-1]) + 1
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
                raw = self.files.read(self._file("config.json"), 0, CONFIG_BYTES)
            except OSError:
                return False  # not there for a moment (a server's): ask again at the next poll
            try:
                config = json.loads(raw)
            except (ValueError, RecursionError):
                config = None
            if not isinstance(config, dict):
                # A writer replaces config.json whole (a new file renamed over it), so what
                # is read is never half of one: garbage is garbage, said at once (a follower
                # waited out its silence on it).
                raise RecordingError(f"{shown(self.path)}/config.json: replaced by something "
                                     "that is not a recording's config while followed; the "
                                     f"{self.n_read:,} transitions read are kept")
            if not config.get("complete") or not isinstance(config.get("n_transitions"), int):
                return False
            self._promised = int(config["n_transitions"])
        return self.n_read >= self._promised

    def _beat(self) -> None:
        """Note the writer's heartbeat: the transitions file's modification time moved."""
        try:
            st = self.files.stat(self._file(self.table))
        except ConnectionError as exc:
            self._lost(exc)
            return
        if st is None:
            return
        mtime = st[0]
        if mtime != self._mtime:
            if self._mtime is not None:
                self.last_beat = time.monotonic()
            self._mtime = mtime

    def _lost(self, exc: ConnectionError) -> None:
        self.connection_problem = str(exc)
        if self.lost_since is None:
            self.lost_since = time.monotonic()

    def silent_for(self) -> float:
        """Seconds since the writer was last seen alive: new bytes or its heartbeat."""
        self._beat()
        return time.monotonic() - max(self.last_data, self.last_beat)

    def idle_for(self) -> float:
        """Seconds since new bytes last arrived (an idle writer still beats)."""
        return time.monotonic() - self.last_data

    def interrupt(self) -> None:
        """End a read under way in another thread (a server's; it counts as nothing new)."""
        interrupt = getattr(self.files, "interrupt", None)
        if interrupt is not None:
            interrupt()

    def close(self) -> None:
        """Let the files go (a server's connection is closed)."""
        close = getattr(self.files, "close", None)
        if close is not None:
            close()
