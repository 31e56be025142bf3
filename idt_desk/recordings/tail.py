"""Following a recording another process is writing: whole lines only, events first."""

from __future__ import annotations

import io
import json
import os
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from idt_desk.recordings._checks import check_columns, check_event, check_regular, read_config
from idt_desk.recordings._format import (
    _CLOSING_EVENTS,
    HEAD_BYTES,
    RecordingError,
    parse_json,
)

__all__ = ["RecordingTail"]


class RecordingTail:
    """Read a recording while it is being written: each :meth:`poll` returns what is new.

    Only whole lines are taken (a writer appends whole lines per flush, but a reader can
    still catch a write half done: the rest comes with the next poll). Events are polled
    before transitions, as a writer flushes them first, so every event logged before a
    transition has arrived by the time that transition has. A writer with nothing to write
    touches transitions.csv once a second (its heartbeat): :meth:`silent_for` counts from
    the latest data or heartbeat, :meth:`idle_for` from the latest data.

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
        #: Monotonic time the writer was last seen alive (data or a heartbeat).
        self.last_beat = self.last_data
        self._mtime: int | None = None
        #: A closing event (``session_end`` / ``recording_stop``) has been read.
        self.ended = False
        #: Transitions read so far.
        self.n_read = 0
        self._promised: int | None = None
        self._n_events = 0  # events lines read (to name a bad one)

    def ready(self) -> bool:
        """Whether config.json and the transitions' header are there (the writer started)."""
        if self.columns:
            return True
        try:
            for name in ("config.json", "transitions.csv", "events.jsonl"):
                check_regular(self.path / name)
        except RecordingError:
            if all(os.path.isfile(self.path / n) or not os.path.lexists(self.path / n)
                   for n in ("config.json", "transitions.csv", "events.jsonl")):
                return False  # not all written yet
            raise
        try:
            with open(self.path / "transitions.csv", "rb") as f:
                header = f.readline(HEAD_BYTES)
            raw = (self.path / "config.json").read_bytes()
            json.loads(raw)
        except (OSError, json.JSONDecodeError):
            return False  # not all written yet
        except (ValueError, RecursionError):
            pass  # read_config says what is wrong with it
        if not header.endswith(b"\n"):
            if len(header) >= HEAD_BYTES:
                raise RecordingError(f"{self.path}/transitions.csv: its first line is longer "
                                     f"than {HEAD_BYTES // 2**20} MiB: not a table")
            return False
        self.config = read_config(self.path)
        self.columns = header.decode(errors="replace").strip().split(",")
        check_columns(self.columns, self.config, f"{self.path}/transitions.csv")
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
        self._beat()
        events = []
        for line in self._new_lines("events.jsonl").split(b"\n"):
            if line.strip():
                self._n_events += 1
                where = f"{self.path}/events.jsonl: line {self._n_events}"
                ev = parse_json(line, where)
                if not isinstance(ev, dict):
                    raise RecordingError(f"{where}: not a JSON event")
                check_event(ev, where)
                events.append(ev)
                self.ended = self.ended or ev.get("kind") in _CLOSING_EVENTS
        raw = self._new_lines("transitions.csv")
        if not raw:
            return np.empty((0, len(self.columns))), events
        try:
            rows = pd.read_csv(io.BytesIO(raw), header=None, names=self.columns,
                               dtype=np.float64, engine="c").to_numpy()
        except (ValueError, pd.errors.ParserError) as exc:
            raise RecordingError(f"{self.path}/transitions.csv: rows after transition "
                                 f"{self.n_read:,}: not numbers ({exc})") from None
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
            except (OSError, ValueError, RecursionError):
                return False  # being rewritten: ask again at the next poll
            if not isinstance(config, dict):
                return False
            if not config.get("complete") or not isinstance(config.get("n_transitions"), int):
                return False
            self._promised = int(config["n_transitions"])
        return self.n_read >= self._promised

    def _beat(self) -> None:
        """Note the writer's heartbeat: transitions.csv's modification time moved."""
        try:
            mtime = os.stat(self.path / "transitions.csv").st_mtime_ns
        except OSError:
            return
        if mtime != self._mtime:
            if self._mtime is not None:
                self.last_beat = time.monotonic()
            self._mtime = mtime

    def silent_for(self) -> float:
        """Seconds since the writer was last seen alive: new bytes or its heartbeat."""
        self._beat()
        return time.monotonic() - max(self.last_data, self.last_beat)

    def idle_for(self) -> float:
        """Seconds since new bytes last arrived (an idle writer still beats)."""
        return time.monotonic() - self.last_data
