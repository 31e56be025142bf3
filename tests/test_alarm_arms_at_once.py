"""The alarm arms in the window that completes the baseline: thresholds fitted where the loop
runs, every window judged as it arrives (live equals replay), a stop within two seconds at the
baseline's end, kernels loaded before the first row, and nothing imported from the working
directory or a recording folder."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import idt_desk.detection.monitor as monitor_module
from idt_desk.live.session import Session, SessionConfig, run_headless
from idt_desk.recordings import load_recording

from .polling import rows_on_disk, until

STEPS = 9000
#: The baseline completes at the end of window 20 + 30 - 1: 300 + 49 * 75 transitions.
BASELINE_END = 300 + 49 * 75
#: Sensor noise from one window after the baseline completes.
ONSET, OFFSET = BASELINE_END + 75, BASELINE_END + 2000
IDT_DESK = str(Path(sys.executable).with_name("idt-desk"))


def _session(path: Path | None, speed: float | None = None, detector: str = "mewma"
             ) -> Session:
    session = Session(SessionConfig(speed=speed, baseline_windows=30, detector=detector),
                      record=path)
    params = session.source.perturbation("sensor_noise").resolve({"sigma_angle": 0.2})
    session.schedule(ONSET, "perturb", name="sensor_noise", params=params)
    session.schedule(OFFSET, "perturb", name="sensor_noise", params=None)
    return session


def test_a_perturbation_one_window_after_the_baseline_is_judged_as_it_arrives(tmp_path):
    """Polled while it runs (10x real time): once the baseline is set, every window after it
    already carries its flags; the perturbation is detected, and a replay of the recording
    flags every window exactly as the live session did."""
    path = tmp_path / "rec"
    session = _session(path, speed=10.0)
    session.limit = STEPS
    session.start()
    seen_after_baseline = 0
    try:
        while session.running:
            snap = session.snapshot(limit=20_000)
            if snap.baseline is not None:
                start = np.asarray(snap.windows["start"])
                after = start >= BASELINE_END - 300 + 75  # windows that end past the baseline
                flags = np.asarray(snap.windows["x_IDT"], dtype=np.float64)[after]
                assert np.isfinite(flags).all()
                seen_after_baseline = max(seen_after_baseline, int(after.sum()))
            time.sleep(0.05)
    finally:
        session.stop()
    assert seen_after_baseline > 10
    live = load_recording(path)
    assert live.complete
    kinds = list(live.events["kind"])
    assert "baseline" in kinds and "detected" in kinds
    alarm = live.events[live.events["kind"] == "alarm_on"]["i"]
    assert (alarm >= ONSET).any()
    snap = run_headless(Session(SessionConfig(source="replay", speed=None,
                                              settings={"path": str(path)}),
                                record=tmp_path / "replayed"))
    assert snap.state == "stopped", snap.error
    again = load_recording(tmp_path / "replayed")
    cols = ["start", "end", "P", "H_f", "H_b", "dH", "x_P", "x_H_f", "x_H_b", "x_dH", "x_IDT"]
    pd.testing.assert_frame_equal(again.windows[cols], live.windows[cols])


def test_a_failed_fit_ends_the_session_in_error_with_its_transitions(tmp_path, monkeypatch):
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


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _baseline_logged(path: Path) -> bool:
    events = path / "events.jsonl"
    return events.exists() and b'"kind": "baseline"' in events.read_bytes()


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_stop_at_the_baseline_end_of_a_max_speed_mewma_run_takes_under_two_seconds(
        tmp_path, sig):
    rec = tmp_path / "rec"
    proc = subprocess.Popen([IDT_DESK, "run", "--source", "pendulum", "--speed", "max",
                             "--detector", "mewma", "--record", str(rec)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            preexec_fn=_default_sigint)
    try:
        assert until(lambda: _baseline_logged(rec) or proc.poll() is not None, seconds=120)
        assert proc.poll() is None, proc.stdout.read()
        t0 = time.monotonic()
        proc.send_signal(sig)
        out, _ = proc.communicate(timeout=30)
        took = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 128 + sig, out
    assert took < 2.0, (took, out)
    got = load_recording(rec)
    assert got.complete, got.warnings
    assert got.events["kind"].iloc[-1] == "session_end" and "baseline" in set(got.events["kind"])


def test_a_recorder_closes_within_two_seconds_right_after_its_baseline(tmp_path):
    """The fit runs on the recorder's pipeline thread as windows arrive: a close at the
    baseline's end neither waits for a fit nor leaves a row behind."""
    import idt_desk

    rng = np.random.default_rng(0)
    path = tmp_path / "rec"
    rec = idt_desk.Recorder(path, ["x", "v"], ["u"], detector="mewma", window=300, stride=50,
                            calibration_windows=20, baseline_windows=200, rate=100.0)
    added = 0
    while rec.snapshot(1).baseline is None:
        s = rng.normal(size=(500, 2))
        rec.add(s, rng.normal(size=(500, 1)), s + 0.1)
        added += 500
        assert added < 100_000
    t0 = time.monotonic()
    rec.close()
    assert time.monotonic() - t0 < 2.0
    got = load_recording(path)
    assert got.complete and len(got.transitions) == added


def test_a_recorder_puts_its_first_rows_on_disk_within_its_flush_time(tmp_path):
    """The kernels are loaded when the recorder opens: rows past the symbols' calibration
    reach the disk within flush_seconds (plus the writer's half second) of being added."""
    import idt_desk

    rng = np.random.default_rng(1)
    path = tmp_path / "rec"
    with idt_desk.Recorder(path, ["x", "v"], ["u"], window=300, stride=50,
                           calibration_windows=5, baseline_windows=50, rate=100.0,
                           flush_seconds=0.5) as rec:
        s = rng.normal(size=(3000, 2))
        rec.add(s, rng.normal(size=(3000, 1)), s + 0.1)
        t0 = time.monotonic()
        assert until(lambda: rows_on_disk(path) >= 3000, seconds=30)
        assert time.monotonic() - t0 < 1.5


# -- nothing runs from the working directory -------------------------------------------------


@pytest.fixture
def shadow(tmp_path):
    """A folder holding an ``idt_desk`` package that leaves a mark if it is ever imported."""
    folder = tmp_path / "shared"
    (folder / "idt_desk").mkdir(parents=True)
    mark = tmp_path / "IMPORTED"
    (folder / "idt_desk" / "__init__.py").write_text(
        f"open({str(mark)!r}, 'w').write('the working directory ran')\n"
        "raise SystemExit('shadowing idt_desk imported')\n")
    return folder, mark


@pytest.fixture(scope="module")
def recording(tmp_path_factory):
    path = tmp_path_factory.mktemp("made") / "rec"
    run_headless(Session(SessionConfig(speed=None, detector="mewma", baseline_windows=30),
                         record=path), steps=6000)
    return path


def _run_in(folder: Path, *args: str, env: dict[str, str] | None = None
            ) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(args), cwd=folder, capture_output=True, text=True, timeout=180,
                          env={**os.environ, **(env or {})})


def test_replay_and_follow_from_a_folder_with_its_own_idt_desk(shadow, recording):
    folder, mark = shadow
    # The recording sits in the shadowing folder, as in a shared recordings folder.
    local = folder / "rec"
    local.mkdir()
    for f in recording.iterdir():
        (local / f.name).write_bytes(f.read_bytes())
    done = _run_in(folder, IDT_DESK, "run", "--source", "replay", "--set", "path=rec",
                   "--speed", "max")
    assert done.returncode == 0, done.stdout + done.stderr
    followed = _run_in(folder, IDT_DESK, "run", "--source", "replay", "--set", "path=rec",
                       "--set", "follow=true", "--set", "silence=1", "--speed", "max")
    assert followed.returncode == 0, followed.stdout + followed.stderr
    assert not mark.exists()


def test_run_and_record_from_a_folder_with_its_own_idt_desk(shadow):
    folder, mark = shadow
    done = _run_in(folder, IDT_DESK, "run", "--source", "pendulum", "--speed", "max",
                   "--seconds", "90", "--detector", "mewma", "--record", "out")
    assert done.returncode == 0, done.stdout + done.stderr
    assert load_recording(folder / "out").complete
    assert not mark.exists()


def test_a_recorder_script_run_in_a_folder_with_its_own_idt_desk(shadow, tmp_path):
    folder, mark = shadow
    script = tmp_path / "loop.py"
    script.write_text(
        "import numpy as np, idt_desk\n"
        "rng = np.random.default_rng(0)\n"
        "with idt_desk.Recorder('out', ['x', 'v'], ['u'], detector='mewma', window=300,\n"
        "                       stride=50, calibration_windows=5, baseline_windows=50,\n"
        "                       rate=100.0) as rec:\n"
        "    for _ in range(20):\n"
        "        s = rng.normal(size=(500, 2))\n"
        "        rec.add(s, rng.normal(size=(500, 1)), s + 0.1)\n"
        "print(idt_desk.__file__)\n")
    done = _run_in(folder, sys.executable, str(script))
    assert done.returncode == 0, done.stdout + done.stderr
    assert str(folder) not in done.stdout
    assert load_recording(folder / "out").complete
    assert not mark.exists()


def test_watch_from_a_folder_with_its_own_idt_desk(shadow, recording):
    folder, mark = shadow
    done = _run_in(folder, IDT_DESK, "watch", str(recording), "--quit-after", "3",
                   "--silence", "1", env={"QT_QPA_PLATFORM": "offscreen"})
    assert done.returncode == 0, done.stdout + done.stderr
    assert not mark.exists()
