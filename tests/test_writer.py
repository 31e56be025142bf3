"""The recording writer: rows on disk while the loop is busy, a heartbeat, a full disk, one
writer per path."""

from __future__ import annotations

import errno
import os
import threading
import time

import numpy as np
import pytest

from idt_desk.live.config import WINDOW_COLUMNS
from idt_desk.recordings import (
    RecordingError,
    RecordingTail,
    RecordingWriter,
    files,
    load_recording,
)

from .cli_call import call
from .layouts import disk_rows, transitions_path
from .polling import rows_on_disk, until


def _writer(path, **kw) -> RecordingWriter:
    return RecordingWriter(path, {"session": {}}, ["x", "v"], ["u"], WINDOW_COLUMNS, **kw)


def _add(rec: RecordingWriter, i0: int, n: int) -> np.ndarray:
    s = np.arange(i0, i0 + n, dtype=np.float64)[:, None] * np.array([[1.0, 0.5]])
    rec.add_transitions(i0, s[:, 0] / 10, s, s[:, :1], s + 1, None, None)
    return s


def _close(rec: RecordingWriter) -> None:
    rec.add_event({"kind": "session_end", "i": rec.n_transitions})
    rec.close()


def test_rows_reach_the_disk_while_the_loop_is_busy_elsewhere(tmp_path):
    """Added once, then never called again until closed: the rows are on disk meanwhile."""
    rec = _writer(tmp_path / "r", flush_seconds=0.2)
    try:
        _add(rec, 0, 500)
        assert until(lambda: rows_on_disk(tmp_path / "r") == 500)
        rec.add_event({"kind": "note", "i": 500, "text": "training now"})
        assert until(lambda: b"training now" in (tmp_path / "r" / "events.jsonl").read_bytes())
    finally:
        _close(rec)
    assert load_recording(tmp_path / "r").complete


def test_a_loop_faster_than_its_writer_waits_for_it(tmp_path, monkeypatch):
    """Rows left unwritten for a flush period are written by the loop's next add.

    The flusher is held (as a busy machine or a slow disk holds it) and the writer's clock
    is the test's: before, the rows piled up unwritten (a max-speed session killed after
    2-7 s had up to 166,000 accepted rows not on disk).
    """
    from types import SimpleNamespace

    from idt_desk.recordings import writer

    clock = [0.0]
    monkeypatch.setattr(writer, "time", SimpleNamespace(monotonic=lambda: clock[0],
                                                         strftime=time.strftime,
                                                         time=time.time))
    rec = _writer(tmp_path / "r", flush_seconds=0.5)
    rec._tick = lambda: None  # the flusher never gets to it
    try:
        _add(rec, 0, 100)
        clock[0] += 0.4
        _add(rec, 100, 100)
        assert rows_on_disk(tmp_path / "r") == 0  # not yet behind: the loop goes on
        clock[0] += 0.2
        _add(rec, 200, 100)
        assert rows_on_disk(tmp_path / "r") == 300  # behind: this add wrote them all
        clock[0] += 0.4
        rec.add_windows({"start": np.array([0.0]), "end": np.array([300.0])})
        assert rows_on_disk(tmp_path / "r") == 300  # the clock starts again at the write
    finally:
        _close(rec)
    assert load_recording(tmp_path / "r").complete


def test_an_idle_writer_beats_and_its_follower_does_not_give_up(tmp_path):
    rec = _writer(tmp_path / "r", flush_seconds=0.1)
    try:
        _add(rec, 0, 10)
        tail = RecordingTail(tmp_path / "r")
        assert until(lambda: len(tail.poll()[0]) == 10 or tail.n_read == 10)
        table = transitions_path(tmp_path / "r")
        before = table.stat().st_mtime_ns
        # Nothing written: the modification time moves all the same (the heartbeat).
        assert until(lambda: table.stat().st_mtime_ns != before)
        assert until(lambda: tail.idle_for() > 2.5)
        assert tail.silent_for() < 2.0  # idle, not silent
    finally:
        rec.close()
    tail.silent_for()  # closing wrote the log's end: seen once
    # A writer that is gone never beats: the follower's silence grows.
    mtime = table.stat().st_mtime_ns
    time.sleep(1.5)
    assert table.stat().st_mtime_ns == mtime
    assert tail.silent_for() > 1.4


class _Disk:
    """``os.write`` of a disk with ``room`` bytes left: a short write, then ENOSPC."""

    def __init__(self, room: int) -> None:
        self.room = room
        self.real = os.write

    def __call__(self, fd: int, data: bytes) -> int:
        if self.room <= 0:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        n = self.real(fd, data[:self.room])
        self.room -= n
        return n


@pytest.mark.parametrize("layout", ["arrows", "csv"])
def test_a_full_disk_keeps_every_row_and_never_tears_a_line(tmp_path, monkeypatch, layout):
    rec = _writer(tmp_path / "r", flush_seconds=3600, transitions=layout)
    s1 = _add(rec, 0, 300)
    rec.flush()
    table = transitions_path(tmp_path / "r")
    size = table.stat().st_size
    disk = _Disk(room=1000)  # less than the next block's lines: a torn write
    monkeypatch.setattr(files.os, "write", disk)
    s2 = _add(rec, 300, 300)
    with pytest.raises(RecordingError, match=r"disk is full.*kept in memory"):
        rec.flush()
    raw = table.read_bytes()
    if layout == "csv":  # the whole lines that fitted are kept, cut back to the last of them
        assert raw.endswith(b"\n") and size < len(raw) <= size + 1000
    else:  # a block is one message, larger than the room: cut back to the one before it
        assert len(raw) == size and disk_rows(tmp_path / "r") == 300
    assert isinstance(rec.error, RecordingError)
    # The loop goes on; space is freed: every row is written once, in order.
    s3 = _add(rec, 600, 100)
    monkeypatch.setattr(files.os, "write", disk.real)
    rec.flush()
    assert rec.error is None
    _close(rec)
    got = load_recording(tmp_path / "r")
    assert got.complete, got.warnings
    np.testing.assert_array_equal(got.transitions[["s_0", "s_1"]].to_numpy(),
                                  np.concatenate([s1, s2, s3]))


@pytest.mark.parametrize("layout", ["arrows", "csv"])
def test_closing_on_a_full_disk_raises_and_leaves_whole_lines(tmp_path, monkeypatch, layout):
    rec = _writer(tmp_path / "r", flush_seconds=3600, transitions=layout)
    _add(rec, 0, 100)
    rec.flush()
    monkeypatch.setattr(files.os, "write", _Disk(room=700))
    _add(rec, 100, 100)
    with pytest.raises(RecordingError, match="disk is full"):
        rec.close()
    monkeypatch.undo()
    got = load_recording(tmp_path / "r")
    # What fitted (whole lines of the second hundred; no whole block) is kept; the rest is
    # said missing.
    assert not got.complete and (100 < len(got.transitions) < 200 if layout == "csv"
                                 else len(got.transitions) == 100)
    assert not any("partly written" in w for w in got.warnings)


def test_two_writers_cannot_share_a_path(tmp_path, monkeypatch):
    """Both pass every check before either writes: one gets the path, the other an error."""
    from idt_desk.recordings import writer

    both = threading.Barrier(2, timeout=10)
    folder = writer.output_folder

    def meet(path, what):
        try:
            return folder(path, what)
        finally:  # the folder made (or found empty) by both, neither has written
            both.wait()

    monkeypatch.setattr(writer, "output_folder", meet)
    got: list[object] = []

    def start():
        try:
            got.append(_writer(tmp_path / "r"))
        except RecordingError as exc:
            got.append(exc)

    threads = [threading.Thread(target=start) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    writers = [g for g in got if isinstance(g, RecordingWriter)]
    errors = [g for g in got if isinstance(g, RecordingError)]
    for w in writers:
        w.close()
    assert len(writers) == 1 and len(errors) == 1
    assert "already holds a recording" in str(errors[0])


def test_run_on_a_full_disk_exits_non_zero_with_one_line(tmp_path, monkeypatch):
    monkeypatch.setattr(files.os, "write", _Disk(room=200_000))
    rc, out, err = call(["run", "--steps", "200000", "--record", str(tmp_path / "r"),
                         "--quiet"])
    assert rc == 1, (out, err)
    lines = [x for x in err.splitlines() if x.strip()]
    assert len(lines) == 1 and "disk is full" in lines[0], err
    assert "Traceback" not in out + err
    monkeypatch.undo()
    got = load_recording(tmp_path / "r")  # whole lines: it opens, and says what it lacks
    assert not got.complete
    assert not any("partly written" in w for w in got.warnings)


def test_the_status_counts_what_is_on_disk_not_what_waits_in_memory(tmp_path):
    """A killed run listed 17,936 transitions where its files held 17,926: the status
    counted rows accepted but not yet written. A heartbeat between a flush and the next
    says the flushed counts; the next flush the rest."""
    import json

    rec = _writer(tmp_path / "r")
    rec._tick = lambda: None  # the flusher never gets to it: the test says when
    try:
        _add(rec, 0, 300)
        rec.flush()
        _add(rec, 300, 10)  # accepted, waiting
        with rec._write_lock:
            rec._write_status()  # the heartbeat's
        status = json.loads((tmp_path / "r" / "status.json").read_text())
        assert status["transitions"] == rows_on_disk(tmp_path / "r") == 300
        rec.flush()
        status = json.loads((tmp_path / "r" / "status.json").read_text())
        assert status["transitions"] == rows_on_disk(tmp_path / "r") == 310
    finally:
        _close(rec)
