"""Watching a folder of runs: the run that started last is followed, and a new one in turn.

Runs are ordered by when they started (their first event's wall time), never by a file's
modification time: a writer rewrites config.json as it closes, so the run that has just
finished would otherwise look newer than the one still being written.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from idt_desk.recordings import RecordingWriter, newest_recording

ROOT = Path(__file__).resolve().parents[1]


def _open_run(path: Path) -> RecordingWriter:
    """A recording opened as a session opens one (its first event: recording_start)."""
    rec = RecordingWriter(path, {}, ["x"], [], ["start", "end"])
    rec.add_event({"kind": "recording_start", "i": 0, "wall": time.time()})
    rec.flush()
    return rec


def test_the_run_that_started_last_is_the_newest_though_an_older_one_closes_later(tmp_path):
    a = _open_run(tmp_path / "a")
    time.sleep(0.02)
    b = _open_run(tmp_path / "b")
    assert newest_recording(tmp_path) == tmp_path / "b"
    time.sleep(0.02)
    a.close()  # rewrites a's config.json: now the newest file in the folder
    assert (tmp_path / "a" / "config.json").stat().st_mtime > \
        (tmp_path / "b" / "config.json").stat().st_mtime
    assert newest_recording(tmp_path) == tmp_path / "b"
    b.close()
    assert newest_recording(tmp_path) == tmp_path / "b"
    # A recording itself is its own newest; a folder without runs has none.
    assert newest_recording(tmp_path / "a") == tmp_path / "a"
    assert newest_recording(tmp_path / "nothing") is None


def test_without_a_first_event_the_configs_start_time_orders_the_runs(tmp_path):
    # Two runs whose writers have not flushed an event yet (or died first): config.json's
    # "created" orders them, whatever the files' modification times say.
    for name, created, mtime in (("early", "2030-01-01T10:00:00+0000", 2_000_000_000),
                                 ("late", "2030-01-01T10:00:05+0000", 1_000_000_000)):
        d = tmp_path / name
        d.mkdir()
        (d / "config.json").write_text(json.dumps({"format_version": 1, "created": created}))
        (d / "events.jsonl").write_text('{"kind": "recording_sta')  # torn: not a line yet
        os.utime(d / "config.json", (mtime, mtime))
    (tmp_path / "not-a-run").mkdir()
    assert newest_recording(tmp_path) == tmp_path / "late"
    # Once its first event is out, the wall time it holds counts.
    (tmp_path / "early" / "events.jsonl").write_text(
        json.dumps({"kind": "recording_start", "wall": 1_900_000_000.5}) + "\n")
    assert newest_recording(tmp_path) == tmp_path / "early"


def _watch(path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "idt_desk.cli", "watch", str(path),
                           "--quit-after", "0.5"], cwd=ROOT, capture_output=True, text=True,
                          timeout=120, env={**os.environ, "QT_QPA_PLATFORM": "offscreen"})


def test_watch_on_one_run_follows_it_and_on_several_lists_them(tmp_path):
    a = _open_run(tmp_path / "first")
    a.close()
    r = _watch(tmp_path)
    assert r.returncode == 0, r.stderr
    assert f"following {tmp_path / 'first'}; a run that starts in {tmp_path}" in r.stderr
    time.sleep(0.02)
    b = _open_run(tmp_path / "second")
    b.close()
    r = _watch(tmp_path)
    assert r.returncode == 0, r.stderr
    assert f"2 runs in {tmp_path} (0 alarmed); the window lists them" in r.stderr
    assert "following" not in r.stderr


def _writer(path: Path, n: int, chunk: int, delay: float) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "tests.loop_writer", str(path), str(n),
                             str(chunk), str(delay)], cwd=ROOT)


def _started(run: Path) -> bool:
    ev = run / "events.jsonl"
    return ev.exists() and b"recording_start" in ev.read_bytes()


def test_the_window_switches_to_a_new_run_and_stays_there(qtbot, tmp_path):
    pytest.importorskip("pytestqt")
    from idt_desk_widgets.main_window import MainWindow

    runs = tmp_path / "runs"
    run1, run2 = runs / "run1", runs / "run2"
    first = _writer(run1, 20_000, 400, 0.1)  # about 5 s of writing after its calibration
    second = None
    w = None
    try:
        qtbot.waitUntil(lambda: _started(run1), timeout=30_000)
        w = MainWindow(source="replay", settings={"path": str(run1), "follow": True,
                                                  "silence": 30.0}, speed=None,
                       record_dir=tmp_path / "recordings", watch_folder=runs)
        qtbot.addWidget(w)
        w.show()
        assert w.start_session(), w.banner.text()
        old = w.session
        qtbot.waitUntil(lambda: old.snapshot(1).n_transitions > 0, timeout=30_000)
        assert first.poll() is None  # the first run is still being written ...
        second = _writer(run2, 200_000, 400, 0.1)  # ... when a second one starts
        qtbot.waitUntil(lambda: w.session is not old and w.session is not None
                        and w.session.source.config["path"] == str(run2), timeout=20_000)
        assert not old.running  # the first run's session was stopped
        new = w.session
        said = "a new run started: run2; following it"
        qtbot.waitUntil(lambda: any(e.get("kind") == "note" and e.get("text") == said
                                    for e in w.events.events), timeout=10_000)
        qtbot.waitUntil(lambda: new.snapshot(1).n_transitions > 0, timeout=30_000)
        status = w.status_line.status
        qtbot.waitUntil(lambda: f"following {run2.name} (the writer:" in status.text(),
                        timeout=10_000)
        # The first run ends while the second is written: its config.json is rewritten
        # (the newest file in the folder), yet the window stays with the run that started last.
        assert first.wait(60) == 0
        assert second.poll() is None
        assert newest_recording(runs) == run2
        qtbot.wait(2500)  # two and a half looks at the folder
        assert w.session is new and new.running
        assert new.source.config["path"] == str(run2)
    finally:
        if w is not None:
            w.close()
        for proc in (first, second):
            if proc is not None and proc.poll() is None:
                proc.kill()
            if proc is not None:
                proc.wait(10)


def test_watch_on_an_empty_folder_opens_the_window_at_once(tmp_path):
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, "-m", "idt_desk.cli", "watch", str(tmp_path),
                        "--quit-after", "0.5"], cwd=ROOT, capture_output=True, text=True,
                       timeout=90, env={**os.environ, "QT_QPA_PLATFORM": "offscreen"})
    assert r.returncode == 0, r.stderr
    assert f"no recording in {tmp_path} yet; the window waits for one" in r.stderr
    assert time.monotonic() - t0 < 60  # never the 600 s --wait before any window


@pytest.mark.parametrize("where", ["folder", "the run itself"])
def test_the_waiting_window_follows_the_first_run_that_starts(qtbot, tmp_path, where):
    pytest.importorskip("pytestqt")
    from idt_desk_widgets.main_window import MainWindow

    runs = tmp_path / "runs"
    run = runs / "run1"
    watched = runs if where == "folder" else run  # neither exists yet
    w = MainWindow(source="replay", settings={"path": "", "follow": True, "silence": 30.0},
                   speed=None, record_dir=tmp_path / "recordings", watch_folder=watched)
    qtbot.addWidget(w)
    w.show()
    assert w.plots.hint.text().startswith(f"Waiting for a run in {watched} …")
    assert w.session is None
    writer = _writer(run, 20_000, 400, 0.1)
    try:
        qtbot.waitUntil(lambda: w.session is not None and w.session.running
                        and w.session.source.config["path"] == str(run), timeout=30_000)
        qtbot.waitUntil(lambda: w.session.snapshot(1).n_transitions > 0, timeout=30_000)
    finally:
        w.close()
        if writer.poll() is None:
            writer.kill()
        writer.wait(10)
