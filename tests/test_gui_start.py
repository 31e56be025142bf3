"""Starting and stopping: a source built off the GUI thread (cancellable), shortcuts for what a
user does often, never a key press that loses a session."""

from __future__ import annotations

import pytest

pytest.importorskip("pytestqt")

from idt_desk_widgets.main_window import MainWindow
from PySide6.QtCore import Qt
from PySide6.QtTest import QTest
from PySide6.QtWidgets import QApplication, QFileDialog, QMessageBox

WAIT = 30_000
Button = QMessageBox.StandardButton


@pytest.fixture
def window(window, qtbot):
    """conftest's window, active (shortcuts need it), with a baseline it never reaches."""
    # No baseline calibration within these tests: it runs in the loop's thread, which on a
    # loaded machine may not stop within Session.stop's 10 s while it calibrates.
    window.pipeline_panel.baseline_spin.setValue(10_000)
    window.activateWindow()
    qtbot.waitUntil(window.isActiveWindow)
    return window


def _drawn(w: MainWindow) -> int:
    return len(w.plots._last[0]) if w.plots._last is not None else 0


def _answer(monkeypatch, button: Button) -> list[str]:
    """Reset's question answered with ``button``; the questions asked go to the list."""
    asked: list[str] = []

    def question(_parent, _title, text, _buttons, default):
        asked.append(text)
        assert default == Button.Cancel  # a stray Return keeps the session
        return button

    monkeypatch.setattr(QMessageBox, "question", staticmethod(question))
    return asked


def test_after_stop_no_key_press_clears_an_unrecorded_session(qtbot, window, monkeypatch):
    asked = _answer(monkeypatch, Button.Cancel)
    qtbot.mouseClick(window.source_panel.start_button, Qt.MouseButton.LeftButton)
    # Start disabled itself: the focus went to Stop, not on to Reset.
    assert window.source_panel.stop_button.hasFocus(), QApplication.focusWidget()
    qtbot.waitUntil(lambda: _drawn(window) > 20, timeout=WAIT)
    assert window.isActiveWindow() and window.source_panel.stop_button.hasFocus()
    qtbot.mouseClick(window.source_panel.stop_button, Qt.MouseButton.LeftButton)
    # Stop disabled itself: the focus went to the plots, not on to Reset.
    assert window.plots.hasFocus() and not window.source_panel.reset_button.hasFocus()
    drawn, events = _drawn(window), len(window.events.events)
    QTest.keyClick(QApplication.focusWidget(), Qt.Key.Key_Space)
    assert _drawn(window) == drawn and len(window.events.events) == events and not asked
    # Space on Reset itself asks first; Cancel (the default) keeps everything.
    window.source_panel.reset_button.setFocus()
    QTest.keyClick(window.source_panel.reset_button, Qt.Key.Key_Space)
    assert len(asked) == 1 and "not recorded" in asked[0] and f"{events:,} events" in asked[0]
    assert window.session is not None and _drawn(window) == drawn
    assert len(window.events.events) == events
    # Answered Reset: cleared.
    _answer(monkeypatch, Button.Reset)
    window.source_panel.reset_button.click()
    assert window.session is None and _drawn(window) == 0 and not window.events.events


def test_start_after_stop_asks_before_replacing_an_unrecorded_session(qtbot, window,
                                                                       monkeypatch):
    asked = _answer(monkeypatch, Button.Cancel)
    qtbot.mouseClick(window.source_panel.start_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: _drawn(window) > 20, timeout=WAIT)
    qtbot.mouseClick(window.source_panel.stop_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: not window.session.running, timeout=WAIT)
    first, drawn, events = window.session, _drawn(window), len(window.events.events)
    assert not asked
    # Start, then Ctrl+Return: each asks; Cancel (the default) keeps the stopped session.
    qtbot.mouseClick(window.source_panel.start_button, Qt.MouseButton.LeftButton)
    QTest.keyClick(window, Qt.Key.Key_Return, Qt.KeyboardModifier.ControlModifier)
    assert len(asked) == 2 and all("not recorded" in q and f"{events:,} events" in q
                                   for q in asked)
    assert window.session is first and _drawn(window) == drawn
    assert len(window.events.events) == events and window._builder is None
    # Discard: a new session starts.
    _answer(monkeypatch, Button.Discard)
    qtbot.mouseClick(window.source_panel.start_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: window.session is not first and window.session is not None
                    and window.session.running, timeout=WAIT)
    window.stop_session(wait=True)


def test_start_asks_when_only_part_of_the_session_is_recorded(qtbot, window, monkeypatch):
    # Record pressed mid-session: what came before is on no disk.
    asked = _answer(monkeypatch, Button.Cancel)
    window.start_session()
    qtbot.waitUntil(lambda: _drawn(window) > 20, timeout=WAIT)
    window.record_panel.record_button.setChecked(True)
    qtbot.waitUntil(lambda: window.session.recording_path is not None, timeout=WAIT)
    qtbot.wait(300)
    window.stop_session(wait=True)
    first = window.session
    assert not first.on_disk
    qtbot.mouseClick(window.source_panel.start_button, Qt.MouseButton.LeftButton)
    assert len(asked) == 1 and asked[0].startswith("Only part of this session is recorded")
    assert window.session is first


def test_a_replay_is_closed_and_replaced_without_a_question(qtbot, window, monkeypatch,
                                                            tmp_path):
    # Its data is the recording it reads: nothing is lost by closing it.
    window.record_panel.record_button.setChecked(True)
    window.pipeline_panel.baseline_spin.setValue(30)
    window.start_session()
    qtbot.waitUntil(lambda: _drawn(window) > 50, timeout=WAIT)
    window.stop_session(wait=True)
    path = window.session.recording_path
    window.record_panel.record_button.setChecked(False)
    window.select_source("replay", {"path": str(path)})
    assert window.start_session()
    start = window.source_panel.start_button
    # Ended, and the window has seen it (Start enabled again: a click before is ignored).
    qtbot.waitUntil(lambda: not window.session.running and _drawn(window) > 50
                    and start.isEnabled(), timeout=2 * WAIT)
    assert window.session.on_disk and window.session.recording_path is None
    asked = _answer(monkeypatch, Button.Cancel)
    replayed = window.session
    qtbot.mouseClick(start, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: window.session is not replayed, timeout=2 * WAIT)
    assert not asked
    window.stop_session(wait=True)
    assert window.may_quit() and not asked


def test_a_new_start_clears_the_old_curves_at_once_not_after_loading(qtbot, window):
    window.record_panel.record_button.setChecked(True)  # on disk: Start asks nothing
    window.start_session()
    qtbot.waitUntil(lambda: _drawn(window) > 20 and "Symbols:" in
                    window.alarms.calibration.text(), timeout=WAIT)
    window.stop_session(wait=True)
    window.select_source("replay", {"path": str(window.session.recording_path)})
    assert window.start_session(background=True)  # the new source loads on its thread
    # At once, while it loads: no old curve under the new labels, no old "Symbols: …".
    assert _drawn(window) == 0 and window.alarms.calibration.text() == ""
    assert window.events.events == []
    qtbot.waitUntil(lambda: window.session is not None and window._builder is None,
                    timeout=WAIT)
    window.stop_session(wait=True)


def test_a_recorded_session_is_reset_without_a_question(qtbot, window, monkeypatch):
    asked = _answer(monkeypatch, Button.Cancel)
    window.record_panel.record_button.setChecked(True)
    window.start_session()
    qtbot.waitUntil(lambda: _drawn(window) > 5, timeout=WAIT)
    window.stop_session(wait=True)
    window.source_panel.reset_button.click()
    assert not asked and window.session is None


def test_shortcuts_start_stop_freeze_record_save_quit(qtbot, window, tmp_path, monkeypatch):
    ctrl = Qt.KeyboardModifier.ControlModifier
    QTest.keyClick(window, Qt.Key.Key_R, ctrl)
    assert window.record_panel.record_button.isChecked()  # armed: records from the start
    QTest.keyClick(window, Qt.Key.Key_Return, ctrl)  # the source is built in the background
    qtbot.waitUntil(lambda: window.session is not None and window.session.running,
                    timeout=WAIT)
    assert window.session.recording_path is not None
    qtbot.waitUntil(lambda: _drawn(window) > 5, timeout=WAIT)
    QTest.keyClick(window, Qt.Key.Key_F, ctrl)
    assert window.plots.frozen and window.navigator.freeze_button.text() == "Follow"
    QTest.keyClick(window, Qt.Key.Key_F, ctrl)
    assert not window.plots.frozen
    QTest.keyClick(window, Qt.Key.Key_R, ctrl)
    # The recording closes, the session runs.
    assert not window.record_panel.record_button.isChecked()
    QTest.keyClick(window, Qt.Key.Key_Return, ctrl)
    assert not window.session.running
    target = tmp_path / "plots.png"
    monkeypatch.setattr(QFileDialog, "getSaveFileName",
                        staticmethod(lambda *_a, **_k: (str(target), "")))
    QTest.keyClick(window, Qt.Key.Key_S, ctrl)
    assert target.stat().st_size > 1000
    # Windows that came between closing the recording and Stop are not on disk: then Ctrl+Q
    # asks first (a machine under load gets some), and Discard quits.
    asked = []
    monkeypatch.setattr(QMessageBox, "question", staticmethod(
        lambda _p, title, text, *_a: asked.append(text) or QMessageBox.StandardButton.Discard))
    QTest.keyClick(window, Qt.Key.Key_Q, ctrl)
    assert all("Only part of this session is recorded" in t for t in asked)
    assert not window.isVisible()
    # Each shortcut's key is in its button's tooltip.
    assert "Ctrl+Return" in window.source_panel.start_button.toolTip()
    assert "Ctrl+R" in window.record_panel.record_button.toolTip()
    assert "Ctrl+F" in window.navigator.freeze_button.toolTip()


def test_a_slow_source_loads_off_the_gui_thread_and_can_be_cancelled(qtbot, window,
                                                                      monkeypatch):
    import threading

    from idt_desk_sources.pendulum import PendulumSource
    from PySide6.QtCore import QTimer

    gate = threading.Event()
    built, closed = [], []
    real_init, real_close = PendulumSource.__init__, PendulumSource.close

    def slow_init(self, **settings):
        built.append(threading.current_thread().name)
        gate.wait(3.0)  # the RL source's torch, policy and MuJoCo: seconds
        real_init(self, **settings)

    def close(self):
        closed.append(threading.current_thread().name)
        real_close(self)

    monkeypatch.setattr(PendulumSource, "__init__", slow_init)
    monkeypatch.setattr(PendulumSource, "close", close)
    ticks = []
    timer = QTimer()
    timer.timeout.connect(lambda: ticks.append(1))
    timer.start(20)
    qtbot.mouseClick(window.source_panel.start_button, Qt.MouseButton.LeftButton)
    qtbot.wait(600)
    # The window stayed live while the source was built on a thread of its own...
    assert built == ["idt-load-pendulum"] and len(ticks) >= 10
    assert window.plots.hint.text().startswith("Loading Double pendulum… ")
    assert "Cancel" in window.plots.hint.text()
    # ...and Stop, now Cancel, gives the loading up at once.
    panel = window.source_panel
    assert panel.stop_button.text() == "Cancel" and panel.stop_button.isEnabled()
    assert not panel.start_button.isEnabled() and not panel.settings_form.isEnabled()
    qtbot.mouseClick(window.source_panel.stop_button, Qt.MouseButton.LeftButton)
    assert window.session is None and window.source_panel.start_button.isEnabled()
    assert window.source_panel.stop_button.text() == "Stop" and "Press <b>Start</b>" in \
        window.plots.hint.text()
    # What the cancelled build made is closed when it ends, never started.
    gate.set()
    qtbot.waitUntil(lambda: closed == ["idt-load-pendulum"], timeout=WAIT)
    assert window.session is None
    timer.stop()
    # Started again and left to load: it runs.
    qtbot.mouseClick(window.source_panel.start_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: window.session is not None and window.session.running,
                    timeout=WAIT)
    window.stop_session(wait=True)


def test_a_source_that_fails_to_build_says_why_in_the_banner(qtbot, window):
    window.select_source("replay", {})  # no recording chosen
    qtbot.mouseClick(window.source_panel.start_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: window.banner.isVisible(), timeout=WAIT)
    assert window.banner.text() == ("Cannot start Replay a recording: replay: set 'path' to "
                                    "a recording directory")
    assert window.session is None and window.source_panel.start_button.isEnabled()
    assert window.source_panel.stop_button.text() == "Stop"


def test_a_worker_that_cannot_stop_is_waited_for_once(qtbot, window, capsys):
    """Closing the window, the application's aboutToQuit and the end of run_gui each shut
    the window down; a worker stuck in a model call was waited for 10 s each time."""
    window.start_session()
    session = window.session
    calls = []
    real_stop = session.stop

    def stuck(timeout: float = 10.0) -> None:
        calls.append(timeout)
        raise RuntimeError(f"session worker did not stop within {timeout} s")

    session.stop = stuck  # type: ignore[method-assign]
    try:
        for _ in range(3):
            window.shutdown()
        assert calls == [10.0]
        assert capsys.readouterr().err.count("did not stop within") == 1
    finally:
        session.stop = real_stop  # type: ignore[method-assign]
        real_stop()


def _screen(tmp_path, width: int, height: int) -> str:
    """An offscreen platform whose one screen is ``width`` × ``height``."""
    import json

    path = tmp_path / f"screen_{width}x{height}.json"
    path.write_text(json.dumps({"synchronousWindowSystem": False, "windowFrameMargins": True,
                                "screens": [{"name": "small", "x": 0, "y": 0, "width": width,
                                             "height": height, "logicalDpi": 96,
                                             "logicalBaseDpi": 96, "dpr": 1}]}))
    return f"offscreen:configfile={path}"


@pytest.mark.parametrize("width, height", [(1024, 700), (1366, 768)])
def test_the_window_opens_inside_a_small_screen_and_remembers_its_place(tmp_path, width,
                                                                          height):
    """The 1400×900 default clipped the alarm column and the status bar on these screens."""
    import os
    import subprocess
    import sys

    from PySide6.QtGui import QImage

    env = {**os.environ, "QT_QPA_PLATFORM": _screen(tmp_path, width, height),
           "XDG_CONFIG_HOME": str(tmp_path / "config")}
    shot = tmp_path / "shot.png"
    subprocess.run([sys.executable, "-m", "idt_desk.cli", "gui", "--screenshot", str(shot),
                    "--quit-after", "0.5"], env=env, check=True, timeout=120,
                   capture_output=True)
    image = QImage(str(shot))
    assert 0 < image.width() <= width and 0 < image.height() <= height
    # A session's last size and place (here a 1920×1080 one's) is restored inside the screen.
    big = _screen(tmp_path, 1920, 1080)
    subprocess.run([sys.executable, "-m", "idt_desk.cli", "gui", "--quit-after", "0.5"],
                   env={**env, "QT_QPA_PLATFORM": big}, check=True, timeout=120,
                   capture_output=True)
    assert (tmp_path / "config" / "IDT Desk" / "idt-desk.conf").is_file()
    subprocess.run([sys.executable, "-m", "idt_desk.cli", "gui", "--screenshot", str(shot),
                    "--quit-after", "0.5"], env=env, check=True, timeout=120,
                   capture_output=True)
    image = QImage(str(shot))
    assert 0 < image.width() <= width and 0 < image.height() <= height


def test_fitting_a_small_screen_keeps_the_alarm_column(window):
    from PySide6.QtCore import QRect

    window.resize(1400, 900)
    window.move(300, 200)
    window.fit_to_screen(QRect(0, 0, 1024, 700))
    g = window.geometry()
    assert g.right() < 1024 and g.bottom() < 700 and g.left() >= 0 and g.top() >= 0
    assert window.main_split.sizes()[2] >= window.right_scroll.minimumWidth()


def test_quit_asks_before_losing_an_unrecorded_session(qtbot, window, monkeypatch):
    asked = _answer(monkeypatch, Button.Cancel)
    window.start_session()
    qtbot.waitUntil(lambda: _drawn(window) > 5, timeout=WAIT)
    window.stop_session(wait=True)
    QTest.keyClick(window, Qt.Key.Key_Q, Qt.KeyboardModifier.ControlModifier)
    assert len(asked) == 1 and "quitting loses" in asked[0] and window.isVisible()
    _answer(monkeypatch, Button.Discard)
    QTest.keyClick(window, Qt.Key.Key_Q, Qt.KeyboardModifier.ControlModifier)
    assert not window.isVisible()


def test_at_1366_by_768_the_perturbations_show_without_scrolling(qtbot, window):
    """The README sends a new user to *Perturbations*; at 1366×768 nothing of it showed
    without scrolling the left column (it sat under the pipeline's settings)."""
    window.resize(1366, 768)
    qtbot.waitUntil(lambda: window.width() == 1366, timeout=5000)
    column = window.controls_scroll
    assert column.verticalScrollBar().value() == 0
    first = next(iter(window.switches.perturb_buttons.values()))
    bottom = first.mapTo(column.viewport(), first.rect().bottomLeft()).y()
    assert 0 < bottom <= column.viewport().height()


def test_the_side_column_grows_to_its_panels_instead_of_cutting_them(qtbot, window):
    """On the RL source the alarm tiles squashed and their text was cut at the column's
    right edge once the agency panel grew: the column had no horizontal scroll bar."""
    from PySide6.QtWidgets import QLabel

    window.resize(1366, 768)
    side = window.right_scroll
    wide = QLabel("x" * 120, side.widget())  # a panel that needs more than the column has
    side.widget().layout().insertWidget(0, wide)
    qtbot.waitUntil(lambda: side.minimumWidth() > 300, timeout=5000)
    qtbot.waitUntil(lambda: side.widget().width() <= side.viewport().width(), timeout=5000)
    lights = window.alarms.lights
    assert all(lights[k].width() > 40 for k in ("P", "H_f", "H_b"))
    wide.deleteLater()
    qtbot.waitUntil(lambda: side.minimumWidth() == side.MIN_WIDTH, timeout=5000)


def test_the_startup_times_are_measured_to_the_first_plotted_window(tmp_path):
    """What the README's start-up figures are measured with: the window shown, then its
    first window plotted, in seconds after the command started; then it quits."""
    import os
    import re
    import subprocess
    import sys

    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen", "XDG_CONFIG_HOME": str(tmp_path)}
    got = subprocess.run([sys.executable, "-m", "idt_desk.cli", "gui", "--start",
                          "--startup-times"], env=env, capture_output=True, text=True,
                         timeout=180)
    assert got.returncode == 0, got.stderr
    m = re.search(r"window shown ([\d.]+) s and its first window plotted ([\d.]+) s after "
                  r"the command started", got.stderr)
    assert m is not None, got.stderr
    shown, plotted = float(m.group(1)), float(m.group(2))
    assert 0 < shown < plotted
    refused = subprocess.run([sys.executable, "-m", "idt_desk.cli", "gui", "--startup-times"],
                             env=env, capture_output=True, text=True, timeout=120)
    assert refused.returncode == 2 and "needs --start" in refused.stderr
