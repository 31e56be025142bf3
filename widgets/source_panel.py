"""The source panel: which source, its settings, Start / Pause / Stop / Reset and the speed.

The panel owns its widgets and says what the user asked for with signals; the main window
turns them into session commands and tells the panel what the session is doing
(:meth:`SourcePanel.set_state`).
"""

from __future__ import annotations

import html
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

from idt_desk_widgets.forms import ParamForm, compact_combo, compact_form, set_quietly
from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QComboBox,
    QFileDialog,
    QFormLayout,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from idt_desk.live.plugins import SourceLoadError, discover
from idt_desk.live.source import Source

__all__ = ["SPEEDS", "SourcePanel", "idle_hint", "speed_label"]

#: Speed choices: label -> multiple of real time (None = as fast as possible).
SPEEDS = {"0.1×": 0.1, "0.25×": 0.25, "0.5×": 0.5, "1× (real time)": 1.0, "2×": 2.0,
          "5×": 5.0, "10×": 10.0, "50×": 50.0, "100×": 100.0, "max": None}


def _same(a: float | None, b: float | None) -> bool:
    """Whether two speeds are the same (None: max)."""
    return a == b or (a is not None and b is not None and math.isclose(a, b))


def speed_label(speed: float | None) -> str:
    """The speed combo's label of a speed (a preset's, or "3×" for any other multiple)."""
    for label, v in SPEEDS.items():
        if _same(v, speed):
            return label
    return f"{speed:g}×"


def idle_hint(cls: type[Source] | None, stopped: bool = False, profile: Any = None) -> str:
    """What the empty plots say before a session (or after one that made no window).

    ``profile``: the baseline profile the next Start takes (it judges from the first window).
    """
    if cls is None:
        return "Choose a source that loads, then press Start."
    label = cls.label
    what = label[0].lower() + label[1:] if label[1:2].islower() else label
    if cls.metric_path == "turns":
        first = "Stopped before the first turn. " if stopped else ""
        return (f"{first}Press <b>Start</b> to run the {what}.<br><small>Every turn gives "
                "P, H<sub>f</sub>, H<sub>b</sub> and ΔH from its token counts; the first "
                "turns are the baseline, then the alarms judge each new one.</small>")
    first = "Stopped before the first window. " if stopped else ""
    if profile is not None:
        return (f"{first}Press <b>Start</b> to run the {what}.<br><small>The baseline profile "
                f"{html.escape(Path(profile.name).name)} judges it from the first window: "
                "its symbols, twin and thresholds, no calibration, no baseline to "
                "gather.</small>")
    return (f"{first}Press <b>Start</b> to run the {what}.<br><small>The first windows "
            "calibrate the symbols, the next ones the baseline; then the plots show "
            "P, H<sub>f</sub>, H<sub>b</sub>, ΔH and their alarms.</small>")


class SourcePanel(QGroupBox):
    """The "Source" group: source, description, settings, Start / Pause / Stop / Reset, speed.

    The source list holds every discovered source plugin (:attr:`entries`); choosing one
    emits ``source_chosen`` (the window then calls :meth:`select`). The buttons emit
    ``start_requested``, ``pause_toggled``, ``stop_requested`` and ``reset_requested``; a
    new speed emits ``speed_chosen``.
    """

    #: The user chose another source (its plugin name).
    source_chosen = Signal(str)
    #: A recording was chosen with the folder button (its path): a replay's speed follows.
    recording_chosen = Signal(str)
    #: Start was clicked.
    start_requested = Signal()
    #: Pause (True) or Resume (False) was clicked.
    pause_toggled = Signal(bool)
    #: Stop (or Cancel, while a source loads) was clicked.
    stop_requested = Signal()
    #: Reset was clicked.
    reset_requested = Signal()
    #: A speed was chosen: a multiple of real time, or None for max.
    speed_chosen = Signal(object)
    #: Something the user asked for cannot be done (for the window's banner).
    error = Signal(str)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__("Source", parent)
        #: Where Browse opens (the window's recordings folder).
        self.folder: Callable[[], Path] = Path.cwd
        #: What takes the focus when a lifecycle button that has it disables itself.
        self.focus_after: QWidget | None = None
        #: The speeds are turns a second (a dialogue), not multiples of real time.
        self.turns = False
        lay = QVBoxLayout(self)
        self.source_combo = compact_combo(QComboBox(self), 16)
        self.source_combo.setObjectName("source_combo")
        #: The source plugins by name (``idt_desk.live.plugins.discover``).
        self.entries = discover()
        for name, entry in self.entries.items():
            try:
                label = entry.load().label
            except SourceLoadError:
                label = f"{name} (failed to load)"
            self.source_combo.addItem(label, name)
        self.source_combo.currentIndexChanged.connect(
            lambda _i: self.source_chosen.emit(self.source_combo.currentData()))
        lay.addWidget(self.source_combo)
        self.source_info = QLabel("", self)
        self.source_info.setWordWrap(True)
        lay.addWidget(self.source_info)
        self.settings_holder = QVBoxLayout()
        lay.addLayout(self.settings_holder)
        #: The selected source's declared settings (None: no source loaded).
        self.settings_form: ParamForm | None = None
        self.browse_button = QPushButton("Browse recording…", self)
        self.browse_button.clicked.connect(self._browse_path)
        self.browse_button.hide()
        lay.addWidget(self.browse_button)
        row = QHBoxLayout()
        self.start_button = QPushButton("Start", self)
        self.pause_button = QPushButton("Pause", self)
        self.pause_button.setCheckable(True)
        self.stop_button = QPushButton("Stop", self)
        self.reset_button = QPushButton("Reset", self)
        for b in (self.start_button, self.pause_button, self.stop_button, self.reset_button):
            b.setMinimumWidth(60)  # the style's 80 px minimum would widen the panel
            row.addWidget(b)
        self.start_button.clicked.connect(lambda: self.start_requested.emit())
        self.pause_button.toggled.connect(lambda on: self.pause_toggled.emit(on))
        self.stop_button.clicked.connect(lambda: self.stop_requested.emit())
        self.reset_button.clicked.connect(lambda: self.reset_requested.emit())
        lay.addLayout(row)
        form = compact_form(QFormLayout())
        self.speed_combo = QComboBox(self)
        for label, value in SPEEDS.items():
            self.speed_combo.addItem(label, value)
        self.speed_combo.currentIndexChanged.connect(
            lambda _i: self.speed_chosen.emit(self.speed_combo.currentData()))
        self.speed_combo.setToolTip(
            "Multiples of the loop's real time, or max (as fast as the machine goes). The "
            "status line says the speed reached when the machine cannot keep up. The RL "
            "source's loop runs in a process of its own, so the window's drawing does not "
            "slow it; a long run can also go headless (idt-desk run --record R) and be "
            "followed with idt-desk watch R.")
        form.addRow("Speed", self.speed_combo)
        lay.addLayout(form)

    # -- the source -------------------------------------------------------------------------

    def has(self, name: str) -> bool:
        """Whether the source list holds a source named ``name``."""
        return self.source_combo.findData(name) >= 0

    def select(self, name: str, settings: dict[str, Any]) -> type[Source] | None:
        """Show source ``name`` (one the list holds) with ``settings`` in its form.

        Returns its class, or None when it fails to load (the description says why and
        Start is disabled).
        """
        idx = self.source_combo.findData(name)
        if self.source_combo.currentIndex() != idx:
            self.source_combo.blockSignals(True)
            self.source_combo.setCurrentIndex(idx)
            self.source_combo.blockSignals(False)
        if self.settings_form is not None:
            self.settings_form.setParent(None)
            self.settings_form.deleteLater()
            self.settings_form = None
        try:
            cls = self.entries[name].load()
        except SourceLoadError as exc:
            self.source_info.setText(str(exc))
            self.start_button.setEnabled(False)
            return None
        self.start_button.setEnabled(True)
        self.source_info.setText(cls.description)
        self.settings_form = ParamForm(cls.settings, self)
        self.settings_form.set_values(settings)
        self.settings_holder.addWidget(self.settings_form)
        self.browse_button.setVisible(any(p.name == "path" for p in cls.settings))
        return cls

    def _browse_path(self) -> None:
        path = QFileDialog.getExistingDirectory(self, "Choose a recording", str(self.folder()))
        if path and self.settings_form is not None:
            self.settings_form.set_values({"path": path})
            self.recording_chosen.emit(path)

    # -- the lifecycle ----------------------------------------------------------------------

    def set_state(self, loading: bool, running: bool, stopping: bool, loaded: bool) -> None:
        """Enable what the session's state allows.

        ``loading``: a source is being built (Stop cancels it); ``running``: a session runs
        (or loads); ``stopping``: its worker is finishing; ``loaded``: a source class is
        selected that loaded.
        """
        self.stop_button.setText("Cancel" if loading else "Stop")
        # A button that disables itself hands the focus on to the next one in the panel
        # (Start's and Stop's to Reset, where a Space would clear the session): Start's goes
        # to Stop, Stop's and Pause's to the plots.
        moving = any(b.hasFocus() for b in (self.start_button, self.pause_button,
                                             self.stop_button))
        if moving and self.focus_after is not None:
            self.focus_after.setFocus(Qt.FocusReason.OtherFocusReason)
        self.start_button.setEnabled(not running and loaded)
        self.pause_button.setEnabled(running and not loading and not stopping)
        self.stop_button.setEnabled(running and not stopping)
        if moving and running and not stopping:
            self.stop_button.setFocus(Qt.FocusReason.OtherFocusReason)
        self.source_combo.setEnabled(not running)
        if self.settings_form is not None:
            self.settings_form.setEnabled(not running)

    def show_paused(self, on: bool, quietly: bool = False) -> None:
        """Pause's label says what a click does: Resume while paused.

        ``quietly``: check the button too, without emitting ``pause_toggled`` (the source
        paused the loop itself).
        """
        if quietly:
            set_quietly(self.pause_button, on)
        self.pause_button.setText("Resume" if on else "Pause")

    # -- the speed --------------------------------------------------------------------------

    @property
    def speeds(self) -> dict[str, float | None]:
        """The speed choices: label -> multiple of real time (None = max), in order."""
        combo = self.speed_combo
        return {combo.itemText(i): combo.itemData(i) for i in range(combo.count())}

    def speed_text(self, speed: float | None) -> str:
        """A speed's label: "3×", "1× (real time)"; on a turn axis "3 turns/s"."""
        if speed is None or not self.turns:
            return speed_label(speed)
        return f"{speed:g} turn{'' if speed == 1 else 's'}/s"

    def set_turns(self, turns: bool) -> None:
        """Label the speeds in turns a second (a dialogue) or as multiples of real time."""
        self.turns = turns
        # A dialogue's loop time is its turns: "1× (real time)" would say nothing there.
        for i in range(self.speed_combo.count()):
            self.speed_combo.setItemText(i, self.speed_text(self.speed_combo.itemData(i)))

    def set_speed(self, speed: float | None) -> None:
        """Select a speed (any positive multiple of real time, or None for max).

        A multiple that is not one of the presets is added to the choices, in order; one
        that is not a positive number emits ``error`` and selects real time.
        """
        if speed is not None and not (isinstance(speed, int | float) and speed > 0
                                      and math.isfinite(speed)):
            self.error.emit(f"speed must be a positive multiple of real time or max, got "
                            f"{speed!r}; using real time")
            speed = 1.0
        combo = self.speed_combo
        values = [combo.itemData(i) for i in range(combo.count())]
        at = next((i for i, v in enumerate(values) if _same(v, speed)), None)
        if at is None:
            at = sum(1 for v in values if v is not None and v < speed)
            combo.insertItem(at, self.speed_text(speed), float(speed))
        combo.setCurrentIndex(at)
