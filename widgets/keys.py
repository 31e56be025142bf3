"""The main window's keyboard shortcuts, and the question before a session is thrown away.

The shortcuts act on the whole window (whatever has the focus, except where a text field
takes the key), each one what a button does: Start / Stop, Freeze / Follow, Record, Save
plots, Quit. Reset has none: it throws a session away, and asks first when nothing of it is
recorded (:func:`may_discard`).
"""

from __future__ import annotations

from typing import Any

from PySide6.QtGui import QKeySequence, QShortcut
from PySide6.QtWidgets import QMessageBox, QWidget

__all__ = ["SHORTCUTS", "install_shortcuts", "may_discard", "may_recalibrate"]

#: (keys, what it does, the window's method name).
SHORTCUTS = (
    ("Ctrl+Return", "Start / Stop", "toggle_running"),
    ("Ctrl+F", "Freeze / Follow the plots", "toggle_frozen"),
    ("Ctrl+R", "Record on / off", "toggle_recording"),
    ("Ctrl+S", "Save the plots (PNG)…", "save_plots"),
    ("Ctrl+Q", "Quit", "quit_asking"),
    ("Alt+Left", "Back to the watched folder's runs", "show_fleet"),
)


def install_shortcuts(window: Any) -> dict[str, QShortcut]:
    """Make :data:`SHORTCUTS` on ``window``; name each in its button's tooltip."""
    out = {}
    for keys, what, method in SHORTCUTS:
        shortcut = QShortcut(QKeySequence(keys), window)
        shortcut.setObjectName(f"shortcut_{method}")
        shortcut.activated.connect(getattr(window, method))
        shortcut.setWhatsThis(what)
        out[method] = shortcut
    for button, keys in ((window.source_panel.start_button, "Ctrl+Return"),
                         (window.source_panel.stop_button, "Ctrl+Return"),
                         (window.record_panel.record_button, "Ctrl+R")):
        tip = button.toolTip()
        button.setToolTip(f"{tip}<br>({keys})" if tip else f"{button.text()} ({keys})")
    return out


def may_discard(parent: QWidget, windows: int, events: int, recorded: bool,
                action: str = "reset", partly: bool = False) -> bool:
    """Whether a session's plots and event log may be cleared: asks when nothing is recorded.

    ``action``: what clears them, ``reset`` (Reset), ``start`` (Start or Ctrl+Return after
    Stop: a new session replaces the stopped one) or ``quit`` (Ctrl+Q, the window's close
    button). Cancel is the default answer, so a stray
    Space or Return keeps the session.
    """
    if recorded or (windows == 0 and events == 0):
        return True
    what = "Only part of this session is recorded" if partly else \
        "This session is not recorded"
    if action == "quit":
        return _confirm(
            parent, "Quit?",
            f"{what}: quitting loses its {windows:,} windows and "
            f"{events:,} events. (Export CSV keeps them.)\n\nQuit anyway?",
            QMessageBox.StandardButton.Discard)
    if action == "start":
        return _confirm(
            parent, "Start a new session?",
            f"{what.replace('This session', 'The stopped session')}: a new one replaces its "
            f"{windows:,} windows "
            f"and {events:,} events in the plots and the event log. (Export CSV keeps "
            "them.)\n\nDiscard it and start?", QMessageBox.StandardButton.Discard)
    return _confirm(
        parent, "Clear this session?",
        f"{what}: Reset clears its {windows:,} windows and {events:,} "
        "events from the plots and the event log. (Export CSV keeps them.)\n\nClear them?",
        QMessageBox.StandardButton.Reset)


def may_recalibrate(parent: QWidget, recheck: str) -> bool:
    """Whether to re-calibrate the symbols after the range re-check found a real shift.

    ``recheck``: the re-check in words. Cancel is the default answer: re-calibrating takes
    the changed loop as the new normal, so the detection it made is given up.
    """
    return _confirm(
        parent, "Re-calibrate a changed loop?",
        f"{recheck}\n\nRe-calibrating now fits new bins and a new baseline to the changed "
        "loop: the alarm would then measure against it.\n\nRe-calibrate anyway?",
        QMessageBox.StandardButton.Yes)


def _confirm(parent: QWidget, title: str, text: str, button: QMessageBox.StandardButton
             ) -> bool:
    """Ask ``button`` or Cancel, Cancel the default; whether ``button`` was the answer."""
    answer = QMessageBox.question(parent, title, text,
                                  button | QMessageBox.StandardButton.Cancel,
                                  QMessageBox.StandardButton.Cancel)
    return answer == button
