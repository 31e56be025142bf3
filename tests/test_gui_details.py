"""Details a daily user meets: the hover cursor, where file dialogs open, wording."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("pytestqt")

from idt_desk_widgets.main_window import MainWindow
from PySide6.QtCore import QEvent
from PySide6.QtGui import QImage
from PySide6.QtWidgets import QApplication, QFileDialog, QLabel

WAIT = 30_000


def _pixels(path) -> np.ndarray:
    img = QImage(str(path)).convertToFormat(QImage.Format.Format_RGB32)
    return np.frombuffer(bytes(img.constBits()), np.uint8).reshape(img.height(), -1).copy()


def test_the_cursor_goes_when_the_pointer_leaves_and_never_into_a_figure(qtbot, window,
                                                                        tmp_path):
    window.pipeline_panel.baseline_spin.setValue(30)
    window.start_session()
    plots = window.plots
    qtbot.waitUntil(lambda: plots._last is not None and len(plots._last[0]) > 20,
                    timeout=WAIT)
    window.stop_session(wait=True)
    plain = tmp_path / "plain.png"
    window.save_figure(plain)
    x = float(plots._last[0][len(plots._last[0]) // 2])
    plots.show_cursor(x)
    assert plots.cursor_lines["P"].isVisible() and plots.cursor_text
    with_cursor = tmp_path / "cursor.png"
    window.save_figure(with_cursor)
    # The figure is the same as without the cursor; the cursor is still on screen.
    np.testing.assert_array_equal(_pixels(with_cursor), _pixels(plain))
    assert plots.cursor_lines["P"].isVisible()
    # The pointer leaves the plots: the cursor and its values in the status bar go.
    QApplication.sendEvent(plots, QEvent(QEvent.Type.Leave))
    assert not plots.cursor_lines["P"].isVisible() and plots.cursor_text == ""
    assert window.statusBar().currentMessage() == ""


def test_file_dialogs_open_in_the_recordings_folder(qtbot, window, tmp_path, monkeypatch):
    asked = []

    def save(_parent, _caption, where, _filter):
        asked.append(where)
        return "", ""

    monkeypatch.setattr(QFileDialog, "getSaveFileName", staticmethod(save))
    monkeypatch.setattr(QFileDialog, "getExistingDirectory",
                        staticmethod(lambda _p, _c, where="": asked.append(where) or ""))
    window.record_panel.ask_figure_path("png")
    window.events._export_dialog()
    window.select_source("replay", {})
    window.source_panel.browse_button.click()
    folder = tmp_path / "recordings"
    assert asked == [str(folder / "idt-plots.png"), str(folder / "events.csv"), str(folder)]


def test_a_dialogue_speaks_of_turns(qtbot, tmp_path):
    w = MainWindow(source="dialogue", speed=1.0, record_dir=tmp_path)
    qtbot.addWidget(w)
    combo = w.source_panel.speed_combo
    items = [combo.itemText(i) for i in range(combo.count())]
    assert combo.currentText() == "1 turn/s" and "10 turns/s" in items
    assert "max" in items and not any("real time" in t for t in items)
    assert w.source_panel.speeds["10 turns/s"] == 10.0 and w.source_panel.speeds["max"] is None
    labels = [lab.text() for lab in w.switches.modulate_box.findChildren(QLabel)]
    assert "Engage after (turns)" in labels and "Release after quiet (turns)" in labels
    editor = w.switches.perturb_forms["contradiction"].editors["variant"]
    assert w.switches.perturb_forms["contradiction"].layout().labelForField(editor).text() == \
        "Which text (0–2)"
    assert w.pipeline_panel.budget_edit.placeholderText() == "1/100turns"
    # Back to the pendulum: seconds again.
    w.select_source("pendulum", {})
    assert w.source_panel.speed_combo.currentText() == "1× (real time)"
    assert "Engage after" not in " ".join(
        lab.text() for lab in w.switches.modulate_box.findChildren(QLabel))
    w.select_source("replay", {})
    assert w.pipeline_panel.budget_edit.placeholderText() == "the recording's"


def test_the_latency_line_says_how_far_into_the_horizon(qtbot, window):
    window.pipeline_panel.baseline_spin.setValue(30)
    # Paused by the schedule well within the horizon's 100 windows, whatever the load (a
    # loop catching up after its calibration ran hundreds of windows past a polled stop).
    window.start_session(schedule=[
        (5000, "perturb", {"name": "friction", "params": {"damping": 0.0}}),
        (6500, "pause", {})])
    qtbot.waitUntil(lambda: window.session.snapshot(1).state == "paused", timeout=4 * WAIT)
    snap = window.session.snapshot(1)
    window.alarms.update_snapshot(snap)
    n = snap.n_windows - snap.onset["first_window"]
    assert window.alarms.latency.text() == (
        f"<i>Friction</i> on: not detected yet ({n} of 100 windows since the onset)")
    # Once the session has ended no window more is coming: never "yet".
    window.stop_session(wait=True)
    snap = window.session.snapshot(1)
    window.alarms.update_snapshot(snap)
    n = snap.n_windows - snap.onset["first_window"]
    assert window.alarms.latency.text() == (
        f"<i>Friction</i> on: not detected before the session ended ({n} of 100 windows "
        "since the onset)")


def test_the_small_words(qtbot, window):
    from idt_desk_widgets.source_panel import SPEEDS

    assert SPEEDS["50×"] == 50.0  # the RL page's commands use 50×
    window.events.add_events([{"kind": "note", "text": "one", "i": 0, "t": 0.0}])
    assert window.events.count.text() == "1 event"


def test_the_recording_says_how_large_it_is(qtbot, window, tmp_path):
    import os

    from idt_desk.recordings import recording_size

    record = window.record_panel
    record.record_button.setChecked(True)
    window.start_session()
    path = record.last_recording
    qtbot.waitUntil(lambda: " so far (" in record.record_label.text(), timeout=WAIT)
    text = record.record_label.text()
    assert text.startswith(f"recording into {path} — ") and text.endswith(" MB/s)")
    window.stop_session(wait=True)
    total = sum(os.path.getsize(p) for p in path.iterdir() if p.is_file())
    assert recording_size(path)[0] == total > 0
    assert record.record_label.text() == f"recorded: {path} ({recording_size(path)[1]})"
    # A next session that is not recorded does not read as that one's recording.
    record.record_button.setChecked(False)
    window.start_session()
    assert record.record_label.text() == ("not recording: Export writes this session's "
                                          "windows and events (no transitions)")
    window.stop_session(wait=True)
    # Exported as it stands, it is kept: Start, Reset and Quit no longer ask.
    assert not record.kept(window.session)
    assert window.export_last_recording("csv")
    assert record.kept(window.session)


def test_a_small_window_gets_short_legend_words_and_axis_labels(qtbot, window):
    plots = window.plots
    plots.set_reward_visible(True)  # the RL agent's five plots
    plots.set_source({"kick": "Kick"}, has_modulation=True, has_impulse=True,
                     impulse_label="impulse (kick)")

    def legend() -> list[str]:
        return [label.text for _sample, label in plots.legend.items]

    def axis(key: str) -> str:
        return plots.plots[key].getAxis("left").labelText

    window.resize(1024, 700)  # a centre pane about 320 px wide, plots about 70 px tall
    qtbot.waitUntil(lambda: plots.width() < 560, timeout=2000)
    assert legend() == ["mean", "alarm band", "alarmed", "perturbed", "modulated", "kick"]
    assert plots.legend.columnCount >= 2  # five rows of one entry before
    assert axis("reward") == "reward" and axis("dH") == "ΔH"
    window.resize(1920, 1080)
    qtbot.waitUntil(lambda: plots.width() > 560, timeout=2000)
    assert legend() == ["baseline mean", "alarm band", "alarmed window", "perturbation",
                        "modulation", "impulse (kick)"]
    assert axis("reward") == "reward / step" and axis("dH") == "ΔH (bits)"


def test_a_long_status_line_is_cut_with_an_ellipsis_and_never_widens_the_window(qtbot):
    w = MainWindow(speed=None)
    qtbot.addWidget(w)
    w.resize(1024, 700)
    w.show()
    qtbot.waitExposed(w)
    before = w.minimumSizeHint().width()
    whole = "stopped — following " + "a-very-long-run-name-" * 20 + " — 411,725 transitions"
    w.status_line.status.setText(whole)
    assert w.minimumSizeHint().width() == before
    assert w.status_line.status.text() == whole  # what the window says, whole: for tests and copies
    assert w.status_line.status.toolTip() == whole  # cut on screen: the whole text on hover
    w.status_line.status.setText("idle")
    assert w.status_line.status.toolTip() == ""


def test_choosing_another_source_clears_the_last_sessions_panels(qtbot, window):
    """After switching the source, the old plots and symbols stayed until Start."""
    window.pipeline_panel.baseline_spin.setValue(30)
    window.start_session()
    plots = window.plots
    qtbot.waitUntil(lambda: plots.history.total > 40 and window.alarms.idt.state != "idle",
                    timeout=WAIT)
    window.stop_session(wait=True)
    assert "Symbols:" in window.alarms.calibration.text()
    said = []
    window.statusBar().messageChanged.connect(said.append)
    combo = window.source_panel.source_combo
    combo.setCurrentIndex(combo.findData("replay"))
    x, _y = plots.curves["P"].getData()
    assert (x is None or len(x) == 0) and plots.history.total == 0
    assert window.alarms.idt.state == "idle" and window.alarms.calibration.text() == ""
    assert any("the last session (pendulum) is kept for Export until Start" in m for m in said)
    # The session itself stays: Export still writes it.
    assert window.session is not None and window.export_last_recording("csv")


def test_a_replay_defaults_to_the_speed_it_was_recorded_at(qtbot, window, tmp_path,
                                                           monkeypatch):
    """A session recorded at 10× replayed at 1× unless the user changed the speed."""
    import json

    from idt_desk.recordings import RecordingError, recorded_speed

    window.record_panel.record_button.setChecked(True)
    window.start_session()
    qtbot.waitUntil(lambda: window.session.snapshot(1).n_windows > 5, timeout=WAIT)
    window.stop_session(wait=True)
    rec = window.record_panel.last_recording
    assert recorded_speed(rec) is None  # made at maximum speed
    config = json.loads((rec / "config.json").read_text())
    config["session"]["speed"] = 10.0
    (rec / "config.json").write_text(json.dumps(config))
    assert recorded_speed(rec) == 10.0
    combo = window.source_panel.source_combo
    combo.setCurrentIndex(combo.findData("replay"))
    window.source_panel.set_speed(1.0)
    monkeypatch.setattr(QFileDialog, "getExistingDirectory",
                        staticmethod(lambda *_a, **_k: str(rec)))
    window.source_panel.browse_button.click()
    assert window.source_panel.speed_combo.currentData() == 10.0
    assert window.source_panel.settings_form.values()["path"] == str(rec)
    # Not a recording: the speed stays, and the replay's Start says what is wrong.
    with pytest.raises(RecordingError):
        recorded_speed(tmp_path)
    window.use_recorded_speed(tmp_path)
    assert window.source_panel.speed_combo.currentData() == 10.0
