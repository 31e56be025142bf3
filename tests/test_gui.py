"""The desktop window (pytest-qt, offscreen)."""

from __future__ import annotations

import html
import itertools
import json
import os
import signal
import subprocess
import sys
import time
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("pytestqt")

import pyqtgraph as pg
from idt_desk_widgets.main_window import MainWindow
from PySide6.QtCore import QPoint, Qt
from PySide6.QtWidgets import QApplication, QCheckBox, QLabel, QMessageBox, QPushButton, QWidget

from idt_desk.live.plugins import discover, register
from idt_desk.live.ranges import recheck_text
from idt_desk.live.session import Session, SessionConfig, run_headless
from idt_desk.recordings import load_recording
from tests.layouts import disk_rows, transitions_path

from .toy_source import ToySource

WAIT = 30_000  # ms; the first test may load the numba cache


def _clear_when_asked(monkeypatch) -> None:
    """Reset's question (an unrecorded session) answered: clear it."""
    monkeypatch.setattr(QMessageBox, "question",
                        staticmethod(lambda *_a: QMessageBox.StandardButton.Reset))


def _windows_on_plot(w: MainWindow) -> int:
    x, _y = w.plots.curves["P"].getData()
    return 0 if x is None else len(x)


def _period_labels(w: MainWindow) -> list[str]:
    """Texts written at the top of the shaded periods (P plot)."""
    out = []
    for items in w.plots._regions:
        for child in items[0].lines[0].childItems():
            if isinstance(child, pg.InfLineLabel):
                out.append(child.textItem.toPlainText())
    return out


def _legend_texts(w: MainWindow) -> list[str]:
    return [label.text for _sample, label in w.plots.legend.items]


def test_launch_shows_live_pendulum_windows(qtbot, window):
    assert window.source_panel.source_combo.currentData() == "pendulum"
    # Before Start: the empty plots say what to do; the alarm says it is not running.
    assert window.plots.hint.isVisible() and "Press <b>Start</b>" in window.plots.hint.text()
    assert window.alarms.idt.state == "idle" and "not running" in window.alarms.idt.text()
    qtbot.mouseClick(window.source_panel.start_button, Qt.MouseButton.LeftButton)
    # The source is built on a thread of its own; the session starts once it is.
    qtbot.waitUntil(lambda: window.session is not None and window.session.running,
                    timeout=WAIT)
    assert window.timer.isActive()
    qtbot.waitUntil(lambda: _windows_on_plot(window) > 20, timeout=WAIT)
    assert not window.plots.hint.isVisible()  # gone once windows arrive
    x, y = window.plots.curves["P"].getData()
    assert np.all(np.diff(x) > 0) and 0.3 < np.nanmean(y) < 0.5
    qtbot.waitUntil(lambda: window.alarms.idt.state in ("ok", "alarm"), timeout=WAIT)
    assert window.plots.bands["P"].isVisible()  # the baseline band, once calibrated
    text = window.alarms.calibration.text()
    assert "Alarm: persistence (5 windows in a row), ≤ 1 false alarm / hour" in text
    assert "Baseline: 800 windows, long enough for the budget" in text
    assert window.view._y is not None  # the pendulum is drawn from live data
    assert "transitions" in window.status_line.status.text()
    # Entropy bands stop at 0 bits; ΔH's may go below.
    b = window.session.snapshot(1).baseline
    for key in ("P", "H_f", "H_b"):
        lo, hi = window.plots.bands[key].getRegion()
        assert lo == pytest.approx(max(b.band(key)[0], 0.0)) and lo >= 0.0
        assert hi == pytest.approx(b.band(key)[1])
    lo = window.plots.bands["dH"].getRegion()[0]
    assert lo == pytest.approx(b.band("dH")[0]) and lo < 0
    # One legend for the whole stack, naming every kind of mark.
    texts = _legend_texts(window)
    assert {"baseline mean", "alarm band (kσ)", "alarmed window", "perturbation",
            "impulse (kick)"} <= set(texts)
    # (The dialogue's structural-baselines plot and the physics' residual keep a legend for
    # their curves; the first is hidden unless a session computes them.)
    own = {"cos_sim", "R_spread_pos"}
    assert all(p.legend is None for k, p in window.plots.plots.items() if k not in own)
    assert window.plots.plots["R_spread_pos"].legend is not None
    assert not window.plots.plots["cos_sim"].isVisible()
    assert "H<sub>f</sub>" in window.plots.plots["H_f"].getAxis("left").labelText
    assert "H<sub>b</sub>" in window.alarms.lights["H_b"].text()


def test_alarm_lights_say_their_state(qtbot, window):
    lights = window.alarms.lights
    assert window.alarms.idt.text() == "IDT: not running"
    assert all("waiting" in lt.text() for lt in lights.values())
    window.source_panel.speed_combo.setCurrentText("0.1×")
    window.start_session()
    qtbot.waitUntil(lambda: "calibrating symbols" in window.alarms.idt.text(), timeout=WAIT)
    assert window.alarms.idt.state == "idle"
    # The empty plots say why, once the loop's first step is taken (after the kernels load).
    qtbot.waitUntil(lambda: "Calibrating symbols" in window.plots.hint.text(), timeout=WAIT)
    assert "no baseline yet" in lights["P"].toolTip()
    window.source_panel.speed_combo.setCurrentText("max")
    qtbot.waitUntil(lambda: window.alarms.idt.state != "idle", timeout=WAIT)
    idt = window.alarms.idt
    assert idt.text() == ("IDT ALARM" if idt.state == "alarm" else "IDT: no alarm")
    for key in ("P", "H_f", "H_b", "dH"):
        light = lights[key]
        assert light.state in ("ok", "alarm")
        if light.state == "alarm":  # an excursion says which way
            assert "▲ high" in light.text() or "▼ low" in light.text()
            assert "alarm" in light.toolTip()
        else:
            assert "ok" in light.text()
    window.switches.perturb_buttons["sensor_noise"].click()
    qtbot.waitUntil(lambda: window.alarms.idt.state == "alarm", timeout=WAIT)
    assert window.alarms.idt.text() == "IDT ALARM"
    qtbot.waitUntil(lambda: "▲ high" in lights["H_f"].text(), timeout=WAIT)  # noise: H_f up
    qtbot.waitUntil(lambda: "Sensor noise" in _period_labels(window), timeout=WAIT)
    window.stop_session(wait=True)
    assert "session stopped" in window.alarms.idt.text()


@pytest.mark.parametrize("own_process", [False, True], ids=["thread", "process"])
def test_perturbation_button_records_an_event_and_shades_the_plot(qtbot, window, own_process,
                                                                  tmp_path, monkeypatch):
    window.own_process = own_process  # a session in a process of its own acts the same
    window.record_panel.record_button.setChecked(True)  # armed: records from the start
    window.start_session()
    # Once the baseline is set: switched on while it is gathered, the noise would be part of
    # it (said as a baseline_overlap) and the alarm calibrated on it could not see it.
    qtbot.waitUntil(lambda: window.session.snapshot(1).detector["calibrated"], timeout=4 * WAIT)
    qtbot.waitUntil(lambda: _windows_on_plot(window) > 10, timeout=WAIT)
    button = window.switches.perturb_buttons["sensor_noise"]
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
    qtbot.mouseClick(window.source_panel.stop_button, Qt.MouseButton.LeftButton)
    # At max speed the writer closes on up to a second's rows: the window says "stopping"
    # meanwhile and gives the controls back when the recording is whole.
    qtbot.waitUntil(lambda: not window.session.running and
                    window.record_panel.export_csv_button.isEnabled(), timeout=WAIT)
    rec = load_recording(window.record_panel.last_recording)
    kinds = rec.events["kind"].tolist()
    assert kinds.count("perturbation_on") == 1 and kinds.count("perturbation_off") == 1
    on = rec.events[rec.events["kind"] == "perturbation_on"].iloc[0]
    assert on["name"] == "sensor_noise" and on["params"]["sigma_rate"] == 0.3
    # Export buttons ask where (the folder beside the recording proposed), then write the
    # tables off the GUI thread, saying how far they are and, at the end, what they wrote.
    from PySide6.QtWidgets import QFileDialog

    panel = window.record_panel
    assert panel.export_csv_button.isEnabled()
    last = panel.last_recording
    asked, chosen = [], tmp_path / "my-export"

    def choose(_parent, _title, proposed, _filter):
        asked.append(proposed)
        return str(chosen), ""

    monkeypatch.setattr(QFileDialog, "getSaveFileName", staticmethod(choose))
    said = []
    panel.message.connect(said.append)
    qtbot.mouseClick(panel.export_parquet_button, Qt.MouseButton.LeftButton)
    assert asked == [str(last.with_name(last.name + "-parquet"))]
    assert panel.exporting and not panel.export_csv_button.isEnabled()
    assert panel.export_parquet_button.text().startswith("Exporting PARQUET")
    qtbot.waitUntil(lambda: not panel.exporting, timeout=WAIT)
    assert (chosen / "windows.parquet").exists() and (chosen / "events.parquet").exists()
    assert said[0].startswith("exporting PARQUET into") and " MB in " in said[-1]
    assert panel.export_parquet_button.text() == "Export Parquet"
    assert panel.export_csv_button.isEnabled()
    if own_process:  # its process lets the session go with the window, and waits warm
        from idt_desk.live import process

        proc = window.session._proc
        window.close()
        assert process._STANDBY["pendulum"][0] is proc and proc.poll() is None


def test_pause_speed_baseline_and_resymbolise_controls(qtbot, window):
    window.source_panel.speed_combo.setCurrentText("1× (real time)")
    window.start_session()
    qtbot.waitUntil(lambda: window.session.snapshot(1).n_transitions > 200, timeout=WAIT)
    window.source_panel.pause_button.click()
    qtbot.waitUntil(lambda: window.session.state == "paused", timeout=WAIT)
    n = window.session.snapshot(1).n_transitions
    qtbot.wait(300)
    assert window.session.snapshot(1).n_transitions == n
    window.source_panel.pause_button.click()
    window.source_panel.speed_combo.setCurrentText("max")
    qtbot.waitUntil(lambda: window.session.snapshot(1).n_transitions > n + 3000, timeout=WAIT)
    window.pipeline_panel.baseline_spin.setValue(12)
    window.pipeline_panel.baseline_button.click()
    window.pipeline_panel.preset_combo.setCurrentText("pendulum-batch2")
    window.pipeline_panel.apply_symbols_button.click()
    qtbot.waitUntil(lambda: window.session.snapshot(1).preset["name"] == "pendulum-batch2",
                    timeout=WAIT)
    # The loop logs the change just after it applies it: a snapshot between the two holds
    # the new preset and not yet its event (seen once in CI).
    qtbot.waitUntil(lambda: "reconfigure" in
                    [e["kind"] for e in window.session.snapshot(1).events], timeout=WAIT)
    kinds = [e["kind"] for e in window.session.snapshot(1).events]
    assert {"pause", "resume", "speed", "calibrate_baseline", "reconfigure"} <= set(kinds)
    qtbot.waitUntil(lambda: window.session.snapshot(1).preset["window"] == 150, timeout=WAIT)


def test_status_bar_separates_loop_rate_compute_and_frame_rate(qtbot, window, monkeypatch):
    window.source_panel.speed_combo.setCurrentText("1× (real time)")
    window.start_session()
    fps, rates = window.status_line.fps_label, window.status_line.rates
    qtbot.waitUntil(lambda: fps.text() != "GUI —", timeout=WAIT)
    assert fps.text().endswith(" fps")
    qtbot.waitUntil(lambda: "loop 1," in rates.text() or "loop 9" in rates.text(),
                    timeout=WAIT)  # about 1,000 transitions per second at real time
    assert "compute" in rates.text() and "tr/s" in rates.text()
    window.stop_session(wait=True)
    # No stale frame rate or loop rate once nothing runs.
    assert fps.text() == "GUI —" and "loop —" in rates.text()
    _clear_when_asked(monkeypatch)
    window.reset_session()
    assert fps.text() == "GUI —"


@pytest.mark.parametrize("speed, label", [(3.0, "3×"), (2.0, "2×"), (0.75, "0.75×"),
                                          (None, "max")])
def test_any_speed_is_shown_and_used(qtbot, tmp_path, speed, label):
    w = MainWindow(speed=speed, record_dir=tmp_path)
    qtbot.addWidget(w)
    combo = w.source_panel.speed_combo
    items = [combo.itemText(i) for i in range(combo.count())]
    assert combo.currentText() == label and items.count(label) == 1
    numeric = [w.source_panel.speeds[t] for t in items if w.source_panel.speeds[t] is not None]
    assert numeric == sorted(numeric)  # a new multiple sits in order among the presets
    assert w.start_session()
    assert w.session.config.speed == speed
    qtbot.waitUntil(lambda: w.session.snapshot(1).speed == speed, timeout=WAIT)
    w.close()


def test_a_speed_that_is_not_positive_falls_back_with_a_message(qtbot, tmp_path):
    w = MainWindow(speed=-2.0, record_dir=tmp_path)
    qtbot.addWidget(w)
    assert w.source_panel.speed_combo.currentText() == "1× (real time)"
    assert "speed must be a positive multiple" in w.banner.text()


def test_kick_with_period_0_is_a_one_shot_marker(qtbot, window):
    window.start_session()
    qtbot.waitUntil(lambda: _windows_on_plot(window) > 5, timeout=WAIT)
    button = window.switches.perturb_buttons["kick"]
    assert window.switches.perturb_forms["kick"].values()["period"] == 0
    qtbot.mouseClick(button, Qt.MouseButton.LeftButton)
    assert not button.isChecked()  # an impulse, not a state: the button does not stay down

    def pulses():
        return [e for e in window.session.snapshot(1).events
                if e["kind"] == "perturbation_pulse"]

    qtbot.waitUntil(lambda: len(pulses()) == 1, timeout=WAIT)
    qtbot.waitUntil(lambda: len(window.plots._pulses) == 1, timeout=WAIT)
    line = window.plots._pulses[0][0]
    assert isinstance(line, pg.InfiniteLine) and line.angle == 90
    assert line.value() == pytest.approx(pulses()[0]["t"], abs=1e-3)
    assert not window.plots._regions  # a marker, not a band
    snap = window.session.snapshot(1)
    assert "kick" not in snap.active_perturbations and not button.isChecked()
    # A repeating kick is a state: a toggle and a band.
    window.switches.perturb_forms["kick"].set_values({"period": 0.5})
    qtbot.mouseClick(button, Qt.MouseButton.LeftButton)
    assert button.isChecked()
    qtbot.waitUntil(lambda: len(window.plots._regions) == 1, timeout=WAIT)
    assert _period_labels(window) == ["Kick · period=0.5"]  # a repeating kick: a band
    qtbot.mouseClick(button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: "kick" not in window.session.snapshot(1).active_perturbations,
                    timeout=WAIT)
    assert len(pulses()) == 1 and len(window.plots._pulses) == 1


def test_out_of_range_symbols_show_a_notice_that_recalibrates(qtbot, window, monkeypatch):
    # A big kick takes the pendulum's velocities far outside the calibrated bins.
    kick = {"d_omega1": 40.0, "d_omega2": -40.0, "period": 0.0}
    window.pipeline_panel.baseline_spin.setValue(30)  # a verdict before the kick at 6 s
    window.start_session(schedule=[(6000, "perturb", {"name": "kick", "params": kick})])
    bar, notice = window.alarms.out_of_range, window.alarms.notice
    assert bar.isVisible() and not notice.isVisible()
    qtbot.waitUntil(lambda: notice.isVisible(), timeout=WAIT)
    snap = window.session.snapshot(10**6)
    assert snap.out_of_range_warning is not None
    assert "no longer covers the data" in window.alarms.notice_text.text()
    assert "out of calibrated range" in window.alarms.idt.text()
    before = snap.windows["out_of_range"][snap.windows["end"] <= 6000]
    assert before.size and np.all(before < 0.05)  # in range before the kick
    snap = window.session.snapshot(window.history)
    window.alarms.update_snapshot(snap)
    frac = snap.windows["out_of_range"][-1]
    assert snap.out_of_range_warning["fraction"] > 0.05
    assert bar.value() == round(1000 * frac) and f"{100 * frac:.0f} %" in bar.format()
    assert f"{snap.out_of_range_warning['fraction']:.0%} of the" in window.alarms.notice_text.text()
    # Re-checked against the baseline with bins that cover the data: the notice says what.
    check = snap.out_of_range_warning["recheck"]
    assert html.escape(recheck_text(check)) in window.alarms.notice_text.text()
    assert "Re-checked with bins widened" in window.alarms.notice_text.text()
    # The loop itself changed (the kick raised its energy): re-calibrating would take the new
    # loop as normal, so the button says "anyway" and asks; Cancel keeps the symbols.
    def verdict():
        return ((window.session.snapshot(1).out_of_range_warning or {}).get("recheck")
                or {}).get("verdict")

    qtbot.waitUntil(lambda: verdict() == "shift", timeout=WAIT)
    qtbot.waitUntil(lambda: "anyway" in window.alarms.recalibrate_button.text(), timeout=WAIT)
    asked, answer = [], [QMessageBox.StandardButton.Cancel]

    def question(_parent, title, text, *_a):
        asked.append((title, text))
        return answer[0]

    monkeypatch.setattr(QMessageBox, "question", staticmethod(question))
    reconfigured = []
    monkeypatch.setattr(window.session, "reconfigure", lambda *a, plain=window.session.reconfigure,
                        **k: (reconfigured.append(1), plain(*a, **k))[1])
    qtbot.mouseClick(window.alarms.recalibrate_button, Qt.MouseButton.LeftButton)
    assert len(asked) == 1 and "changed loop" in asked[0][0] and "sd" in asked[0][1]
    assert not reconfigured and window.session.snapshot(1).out_of_range_warning is not None
    answer[0] = QMessageBox.StandardButton.Yes
    qtbot.mouseClick(window.alarms.recalibrate_button, Qt.MouseButton.LeftButton)
    assert len(asked) == 2 and reconfigured == [1]
    qtbot.waitUntil(lambda: any(e["kind"] == "reconfigure"
                                for e in window.session.snapshot(1).events), timeout=WAIT)
    qtbot.waitUntil(lambda: not notice.isVisible(), timeout=WAIT)
    qtbot.waitUntil(lambda: window.alarms.idt.state != "idle", timeout=WAIT)
    assert window.session.snapshot(1).out_of_range_warning is None


def test_undefined_p_is_a_marked_gap_never_ok(qtbot, tmp_path):
    # A pendulum hanging at rest: every symbol of every window is the same, so P is 0/0.
    w = MainWindow(speed=None, settings={"theta1": 0.0, "theta2": 0.0}, record_dir=tmp_path)
    qtbot.addWidget(w)
    w.show()
    w.start_session()
    qtbot.waitUntil(lambda: w.alarms.idt.state != "idle", timeout=WAIT)
    qtbot.waitUntil(lambda: len(w.plots.undefined.data) > 5, timeout=WAIT)
    light = w.alarms.lights["P"]
    assert light.state == "undefined" and "undefined" in light.text()
    assert w.alarms.undefined.isVisible()
    assert "Latest window: P undefined" in w.alarms.undefined.text()
    assert "constant window" in w.alarms.undefined.text()
    x, y = w.plots.curves["P"].getData()
    assert np.all(np.isnan(y))  # drawn as a gap
    marks = w.plots.undefined.data
    assert set(marks["x"]) <= set(x) and "constant window" in marks["data"][0]
    assert "P undefined" in _legend_texts(w)
    assert not w.plots.bands["P"].isVisible()  # no baseline of an undefined metric
    w.close()


def _fits(scroll: QWidget) -> list[str]:
    """Widgets of the control panel that are cut off or stick out of the visible area."""
    view = scroll.viewport()
    bad = []
    for c in scroll.widget().findChildren(QWidget):
        if not c.isVisible() or c.width() == 0:
            continue
        right = c.mapTo(view, QPoint(c.width(), 0)).x()
        name = f"{type(c).__name__} {c.objectName()!r} {getattr(c, 'text', lambda: '')()!r}"
        if right > view.width():
            bad.append(f"{name} ends at {right} > {view.width()}")
        if isinstance(c, QPushButton | QCheckBox) and c.text():
            need = c.fontMetrics().horizontalAdvance(c.text()) + 8
            if c.width() < need and c.text() != "…":
                bad.append(f"{name}: {c.width()} px < {need} px of text")
        elif isinstance(c, QLabel) and not c.wordWrap() and c.text():
            if c.width() < c.minimumSizeHint().width():
                bad.append(f"{name}: clipped")
        elif c.width() < c.minimumSizeHint().width() and not isinstance(c, QLabel):
            bad.append(f"{name}: {c.width()} < {c.minimumSizeHint().width()}")
    return bad


@pytest.mark.parametrize("name", ["pendulum", "replay", "toy", "dialogue"])
def test_control_panel_needs_no_horizontal_scrolling(qtbot, tmp_path, name):
    register(ToySource)
    w = MainWindow(speed=1.0, record_dir=tmp_path)
    qtbot.addWidget(w)
    if name == "toy":
        w.source_panel.source_combo.addItem(ToySource.label, "toy")
        w.source_panel.entries = discover()
    w.select_source(name, {})
    w.show()
    qtbot.waitExposed(w)
    assert (w.width(), w.height()) == (1400, 900)
    scroll = w.controls_scroll
    qtbot.wait(50)
    assert scroll.horizontalScrollBar().maximum() == 0
    assert not scroll.horizontalScrollBar().isVisible()
    assert _fits(scroll) == []
    if w.switches.perturb_buttons:  # every perturbation's parameter form is shown and fits
        assert all(f.isVisible() for f in w.switches.perturb_forms.values())
    w.close()


def test_passive_source_explains_why_modulation_is_disabled(window):
    assert not window.switches.modulate_buttons
    label = window.findChild(type(window.source_panel.source_info), "modulation_disabled")
    assert label is not None and "passive" in label.text()
    assert not window.switches.auto_check.isEnabled()


def test_agent_source_gets_generated_modulation_panel(qtbot, window):
    register(ToySource)
    window.source_panel.source_combo.addItem(ToySource.label, "toy")
    window.source_panel.entries = discover()
    window.select_source("toy", {})
    assert set(window.switches.modulate_buttons) == {"hold", "input_filter", "dim_reduction"}
    assert window.plots.plots["reward"].isVisible() and window.alarms.lights["reward"].isVisible()
    window.pipeline_panel.window_spin.setValue(100)
    window.pipeline_panel.stride_spin.setValue(20)
    window.start_session()
    qtbot.waitUntil(lambda: window.session.snapshot(1).n_windows > 5, timeout=WAIT)
    window.switches.modulate_forms["hold"].set_values({"mode": "repeat"})
    window.switches.modulate_buttons["hold"].click()
    qtbot.waitUntil(lambda: "hold" in window.session.snapshot(1).active_modulations,
                    timeout=WAIT)
    assert window.session.snapshot(1).active_modulations["hold"]["mode"] == "repeat"
    qtbot.waitUntil(lambda: len(window.plots._regions) == 1, timeout=WAIT)  # shaded
    # Labelled with the modulation's name and the parameter that differs from its default.
    assert _period_labels(window) == ["Hold · mode=repeat"]
    assert "modulation" in _legend_texts(window)


def test_source_errors_show_in_the_banner(qtbot, window):
    register(ToySource)
    window.source_panel.entries = discover()
    window.source_panel.source_combo.addItem(ToySource.label, "toy")
    window.select_source("toy", {"fail_at": 300})
    window.start_session()
    qtbot.waitUntil(lambda: window.banner.isVisible(), timeout=WAIT)
    assert "failed on purpose" in window.banner.text()
    qtbot.waitUntil(lambda: window.source_panel.start_button.isEnabled(), timeout=WAIT)


def test_bad_settings_show_a_message_not_a_traceback(window):
    window.select_source("replay", {"path": "/no/such/recording"})
    assert window.start_session() is False
    assert window.banner.isVisible() and "no such recording" in window.banner.text()


def test_replay_in_the_window_reproduces_the_recorded_windows(qtbot, window, tmp_path):
    rec_dir = tmp_path / "rec"
    run_headless(Session(SessionConfig(speed=None), record=rec_dir), steps=6000)
    window.select_source("replay", {"path": str(rec_dir)})
    window.start_session()
    qtbot.waitUntil(lambda: not window.session.running, timeout=WAIT)
    got = window.session.snapshot(limit=10**6).windows
    want = load_recording(rec_dir).windows
    np.testing.assert_array_equal(got["P"], want["P"].to_numpy())
    np.testing.assert_array_equal(got["dH"], want["dH"].to_numpy())
    # The window's timer settles the controls at its next tick after the worker ends.
    start = window.source_panel.start_button
    qtbot.waitUntil(lambda: start.isEnabled() and not window.timer.isActive(), timeout=WAIT)


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
    # A dialogue's first turn waits for its model to load and answer (tens of seconds on a
    # loaded two-core machine): its first transition is given longer.
    qtbot.waitUntil(lambda: w.session.snapshot(1).n_transitions > 0,
                    timeout=WAIT * (4 if name == "dialogue" else 1))
    w.close()
    assert not w.session.running


def test_gui_recording_survives_sigkill(tmp_path):
    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen", "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "idt_desk.cli", "gui", "--start", "--speed", "1",
         "--record", str(tmp_path / "rec")], env=env,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        rec = None
        while time.monotonic() < deadline:
            # Into DIR itself, as `run --record DIR` (it wrote into DIR/pendulum-STAMP).
            found = [p for p in tmp_path.glob("rec/windows.csv") if p.stat().st_size > 3000]
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


def _wheel(widget, steps: int = -3) -> None:
    """A real wheel turn (``steps`` notches; negative: towards the user) over ``widget``.

    Through the window system (``QTest.wheelEvent``): a spontaneous event, as a mouse sends
    it, which Qt lets focus a box (its focus policy permitting) before any event filter runs.
    An event sent with ``QApplication.sendEvent`` is not spontaneous and never does.
    """
    from PySide6.QtCore import QPointF
    from PySide6.QtTest import QTest

    top = widget.window()
    pos = widget.mapTo(top, QPoint(widget.width() // 2, widget.height() // 2))
    QTest.wheelEvent(top.windowHandle(), QPointF(pos), QPoint(0, 120 * steps))
    QApplication.processEvents()


def test_the_mouse_wheel_scrolls_the_panel_and_never_changes_a_setting(qtbot, window):
    window.resize(1024, 700)
    qtbot.wait(50)
    bar = window.controls_scroll.verticalScrollBar()
    assert bar.maximum() > 0  # the panel is taller than the window: it scrolls
    theta2 = window.source_panel.settings_form.editors["theta2"]
    kick = window.switches.perturb_forms["kick"].editors["d_omega2"]
    sigma = window.switches.perturb_forms["sensor_noise"].editors["sigma_angle"]
    damping = window.switches.perturb_forms["friction"].editors["damping"]
    pipeline = window.pipeline_panel
    boxes = [theta2, kick, sigma, damping, pipeline.baseline_spin, pipeline.k_spin,
             pipeline.detector_combo, pipeline.preset_combo]
    before = [b.value() if hasattr(b, "value") else b.currentIndex() for b in boxes]
    for box in boxes:
        # The box under the pointer, never clicked; the panel can scroll down from there.
        bar.setValue(0)
        window.controls_scroll.ensureWidgetVisible(box)
        start = bar.value()
        assert start < bar.maximum(), box
        _wheel(box)
        assert bar.value() > start, box  # the wheel went to the panel
        assert not box.hasFocus(), box  # and did not focus the box
    after = [b.value() if hasattr(b, "value") else b.currentIndex() for b in boxes]
    assert after == before
    # Clicked into (focused), a box takes the wheel as Qt intends.
    bar.setValue(0)
    qtbot.mouseClick(theta2, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(theta2.hasFocus)
    _wheel(theta2, steps=1)
    assert theta2.value() != before[0]


@pytest.mark.parametrize("sig,code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_signal_to_the_gui_completes_its_recording(tmp_path, sig, code):
    proc = subprocess.Popen(
        [sys.executable, "-m", "idt_desk.cli", "gui", "--start", "--speed", "max",
         "--record", str(tmp_path / "rec")],
        env={**os.environ, "QT_QPA_PLATFORM": "offscreen", "PYTHONUNBUFFERED": "1"},
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        # A child of a non-interactive shell ignores SIGINT; restore the default (Ctrl-C).
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        deadline = time.monotonic() + 60
        while not (tmp_path / "rec").is_dir() or not transitions_path(tmp_path / "rec").exists() \
                or disk_rows(tmp_path / "rec") < 1_000:
            assert time.monotonic() < deadline and proc.poll() is None, "it never recorded"
            time.sleep(0.05)
        time.sleep(1.0)
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == code, err
    assert "Traceback" not in err and signal.Signals(sig).name in err
    (rec_dir,) = [p.parent for p in tmp_path.glob("rec/transitions.arrows")]
    rec = load_recording(rec_dir)
    assert rec.complete and rec.events["kind"].iloc[-1] == "session_end"
    assert rec.config["n_transitions"] == len(rec.transitions) > 10_000


def _truncated_recording(path):
    """A pendulum recording with its transitions log cut in the middle of a block."""
    run_headless(Session(SessionConfig(speed=None), record=path), steps=12_000)
    log = path / "transitions.arrows"
    data = log.read_bytes()
    log.write_bytes(data[: len(data) // 2 + 7])
    return path


def test_a_truncated_recording_replays_with_a_note(qtbot, tmp_path, capsys):
    from idt_desk.cli import main

    path = _truncated_recording(tmp_path / "cut")
    rc = main(["run", "--source", "replay", "--set", f"path={path}", "--quiet"])
    err = capsys.readouterr().err
    assert rc == 0
    held = len(load_recording(path).transitions)
    assert 0 < held < 12_000
    assert err.count("is incomplete") == 1 and f"replay runs the {held:,}" in err
    win = MainWindow(source="replay", settings={"path": str(path)}, speed=None,
                     record_dir=tmp_path / "recs")
    qtbot.addWidget(win)
    assert win.start_session()
    assert win.banner.isVisible() or not win.banner.isHidden()
    assert "is incomplete" in win.banner.text() and "transitions.arrows" in win.banner.text()
    win.close()


def test_a_replay_names_its_bands_as_the_recorded_source_did(qtbot, tmp_path):
    session = Session(SessionConfig(speed=None, baseline_windows=30), record=tmp_path / "r")
    session.schedule(3000, "perturb", name="sensor_noise", params={"sigma_angle": 0.05})
    session.schedule(4000, "perturb", name="sensor_noise", params=None)
    run_headless(session, steps=6000)
    w = MainWindow(source="replay", settings={"path": str(tmp_path / "r")}, speed=None,
                   record_dir=tmp_path / "recs")
    qtbot.addWidget(w)
    w.show()
    assert w.start_session(), w.banner.text()
    qtbot.waitUntil(lambda: not w.session.running, timeout=WAIT)
    w.refresh()
    labels = _period_labels(w)
    assert any(lbl.startswith("Sensor noise") for lbl in labels), labels
    assert not any("sensor_noise" in lbl for lbl in labels)
    assert "impulse (kick)" in _legend_texts(w)  # the pendulum's one-shot is its kick
    w.close()


@pytest.mark.parametrize("size", [(1024, 700), (1400, 900), (1920, 1080)])
def test_small_windows_show_every_plot_whole_and_nothing_overlaps(qtbot, window, size):
    window.resize(1920, 1080)  # laid out wide first: narrowing must lay it out again
    qtbot.wait(20)
    window.resize(*size)
    window.start_session(schedule=[(2000, "perturb", {"name": "sensor_noise",
                                                      "params": {"sigma_angle": 0.05}})])
    qtbot.waitUntil(lambda: _windows_on_plot(window) > 30, timeout=WAIT)
    qtbot.wait(100)
    assert (window.width(), window.height()) == size  # nothing forces the window larger
    plots = window.plots
    # The scene (legend and plots) fits the view: no plot's right part, the newest data,
    # is hidden behind the next pane.
    assert plots.ci.boundingRect().width() <= plots.viewport().width() + 1
    if size[0] >= 1400:  # room for the legend in one row
        assert plots.legend.columnCount == len(plots.legend.items)
    right = window.right_scroll.widget()
    assert right.height() >= right.minimumSizeHint().height()  # scrolls, never squeezed
    window.stop_session(wait=True)


def test_export_without_having_pressed_record(qtbot, window, tmp_path):
    window.pipeline_panel.baseline_spin.setValue(30)
    window.start_session(schedule=[(3000, "perturb", {"name": "sensor_noise",
                                                      "params": {"sigma_angle": 0.05}})])
    qtbot.waitUntil(lambda: window.session.snapshot(1).n_windows > 80, timeout=WAIT)
    window.stop_session(wait=True)
    record = window.record_panel
    assert record.last_recording is None and record.export_csv_button.isEnabled()
    paths = window.export_last_recording("csv", tmp_path / "out")
    names = sorted(p.name for p in paths)
    assert names == ["config.json", "events.csv", "windows.csv"]  # no transitions: no Record
    windows = pd.read_csv(tmp_path / "out" / "windows.csv")
    snap = window.session.snapshot(10**6)
    np.testing.assert_array_equal(windows["P"].to_numpy(), snap.windows["P"])
    events = pd.read_csv(tmp_path / "out" / "events.csv")
    assert {"session_start", "calibrated", "baseline", "perturbation_on"} <= set(events["kind"])
    config = json.loads((tmp_path / "out" / "config.json").read_text())
    assert config["exported_without_recording"] and "only a recording" in config["note"]
    paths = window.export_last_recording("parquet", tmp_path / "pq")
    assert sorted(p.name for p in paths) == ["config.json", "events.parquet", "windows.parquet"]


def _grey(img) -> np.ndarray:
    """A QImage as a (height, width) array of grey levels 0-255."""
    from PySide6.QtGui import QImage

    img = img.convertToFormat(QImage.Format.Format_Grayscale8)
    arr = np.frombuffer(img.constBits(), np.uint8).reshape(img.height(), img.bytesPerLine())
    return arr[:, :img.width()].astype(float)


def test_a_figure_at_twice_the_resolution_with_its_title_line(qtbot, window, tmp_path):
    from idt_desk_widgets.recording import figure_title
    from PySide6.QtGui import QImage

    window.pipeline_panel.baseline_spin.setValue(30)
    window.start_session()
    qtbot.waitUntil(lambda: window.alarms.idt.state in ("ok", "alarm"), timeout=WAIT)
    window.stop_session(wait=True)
    window.refresh()
    title = figure_title(window.session)
    assert title.startswith("Double pendulum · preset pendulum-live (16 bins, W 300, stride 75)")
    assert "baseline 30 windows" in title and "persistence (5 windows in a row)" in title
    width = window.plots.ci.boundingRect().width()
    scale = window.record_panel.figure_scale
    scale.setCurrentIndex(scale.findData(2))
    window.save_figure(tmp_path / "fig.png")
    img = QImage(str(tmp_path / "fig.png"))
    assert abs(img.width() - 2 * width) <= 2
    assert img.height() > 2 * window.plots.ci.boundingRect().height()  # plus the title strip
    # Everything grows with the scale, the legend's text too: the 2× figure shrunk back
    # to 1× looks like the 1× one, the legend row included.
    window.record_panel.figure_title.setChecked(False)
    scale.setCurrentIndex(scale.findData(1))
    window.save_figure(tmp_path / "one.png")
    scale.setCurrentIndex(scale.findData(2))
    window.save_figure(tmp_path / "two.png")
    one = _grey(QImage(str(tmp_path / "one.png")))
    two = QImage(str(tmp_path / "two.png"))
    two = _grey(two.scaled(two.width() // 2, two.height() // 2,
                           Qt.AspectRatioMode.IgnoreAspectRatio,
                           Qt.TransformationMode.SmoothTransformation))
    rows = slice(0, int(window.plots.legend.sceneBoundingRect().bottom()) + 4)
    assert one.shape == two.shape
    ink_one, ink_two = (one[rows] < 200).mean(), (two[rows] < 200).mean()
    assert ink_one > 0.005 and abs(ink_two - ink_one) < 0.3 * ink_one
    window.record_panel.figure_title.setChecked(True)
    window.save_figure(tmp_path / "fig.svg")
    svg = (tmp_path / "fig.svg").read_text()
    assert "Double pendulum" in svg and "persistence" in svg  # the title line is in it
    assert window.plots.ci.boundingRect().width() == width  # the window is as it was


def test_a_slow_start_says_what_it_is_doing(qtbot, tmp_path, monkeypatch):
    from types import SimpleNamespace

    from idt_desk_sources.pendulum import PendulumSource
    from idt_desk_widgets.plots import _waiting_text

    w = MainWindow(speed=1.0, record_dir=tmp_path)
    qtbot.addWidget(w)
    w.show()
    seen = []
    real_init = PendulumSource.__init__

    def slow_init(self, **settings):
        seen.append((w.status_line.status.text(), w.plots.hint.text()))
        real_init(self, **settings)

    monkeypatch.setattr(PendulumSource, "__init__", slow_init)
    assert w.start_session()
    assert seen and seen[0][0] == "loading Double pendulum…"
    assert seen[0][1] == "Loading Double pendulum…"
    w.stop_session(wait=True)
    w.close()
    # Calibrating at 20 transitions per second of wall time (the RL source at 1x): how long.
    snap = SimpleNamespace(error=None, calibration=(250, 1250), state="running",
                           n_transitions=250, loop_rate=20.0)
    text = _waiting_text(snap)
    assert "about 50 s more at this speed" in text and "raise <b>Speed</b>" in text


def _wheel_on_plot(plots: pg.GraphicsView, steps: int = 1) -> None:
    """A real mouse-wheel turn over the middle of the P plot."""
    from PySide6.QtCore import QPointF
    from PySide6.QtGui import QWheelEvent

    vb = plots.plots["P"].getViewBox()
    pos = QPointF(plots.mapFromScene(vb.mapViewToScene(vb.viewRect().center())))
    widget = plots
    ev = QWheelEvent(pos, widget.mapToGlobal(pos), QPoint(0, 0), QPoint(0, 120 * steps),
                     Qt.MouseButton.NoButton, Qt.KeyboardModifier.NoModifier,
                     Qt.ScrollPhase.NoScrollPhase, False)
    QApplication.sendEvent(widget.viewport(), ev)


def test_plot_navigation_follows_latest_freezes_and_reads_values(qtbot, window):
    plots, nav = window.plots, window.navigator
    # The frozen span stays among the windows held while it runs on.
    window.source_panel.set_speed(10.0)
    window.start_session()
    qtbot.waitUntil(lambda: _windows_on_plot(window) > 300, timeout=WAIT)
    x = plots.curves["P"].getData()[0]
    lo, hi = plots.x_range()
    assert lo <= x[0] and hi >= x[-1]  # whole history: every window held
    # Latest 5 s: the view is 5 s wide and ends at the newest window.
    nav.mode.setCurrentIndex(nav.mode.findData("latest"))
    nav.span.setValue(5)
    qtbot.wait(100)
    lo, hi = plots.x_range()
    newest = plots.curves["P"].getData()[0][-1]
    assert 5.0 <= hi - lo <= 5.3 and abs(hi - newest) < 0.2
    # A wheel turn over the plots zooms time only and freezes the view: it stays put while
    # the loop runs on; the button says how to follow again.
    _wheel_on_plot(plots)
    assert plots.frozen and nav.freeze_button.isChecked() and nav.freeze_button.text() == \
        "Follow"
    frozen = plots.x_range()
    assert frozen[1] - frozen[0] < 5.0  # zoomed in
    qtbot.waitUntil(lambda: plots._last[0][-1] > frozen[1] + 1, timeout=WAIT)
    assert plots.x_range() == pytest.approx(frozen)
    # y fits what is in view (the band included), not the whole history.
    x, y = plots._last[0], plots._last[1]["P"]
    seen = y[(x >= frozen[0]) & (x <= frozen[1])]
    assert seen.size
    ylo, yhi = plots.plots["P"].viewRange()[1]
    assert ylo <= seen.min() and yhi >= seen.max()
    # Follow again: back to the newest data.
    nav.freeze_button.click()
    qtbot.wait(100)
    assert not plots.frozen and plots.x_range()[1] > frozen[1] + 1
    # The cursor: a dotted line on every plot and the nearest window's values in the
    # status bar, exactly as the session has them.
    window.stop_session(wait=True)
    snap = window.session.snapshot(window.history)
    t = snap.windows["t"]
    j = len(t) - 10
    plots.show_cursor(float(t[j]) + 1e-6)
    assert all(line.isVisible() and line.value() == pytest.approx(t[j])
               for k, line in plots.cursor_lines.items() if plots.plots[k].isVisible())
    msg = window.statusBar().currentMessage()
    assert msg.startswith(f"t = {t[j]:,.2f} s") and f"P {snap.windows['P'][j]:.3f}" in msg
    assert f"ΔH {snap.windows['dH'][j]:.3f}" in msg
    # A real pointer move over the P plot shows it too; leaving the plots clears it.
    vb = plots.plots["P"].getViewBox()
    centre = plots.mapFromScene(vb.mapViewToScene(vb.viewRect().center()))
    qtbot.mouseMove(plots.viewport(), centre)
    qtbot.waitUntil(lambda: window.statusBar().currentMessage().startswith("t = "),
                    timeout=2000)
    plots.show_cursor(None)
    assert window.statusBar().currentMessage() == "" and not plots.cursor_lines["P"].isVisible()


def test_whole_history_is_the_whole_session(qtbot, window):
    """More windows than a refresh copies: the plots still hold the session from its start,
    the early perturbation's band in view."""
    from idt_desk_widgets.pipeline_panel import CUSTOM

    window.pipeline_panel.preset_combo.setCurrentText(CUSTOM)
    window.pipeline_panel.window_spin.setValue(100)
    window.pipeline_panel.stride_spin.setValue(10)  # 100 windows a second of loop time
    window.pipeline_panel.baseline_spin.setValue(30)
    window.start_session(schedule=[
        (3000, "perturb", {"name": "sensor_noise", "params": {"sigma_angle": 0.3}}),
        (6000, "perturb", {"name": "sensor_noise", "params": None})])
    plots = window.plots
    qtbot.waitUntil(lambda: window.session.snapshot(1).n_windows > window.history + 3000,
                    timeout=WAIT)
    window.stop_session(wait=True)
    snap = window.session.snapshot(10**6)
    x = plots._last[0]
    assert snap.n_windows > window.history + 3000  # more than a refresh copies
    # The session's first window ends at its 100th transition (the ring the snapshot holds may
    # have let it go: the loop runs on while the thresholds are fitted off its thread).
    assert x[0] == pytest.approx(100 / window.session.source.rate)
    assert x[-1] == snap.windows["t"][-1]
    assert plots.history.missed == 0
    lo, hi = plots.x_range()
    assert lo <= x[0] and hi >= x[-1]
    # The perturbation (3 to 6 s) is shaded within the view, over drawn windows.
    (region, *_), = plots._regions
    assert region.getRegion() == pytest.approx((3.0, 6.0))
    assert ((x >= 3.0) & (x <= 6.0)).sum() > 20  # merged rows, older ones


def test_the_event_log_lists_centres_and_exports(qtbot, window, tmp_path, monkeypatch):
    window.pipeline_panel.baseline_spin.setValue(30)
    log = window.events
    window.start_session(schedule=[
        (20_000, "perturb", {"name": "sensor_noise", "params": {"sigma_angle": 0.05}}),
        (26_000, "perturb", {"name": "sensor_noise", "params": None})])
    qtbot.waitUntil(lambda: any(e["kind"] == "detected" for e in log.events), timeout=WAIT)
    window.session.note("a note")
    qtbot.waitUntil(lambda: any(e["kind"] == "note" for e in log.events), timeout=WAIT)
    window.stop_session(wait=True)
    # Every event of the session, in order, with the latency on the perturbation's row.
    assert [e["kind"] for e in log.events] == [
        e["kind"] for e in window.session.events_since(0)]
    on = next(k for k, e in enumerate(log.events) if e["kind"] == "perturbation_on")
    row = log._shown.index(on)
    cells = [log.table.item(row, c).text() for c in range(5)]
    onset = window.session.snapshot(1).onset
    assert cells[0] == f"{log.events[on]['t']:,.2f} s" and cells[1] == "perturbation on"
    assert cells[2] == "Sensor noise" and "sigma_angle=0.05" in cells[3]
    assert cells[4].startswith(f"{onset['latency']} window")
    assert log.count.text() == f"{len(log.events):,} events"
    # The filter: alarms and detections only.
    log.filter.setCurrentText("alarms and detections")
    kinds = {log.events[k]["kind"] for k in log._shown}
    assert kinds and kinds <= {"alarm_on", "alarm_off", "attributed", "detected", "not_detected"}
    assert log.table.rowCount() == len(log._shown) < len(log.events)
    # A click on the detection centres the plots on it and freezes them.
    det = next(r for r, k in enumerate(log._shown) if log.events[k]["kind"] == "detected")
    width = window.plots.x_range()[1] - window.plots.x_range()[0]
    rect = log.table.visualItemRect(log.table.item(det, 1))
    qtbot.mouseClick(log.table.viewport(), Qt.MouseButton.LeftButton, pos=rect.center())
    lo, hi = window.plots.x_range()
    assert window.plots.frozen
    assert (lo + hi) / 2 == pytest.approx(log.events[log._shown[det]]["t"], abs=1e-6)
    assert hi - lo == pytest.approx(width, rel=1e-6)
    # Export: the rows shown, readable, with the event's own fields.
    path = log.export(tmp_path / "events.csv")
    table = pd.read_csv(path)
    assert list(table["kind"]) == [log.events[k]["kind"] for k in log._shown]
    assert set(table.columns) >= {"time", "event", "latency", "i", "x", "fields"}
    detected = table[table["kind"] == "detected"].iloc[0]
    assert json.loads(detected["fields"])["name"] == "sensor_noise"
    # The verdict says how far each component moved (in baseline σ, largest first).
    assert " windows after the onset; moved " in detected["details"]
    assert detected["details"].count("σ") == len(json.loads(detected["fields"])["severity"])
    # Folding gives the plots the height; a new session empties the log.
    before = window.plots.height()
    log.toggle.click()
    qtbot.wait(50)
    assert not log.table.isVisible() and window.plots.height() > before
    _clear_when_asked(monkeypatch)
    window.reset_session()
    assert log.events == [] and log.table.rowCount() == 0


def test_a_band_name_whose_line_left_the_view_is_hidden_not_cut(qtbot, window):
    window.source_panel.set_speed(10.0)
    window.start_session(schedule=[(25_000, "perturb", {"name": "sensor_noise",
                                                        "params": {"sigma_angle": 0.05}})])
    qtbot.waitUntil(lambda: bool(window.plots._regions) and window.plots._last is not None
                    and window.plots._last[0][-1] > 30, timeout=WAIT)
    window.stop_session(wait=True)
    label = next(c for c in window.plots._regions[0][0].lines[0].childItems()
                 if isinstance(c, pg.InfLineLabel))
    plots = window.plots
    plots.plots["P"].setXRange(20, 32, padding=0)  # the band starts at 25 s: in view
    plots._stack_labels(force=True)
    assert label.isVisible() and _period_labels(window) == ["Sensor noise"]
    plots.plots["P"].setXRange(27, 32, padding=0)  # its start has scrolled out on the left
    plots._stack_labels(force=True)
    assert not label.isVisible()
    assert window.plots._regions[0][0].isVisible()  # the band itself stays


def test_a_band_name_too_long_for_either_side_is_cut_with_an_ellipsis(qtbot, window):
    # At 1024 px a name with its parameters ran past the plot's right edge ("Sensor noise ·
    # sigm"): now it is cut inside the plot, and whole again where there is room.
    window.source_panel.set_speed(10.0)
    params = {"sigma_angle": 0.2, "sigma_rate": 0.5}
    window.start_session(schedule=[(25_000, "perturb", {"name": "sensor_noise",
                                                        "params": params})])
    qtbot.waitUntil(lambda: bool(window.plots._regions) and window.plots._last is not None
                    and window.plots._last[0][-1] > 30, timeout=WAIT)
    window.stop_session(wait=True)
    whole = "Sensor noise · sigma_angle=0.2, sigma_rate=0.5"
    label = next(c for c in window.plots._regions[0][0].lines[0].childItems()
                 if isinstance(c, pg.InfLineLabel))
    plots = window.plots
    vb = plots.plots["P"].getViewBox()

    def right_edge_px() -> float:
        return label.mapRectToItem(vb, label.boundingRect()).right()

    plots.plots["P"].setXRange(20, 30, padding=0)  # 5 s each side of the line: too little
    plots._stack_labels(force=True)
    text = _period_labels(window)[0]
    assert text.endswith("…") and whole.startswith(text[:-1]) and len(text) < len(whole)
    # The line moves with each frame's redraw; the cut name stays cut.
    label.valueChanged()
    assert _period_labels(window) == [text]
    qtbot.wait(50)
    assert right_edge_px() <= vb.width() + 1
    plots.plots["P"].setXRange(24, 400, padding=0)  # room on the right: the whole name
    plots._stack_labels(force=True)
    assert _period_labels(window) == [whole]


def test_the_event_log_keeps_episode_ends_out_of_the_way(qtbot):
    from idt_desk_widgets.events import EventLog

    log = EventLog()
    qtbot.addWidget(log)
    events = [{"kind": "session_start", "i": 0, "t": 0.0, "source": "gym"}]
    events += [{"kind": "episode_end", "i": 1000 * k, "t": 50.0 * k, "episode": k,
                "return": 6000.0 + k} for k in range(1, 40)]
    events += [{"kind": "perturbation_on", "i": 40_500, "t": 14_250.25, "name": "obs_noise_3",
                "params": {"sigma": 3.0}}]
    log.names = {"obs_noise_3": "Observation noise 3 %"}
    log.add_events(events)
    # By default an RL loop's episode ends do not bury the rest...
    assert [log.events[k]["kind"] for k in log._shown] == ["session_start", "perturbation_on"]
    assert log.count.text() == f"2 of {len(events)} events"
    assert log.row_texts(len(events) - 1)[:3] == ["14,250.2 s", "perturbation on",
                                                  "Observation noise 3 %"]
    # ...and "all events" lists them, with the episode's return.
    log.filter.setCurrentText("all events")
    assert log.table.rowCount() == len(events)
    assert log.table.item(1, 1).text() == "episode end"
    assert log.table.item(1, 3).text() == "episode 1, return 6,001"


def test_the_event_log_keeps_loop_time_order_when_events_arrive_late(qtbot):
    """A window's verdict comes when the window is judged, a source's end when it is seen:
    both may arrive after later events (a max-speed replay logged "source done 119.53 s"
    above "baseline set 76.16 s"). Rows stay in loop-time order, the export too."""
    from idt_desk_widgets.events import EventLog

    log = EventLog()
    qtbot.addWidget(log)
    log.add_events([{"kind": "session_start", "i": 0, "t": 0.0},
                    {"kind": "perturbation_on", "i": 2000, "t": 100.0, "name": "kick"},
                    {"kind": "perturbation_off", "i": 2200, "t": 110.0, "name": "kick"},
                    {"kind": "note", "i": 2390, "t": 119.53, "text": "source done"}])
    # Late: the baseline (76.16 s) and the alarm (100.42 s), judged afterwards.
    log.add_events([{"kind": "baseline", "i": 1523, "t": 76.16, "n_windows": 800},
                    {"kind": "alarm_on", "i": 2008, "t": 100.42, "metric": "IDT"}])
    times = [log.table.item(r, 0).text() for r in range(log.table.rowCount())]
    assert times == ["0.00 s", "76.16 s", "100.00 s", "100.42 s", "110.00 s", "119.53 s"]
    kinds = [log.events[k]["kind"] for k in log._shown]
    assert kinds == ["session_start", "baseline", "perturbation_on", "alarm_on",
                     "perturbation_off", "note"]
    # A filter rebuilds in the same order.
    log.filter.setCurrentText("alarms and detections")
    log.filter.setCurrentText("all events")
    assert [log.events[k]["kind"] for k in log._shown] == kinds


def test_band_and_marker_names_never_overlap_as_the_plot_narrows(qtbot):
    """Five names close together ("Gravity change" ran over the kick's and the sensor
    noise's as the plot narrowed): at every width the visible ones do not overlap, and
    each hidden one is still on its band's or marker's hover."""
    from idt_desk_widgets.plots import MetricPlots

    plots = MetricPlots()
    qtbot.addWidget(plots)
    plots.names = {"gravity": "Gravity change", "sensor_noise": "Sensor noise",
                   "kick": "Kick", "friction": "Friction change", "coarse": "Coarse sensor"}
    plots.resize(1400, 700)
    plots.show()
    qtbot.waitExposed(plots)
    plots.plots["P"].setXRange(0, 100, padding=0)
    plots._set_periods([(10.0, 40.0, "perturbation", "gravity", ()),
                        (12.0, 30.0, "perturbation", "sensor_noise", ()),
                        (14.0, 50.0, "perturbation", "friction", ()),
                        (16.0, 60.0, "perturbation", "coarse", ())])
    plots._set_pulses([(13.0, "kick")])

    def labels():
        out = []
        for items in (*plots._regions, *plots._pulses):
            line = items[0].lines[0] if hasattr(items[0], "lines") else items[0]
            out += [(items, c) for c in line.childItems() if isinstance(c, pg.InfLineLabel)]
        return out

    for width in (1400, 900, 700, 500, 1200):
        plots.resize(width, 700)
        QApplication.processEvents()
        plots._stack_labels()  # what every frame calls
        shown = [c.sceneBoundingRect() for _, c in labels() if c.isVisible()]
        assert shown, width
        for a, b in itertools.combinations(shown, 2):
            assert not a.intersects(b), (width, a, b)
        for items, _label in labels():
            assert items[0].toolTip() and all(i.toolTip() == items[0].toolTip()
                                              for i in items)


def test_a_step_of_a_settings_box_scales_with_its_value(qtbot):
    """One notch after a click moved a 0.05 rad noise to 0.15 (a step fixed by the range)."""
    from idt_desk_widgets.forms import ParamForm

    from idt_desk.live.source import Param

    form = ParamForm((Param("sigma_angle", 0.05, "σ angle", 0.0, 10.0),
                      Param("force", 30.0, "Force", 0.0, 1000.0)))
    qtbot.addWidget(form)
    small = form.findChild(QWidget, "param_sigma_angle")
    big = form.findChild(QWidget, "param_force")
    small.stepBy(1)
    big.stepBy(-1)
    assert small.value() == pytest.approx(0.051) and big.value() == pytest.approx(29.0)


def test_a_negative_choice_says_why(qtbot):
    """The agency panel showed "Choice H(A|S) −0.021 bits" and nothing more."""
    from idt_desk_widgets.agency import AgencyPanel

    panel = AgencyPanel()
    qtbot.addWidget(panel)
    agency = {"choice": {"value": -0.021, "holds": False, "method": "per turn, pooled counts"},
              "effect": {"value": 0.01, "holds": True, "method": "per turn, pooled counts"},
              "asymmetry": {"value": 3.6, "holds": True, "method": "per turn, pooled counts"},
              "window_end": 100, "where": "turn 100 (its token counts)"}
    snap = SimpleNamespace(agency=agency, passive=False, windows={"unique_frac": np.array([0.1])})
    panel.update_snapshot(snap)
    footer = panel.footer.text()
    assert "H(A|S) below 0" in footer and "read it as 0" in footer


def test_every_screenshot_of_the_docs_comes_from_the_pictures_script(tmp_path):
    """Each screenshot a page shows is one of ``idt-desk pictures``' (the front page showed an
    older window); the script takes one here, and refuses a name it does not know."""
    import re
    from pathlib import Path

    from idt_desk_widgets.pictures import PICTURES

    from idt_desk.cli import main

    root = Path(__file__).resolve().parent.parent
    shown = set()
    for page in [root / "README.md", *sorted((root / "assets/docs").glob("*.md"))]:
        shown |= {m.group(1) for m in re.finditer(r"img/((?:screenshot[^)]*|alarms)\.png)",
                                                   page.read_text())}
    assert shown and shown <= {p.name for p in PICTURES}, shown - {p.name for p in PICTURES}
    assert main(["pictures", "alarms.png", "--out", str(tmp_path)]) == 0
    from PySide6.QtGui import QImage

    image = QImage(str(tmp_path / "alarms.png"))
    assert image.width() > 200 and image.height() > 200
    assert main(["pictures", "nope.png", "--out", str(tmp_path)]) == 2


def test_a_snapshot_taken_during_a_kick_does_not_press_its_button(qtbot, window, monkeypatch):
    import dataclasses

    qtbot.mouseClick(window.source_panel.start_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: window.session is not None and window.session.running, timeout=WAIT)
    real = window.session.snapshot
    params = window.switches.perturb_forms["kick"].values()
    for period, pressed in ((0.0, False), (0.5, True)):  # an impulse, then a repeating kick
        during = dataclasses.replace(real(1), active_perturbations={
            "kick": {**params, "period": period}})
        monkeypatch.setattr(window.session, "snapshot", lambda *a, _s=during, **k: _s)
        window.refresh()
        assert window.switches.perturb_buttons["kick"].isChecked() is pressed, period
    monkeypatch.setattr(window.session, "snapshot", real)
