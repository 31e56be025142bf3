"""Writing a recording while a loop runs: whole lines, on disk within half a second.

The loop appends rows (cheap: they are kept as arrays); a flusher thread formats and writes
them at least every ``flush_seconds``, whatever the loop is doing (training, waiting,
calibrating), and while nothing is written it touches the transitions file once a second: a
follower tells an idle writer from a dead one by that heartbeat. A loop that adds rows faster
than they can be formatted and written (maximum speed on a busy machine) waits for the writer
once its oldest unwritten rows are ``flush_seconds`` old: what a kill can lose, and what a
stop must still write, stay bounded instead of growing with the run (at twice that, a
max-speed session's Stop took 1.6-2.1 s to write its backlog; now about 0.5 s). A write
that fails (a full disk) keeps the whole lines that fit, cuts the file back to the last of
them, and tries the rest again at the next flush; :attr:`RecordingWriter.error` says what failed
meanwhile.
"""

from __future__ import annotations

import errno
import json
import math
import os
import threading
import time
import weakref
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from idt_desk.metrics.regime import regime
from idt_desk.recordings.arrows import NAME, TransitionLog, transition_columns
from idt_desk.recordings.files import (
    FORMAT_VERSION,
    JsonLines,
    RecordingError,
    Table,
    create_new,
    json_safe,
    output_folder,
    replace_whole,
)
from idt_desk.recordings.status import RunStatus, write_status

__all__ = ["RecordingWriter"]

#: Seconds without a write after which the flusher touches the transitions file (a heartbeat).
HEARTBEAT_SECONDS = 1.0

#: How a Recorder given no ``transitions`` writes them: ``"arrows"`` (format 2). ``idt-desk
#: bench recording`` sets ``"csv"`` for its baseline, the writer of format 1.
TRANSITIONS_LAYOUT = "arrows"


class RecordingWriter:
    """Writes a recording while a session runs.

    Rows handed to the ``add_*`` methods are on disk within ``flush_seconds``: a flusher
    thread writes them. The methods never fail for a full disk; :attr:`error` says so and
    :meth:`flush` and :meth:`close` raise it (the rows stay in memory, tried again).

    Parameters
    ----------
    path
        Recording directory (created; must not already hold a recording: config.json is
        created exclusively, so two writers cannot share a path).
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
    transitions
        ``"arrows"``: the transitions log, an Arrow IPC stream
        (:mod:`idt_desk.recordings.arrows`); ``"csv"``: the text table of format version 1,
        kept for ``idt-desk bench recording``'s baseline (default:
        :data:`TRANSITIONS_LAYOUT`).
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
        transitions: str | None = None,
    ) -> None:
        self.path = Path(path)
        if str(path) == "":
            raise RecordingError("a recording needs a path (got an empty one)")
        self.flush_seconds = float(flush_seconds)
        transitions = TRANSITIONS_LAYOUT if transitions is None else transitions
        if transitions not in ("arrows", "csv"):
            raise ValueError(f"transitions must be 'arrows' or 'csv', got {transitions!r}")
        self._ds, self._da = len(state_names), len(action_names)
        cols = transition_columns(self._ds, self._da)
        self.config = dict(config)
        self.config.update(
            format_version=FORMAT_VERSION if transitions == "arrows" else 1,
            state_names=list(state_names),
            action_names=list(action_names),
            created=time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        )
        self._claim()
        self._transitions = TransitionLog(self.path / NAME, cols, self._ds, self._da) \
            if transitions == "arrows" else Table(self.path / "transitions.csv", cols)
        self._windows = Table(self.path / "windows.csv", window_columns)
        self._events = JsonLines(self.path / "events.jsonl")
        self._turns = JsonLines(self.path / "turns.jsonl") if turns else None
        # Events first: a reader that reads the transitions, then the events, finds every
        # event logged before the transitions it has (a follower places each at its row).
        self._files = [f for f in (self._events, self._turns, self._transitions,
                                   self._windows) if f is not None]
        #: Guards the pending rows (appends from the loop, takes from the flusher).
        self._lock = threading.Lock()
        #: One flush at a time, so flushes write in the order they took.
        self._write_lock = threading.Lock()
        self._last_write = time.monotonic()
        #: When the oldest row no flush has taken yet was added, and the oldest of those a
        #: flush is writing now (None: none).
        self._since: float | None = None
        self._since_taken: float | None = None
        self.n_transitions = 0
        self.n_windows = 0
        #: (transitions, windows) handed to the operating system: what the status says, so a
        #: listing of a killed run counts what a reader of its files finds (it counted rows
        #: still waiting in memory: 17,936 transitions where the files held 17,926).
        self._on_disk = (0, 0)
        self.n_events = 0
        self.n_turns = 0
        self.closed = False
        #: The run's state as its events and counts say, kept in status.json
        #: (:mod:`idt_desk.recordings.status`): what ``idt-desk runs`` reads.
        self.status = RunStatus()
        #: The last write's failure (a full disk), None once a write succeeds again.
        self.error: RecordingError | None = None
        self._stop = threading.Event()
        self._flusher = threading.Thread(target=_flush_loop, args=(weakref.ref(self),
                                         self._stop, self.flush_seconds),
                                         name=f"idt-writer {self.path.name}", daemon=True)
        self._flusher.start()

    def _claim(self) -> None:
        """Create the folder and its config.json exclusively: one writer per recording.

        The folder is new or empty (:func:`output_folder`): never one holding files this
        writer did not write, which a planted link among them would have it write through.
        """
        output_folder(self.path, "a recording")
        try:
            fd = create_new(self.path / "config.json")
        except FileExistsError:
            raise RecordingError(f"{self.path}: already holds a recording; choose a new "
                                 "path") from None
        except OSError as exc:
            raise RecordingError(f"{self.path}: cannot create the recording: "
                                 f"{exc.strerror or exc}") from None
        try:
            os.write(fd, self._config_bytes())
        finally:
            os.close(fd)

    @property
    def window_columns(self) -> list[str]:
        """Columns of the windows table."""
        return self._windows.columns

    def _config_bytes(self) -> bytes:
        return (json.dumps(json_safe(self.config), indent=2) + "\n").encode()

    def write_config(self, **updates: Any) -> None:
        """Rewrite config.json atomically (a reader never sees half a file).

        Raises
        ------
        RecordingError
            It could not be written (a full disk): the old config.json stays.
        """
        self.config.update(updates)
        try:
            replace_whole(self.path / "config.json", self._config_bytes())
        except OSError as exc:
            raise self._failed("config.json", exc) from None

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
        block = np.hstack(parts)
        with self._lock:
            self._transitions.append(block)
            self.n_transitions += n
            if self._since is None:
                self._since = time.monotonic()
        self._keep_up()

    def add_windows(self, table: Mapping[str, np.ndarray]) -> None:
        """Append windows given as columns (missing columns are written as NaN)."""
        n = len(next(iter(table.values()))) if table else 0
        if n == 0:
            return
        block = np.column_stack([
            np.asarray(table[c], dtype=np.float64) if c in table else np.full(n, np.nan)
            for c in self._windows.columns
        ])
        u, hf, moved = table.get("unique_frac"), table.get("H_f"), table.get("motion")
        with self._lock:
            self._windows.append(block)
            self.n_windows += n
            if u is not None and hf is not None:  # the latest window's estimator regime
                self.status.regime = regime(np.asarray(u)[-1], np.asarray(hf)[-1],
                                            math.nan if moved is None else
                                            np.asarray(moved)[-1])
            if self._since is None:
                self._since = time.monotonic()
        self._keep_up()

    def add_event(self, event: Mapping[str, Any]) -> None:
        """Append one event (a JSON object; ``kind`` required)."""
        if "kind" not in event:
            raise ValueError("an event needs a 'kind'")
        with self._lock:
            self._events.append(event)
            self.n_events += 1
            self.status.windows = self.n_windows
            self.status.fold(dict(event))

    def add_turns(self, turns: Sequence[Mapping[str, Any]]) -> None:
        """Append a dialogue's turns (their texts and settings) to turns.jsonl."""
        if self._turns is None:
            raise ValueError("this recording was opened without turns")
        with self._lock:
            for turn in turns:
                self._turns.append(turn)
                self.n_turns += not turn.get("history")

    def flush(self) -> None:
        """Hand everything pending to the operating system now.

        Every file's rows are taken at one moment, then written events first: a reader that
        reads the transitions, then the events, finds every event logged before the
        transitions it has (a follower places each at its row).

        Raises
        ------
        RecordingError
            A write failed (a full disk): nothing is lost, the rows are kept and written by
            a later flush; no file is left ending in a torn line.
        """
        with self._write_lock:
            if self.closed:
                return
            with self._lock:  # a swap: the loop's appends never wait for the formatting
                taken = [f.take() for f in self._files]
                counted = (self.n_transitions, self.n_windows)
                if self._since_taken is None:  # else rows a failed write kept are older
                    self._since_taken = self._since
                self._since = None
            for f, rows in zip(self._files, taken, strict=True):
                f.stage(rows)
            for f in self._files:
                try:
                    f.write()
                except OSError as exc:
                    raise self._failed(f.path.name, exc) from None
            self.error = None
            self._since_taken = None
            self._last_write = time.monotonic()
            self._on_disk = counted
            self._write_status()

    def _write_status(self) -> None:
        """Replace status.json with the counts on disk and the events so far.

        The write lock is held. Advisory: a failure (a full disk) is passed over; the next
        flush or heartbeat tries.
        """
        with self._lock:
            st, now = self.status, time.time()
            if (st.transitions, st.windows) != self._on_disk:
                st.rows_wall = now
            (st.transitions, st.windows), st.beat_wall = self._on_disk, now
            copy = RunStatus(**vars(st))
        try:
            write_status(self.path, copy)
        except OSError:
            pass

    def _keep_up(self) -> None:
        """The loop writes itself when rows wait too long (waiting for the flusher's write).

        Rows added faster than they can be written piled up unwritten: a max-speed session
        SIGKILLed after 2-7 s had up to 166,000 rows (6 s of its wall time) not on disk.
        Not while a write fails: the flusher retries those, the loop goes on.
        """
        since = self._since if self._since_taken is None else self._since_taken  # oldest
        if since is not None and self.error is None and \
                time.monotonic() - since > self.flush_seconds:
            try:
                self.flush()
            except RecordingError:
                pass  # kept in self.error, as the flusher's

    def _failed(self, name: str, exc: OSError) -> RecordingError:
        """Remember a failed write (the loop sees :attr:`error`) and say what it was."""
        with self._lock:
            waiting = sum(f.kept() for f in self._files)
        what = "the disk is full" if exc.errno in (errno.ENOSPC, errno.EDQUOT) else \
            (exc.strerror or str(exc))
        self.error = RecordingError(
            f"{self.path}: cannot write {name}: {what}; {waiting:,} record(s) kept in memory, "
            "none torn")
        return self.error

    def _tick(self) -> None:
        """The flusher's turn: write what is pending, or show the writer is alive."""
        with self._lock:
            pending = any(f.carry or f.pending for f in self._files)
        if pending:
            try:
                self.flush()
            except RecordingError:
                pass  # kept in self.error; tried again at the next turn
        elif time.monotonic() - self._last_write >= HEARTBEAT_SECONDS:
            with self._write_lock:
                if self.closed:
                    return
                try:
                    os.utime(self._transitions.fd)
                except OSError:
                    pass
                self._write_status()
                self._last_write = time.monotonic()

    def close(self, **config_updates: Any) -> None:
        """Flush, record final counts in the config, and close the files.

        Raises
        ------
        RecordingError
            The last rows or config.json could not be written (a full disk): the files are
            closed, whole lines only, and config.json does not say complete.
        """
        if self.closed:
            return
        self._stop.set()
        try:
            self.flush()
            counts = {"n_turns": self.n_turns} if self._turns is not None else {}
            self.write_config(n_transitions=self.n_transitions, n_windows=self.n_windows,
                              n_events=self.n_events, complete=True, **counts,
                              **config_updates)
        finally:
            with self._write_lock:
                self.status.ended = True
                self._write_status()
                self.closed = True
                for f in self._files:
                    f.close()
            if self._flusher is not threading.current_thread():
                self._flusher.join()


def _flush_loop(ref: weakref.ref, stop: threading.Event, every: float) -> None:
    """The flusher thread: a turn every ``every`` seconds until the recorder closes.

    It holds the recorder weakly: one dropped without :meth:`Recorder.close` is collected
    and its thread ends.
    """
    while not stop.wait(min(every, HEARTBEAT_SECONDS)):
        rec = ref()
        if rec is None or rec.closed:
            return
        rec._tick()
        del rec
