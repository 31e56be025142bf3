"""The detector's thresholds are fitted off the loop's thread: the loop keeps going and
recording while they are fitted, and the windows, flags and events come out as if it had
waited."""

from __future__ import annotations

import threading
from types import SimpleNamespace

import pandas as pd
import pytest

import idt_desk.detection.monitor as monitor_module
from idt_desk.detection import _offload
from idt_desk.live.session import Session, SessionConfig, run_headless
from idt_desk.recordings import load_recording

from .polling import until

STEPS = 9000
#: The baseline completes at the end of window 20 + 30 - 1: 300 + 49 * 75 transitions.
BASELINE_END = 300 + 49 * 75
SCRIPT = [(4500, "perturb", {"name": "sensor_noise", "params": {"sigma_angle": 0.1}}),
          (5200, "note", {"text": "while the thresholds are fitted"}),
          (6000, "perturb", {"name": "sensor_noise", "params": None})]


def _session(path, speed=None) -> Session:
    session = Session(SessionConfig(speed=speed, baseline_windows=30), record=path)
    for at, kind, args in SCRIPT:
        if kind == "perturb" and args["params"] is not None:
            args = {**args, "params": session.source.perturbation(args["name"]).resolve(
                args["params"])}
        session.schedule(at, kind, **args)
    return session


def _timeline(path):
    rec = load_recording(path)
    assert rec.complete, rec.warnings
    ev = rec.events
    ev = ev[~ev["kind"].isin(["recording_start", "session_start", "session_end"])]
    return rec.windows, ev[["kind", "i", "t"]].reset_index(drop=True), rec


@pytest.fixture
def fit_in_thread(monkeypatch):
    """The fit's fallback (a thread): a patched ``calibrate`` applies there, not in a child."""
    def no_child(self):
        raise _offload._ChildFailed("the test holds the fit in this process")

    monkeypatch.setattr(_offload.Offloaded, "_in_child", no_child)


@pytest.fixture
def held_fit(monkeypatch, fit_in_thread):
    """The thresholds' fit waits for ``release`` (``fitting`` is set once it has begun)."""
    held = SimpleNamespace(release=threading.Event(), fitting=threading.Event())
    calibrate = monitor_module.calibrate

    def slow_calibrate(*args, **kwargs):
        held.fitting.set()
        held.release.wait(120)
        return calibrate(*args, **kwargs)

    monkeypatch.setattr(monitor_module, "calibrate", slow_calibrate)
    yield held
    held.release.set()


@pytest.fixture(scope="module")
def reference_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("ref") / "ref"
    run_headless(_session(path), steps=STEPS)
    return path


@pytest.fixture(scope="module")
def reference(reference_path):
    return _timeline(reference_path)




@pytest.mark.parametrize("speed", [None, 10.0])
def test_the_loop_records_on_while_the_thresholds_are_fitted(tmp_path, reference, speed,
                                                           held_fit):
    """The fit is held until the loop has gone on far past the baseline: it never waits."""
    release, fitting = held_fit.release, held_fit.fitting
    path = tmp_path / "rec"
    session = _session(path, speed)
    session.limit = STEPS
    session.start()
    try:
        assert until(fitting.is_set)
        # The loop goes on past the perturbation, the note and its end; its transitions
        # and its own events reach the disk meanwhile.
        assert until(lambda: session.snapshot(1).n_transitions >= 6500)
        snap = session.snapshot(1)
        assert snap.baseline is None and snap.detector["fitting"]
        assert until(lambda: (path / "transitions.csv").read_bytes().count(b"\n") > 6000)
        assert until(lambda: b"while the thresholds" in (path / "events.jsonl").read_bytes())
    finally:
        release.set()
    session.wait(120)
    session.stop()
    w_ref, ev_ref, _ = reference
    w, ev, _ = _timeline(path)
    pd.testing.assert_frame_equal(w, w_ref)
    pd.testing.assert_frame_equal(ev, ev_ref)
    # The perturbation was judged against the baseline, once the thresholds were there.
    assert {"baseline", "alarm_on", "detected"} <= set(ev["kind"])


def test_stop_while_the_thresholds_are_fitted_keeps_every_window(tmp_path, reference,
                                                                  held_fit):
    release = held_fit.release
    path = tmp_path / "rec"
    session = _session(path)
    session.limit = STEPS
    session.start()
    assert until(lambda: session.snapshot(1).n_transitions >= STEPS)
    threading.Timer(1.0, release.set).start()
    session.stop(timeout=0.2)  # the fit is progress: stop waits for it
    w_ref, ev_ref, _ = reference
    w, ev, _ = _timeline(path)
    pd.testing.assert_frame_equal(w, w_ref)
    pd.testing.assert_frame_equal(ev, ev_ref)


def test_the_window_stays_live_while_a_stopped_session_waits_for_its_fit(
        qtbot, tmp_path, held_fit):
    """Stop in the window asks the worker to stop and returns; the worker scores its held
    windows once the fit is in, and only then do the controls come back."""
    pytest.importorskip("pytestqt")
    from idt_desk_widgets.main_window import MainWindow

    release, fitting = held_fit.release, held_fit.fitting
    w = MainWindow(speed=None, record_dir=tmp_path)
    qtbot.addWidget(w)
    w.show()
    try:
        w.baseline_spin.setValue(30)
        w.record_button.setChecked(True)
        assert w.start_session()
        qtbot.waitUntil(lambda: w.session is not None and fitting.is_set() and
                        w.session.snapshot(1).n_transitions > BASELINE_END + 1000,
                        timeout=60_000)
        w.STOP_TIMEOUT = 2.0  # a worker stuck longer than this is reported
        w.stop_button.click()  # returns while the fit is still held: it waits for nothing
        session = w.session
        assert session.stopping and not release.is_set()
        qtbot.wait(300)  # the window's timer runs meanwhile
        assert w.banner.isHidden()
        assert w.status.text().startswith("stopping — pendulum: scoring the last windows")
        assert not any(b.isEnabled() for b in (w.start_button, w.stop_button, w.pause_button,
                                               *w.perturb_buttons.values()))
        assert not w.start_session()  # not while the last session is stopping
        qtbot.waitUntil(lambda: "did not stop within 2 s" in w.banner.text(), timeout=10_000)
        release.set()
        qtbot.waitUntil(lambda: not session.running and not w.record_button.isChecked(),
                        timeout=120_000)
        qtbot.waitUntil(lambda: w.start_button.isEnabled(), timeout=5_000)
        assert w.status.text().startswith("stopped — ")
    finally:
        release.set()
        w.close()
    windows, ev, _ = _timeline(w.last_recording)
    # Every window the loop made was scored once the thresholds came, and is on record.
    assert len(windows) == session.snapshot(1).n_windows > 30
    assert "baseline" in set(ev["kind"])


def test_a_replay_at_its_end_waits_for_its_fit_with_the_controls_off(
        qtbot, reference_path, held_fit):
    """A replay's end is not a Stop: nothing to report as stuck, and nothing to press."""
    pytest.importorskip("pytestqt")
    from idt_desk_widgets.main_window import MainWindow

    release = held_fit.release
    w = MainWindow(source="replay", settings={"path": str(reference_path)}, speed=None)
    qtbot.addWidget(w)
    w.show()
    w.STOP_TIMEOUT = 0.5
    try:
        assert w.start_session()
        qtbot.waitUntil(lambda: w.session is not None and w.session.stopping, timeout=60_000)
        qtbot.waitUntil(lambda: w.status.text().startswith("stopping — replay"),
                        timeout=5_000)
        qtbot.wait(1000)  # past STOP_TIMEOUT: still no report, as the window asked nothing
        assert w.banner.isHidden()
        assert not any(b.isEnabled() for b in (w.start_button, w.stop_button, w.pause_button))
        release.set()
        qtbot.waitUntil(lambda: w.start_button.isEnabled(), timeout=120_000)
        assert w.status.text().startswith("stopped — ") and w.banner.isHidden()
    finally:
        release.set()
        w.close()


def test_a_failed_fit_ends_the_session_in_error_with_its_transitions(tmp_path, monkeypatch,
                                                                     fit_in_thread):
    def broken(*args, **kwargs):
        raise ValueError("no thresholds today")

    monkeypatch.setattr(monitor_module, "calibrate", broken)
    path = tmp_path / "rec"
    snap = run_headless(_session(path), steps=STEPS)
    assert snap.state == "error" and "no thresholds today" in snap.error
    rec = load_recording(path)
    assert len(rec.transitions) >= BASELINE_END
    end = rec.events[rec.events["kind"] == "session_end"].iloc[0]
    assert end["state"] == "error"


def _whose(x):
    import os

    if x < 0:
        raise ValueError(f"negative: {x}")
    return os.getpid(), x * 2


def test_the_fit_runs_in_a_child_process_and_falls_back_to_a_thread(monkeypatch):
    import os
    import sys

    pid, value = _offload.Offloaded(_whose, 21).result()
    assert value == 42 and pid != os.getpid()  # another process: not the loop's GIL
    with pytest.raises(ValueError, match="negative: -1"):
        _offload.Offloaded(_whose, -1).result()  # the call's own error comes back
    monkeypatch.setattr(sys, "executable", "/nonexistent/python")
    pid, value = _offload.Offloaded(_whose, 5).result()
    assert value == 10 and pid == os.getpid()  # no child: the same call, here
