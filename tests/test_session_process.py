"""A session in a process of its own (idt_desk.live.process): the same windows, events and
recording as in a thread; a dead child said, never hung on; the recording closed when the
window's process goes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest
from idt_desk_sources.pendulum import PendulumSource

from idt_desk.live.process import SessionGone, SessionProcess, build_session
from idt_desk.live.session import Session, SessionConfig, run_headless
from idt_desk.recordings import load_recording

STEPS = 40_000
KICK = 15_000


def _wait(cond, timeout=60.0):
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def test_the_windows_events_and_recording_are_a_threads(tmp_path):
    config = {"speed": None, "calibration_windows": 10, "baseline_windows": 40}
    want = Session(SessionConfig(source="pendulum", **config))
    want.schedule(KICK, "perturb", name="kick", params={})
    run_headless(want, steps=STEPS)
    want_snap = want.snapshot(limit=10**6)

    s = build_session(PendulumSource, {}, config, tmp_path / "rec", process=True)
    try:
        assert isinstance(s, SessionProcess) and s.source.name == "pendulum"
        assert s.source.perturbation("kick").label == "Kick"  # declarations: the class's
        assert s.config.baseline_windows == 40 and s.preset.name == want.preset.name
        s.schedule(KICK, "perturb", name="kick", params={})
        s.start()
        _wait(lambda: s.snapshot(1).n_transitions >= STEPS)
        s.note("seen")
        s.stop()
        assert not s.running and s.state == "stopped"
        snap = s.snapshot(limit=10**6)
        k = want_snap.n_windows
        assert snap.n_windows > k > 100
        for column in ("P", "H_f", "H_b", "dH"):
            np.testing.assert_array_equal(snap.windows[column][:k], want_snap.windows[column])
        on = [e["i"] for e in s.events_since(0) if e["kind"] == "perturbation_on"]
        assert on == [e["i"] for e in want.events_since(0) if e["kind"] == "perturbation_on"]
        assert "note" in [e["kind"] for e in s.events_since(0)]
        assert s.recording_path == tmp_path / "rec" and s.on_disk
        files = s.export_session(tmp_path / "out")
        assert files and all(p.exists() for p in files)
    finally:
        s.close()
    rec = load_recording(tmp_path / "rec")
    assert rec.complete and len(rec.windows) == snap.n_windows
    np.testing.assert_array_equal(rec.windows["P"].to_numpy(), snap.windows["P"])


def test_a_snapshot_carries_only_the_windows_not_had_yet():
    s = build_session(PendulumSource, {}, {"speed": None, "history": 500}, None, process=True)
    try:
        s.start()
        _wait(lambda: s.snapshot(1).n_windows > 300)
        a = s.snapshot(200)
        assert len(a.windows["t"]) == 200
        _wait(lambda: s.snapshot(1).n_windows > a.n_windows + 2000)  # the ring wrapped
        s.stop()
        b = s.snapshot(10**6)
        whole = s._call("snapshot", 10**6)  # the child's ring, sent whole
        assert len(b.windows["t"]) == 500 and whole.n_windows == b.n_windows > 2300
        for column, values in whole.windows.items():
            np.testing.assert_array_equal(b.windows[column], values)
        assert len(s._call("snapshot", 10**6, b.n_windows).windows["t"]) == 0
    finally:
        s.close()


def test_a_bad_setting_is_refused_as_in_a_thread():
    with pytest.raises(ValueError) as thread:
        build_session(PendulumSource, {"no_such": 1}, {}, None, process=False)
    with pytest.raises(ValueError) as process:
        build_session(PendulumSource, {"no_such": 1}, {}, None, process=True)
    assert str(process.value) == str(thread.value)
    from idt_desk.settings import SettingError  # a front end reads its field: it comes whole

    with pytest.raises(SettingError) as err:
        build_session(PendulumSource, {}, {"window": 10, "stride": 20}, None, process=True)
    assert err.value.field == "stride" and "longer than the window" in err.value.why
    s = build_session(PendulumSource, {}, {}, None, process=True)
    try:
        with pytest.raises(ValueError, match="speed must be > 0"):
            s.set_speed(-1)
        with pytest.raises(KeyError):
            s.perturb("no_such")
    finally:
        s.close()


def test_a_dead_child_is_said_and_its_last_snapshot_kept():
    s = build_session(PendulumSource, {}, {"speed": None}, None, process=True)
    try:
        s.start()
        _wait(lambda: s.snapshot(1).n_windows > 50)
        os.kill(s._proc.pid, signal.SIGINT)  # a terminal's Ctrl-C is the window's to act on
        time.sleep(0.3)
        assert s.running
        seen = s.snapshot(100).n_windows
        os.kill(s._proc.pid, signal.SIGKILL)
        s._proc.wait(10)
        assert not s.running and not s.stopping and s.wait(0.1)
        snap = s.snapshot(100)
        assert snap.state == "error" and "SIGKILL" in snap.error and snap.n_windows >= seen
        assert "SIGKILL" in s.error and s.events_since(0) == []
        with pytest.raises(SessionGone, match="SIGKILL"):
            s.perturb("kick")
        s.stop()  # nothing to stop: no error, no wait
    finally:
        s.close()


def test_the_child_closes_the_recording_when_the_window_process_dies(tmp_path):
    script = textwrap.dedent(f"""
        import os, sys, time
        from idt_desk_sources.pendulum import PendulumSource
        from idt_desk.live.process import build_session
        s = build_session(PendulumSource, {{}}, {{"speed": 1.0}}, {str(tmp_path / "rec")!r},
                          process=True)
        s.start()
        while s.snapshot(1).n_windows < 20:
            time.sleep(0.05)
        print(s._proc.pid, flush=True)
        os.kill(os.getpid(), 9)
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=120)
    child = int(out.stdout.split()[0])
    _wait(lambda: not _alive(child), timeout=30)
    rec = load_recording(tmp_path / "rec")
    assert rec.complete and len(rec.windows) >= 20
    assert rec.events["kind"].iloc[-1] == "session_end"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as f:  # a zombie (reaped by init soon) is gone
        return f.read().split(")")[1].split()[0] != "Z"


def test_the_next_session_takes_a_warm_child_and_a_child_serves_sessions_in_turn():
    from idt_desk.live import process

    first = build_session(PendulumSource, {}, {}, None, process=True)
    standby = process._STANDBY["pendulum"][0]
    assert standby.poll() is None and standby.pid != first._proc.pid
    second = build_session(PendulumSource, {}, {}, None, process=True)
    assert second._proc.pid == standby.pid  # warmed while the first one was built
    served = first._proc
    first.close()  # its child, warm, waits for the next session in place of the newer one
    assert process._STANDBY["pendulum"][0] is served and served.poll() is None
    third = build_session(PendulumSource, {}, {}, None, process=True)
    assert third._proc is served
    third.start()
    _wait(lambda: third.snapshot(1).n_windows > 5)
    third.close()
    second.close()
    with pytest.raises(ValueError):  # a refused build leaves its child waiting, not gone
        build_session(PendulumSource, {"no_such": 1}, {}, None, process=True)
    waiting = process._STANDBY["pendulum"][0]
    assert waiting.poll() is None
    process._drop_standbys()
    assert waiting.poll() is not None and not process._STANDBY


def test_a_build_given_up_returns_its_child_warm_and_a_start_meanwhile_waits_for_it():
    from idt_desk.live import process

    process._drop_standbys()
    with pytest.raises(process.BuildGivenUp):  # given up while its fresh child warms
        build_session(PendulumSource, {}, {}, None, process=True, given_up=lambda: True)
    assert process._BUILDING["pendulum"] == 1  # its child still builds, in the background
    # A Start meanwhile waits for that child rather than starting another interpreter.
    s = build_session(PendulumSource, {}, {}, None, process=True)
    try:
        assert process._BUILDING["pendulum"] == 0
        s.start()
        _wait(lambda: s.snapshot(1).n_windows > 5)
    finally:
        s.close()
    children = [p for p in os.listdir("/proc") if p.isdigit() and _is_child(int(p))]
    assert len(children) <= 2, children  # the one kept warm, and at most one more warming
    process._drop_standbys()


def _is_child(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmd = f.read()
        with open(f"/proc/{pid}/stat") as f:
            ppid = int(f.read().split(")")[1].split()[1])
    except OSError:
        return False
    return ppid == os.getpid() and b"idt_desk.live.process" in cmd and _alive(pid)
