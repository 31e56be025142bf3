"""The session runner, recordings and replay (headless)."""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pandas as pd
import pytest
from idt_desk_sources.pendulum import PendulumSource
from idt_desk_sources.replay import ReplaySource

from idt_desk import Symbolizer, sliding_metrics
from idt_desk.cli import main
from idt_desk.live.plugins import register
from idt_desk.live.session import Session, SessionConfig, run_headless
from idt_desk.recordings import RecordingError, export_recording, load_recording

from .layouts import csv_layout, disk_rows, disk_table, transitions_path
from .toy_source import ToySource

METRICS = ("P", "H_f", "H_b", "dH", "MI", "unique_frac")


def _run(config: SessionConfig, steps: int, record=None, source=None, **schedule):
    session = Session(config, source=source, record=record)
    for at, (kind, args) in schedule.items():
        session.schedule(int(at[1:]), kind, **args)
    snap = run_headless(session, steps=steps)
    return session, snap


def test_session_windows_equal_the_offline_pipeline(tmp_path):
    rec_dir = tmp_path / "rec"
    cfg = SessionConfig(speed=None, calibration_windows=10, baseline_windows=10)
    _, snap = _run(cfg, 6000, record=rec_dir)
    assert snap.state == "stopped" and snap.error is None and snap.n_transitions == 6000
    rec = load_recording(rec_dir)
    assert rec.complete and not rec.warnings
    tr = rec.transitions
    s = tr[[f"s_{j}" for j in range(4)]].to_numpy()
    n = tr[[f"s_next_{j}" for j in range(4)]].to_numpy()
    # S' of one transition is S of the next: a time series, as the pendulum streams it.
    np.testing.assert_array_equal(n[:-1], s[1:])
    need = 300 + 9 * 75
    # The live preset wraps the angles (bins over the whole circle) and spans the rates'
    # energy bounds the source declared at calibration.
    cal = rec.events[rec.events["kind"] == "calibrated"].iloc[0]
    assert cal["i"] == need and set(cal["value_ranges"]) == {"omega1", "omega2"}
    ranges = {2 + j: tuple(cal["value_ranges"][v]) for j, v in enumerate(("omega1", "omega2"))}
    sym = Symbolizer(4, 16, circular=(0, 1)).fit(s[:need], ranges)
    offline = sliding_metrics(sym.transform(s), sym.transform(n), None, 300, 75)
    win = rec.windows
    np.testing.assert_array_equal(win["start"], offline["start"])
    for m in METRICS:
        np.testing.assert_array_equal(win[m].to_numpy(), offline[m], err_msg=m)
    assert 0.4 < win["P"].mean() < 0.5


def test_replay_reproduces_recorded_windows_exactly(tmp_path):
    rec_dir = tmp_path / "rec"
    # A 10-minute budget, not the default hour: the thresholds' fits (the live one, the
    # recalibration, the replay's) simulate null paths 20 budgets long (43 s -> ~20 s).
    cfg = SessionConfig(speed=None, calibration_windows=8, baseline_windows=8,
                        false_alarms="1/10min")
    session = Session(cfg, record=rec_dir)
    session.schedule(2000, "perturb", name="sensor_noise", params={"sigma_angle": 0.1})
    session.schedule(3000, "reconfigure", bins=8, stride=50)
    session.schedule(6000, "calibrate_baseline", n=5)
    session.schedule(7000, "perturb", name="sensor_noise", params=None)
    run_headless(session, steps=9000)
    replay_dir = tmp_path / "replay"
    r_session = Session(SessionConfig(speed=None), source=ReplaySource(path=str(rec_dir)),
                        record=replay_dir)
    snap = run_headless(r_session)
    assert snap.state == "stopped" and snap.n_transitions == 9000
    a, b = load_recording(rec_dir).windows, load_recording(replay_dir).windows
    assert len(a) == len(b) > 100
    for col in a.columns:
        np.testing.assert_array_equal(a[col].to_numpy(), b[col].to_numpy(), err_msg=col)
    ev_a, ev_b = load_recording(rec_dir).events, load_recording(replay_dir).events
    assert "reconfigure" in ev_b["kind"].tolist()
    on_a = ev_a[ev_a["kind"] == "perturbation_on"]["i"].tolist()
    on_b = ev_b[ev_b["kind"] == "perturbation_on"]["i"].tolist()
    assert on_a == on_b == [2000]  # replayed at the transition it happened


def test_replay_at_real_time_speed_is_paced(tmp_path):
    rec_dir = tmp_path / "rec"
    _run(SessionConfig(speed=None), 3000, record=rec_dir)
    session = Session(SessionConfig(speed=2.0), source=ReplaySource(path=str(rec_dir)))
    t0 = time.monotonic()
    run_headless(session, interval=0.05)
    # 3 s of recorded loop time at twice real time: about 1.5 s.
    assert 1.2 < time.monotonic() - t0 < 4.0


def test_scheduled_perturbation_lands_on_its_transition(tmp_path):
    rec_dir = tmp_path / "rec"
    session = Session(SessionConfig(speed=None), record=rec_dir)
    session.schedule(1234, "perturb", name="kick", params={"d_omega1": 5.0})
    session.schedule(2345, "perturb", name="kick", params=None)
    run_headless(session, steps=3000)
    rec = load_recording(rec_dir)
    ev = rec.events.set_index("kind")
    # A one-shot kick is an impulse: one event, no "off" (it was never a state).
    assert ev.loc["perturbation_pulse", "i"] == 1234
    assert ev.loc["perturbation_pulse", "t"] == pytest.approx(1.234, abs=1e-12)
    assert "perturbation_on" not in ev.index and "perturbation_off" not in ev.index
    assert ev.loc["perturbation_pulse", "params"]["d_omega1"] == 5.0
    tr = rec.transitions
    # The kick shows in the stream exactly there: omega1 jumps by 5 rad/s.
    jump = tr["s_next_2"].to_numpy()[1234] - tr["s_2"].to_numpy()[1234]
    assert jump == pytest.approx(5.0, abs=0.1)


def test_live_commands_are_recorded_and_pause_holds_the_loop(tmp_path):
    rec_dir = tmp_path / "rec"
    session = Session(SessionConfig(speed=5.0), record=rec_dir)
    session.start()
    time.sleep(0.6)
    session.perturb("sensor_noise", {"sigma_rate": 0.5})
    session.pause()
    time.sleep(0.2)
    n0 = session.snapshot(1).n_transitions
    time.sleep(0.4)
    assert session.snapshot(1).n_transitions == n0
    assert session.state == "paused"
    session.resume()
    time.sleep(0.4)
    assert session.snapshot(1).n_transitions > n0
    session.note("hello")
    session.perturb("sensor_noise", on=False)
    time.sleep(0.1)
    session.stop()
    assert not session.running
    ev = load_recording(rec_dir).events
    kinds = ev["kind"].tolist()
    for k in ("session_start", "perturbation_on", "pause", "resume", "note", "perturbation_off",
              "session_end"):
        assert k in kinds, k
    on = ev[ev["kind"] == "perturbation_on"].iloc[0]
    assert on["params"] == {"sigma_angle": 0.05, "sigma_rate": 0.5}


def test_speed_paces_the_loop():
    session = Session(SessionConfig(speed=1.0))
    session.start()
    time.sleep(0.5)  # start-up (numba cache load)
    n0, t0 = session.snapshot(1).n_transitions, time.monotonic()
    time.sleep(1.0)
    rate = (session.snapshot(1).n_transitions - n0) / (time.monotonic() - t0)
    # Pacing restarts at the speed change: measured from there, a lag cannot become a burst.
    n1, t1 = session.snapshot(1).n_transitions, time.monotonic()
    session.set_speed(3.0)
    time.sleep(1.5)
    rate3 = (session.snapshot(1).n_transitions - n1) / (time.monotonic() - t1)
    session.stop()
    assert 800 < rate < 1200  # the pendulum's 1 kHz in real time
    assert 2400 < rate3 < 3600


@pytest.mark.parametrize("speed", [None, 1.0])
def test_stop_is_honoured_within_100_ms(speed):
    session = Session(SessionConfig(speed=speed))
    session.start()
    while session.snapshot(1).n_windows < 5:
        time.sleep(0.01)
    t0 = time.perf_counter()
    session.stop()
    assert time.perf_counter() - t0 < 0.1
    assert not session.running and session.state == "stopped"


def test_source_exception_stops_cleanly_and_is_reported(tmp_path):
    rec_dir = tmp_path / "rec"
    session = Session(SessionConfig(speed=None), source=ToySource(fail_at=700), record=rec_dir)
    session.start()
    assert session.wait(10)
    assert session.state == "error"
    assert "failed on purpose" in session.error
    rec = load_recording(rec_dir)
    # Closed and flushed despite the error (every file holds what config.json promises), and
    # the reader says how it ended: not complete, with the reason.
    assert rec.config["complete"] and rec.warnings == [
        "the session ended in error: RuntimeError: toy source failed on purpose"]
    assert not rec.complete and rec.error == "RuntimeError: toy source failed on purpose"
    err = rec.events[rec.events["kind"] == "error"].iloc[0]
    assert "failed on purpose" in err["message"] and "Traceback" in err["traceback"]


def test_auto_modulation_engages_on_persistent_alarm_and_releases(tmp_path):
    rec_dir = tmp_path / "rec"
    # The default detector (persistence, calibrated to 1 false alarm per hour of loop time)
    # on a 400-window baseline: Auto follows the calibrated alarm.
    cfg = SessionConfig(speed=None, window=100, stride=20, calibration_windows=20,
                        baseline_windows=400, auto={"modulation": "hold",
                                                    "params": {"mode": "scale", "scale": 0.2},
                                                    "persist": 4, "release": 5})
    session = Session(cfg, source=ToySource(), record=rec_dir)
    session.schedule(12000, "perturb", name="obs_noise", params={"sigma": 3.0})
    session.schedule(14000, "perturb", name="obs_noise", params=None)
    run_headless(session, steps=18000)
    rec = load_recording(rec_dir)
    ev, win = rec.events, rec.windows
    auto = ev[ev["kind"].isin(["modulation_on", "modulation_off"]) & (ev["auto"] == True)]  # noqa: E712
    assert len(auto) >= 2
    # The perturbation (12000-14000) engages the modulation within a few windows of its onset,
    # and nothing before it does (no false alarm on the unperturbed loop).
    on_starts = auto[auto["kind"] == "modulation_on"]["window_start"].to_numpy()
    assert ((on_starts >= 12000 - 100) & (on_starts <= 12600)).any()
    assert not (ev[ev["kind"] == "alarm_on"]["i"] < 12000).any()
    assert ev[ev["kind"] == "baseline"].iloc[0]["detector"]["detector"] == "persistence"
    # Every switch follows the law: engage after 4 alarmed windows in a row, release after 5
    # quiet ones, alternating.
    alarm = win.set_index("start")["x_IDT"]
    starts = list(alarm.index)
    kinds = auto["kind"].tolist()
    assert all(a != b for a, b in itertools.pairwise(kinds))
    for kind, ws in zip(auto["kind"], auto["window_start"], strict=True):
        k = starts.index(ws)
        run = alarm.iloc[k - (4 if kind == "modulation_on" else 5) + 1: k + 1].to_numpy()
        assert np.all(run == (1.0 if kind == "modulation_on" else 0.0)), (kind, ws, run)
    assert (ev["kind"] == "alarm_on").any()
    assert (ev["kind"] == "episode_end").sum() == 18


def test_manual_modulation_reaches_the_source():
    source = ToySource()
    session = Session(SessionConfig(speed=None), source=source)
    session.start()
    session.modulate("input_filter", {"alpha": 0.2})
    deadline = time.monotonic() + 5
    while "input_filter" not in source.active_modulations and time.monotonic() < deadline:
        time.sleep(0.01)
    assert source.active_modulations["input_filter"] == {"alpha": 0.2}
    session.modulate("input_filter", on=False)
    time.sleep(0.1)
    session.stop()
    assert "input_filter" not in source.active_modulations


def test_passive_source_refuses_modulation():
    session = Session(SessionConfig())
    with pytest.raises(KeyError, match="passive"):
        session.modulate("hold")
    with pytest.raises(KeyError, match="passive"):
        session.set_auto({"modulation": "hold"})


def test_bad_configuration_is_rejected_before_running():
    with pytest.raises(ValueError, match="unknown preset"):
        Session(SessionConfig(preset="nope"))
    with pytest.raises(ValueError, match="expects 17 state variables"):
        Session(SessionConfig(preset="cheetah"))
    s = Session(SessionConfig())
    with pytest.raises(ValueError, match="cannot reconfigure"):
        s.reconfigure(speed=3)
    with pytest.raises(ValueError, match="perturbation sensor_noise: unknown"):
        s.perturb("sensor_noise", {"sigma": 1})


def test_memory_stays_bounded_in_the_ring():
    session = Session(SessionConfig(speed=None, history=50))
    run_headless(session, steps=20000)
    snap = session.snapshot(limit=10**6)
    assert snap.n_windows > 200
    assert len(snap.windows["P"]) == 50  # only the latest history is kept
    assert np.all(np.diff(snap.windows["start"]) == 75)


# --- recordings -----------------------------------------------------------------------------


def test_recording_survives_sigkill(tmp_path):
    rec_dir = tmp_path / "rec"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "idt_desk.cli", "run", "--speed", "1", "--record", str(rec_dir),
         "--quiet"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if transitions_path(rec_dir).exists() and disk_rows(rec_dir) > 2_500:  # 2.5 s
                break
            time.sleep(0.05)
        seen = disk_table(rec_dir)["t"].max()
        t_seen = time.monotonic()
        time.sleep(1.5)
        expected = seen + (time.monotonic() - t_seen)  # loop time at 1x when killed
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    finally:
        if proc.poll() is None:
            proc.kill()
    rec = load_recording(rec_dir)
    assert not rec.complete
    assert any("did not close" in w for w in rec.warnings)
    last = rec.transitions["t"].max()
    assert expected - last <= 1.0  # lost at most the last second
    assert len(rec.windows) > 5 and rec.windows["P"].notna().all()


def test_torn_last_line_is_dropped_not_misread(tmp_path):
    """Format 1's text (tests/test_transitions_log.py tears format 2's last batch)."""
    rec_dir = tmp_path / "rec"
    with csv_layout():
        _run(SessionConfig(speed=None), 2000, record=rec_dir)
    path = rec_dir / "transitions.csv"
    data = path.read_bytes()
    path.write_bytes(data[:-7])  # cut the last line in the middle of a number
    (rec_dir / "events.jsonl").write_text(
        (rec_dir / "events.jsonl").read_text() + '{"kind": "no')
    rec = load_recording(rec_dir)
    assert len(rec.transitions) == 1999
    assert len(rec.warnings) == 2


@pytest.mark.parametrize(
    "make,needle",
    [
        (lambda d: None, "no such recording"),
        (lambda d: d.write_text("x"), "is a directory holding"),
        (lambda d: d.mkdir(), "missing config.json"),
    ],
)
def test_foreign_paths_give_clear_errors(tmp_path, make, needle):
    d = tmp_path / "thing"
    make(d)
    with pytest.raises(RecordingError, match=needle):
        load_recording(d)


def test_damaged_config_gives_clear_error(tmp_path):
    rec_dir = tmp_path / "rec"
    _run(SessionConfig(speed=None), 1000, record=rec_dir)
    (rec_dir / "config.json").write_text("{not json")
    with pytest.raises(RecordingError, match="not valid JSON"):
        load_recording(rec_dir)
    (rec_dir / "config.json").write_text(json.dumps({"format_version": 99}))
    with pytest.raises(RecordingError, match="format_version 99"):
        load_recording(rec_dir)


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_export_round_trips(tmp_path, fmt):
    rec_dir = tmp_path / "rec"
    session = Session(SessionConfig(speed=None), record=rec_dir)
    session.schedule(500, "perturb", name="gravity", params={"factor": 2.0})
    run_headless(session, steps=3000)
    rec = load_recording(rec_dir)
    paths = export_recording(rec, tmp_path / "out", fmt)
    read = pd.read_csv if fmt == "csv" else pd.read_parquet
    tr = read(tmp_path / "out" / f"transitions.{fmt}")
    win = read(tmp_path / "out" / f"windows.{fmt}")
    ev = read(tmp_path / "out" / f"events.{fmt}")
    np.testing.assert_array_equal(tr.to_numpy(), rec.transitions.to_numpy())
    np.testing.assert_array_equal(win["P"].to_numpy(), rec.windows["P"].to_numpy())
    assert "perturbation_on" in ev["kind"].tolist()
    assert len(paths) == 4


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_exports_write_nested_fields_as_json_and_no_dialogue_columns(tmp_path, fmt):
    import json

    from idt_desk.live.config import TURN_COLUMNS

    rec_dir = tmp_path / "rec"
    session = Session(SessionConfig(speed=None, baseline_windows=30), record=rec_dir)
    session.schedule(4500, "perturb", name="sensor_noise",
                     params={"sigma_angle": 0.1, "sigma_rate": 0.3})
    run_headless(session, steps=6000)
    # A pendulum's windows have none of a dialogue's 15 columns, recorded or exported.
    header = (rec_dir / "windows.csv").read_text().partition("\n")[0].split(",")
    assert len(TURN_COLUMNS) == 15 and not set(TURN_COLUMNS) & set(header)
    read = pd.read_csv if fmt == "csv" else pd.read_parquet
    for out, paths in ((tmp_path / "out", export_recording(load_recording(rec_dir),
                                                           tmp_path / "out", fmt)),
                       (tmp_path / "mem", session.export_session(tmp_path / "mem", fmt))):
        assert paths
        win = read(out / f"windows.{fmt}")
        assert not set(TURN_COLUMNS) & set(win.columns) and "P" in win.columns
        ev = read(out / f"events.{fmt}")
        on = ev[ev["kind"] == "perturbation_on"].iloc[0]
        assert json.loads(on["params"]) == {"sigma_angle": 0.1, "sigma_rate": 0.3}


def test_cli_run_export_and_replay(tmp_path, capsys):
    rec_dir = tmp_path / "rec"
    assert main(["run", "--steps", "2500", "--record", str(rec_dir), "--quiet",
                 "--perturb", "coarse_sensor:step_angle=0.5@1-2"]) == 0
    rec = load_recording(rec_dir)
    assert len(rec.transitions) == 2500
    on = rec.events[rec.events["kind"] == "perturbation_on"].iloc[0]
    assert on["i"] == 1000 and on["params"]["step_angle"] == 0.5
    assert main(["export", str(rec_dir), "--format", "csv", "--out", str(tmp_path / "x")]) == 0
    assert (tmp_path / "x" / "windows.csv").exists()
    assert main(["run", "--source", "replay", "--set", f"path={rec_dir}", "--quiet"]) == 0
    assert "2500 transitions" in capsys.readouterr().out
    # Recording into an existing recording is refused, with exit code 2.
    assert main(["run", "--steps", "10", "--record", str(rec_dir), "--quiet"]) == 2


def test_toy_source_registered_at_run_time_runs_through_the_cli(tmp_path):
    register(ToySource)
    assert main(["run", "--source", "toy", "--steps", "1500", "--quiet", "--window", "100",
                 "--stride", "20", "--record", str(tmp_path / "toy")]) == 0
    rec = load_recording(tmp_path / "toy")
    assert rec.action_names == ["u"] and "a_0" in rec.transitions
    assert rec.windows["reward"].notna().all() and (rec.windows["H_A"] > 0).all()


def test_pendulum_session_default_is_the_live_preset():
    s = Session(SessionConfig())
    # Live: the paper's batch-1 numbers with circular angles (the offline reproduction keeps
    # the authors' unwrapped "pendulum" preset).
    assert s.preset.name == "pendulum-live" and s.preset.window == 300
    assert s.preset.angle_mode == "wrap" and s.preset.bins == 16 and s.preset.stride == 75
    assert isinstance(s.source, PendulumSource)


def test_progress_hears_the_end_of_a_run_over_before_its_first_look():
    # A short run at maximum speed can end before run_headless first looks at it: the
    # progress callback still gets the final snapshot (`idt-desk run`'s bar ended at 0 %).
    session = Session(SessionConfig(speed=None))
    start = session.start

    def start_and_finish() -> None:
        start()
        session._thread.join()

    session.start = start_and_finish
    seen = []
    snap = run_headless(session, steps=300, progress=seen.append)
    assert snap.n_transitions == 300
    assert seen and seen[-1].n_transitions == 300


def test_the_agency_shown_at_the_end_is_of_the_last_transitions(tmp_path):
    # A session shorter than the agency's 5 s of wall time took one look near its start;
    # its end shows the conditions of its last W transitions (a fast replay, a short run).
    from tests.toy_source import ToySource

    session = Session(SessionConfig(source="toy", speed=None, window=100, stride=20,
                                    calibration_windows=5, baseline_windows=20),
                      source=ToySource())
    snap = run_headless(session, steps=6000)
    assert snap.n_transitions == 6000
    assert snap.agency is not None and snap.agency["window_end"] == 6000
