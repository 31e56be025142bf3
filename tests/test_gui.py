"""The desktop window (pytest-qt, offscreen)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

pytest.importorskip("pytestqt")

from PySide6.QtCore import Qt

from idt_desk.plugins import discover, register
from idt_desk.recording import load_recording
from idt_desk.session import Session, SessionConfig, run_headless
from widgets.main_window import MainWindow

from .toy_source import ToySource

WAIT = 30_000  # ms; the first test may load the numba cache


@pytest.fixture
def window(qtbot, tmp_path):
    w = MainWindow(speed=None, record_dir=tmp_path / "recordings")
    qtbot.addWidget(w)
    w.show()
    yield w
    w.close()
    assert not w.timer.isActive()
    assert w.session is None or not w.session.running


def _windows_on_plot(w: MainWindow) -> int:
    x, _y = w.plots.curves["P"].getData()
    return 0 if x is None else len(x)


def test_launch_shows_live_pendulum_windows(qtbot, window):
    assert window.source_combo.currentData() == "pendulum"
    qtbot.mouseClick(window.start_button, Qt.MouseButton.LeftButton)
    assert window.timer.isActive() and window.session.running
    qtbot.waitUntil(lambda: _windows_on_plot(window) > 20, timeout=WAIT)
    x, y = window.plots.curves["P"].getData()
    assert np.all(np.diff(x) > 0) and 0.3 < np.nanmean(y) < 0.5
    qtbot.waitUntil(lambda: window.alarms.idt.state in ("ok", "alarm"), timeout=WAIT)
    assert window.plots.bands["P"].isVisible()  # the baseline band, once calibrated
    assert "Baseline: μ ± 3σ" in window.alarms.calibration.text()
    assert window.view._y is not None  # the pendulum is drawn from live data
    assert "transitions" in window.status.text()


def test_perturbation_button_records_an_event_and_shades_the_plot(qtbot, window):
    window.record_button.setChecked(True)  # armed: records from the start
    window.start_session()
    qtbot.waitUntil(lambda: _windows_on_plot(window) > 10, timeout=WAIT)
    button = window.perturb_buttons["sensor_noise"]
    assert button.isEnabled()
    qtbot.mouseClick(button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: any(e["kind"] == "perturbation_on"
                                for e in window.session.snapshot(1).events), timeout=WAIT)
    qtbot.waitUntil(lambda: len(window.plots._regions) == 1, timeout=WAIT)
    onset = next(e for e in window.session.snapshot(1).events if e["kind"] == "perturbation_on")
    region = window.plots._regions[0][0]
    assert region.getRegion()[0] == pytest.approx(onset["t"], abs=0.01)
    qtbot.waitUntil(lambda: "Detected" in window.alarms.latency.text(), timeout=WAIT)
    qtbot.mouseClick(button, Qt.MouseButton.LeftButton)  # off again
    qtbot.mouseClick(window.stop_button, Qt.MouseButton.LeftButton)
    rec = load_recording(window.last_recording)
    kinds = rec.events["kind"].tolist()
    assert kinds.count("perturbation_on") == 1 and kinds.count("perturbation_off") == 1
    on = rec.events[rec.events["kind"] == "perturbation_on"].iloc[0]
    assert on["name"] == "sensor_noise" and on["params"]["sigma_rate"] == 0.3
    # Export buttons write the tables.
    assert window.export_csv_button.isEnabled()
    qtbot.mouseClick(window.export_parquet_button, Qt.MouseButton.LeftButton)
    out = window.last_recording.with_name(window.last_recording.name + "-parquet")
    assert (out / "windows.parquet").exists() and (out / "events.parquet").exists()


def test_pause_speed_baseline_and_resymbolise_controls(qtbot, window):
    window.speed_combo.setCurrentText("1× (real time)")
    window.start_session()
    qtbot.waitUntil(lambda: window.session.snapshot(1).n_transitions > 200, timeout=WAIT)
    window.pause_button.click()
    qtbot.waitUntil(lambda: window.session.state == "paused", timeout=WAIT)
    n = window.session.snapshot(1).n_transitions
    qtbot.wait(300)
    assert window.session.snapshot(1).n_transitions == n
    window.pause_button.click()
    window.speed_combo.setCurrentText("max")
    qtbot.waitUntil(lambda: window.session.snapshot(1).n_transitions > n + 3000, timeout=WAIT)
    window.baseline_spin.setValue(12)
    window.baseline_button.click()
    window.preset_combo.setCurrentText("pendulum-batch2")
    window.apply_symbols_button.click()
    qtbot.waitUntil(lambda: window.session.snapshot(1).preset["name"] == "pendulum-batch2",
                    timeout=WAIT)
    kinds = [e["kind"] for e in window.session.snapshot(1).events]
    assert {"pause", "resume", "speed", "calibrate_baseline", "reconfigure"} <= set(kinds)
    qtbot.waitUntil(lambda: window.session.snapshot(1).preset["window"] == 150, timeout=WAIT)


def test_passive_source_explains_why_modulation_is_disabled(window):
    assert not window.modulate_buttons
    label = window.findChild(type(window.source_info), "modulation_disabled")
    assert label is not None and "passive" in label.text()
    assert not window.auto_check.isEnabled()


def test_agent_source_gets_generated_modulation_panel(qtbot, window):
    register(ToySource)
    window.source_combo.addItem(ToySource.label, "toy")
    window._entries = discover()
    window._select_source("toy", {})
    assert set(window.modulate_buttons) == {"hold", "input_filter", "dim_reduction"}
    assert window.plots.plots["reward"].isVisible() and window.alarms.lights["reward"].isVisible()
    window.window_spin.setValue(100)
    window.stride_spin.setValue(20)
    window.start_session()
    qtbot.waitUntil(lambda: window.session.snapshot(1).n_windows > 5, timeout=WAIT)
    window.modulate_forms["hold"].set_values({"mode": "repeat"})
    window.modulate_buttons["hold"].click()
    qtbot.waitUntil(lambda: "hold" in window.session.snapshot(1).active_modulations,
                    timeout=WAIT)
    assert window.session.snapshot(1).active_modulations["hold"]["mode"] == "repeat"
    qtbot.waitUntil(lambda: len(window.plots._regions) == 1, timeout=WAIT)  # shaded


def test_source_errors_show_in_the_banner(qtbot, window):
    register(ToySource)
    window._entries = discover()
    window.source_combo.addItem(ToySource.label, "toy")
    window._select_source("toy", {"fail_at": 300})
    window.start_session()
    qtbot.waitUntil(lambda: window.banner.isVisible(), timeout=WAIT)
    assert "failed on purpose" in window.banner.text()
    qtbot.waitUntil(lambda: window.start_button.isEnabled(), timeout=WAIT)


def test_bad_settings_show_a_message_not_a_traceback(window):
    window._select_source("replay", {"path": "/no/such/recording"})
    assert window.start_session() is False
    assert window.banner.isVisible() and "no such recording" in window.banner.text()


def test_replay_in_the_window_reproduces_the_recorded_windows(qtbot, window, tmp_path):
    rec_dir = tmp_path / "rec"
    run_headless(Session(SessionConfig(speed=None), record=rec_dir), steps=6000)
    window._select_source("replay", {"path": str(rec_dir)})
    window.start_session()
    qtbot.waitUntil(lambda: not window.session.running, timeout=WAIT)
    got = window.session.snapshot(limit=10**6).windows
    want = load_recording(rec_dir).windows
    np.testing.assert_array_equal(got["P"], want["P"].to_numpy())
    np.testing.assert_array_equal(got["dH"], want["dH"].to_numpy())
    assert window.start_button.isEnabled() and not window.timer.isActive()


def test_plots_export_to_png_and_svg(qtbot, window, tmp_path):
    window.start_session()
    qtbot.waitUntil(lambda: _windows_on_plot(window) > 5, timeout=WAIT)
    window.plots.export(str(tmp_path / "plots.png"))
    window.plots.export(str(tmp_path / "plots.svg"))
    assert (tmp_path / "plots.png").stat().st_size > 5000
    assert "<svg" in (tmp_path / "plots.svg").read_text()[:2000]


def test_closing_stops_the_worker_and_the_timer(qtbot, tmp_path):
    w = MainWindow(speed=None, record_dir=tmp_path)
    qtbot.addWidget(w)
    w.show()
    w.start_session()
    qtbot.waitUntil(lambda: w.session.snapshot(1).n_transitions > 100, timeout=WAIT)
    thread = w.session._thread
    w.close()
    assert not thread.is_alive() and not w.timer.isActive()


@pytest.mark.parametrize("name", sorted(discover()))
def test_smoke_every_source_runs_for_a_second(qtbot, tmp_path, name):
    settings = {}
    if name == "replay":
        rec = tmp_path / "rec"
        run_headless(Session(SessionConfig(speed=None), record=rec), steps=3000)
        settings = {"path": str(rec)}
    w = MainWindow(source=name, settings=settings, speed=1.0, record_dir=tmp_path)
    qtbot.addWidget(w)
    w.show()
    assert w.start_session(), w.banner.text()
    qtbot.wait(1000)
    assert w.session.error is None
    qtbot.waitUntil(lambda: w.session.snapshot(1).n_transitions > 0, timeout=WAIT)
    w.close()
    assert not w.session.running


def test_gui_recording_survives_sigkill(tmp_path):
    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen", "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "idt_desk.cli", "gui", "--start", "--speed", "1",
         "--record", str(tmp_path)], env=env,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        rec = None
        while time.monotonic() < deadline:
            found = [p for p in tmp_path.glob("pendulum-*/windows.csv") if p.stat().st_size > 3000]
            if found:
                rec = found[0].parent
                break
            time.sleep(0.1)
        assert rec is not None, "the GUI never started recording"
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    finally:
        if proc.poll() is None:
            proc.kill()
    loaded = load_recording(rec)
    assert not loaded.complete and len(loaded.windows) > 3 and len(loaded.transitions) > 1000
