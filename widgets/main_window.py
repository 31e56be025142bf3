"""The IDT Desk main window.

One file: the window is one ``QMainWindow`` whose slots read one snapshot and send one
session command each; its panels live apart (:mod:`.plots`, :mod:`.alarms`, :mod:`.events`,
:mod:`.forms`, :mod:`.views`, :mod:`.agency`, :mod:`.transcript`). Cutting the class
across files would only scatter the wiring of one object.
"""

from __future__ import annotations

import gc
import math
import sys
import time
from pathlib import Path
from typing import Any

from idt_desk_widgets.agency import AgencyPanel
from idt_desk_widgets.alarms import AlarmPanel, plural
from idt_desk_widgets.events import EventLog
from idt_desk_widgets.forms import (
    ElidedLabel,
    ParamForm,
    WheelGuard,
    compact_combo,
    compact_form,
)
from idt_desk_widgets.keys import install_shortcuts, may_discard, may_recalibrate
from idt_desk_widgets.loading import SessionBuilder, build_session
from idt_desk_widgets.plots import MetricPlots, PlotNavigator, ReturnPlot
from idt_desk_widgets.views import make_view
from PySide6.QtCore import QEventLoop, Qt, QTimer
from PySide6.QtWidgets import (
    QApplication,
    QCheckBox,
    QComboBox,
    QDoubleSpinBox,
    QFileDialog,
    QFormLayout,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QMainWindow,
    QPushButton,
    QScrollArea,
    QSpinBox,
    QSplitter,
    QVBoxLayout,
    QWidget,
)

from idt_desk.detection.detectors import DEFAULT_DETECTOR
from idt_desk.detection.monitor import DEFAULT_BASELINE_WINDOWS
from idt_desk.live.alarms import overlap_text
from idt_desk.live.plugins import SourceLoadError, discover
from idt_desk.live.ranges import recheck_text
from idt_desk.live.session import Session, Snapshot
from idt_desk.live.source import Source
from idt_desk.metrics.presets import PRESETS
from idt_desk.metrics.tokens import TOKENIZER
from idt_desk.recordings import (
    RecordingError,
    export_recording,
    load_recording,
    newest_recording,
    recording_size,
)

__all__ = ["SPEEDS", "MainWindow"]

#: Speed choices: label -> multiple of real time (None = as fast as possible).
SPEEDS = {"0.1×": 0.1, "0.25×": 0.25, "0.5×": 0.5, "1× (real time)": 1.0, "2×": 2.0,
          "5×": 5.0, "10×": 10.0, "100×": 100.0, "max": None}
#: The preset choice that means "no preset: the numbers below".
CUSTOM = "(custom)"
#: GUI refresh interval (ms): 30 Hz.
REFRESH_MS = 33


def _set_quietly(button: QPushButton, on: bool) -> None:
    """Check or uncheck a toggle without firing its slot (the state changed elsewhere)."""
    button.blockSignals(True)
    button.setChecked(on)
    button.blockSignals(False)


def _speed_label(speed: float | None) -> str:
    """The speed combo's label of a speed (a preset's, or "3×" for any other multiple)."""
    for label, v in SPEEDS.items():
        if v == speed or (v is not None and speed is not None and math.isclose(v, speed)):
            return label
    return f"{speed:g}×"


def _rate(per_s: float | None) -> str:
    """Transitions per second, short: 1,000 / 12.3 k / 1.2 M."""
    if per_s is None or not math.isfinite(per_s) or per_s <= 0:
        return "—"
    if per_s >= 1e6:
        return f"{per_s / 1e6:.1f} M"
    if per_s >= 1e4:
        return f"{per_s / 1e3:.0f} k"
    return f"{per_s:,.0f}"


class MainWindow(QMainWindow):
    """Source picker and settings, live plots, alarms, perturbation and modulation panels.

    Parameters
    ----------
    source
        Source selected at start.
    settings
        Initial values of the source's declared settings.
    speed
        Initial speed: any positive multiple of real time (one that is not a preset is
        added to the speed choices), or None for as fast as possible.
    record_dir
        Folder new recordings are created in.
    history
        Windows a refresh copies from the session (more when the plots are further behind);
        the plots keep the whole session (``MetricPlots.history``), memory flat.
    watch_folder
        A folder of runs being watched (``idt-desk watch FOLDER``): once a second the window
        looks for a run that has started there since, and follows it (the replay source,
        following) in place of the one it follows.
    """

    #: Watching a folder: how often it is looked at for a new run (ms).
    WATCH_MS = 1000

    def __init__(
        self,
        source: str = "pendulum",
        settings: dict[str, Any] | None = None,
        speed: float | None = 1.0,
        record_dir: str | Path | None = None,
        history: int = 2000,
        watch_folder: str | Path | None = None,
    ) -> None:
        super().__init__()
        self.setWindowTitle("IDT Desk — Information Digital Twin")
        self.resize(*self.DEFAULT_SIZE)
        self.session: Session | None = None
        self.history = history
        self.last_recording: Path | None = None
        #: When the recording started, and when its size was last looked at (monotonic).
        self._record_since = (0.0, 0.0)
        self._frames = 0
        self._fps_t0 = time.monotonic()
        self.fps = 0.0
        self._error_shown: str | None = None
        self._source_cls: type[Source] | None = None
        self._record_dir = Path(record_dir) if record_dir else Path.home() / "idt-desk-recordings"
        self.perturb_buttons: dict[str, QPushButton] = {}
        self.perturb_forms: dict[str, ParamForm] = {}
        self.modulate_buttons: dict[str, QPushButton] = {}
        self.modulate_forms: dict[str, ParamForm] = {}
        self.auto_check = QCheckBox(self)
        self.auto_check.hide()

        self.plots = MetricPlots(self)
        self.navigator = PlotNavigator(self.plots, self)
        self.returns = ReturnPlot(self)
        self.returns.hide()
        self.events = EventLog(self)
        self.events.folder = lambda: self.recordings_folder
        self.events.selected.connect(self.plots.centre_on)
        # Folded on a short window (the plots need the height) until the user decides.
        self._events_chosen = False
        self.events.toggle.toggled.connect(lambda _on: setattr(self, "_events_chosen", True))
        self.alarms = AlarmPanel(self)
        self.agency = AgencyPanel(self)
        self.view_box = QGroupBox("System", self)
        self.view_layout = QVBoxLayout(self.view_box)
        self.view: QWidget | None = None
        self._view_name = ""

        controls = QWidget(self)
        self.controls_layout = QVBoxLayout(controls)
        self._build_source_group()
        self._build_symbol_group()
        self.perturb_box = QGroupBox("Perturbations", self)
        self.perturb_layout = QVBoxLayout(self.perturb_box)
        self.modulate_box = QGroupBox("Modulation", self)
        self.modulate_layout = QVBoxLayout(self.modulate_box)
        self.controls_layout.addWidget(self.perturb_box)
        self.controls_layout.addWidget(self.modulate_box)
        self._build_record_group()
        self.controls_layout.addStretch(1)
        scroll = QScrollArea(self)
        scroll.setObjectName("controls_scroll")
        scroll.setWidget(controls)
        scroll.setWidgetResizable(True)
        scroll.setMinimumWidth(360)
        self.controls_scroll = scroll
        # Scrolling the panel must never change a setting under the pointer.
        self._wheel_guard = WheelGuard.install(self)

        self.banner = QLabel("", self)
        self.banner.setObjectName("banner")
        self.banner.setWordWrap(True)
        self.banner.setStyleSheet("QLabel { background: #fde7e7; color: #8a1c1c; padding: 6px; }")
        self.banner.hide()
        graphs = QWidget(self)
        gl = QVBoxLayout(graphs)
        gl.setContentsMargins(0, 0, 0, 0)
        gl.setSpacing(0)
        gl.addWidget(self.navigator)
        gl.addWidget(self.plots, 1)
        gl.addWidget(self.returns)
        # The event log under the plots; its handle drags it larger, or shut.
        self.centre_split = QSplitter(Qt.Orientation.Vertical, self)
        self.centre_split.addWidget(graphs)
        self.centre_split.addWidget(self.events)
        self.centre_split.setStretchFactor(0, 1)
        self.centre_split.setCollapsible(0, False)
        self.centre_split.setCollapsible(1, False)
        #: The event log's height when open (the user's, once they drag the handle).
        self.events_height = 150
        self.centre_split.splitterMoved.connect(self._event_log_dragged)
        self.events.folded.connect(lambda _f: self._fit_event_log())
        centre = QWidget(self)
        cl = QVBoxLayout(centre)
        cl.setContentsMargins(0, 0, 0, 0)
        cl.addWidget(self.banner)
        cl.addWidget(self.centre_split, 1)

        right = QWidget(self)
        rl = QVBoxLayout(right)
        rl.addWidget(self.alarms)
        rl.addWidget(self.agency)
        rl.addWidget(self.view_box, 1)
        # Scrolls rather than squeezing its panels into one another on a small screen.
        right_scroll = QScrollArea(self)
        right_scroll.setObjectName("right_scroll")
        right_scroll.setWidget(right)
        right_scroll.setWidgetResizable(True)
        right_scroll.setFrameShape(QScrollArea.Shape.NoFrame)
        right_scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        right_scroll.setMinimumWidth(300)
        self.right_scroll = right_scroll

        split = QSplitter(self)
        split.addWidget(scroll)
        split.addWidget(centre)
        split.addWidget(right_scroll)
        split.setStretchFactor(1, 1)
        split.setSizes([380, 720, 320])
        self.main_split = split
        self.setCentralWidget(split)
        self.status = ElidedLabel("idle — choose a source and press Start", self)
        # A normal widget: a temporary message ("exported ...") shows in its place briefly.
        self.statusBar().addWidget(self.status, 1)
        self.rates = QLabel("", self)
        self.rates.setObjectName("rates")
        self.rates.setToolTip(
            "<b>loop</b>: transitions per second the loop actually advances (about speed × "
            "the source's rate at real time).<br><b>compute</b>: transitions per second the "
            "IDT pipeline can process (its compute throughput; the loop can go no faster "
            "at max speed).")
        self.statusBar().addPermanentWidget(self.rates)
        self.fps_label = QLabel("GUI —", self)
        self.fps_label.setObjectName("fps")
        self.fps_label.setToolTip("Frames per second the dashboard redraws (target 30); "
                                  "— when no session is running")
        self.fps_label.setMinimumWidth(90)
        for label in (self.rates, self.fps_label):
            label.setStyleSheet("QLabel { border-left: 1px solid #b9bec6; padding: 0 8px; }")
        self.statusBar().addPermanentWidget(self.fps_label)
        self.alarms.recalibrate.connect(self._recalibrate)
        self.plots.cursorChanged.connect(
            lambda text: self.statusBar().showMessage(text) if text
            else self.statusBar().clearMessage())
        self.events.message.connect(
            lambda text: self.show_error(text) if text.startswith("Export failed")
            else self.statusBar().showMessage(text, 8000))

        self.timer = QTimer(self)
        self.timer.setInterval(REFRESH_MS)
        self.timer.timeout.connect(self.refresh)
        self._starting = False
        #: A session whose worker did not stop when the window shut down (not waited again).
        self._given_up: Session | None = None
        #: When a worker this window asked to stop is reported as stuck (None: not asked).
        self._stop_deadline: float | None = None
        self._stopping_seen = False  # the controls were last set for a stopping worker
        #: The session being built in the background (Start), polled by the load timer.
        self._builder: SessionBuilder | None = None
        self._pending_schedule: Any = None
        self._load_timer = QTimer(self)
        self._load_timer.setInterval(100)
        self._load_timer.timeout.connect(self._poll_loading)
        self._last_collect = 0.0
        self._collect_timer = QTimer(self)
        self._collect_timer.setSingleShot(True)
        self._collect_timer.timeout.connect(self._collect)

        #: Keyboard shortcuts (``idt_desk_widgets.keys.SHORTCUTS``) by method name.
        self.shortcuts = install_shortcuts(self)
        self.set_speed(speed)
        self._select_source(source, settings or {})
        self.watch_folder = Path(watch_folder) if watch_folder is not None else None
        self._watch_timer = QTimer(self)
        self._watch_timer.setInterval(self.WATCH_MS)
        self._watch_timer.timeout.connect(self._look_for_new_run)
        #: Runs in the watched folder that are not new: there when the watch began, or seen.
        self.runs_seen: set[Path] = set()
        if self.watch_folder is not None:
            self._watch(self.watch_folder, (settings or {}).get("path"))
            if not (settings or {}).get("path"):
                # Nothing to follow yet (an empty folder): the window waits in plain view.
                self.plots.show_hint(f"Waiting for a run in {self.watch_folder} …<br><small>"
                                     "a recording that starts there is followed at once"
                                     "</small>")
                self.status.setText(f"watching {self.watch_folder}: no run yet")

    @property
    def speeds(self) -> dict[str, float | None]:
        """The speed choices: label -> multiple of real time (None = max), in order."""
        combo = self.speed_combo
        return {combo.itemText(i): combo.itemData(i) for i in range(combo.count())}

    def _speed_text(self, speed: float | None) -> str:
        """A speed's label: "3×", "1× (real time)"; on a turn axis "3 turns/s"."""
        if speed is None or not self.plots.x_label == "turn":
            return _speed_label(speed)
        return f"{speed:g} turn{'' if speed == 1 else 's'}/s"

    def set_speed(self, speed: float | None) -> None:
        """Select a speed (any positive multiple of real time, or None for max).

        A multiple that is not one of the presets is added to the choices, in order.
        """
        if speed is not None and not (isinstance(speed, int | float) and speed > 0
                                      and math.isfinite(speed)):
            self.show_error(f"speed must be a positive multiple of real time or max, got "
                            f"{speed!r}; using real time")
            speed = 1.0
        combo = self.speed_combo
        values = [combo.itemData(i) for i in range(combo.count())]
        at = next((i for i, v in enumerate(values) if v == speed or (
            v is not None and speed is not None and math.isclose(v, speed))), None)
        if at is None:
            at = sum(1 for v in values if v is not None and v < speed)
            combo.insertItem(at, self._speed_text(speed), float(speed))
        combo.setCurrentIndex(at)

    # -- building ---------------------------------------------------------------------------

    def _build_source_group(self) -> None:
        box = QGroupBox("Source", self)
        lay = QVBoxLayout(box)
        self.source_combo = compact_combo(QComboBox(box), 16)
        self.source_combo.setObjectName("source_combo")
        self._entries = discover()
        for name, entry in self._entries.items():
            try:
                label = entry.load().label
            except SourceLoadError:
                label = f"{name} (failed to load)"
            self.source_combo.addItem(label, name)
        self.source_combo.currentIndexChanged.connect(
            lambda _i: self._select_source(self.source_combo.currentData(), {}))
        lay.addWidget(self.source_combo)
        self.source_info = QLabel("", box)
        self.source_info.setWordWrap(True)
        lay.addWidget(self.source_info)
        self.settings_holder = QVBoxLayout()
        lay.addLayout(self.settings_holder)
        self.settings_form: ParamForm | None = None
        self.browse_button = QPushButton("Browse recording…", box)
        self.browse_button.clicked.connect(self._browse_path)
        self.browse_button.hide()
        lay.addWidget(self.browse_button)
        row = QHBoxLayout()
        self.start_button = QPushButton("Start", box)
        self.pause_button = QPushButton("Pause", box)
        self.pause_button.setCheckable(True)
        self.stop_button = QPushButton("Stop", box)
        self.reset_button = QPushButton("Reset", box)
        for b in (self.start_button, self.pause_button, self.stop_button, self.reset_button):
            b.setMinimumWidth(60)  # the style's 80 px minimum would widen the panel
            row.addWidget(b)
        self.start_button.clicked.connect(lambda: self.start_session(background=True, ask=True))
        self.pause_button.toggled.connect(self._pause_toggled)
        self.stop_button.clicked.connect(lambda: self.stop_session())
        self.reset_button.clicked.connect(self.reset_session)
        lay.addLayout(row)
        form = compact_form(QFormLayout())
        self.speed_combo = QComboBox(box)
        for label, value in SPEEDS.items():
            self.speed_combo.addItem(label, value)
        self.speed_combo.currentIndexChanged.connect(self._speed_changed)
        form.addRow("Speed", self.speed_combo)
        lay.addLayout(form)
        self.controls_layout.addWidget(box)

    def _build_symbol_group(self) -> None:
        box = QGroupBox("Symbolisation and baseline", self)
        self.symbol_box = box
        form = compact_form(QFormLayout(box))
        self._symbol_form = form
        self.tokens_label = QLabel("", box)
        self.tokens_label.setWordWrap(True)
        form.addRow(self.tokens_label)
        self.preset_combo = compact_combo(QComboBox(box))
        self.preset_combo.addItems([*PRESETS, CUSTOM])
        self.preset_combo.setToolTip("Paper configurations; '(custom)' uses the bins, window "
                                     "and stride below, each variable its own group")
        self.preset_combo.currentTextChanged.connect(self._preset_changed)
        form.addRow("Preset", self.preset_combo)
        self.bins_spin = self._spin(1, 64, 16)
        self.window_spin = self._spin(2, 100000, 300)
        self.stride_spin = self._spin(1, 100000, 75)
        self.calib_spin = self._spin(2, 10000, 20)
        self.calib_spin.setToolTip("Symbol statistics (z-score, bin edges) are frozen from the "
                                   "first N windows of data")
        form.addRow("Bins", self.bins_spin)
        form.addRow("Window W", self.window_spin)
        form.addRow("Stride", self.stride_spin)
        form.addRow("Calibrate on first N windows", self.calib_spin)
        self.correction_combo = QComboBox(box)
        self.correction_combo.addItems(["none", "miller-madow"])
        form.addRow("Entropy correction", self.correction_combo)
        self.apply_symbols_button = QPushButton("Apply (re-symbolise)", box)
        self.apply_symbols_button.setToolTip("Re-calibrate symbols and baseline from the data "
                                             "that follows, with these settings")
        self.apply_symbols_button.clicked.connect(self._apply_symbols)
        form.addRow(self.apply_symbols_button)
        # Rows that only symbols over windows use: hidden for a source whose metrics come
        # per turn from token counts (a dialogue), which shows its tokenizer instead.
        self._symbol_rows = (self.preset_combo, self.bins_spin, self.window_spin,
                             self.stride_spin, self.calib_spin, self.correction_combo,
                             self.apply_symbols_button)
        self.baseline_spin = self._spin(2, 100000, DEFAULT_BASELINE_WINDOWS)
        self.baseline_spin.setToolTip(
            "Windows after the symbols' calibration that set the baseline and calibrate the "
            "detector; the alarm panel says when they are too few for the budget")
        form.addRow("Baseline windows", self.baseline_spin)
        self.detector_combo = QComboBox(box)
        for kind, label in (("persistence", "persistence (m in a row)"),
                            ("cusum", "CUSUM"), ("ewma", "EWMA of z (λ)"),
                            ("mewma", "MEWMA, whitened (λ)"),
                            ("paper", "paper rule (3σ, uncalibrated)")):
            self.detector_combo.addItem(label, kind)
        self.detector_combo.setToolTip(
            "persistence: m windows in a row beyond a kσ calibrated to the budget; EWMA: the "
            "exponentially weighted mean of each component's z (weight λ), calibrated to the "
            "budget; MEWMA: one multivariate EWMA of the components whitened by the baseline's "
            "correlation, calibrated to the budget (the IDT light is its alarm); CUSUM: a "
            "two-sided CUSUM calibrated to the budget (needs a long baseline); paper rule: "
            "the first window beyond kσ, as the paper's tables use (no budget)")
        form.addRow("Alarm detector", self.detector_combo)
        self.lambda_spin = QDoubleSpinBox(box)
        self.lambda_spin.setRange(0.01, 1.0)
        self.lambda_spin.setDecimals(2)
        self.lambda_spin.setSingleStep(0.01)
        self.lambda_spin.setValue(0.05)
        self.lambda_spin.setToolTip(
            "EWMA, MEWMA: the newest window's weight λ (it averages about 2/λ − 1 windows; smaller "
            "sees smaller sustained shifts, later)")
        form.addRow("EWMA λ", self.lambda_spin)
        self.budget_edit = QLineEdit(box)
        self.budget_edit.setPlaceholderText("1/h")
        self.budget_edit.setToolTip(
            "At most this many false alarms per span of loop time: 1/h, 2/30min, "
            "1/10episodes, 1/100turns, 1/1000windows (blank: the source's default)")
        form.addRow("False alarms ≤", self.budget_edit)
        self.k_spin = QDoubleSpinBox(box)
        self.k_spin.setRange(0.5, 20)
        self.k_spin.setValue(3.0)
        self.k_spin.setSuffix(" σ")
        self.k_spin.setToolTip("The paper rule's threshold (the calibrated detectors set their "
                               "own from the budget)")
        form.addRow("Paper rule k", self.k_spin)
        self.baseline_button = QPushButton("Calibrate baseline now", box)
        self.baseline_button.setToolTip("The next N windows become the new baseline")
        self.baseline_button.clicked.connect(self._calibrate_baseline)
        form.addRow(self.baseline_button)
        self.controls_layout.addWidget(box)

    def _build_record_group(self) -> None:
        box = QGroupBox("Recording and export", self)
        lay = QVBoxLayout(box)
        row = QHBoxLayout()
        self.record_dir_edit = QLineEdit(str(self._record_dir), box)
        self.record_dir_edit.setToolTip("Folder new recordings are created in")
        pick = QPushButton("…", box)
        pick.setMaximumWidth(30)
        pick.clicked.connect(self._pick_record_dir)
        row.addWidget(self.record_dir_edit)
        row.addWidget(pick)
        lay.addLayout(row)
        self.record_button = QPushButton("● Record", box)
        self.record_button.setCheckable(True)
        self.record_button.setToolTip(
            "Record transitions, windows and events while running. Starting a recording "
            "mid-session re-calibrates symbols and baseline, so the recording is a "
            "self-contained experiment that replays exactly.")
        self.record_button.toggled.connect(self._record_toggled)
        lay.addWidget(self.record_button)
        self.record_label = QLabel("not recording", box)
        self.record_label.setWordWrap(True)
        lay.addWidget(self.record_label)
        row = QHBoxLayout()
        self.export_csv_button = QPushButton("Export CSV", box)
        self.export_parquet_button = QPushButton("Export Parquet", box)
        self.export_csv_button.clicked.connect(lambda: self.export_last_recording("csv"))
        self.export_parquet_button.clicked.connect(lambda: self.export_last_recording("parquet"))
        row.addWidget(self.export_csv_button)
        row.addWidget(self.export_parquet_button)
        lay.addLayout(row)
        row = QHBoxLayout()
        png = QPushButton("Save plots PNG…", box)
        svg = QPushButton("Save plots SVG…", box)
        png.clicked.connect(lambda: self._save_plots_dialog("png"))
        svg.clicked.connect(lambda: self._save_plots_dialog("svg"))
        row.addWidget(png)
        row.addWidget(svg)
        lay.addLayout(row)
        row = QHBoxLayout()
        self.figure_scale = compact_combo(QComboBox(box), 4)
        for k in (1, 2, 3, 4):
            self.figure_scale.addItem(f"{k}×", k)
        self.figure_scale.setCurrentIndex(1)
        self.figure_scale.setToolTip("PNG pixels per screen pixel (2× is about 200 dpi at "
                                     "the size on screen)")
        self.figure_title = QCheckBox("title line", box)
        self.figure_title.setChecked(True)
        self.figure_title.setToolTip("Write the source, model, preset, baseline and detector "
                                     "above the plots")
        row.addWidget(QLabel("Figure", box))
        row.addWidget(self.figure_scale)
        row.addWidget(self.figure_title)
        lay.addLayout(row)
        row = QHBoxLayout()
        self.note_edit = QLineEdit(box)
        self.note_edit.setPlaceholderText("note for the recording…")
        note = QPushButton("Add note", box)
        note.clicked.connect(self._add_note)
        row.addWidget(self.note_edit)
        row.addWidget(note)
        lay.addLayout(row)
        self.controls_layout.addWidget(box)

    def _spin(self, lo: int, hi: int, value: int) -> QSpinBox:
        s = QSpinBox(self)
        s.setRange(lo, hi)
        s.setValue(value)
        return s

    # -- source selection -------------------------------------------------------------------

    def _select_source(self, name: str, settings: dict[str, Any]) -> None:
        idx = self.source_combo.findData(name)
        if idx < 0:
            self.show_error(f"no source named {name!r}")
            return
        if self.source_combo.currentIndex() != idx:
            self.source_combo.blockSignals(True)
            self.source_combo.setCurrentIndex(idx)
            self.source_combo.blockSignals(False)
        if self.settings_form is not None:
            self.settings_form.setParent(None)
            self.settings_form.deleteLater()
            self.settings_form = None
        try:
            cls = self._entries[name].load()
        except SourceLoadError as exc:
            self._source_cls = None
            self.source_info.setText(str(exc))
            self.start_button.setEnabled(False)
            self.plots.show_hint("This source failed to load: choose another one.")
            return
        self._source_cls = cls
        self.start_button.setEnabled(True)
        self.source_info.setText(cls.description)
        self.settings_form = ParamForm(cls.settings, self)
        self.settings_form.set_values(settings)
        self.settings_holder.addWidget(self.settings_form)
        self.browse_button.setVisible(any(p.name == "path" for p in cls.settings))
        if cls.presets:
            self.preset_combo.setCurrentText(cls.presets[0])
            self._preset_changed(cls.presets[0])
        else:
            self.preset_combo.setCurrentText(CUSTOM)
        self._build_perturbations(cls)
        self._build_modulations(cls)
        has_reward = bool(getattr(cls, "has_reward", False))
        self._set_metric_path(cls.metric_path, has_reward)
        self.returns.setVisible(has_reward)
        self.returns.clear_data()
        # Before Start only the class is known: a source declaring modulations has an action
        # channel whatever its env; a replay's recording decides once it runs.
        self.agency.set_passive(
            None if cls.name == "replay" else not (cls.action_names or cls.modulations))
        self._declare_switches(cls)
        if self.session is None or not self.session.snapshot(limit=1).n_windows:
            self.plots.show_hint(self._idle_hint())
        self.alarms.set_reward_visible(has_reward)
        self._set_view(cls.view)
        self._update_buttons()
        self._fit_controls()

    def _declare_switches(self, cls: Any) -> None:
        """Name ``cls``'s perturbations and modulations in the plots and alarms.

        For a replay, ``cls`` is the recorded source's class: its switches are what the
        replay draws.
        """
        names = {p.name: p.label for p in (*cls.perturbations, *cls.modulations)}
        self.alarms.names = names
        self.events.names = names
        impulses = [p.label for p in cls.perturbations if p.impulse]
        if getattr(cls, "metric_path", "windows") == "turns":
            word = "injection"
        elif len(impulses) == 1:
            word = f"impulse ({impulses[0].lower()})"
        else:
            word = "impulse"
        self.plots.set_source(
            names, has_modulation=bool(cls.modulations),
            has_impulse=bool(impulses),
            defaults={d.name: {q.name: q.default for q in d.params}
                      for d in (*cls.perturbations, *cls.modulations)},
            impulse_label=word)

    def _set_metric_path(self, path: str, has_reward: bool) -> None:
        """Symbol settings and a time axis, or token metrics and a turn axis (a dialogue)."""
        turns = path == "turns"
        self.plots.x_label = "turn" if turns else "loop time (s)"
        # A dialogue's loop time is its turns: "1× (real time)" would say nothing there.
        for i in range(self.speed_combo.count()):
            self.speed_combo.setItemText(i, self._speed_text(self.speed_combo.itemData(i)))
        self.navigator.set_unit("turns" if turns else "s")
        self.events.set_turns(turns)
        self.symbol_box.setTitle("Token metrics and baseline" if turns
                                 else "Symbolisation and baseline")
        self._symbol_form.setRowVisible(self.tokens_label, turns)
        self.tokens_label.setText(
            "Per turn, from the token counts of S (context), A (reply) and S' (next prompt): "
            f"tokenizer {TOKENIZER} (32,000 SentencePiece pieces). Baseline: turns 1 to N."
            if turns else "")
        for widget in self._symbol_rows:
            self._symbol_form.setRowVisible(widget, not turns)
        cls = self._source_cls
        self.baseline_spin.setValue(int(getattr(cls, "default_baseline", 0)) or
                                    (30 if turns else DEFAULT_BASELINE_WINDOWS))
        self._symbol_form.labelForField(self.baseline_spin).setText(
            "Baseline turns" if turns else "Baseline windows")
        self.detector_combo.setCurrentIndex(max(0, self.detector_combo.findData(
            getattr(cls, "default_detector", DEFAULT_DETECTOR))))
        self.budget_edit.setPlaceholderText(
            "the recording's" if getattr(cls, "name", "") == "replay"
            else getattr(cls, "default_budget", "1/h"))
        self.plots.set_reward_visible(has_reward)

    def _fit_controls(self) -> None:
        """Keep the control panel at least as wide as its content: no horizontal scrolling."""
        scroll = self.controls_scroll
        inner = scroll.widget()
        inner.layout().activate()
        need = (inner.minimumSizeHint().width() + scroll.verticalScrollBar().sizeHint().width()
                + 2 * scroll.frameWidth())
        scroll.setMinimumWidth(max(360, need))

    def _idle_hint(self, stopped: bool = False) -> str:
        """What the empty plots say before a session (or after one that made no window)."""
        cls = self._source_cls
        if cls is None:
            return "Choose a source that loads, then press Start."
        label = cls.label
        what = label[0].lower() + label[1:] if label[1:2].islower() else label
        if getattr(cls, "metric_path", "windows") == "turns":
            first = "Stopped before the first turn. " if stopped else ""
            return (f"{first}Press <b>Start</b> to run the {what}.<br><small>Every turn gives "
                    "P, H<sub>f</sub>, H<sub>b</sub> and ΔH from its token counts; the first "
                    "turns are the baseline, then the alarms judge each new one.</small>")
        first = "Stopped before the first window. " if stopped else ""
        return (f"{first}Press <b>Start</b> to run the {what}.<br><small>The first windows "
                "calibrate the symbols, the next ones the baseline; then the plots show "
                "P, H<sub>f</sub>, H<sub>b</sub>, ΔH and their alarms.</small>")

    def _show_pipeline(self) -> None:
        """Show the session's actual symbolisation (a replay's is the recorded one)."""
        if self.session is None:
            return
        p, c = self.session.preset, self.session.config
        widgets = (self.preset_combo, self.bins_spin, self.window_spin, self.stride_spin,
                   self.calib_spin, self.baseline_spin)
        for w in widgets:
            w.blockSignals(True)
        self.preset_combo.setCurrentText(p.name if p.name in PRESETS else CUSTOM)
        self.bins_spin.setValue(p.bins)
        self.window_spin.setValue(p.window)
        self.stride_spin.setValue(p.stride)
        self.calib_spin.setValue(c.calibration_windows)
        self.baseline_spin.setValue(c.baseline_windows)
        self.detector_combo.setCurrentIndex(max(0, self.detector_combo.findData(c.detector)))
        self.lambda_spin.setValue(c.ewma_lambda)
        if self.session.source.name == "replay":  # the budget the recording ran with
            self.budget_edit.setPlaceholderText(str(c.false_alarms or "—"))
        for w in widgets:
            w.blockSignals(False)

    def _set_view(self, name: str) -> None:
        self._view_name = name
        if self.view is not None:
            if hasattr(self.view, "close_view"):
                self.view.close_view()  # stop its render thread, free its renderer
            self.view.setParent(None)
            self.view.deleteLater()
        self.view = make_view(name, self.view_box)
        self.view_layout.addWidget(self.view)

    def _clear_layout(self, layout: QVBoxLayout) -> None:
        while layout.count():
            w = layout.takeAt(0).widget()
            if w is not None:
                w.setParent(None)
                w.deleteLater()

    def _build_perturbations(self, cls: type[Source]) -> None:
        self._clear_layout(self.perturb_layout)
        self.perturb_buttons: dict[str, QPushButton] = {}
        self.perturb_forms: dict[str, ParamForm] = {}
        if not cls.perturbations:
            self.perturb_layout.addWidget(QLabel("This source declares no perturbations."))
        for pert in cls.perturbations:
            self._add_toggle(pert, f"{pert.help} (target: {pert.target})", "perturb",
                             self.perturb_box, self.perturb_layout, self.perturb_buttons,
                             self.perturb_forms, self._perturb_toggled)

    def _add_toggle(self, spec: Any, tip: str, prefix: str, box: QGroupBox,
                    layout: QVBoxLayout, buttons: dict, forms: dict, slot: Any) -> None:
        """A declared perturbation or modulation: a toggle button and its parameter form."""
        button = QPushButton(spec.label, box)
        button.setObjectName(f"{prefix}_{spec.name}")
        button.setCheckable(True)
        button.setToolTip(tip)
        form = ParamForm(spec.params, box)
        button.toggled.connect(lambda on, n=spec.name: slot(n, on))
        layout.addWidget(button)
        layout.addWidget(form)
        buttons[spec.name] = button
        forms[spec.name] = form

    def _build_modulations(self, cls: type[Source], source: Source | None = None) -> None:
        """The Modulation box of ``cls``; a replay's says why it has none.

        ``source``: the replay once it runs (its recording has an action channel or not).
        """
        self._clear_layout(self.modulate_layout)
        self.modulate_buttons: dict[str, QPushButton] = {}
        self.modulate_forms: dict[str, ParamForm] = {}
        self.auto_check = QCheckBox("Auto (engage on persistent alarm)", self.modulate_box)
        self.auto_combo = compact_combo(QComboBox(self.modulate_box))
        self.auto_persist = self._spin(1, 1000, 3)
        self.auto_release = self._spin(1, 10000, 10)
        for w in (self.auto_combo, self.auto_persist, self.auto_release):
            w.setParent(self.modulate_box)
            w.hide()
        if not cls.modulations:
            passive = ("is passive: it has no action channel, so there is no interface to "
                       "modulate (Hold, input filter and dimensionality reduction act on an "
                       "agent's observations and actions, paper §4.3).")
            if cls.name == "replay" and (source is None or not source.passive):
                why = ("plays back what was recorded: a recorded agent's actions cannot be "
                       "modulated any more (its recorded modulations are shaded on the "
                       "plots).")
            elif not cls.action_names or cls.name == "replay":
                why = passive
            else:
                why = "declares no modulations."
            label = QLabel(f"<i>{cls.label}</i> {why}", self.modulate_box)
            label.setObjectName("modulation_disabled")
            label.setWordWrap(True)
            self.modulate_layout.addWidget(label)
            for name in ("Hold", "Input filter", "Dimensionality reduction"):
                b = QPushButton(name, self.modulate_box)
                b.setEnabled(False)
                self.modulate_layout.addWidget(b)
            self.auto_check.setEnabled(False)
            self.modulate_layout.addWidget(self.auto_check)
            return
        for mod in cls.modulations:
            self._add_toggle(mod, mod.help, "modulate", self.modulate_box, self.modulate_layout,
                             self.modulate_buttons, self.modulate_forms, self._modulate_toggled)
            self.auto_combo.addItem(mod.label, mod.name)
        auto = QGroupBox("Automatic modulation", self.modulate_box)
        form = compact_form(QFormLayout(auto))
        form.addRow(self.auto_check)
        for w in (self.auto_combo, self.auto_persist, self.auto_release):
            w.show()
        form.addRow("Modulation", self.auto_combo)
        unit = "turns" if getattr(cls, "metric_path", "windows") == "turns" else "windows"
        form.addRow(f"Engage after ({unit})", self.auto_persist)
        form.addRow(f"Release after quiet ({unit})", self.auto_release)
        self.auto_check.toggled.connect(self._auto_toggled)
        self.modulate_layout.addWidget(auto)

    def _preset_changed(self, name: str) -> None:
        p = PRESETS.get(name)
        if p is not None:
            self.bins_spin.setValue(p.bins)
            self.window_spin.setValue(p.window)
            self.stride_spin.setValue(p.stride)

    @property
    def recordings_folder(self) -> Path:
        """The folder new recordings go to: where file dialogs open."""
        return Path(self.record_dir_edit.text()).expanduser()

    def _browse_path(self) -> None:
        path = QFileDialog.getExistingDirectory(self, "Choose a recording",
                                                str(self.recordings_folder))
        if path and self.settings_form is not None:
            self.settings_form.set_values({"path": path})

    def _pick_record_dir(self) -> None:
        path = QFileDialog.getExistingDirectory(self, "Folder for recordings",
                                                self.record_dir_edit.text())
        if path:
            self.record_dir_edit.setText(path)

    # -- session control --------------------------------------------------------------------

    def _pipeline(self) -> dict[str, Any]:
        preset = self.preset_combo.currentText()
        base = PRESETS.get(preset)
        if base is None:  # custom: the numbers as shown
            return {
                "preset": None, "bins": self.bins_spin.value(),
                "window": self.window_spin.value(), "stride": self.stride_spin.value(),
                "calibration_windows": self.calib_spin.value(),
                "baseline_windows": self.baseline_spin.value(), "k": self.k_spin.value(),
                **self._alarm_settings(),
                "correction": None if self.correction_combo.currentText() == "none"
                else self.correction_combo.currentText(),
            }
        return {
            "preset": preset,
            "bins": self.bins_spin.value() if self.bins_spin.value() != base.bins else None,
            "window": (self.window_spin.value()
                       if self.window_spin.value() != base.window else None),
            "stride": (self.stride_spin.value()
                       if self.stride_spin.value() != base.stride else None),
            "calibration_windows": self.calib_spin.value(),
            "baseline_windows": self.baseline_spin.value(),
            "k": self.k_spin.value(),
            **self._alarm_settings(),
            "correction": None if self.correction_combo.currentText() == "none"
            else self.correction_combo.currentText(),
        }

    def _alarm_settings(self) -> dict[str, Any]:
        """The detector and its budget (blank budget: the source's default)."""
        return {"detector": self.detector_combo.currentData(),
                "ewma_lambda": self.lambda_spin.value(),
                "false_alarms": self.budget_edit.text().strip() or None}

    def start_session(self, schedule: Any = None, background: bool = False,
                      ask: bool = False) -> bool:
        """Build a session from the panels and start it; False (with a message) on bad input.

        ``schedule`` holds (transition, command, arguments) applied exactly then, as
        :meth:`idt_desk.live.session.Session.schedule` does, or is a function of the built
        source giving them (``idt-desk gui --perturb`` for a source that is slow to load:
        times in seconds become transitions at the rate it resolves). ``background``: build
        the source on a thread of its own (:class:`~idt_desk_widgets.loading.SessionBuilder`)
        while the window stays live and says how long it has been loading; **Cancel** (the Stop
        button) gives the build up. Start, Ctrl+Return and ``gui --start`` build so; True
        then means the build began. ``ask`` (Start and Ctrl+Return): a stopped session that
        is not recorded is replaced only once the user says so (Cancel, the default, keeps
        it).
        """
        if self.session is not None and self.session.stopping:
            self.statusBar().showMessage("the last session is still stopping: Start once it "
                                         "has", 5000)
            return False
        if self.session is not None and self.session.running:
            return True
        if self._starting:
            return False  # a Start (or a timer) while the source is still being built
        old = self.session
        if ask and old is not None and not may_discard(
                self, old.snapshot(limit=1).n_windows, len(self.events.events),
                recorded=old.recording_path is not None, action="start"):
            return False
        self.hide_error()
        cls = self._source_cls
        if cls is None or self.settings_form is None:
            self.show_error("choose a source that loads")
            return False
        try:
            settings = self.settings_form.values()
        except (ValueError, KeyError) as exc:
            self.show_error(f"Cannot start {cls.label}: {exc}")
            return False
        # A replay re-runs the recording's own pipeline.
        config = {"speed": self.speed_combo.currentData(),
                  **({} if cls.name == "replay" else self._pipeline())}
        record = self._new_record_path() if self.record_button.isChecked() else None
        self._starting = True
        self.plots.show_hint(f"Loading {cls.label}…")
        self.status.setText(f"loading {cls.label}…")
        if background:
            self._builder = SessionBuilder(cls, settings, config, record)
            self._pending_schedule = schedule
            self._update_buttons()
            self._load_timer.start()
            return True
        try:
            # Paint, but take no clicks: a Start or Stop pressed while the source is built
            # would run inside this one (the guard above refuses what a timer sends).
            QApplication.processEvents(QEventLoop.ProcessEventsFlag.ExcludeUserInputEvents)
            try:
                session = build_session(cls, settings, config, record)
            except (ValueError, KeyError, OSError, RecordingError) as exc:
                self.show_error(f"Cannot start {cls.label}: {exc}")
                self._idle_after_start()
                return False
            return self._start_built(session, schedule, record)
        finally:
            self._starting = False

    def _poll_loading(self) -> None:
        """The load timer's slot: say how long the build takes; start what it built."""
        builder = self._builder
        if builder is None:
            self._load_timer.stop()
            return
        cls = self._source_cls
        label = cls.label if cls is not None else "the source"
        if not builder.done:
            took = time.monotonic() - builder.started
            self.plots.show_hint(f"Loading {label}… {took:.0f} s<br><small>The window stays "
                                 f"live; <b>Cancel</b> gives the loading up.</small>")
            return
        self._load_timer.stop()
        self._builder = None
        self._starting = False
        if builder.session is None:
            exc = builder.error
            what = str(exc) if isinstance(exc, ValueError | KeyError | OSError |
                                          RecordingError) else f"{type(exc).__name__}: {exc}"
            self.show_error(f"Cannot start {label}: {what}")
            self._idle_after_start()
            return
        self._start_built(builder.session, self._pending_schedule, builder.record)

    def cancel_loading(self) -> None:
        """Give up the source being built in the background (its thread closes it)."""
        builder, self._builder = self._builder, None
        if builder is None:
            return
        builder.cancel()
        self._load_timer.stop()
        self._starting = False
        self.statusBar().showMessage("loading cancelled", 8000)
        self._idle_after_start()

    def _idle_after_start(self) -> None:
        """A start that did not happen: the plots and status say what they said before."""
        if self.session is None or not self.session.snapshot(limit=1).n_windows:
            self.plots.show_hint(self._idle_hint())
        self.status.setText("idle — press Start")
        self._update_buttons()

    def _start_built(self, session: Session, schedule: list[tuple[int, str, dict]] | None,
                     record: Path | None) -> bool:
        """Start a built session: the panels show what its source resolved."""
        cls, source = self._source_cls, session.source
        label = cls.label if cls is not None else source.label
        try:
            if callable(schedule):
                schedule = schedule(source)
            for at, kind, args in schedule or []:
                session.schedule(at, kind, **args)
        except (ValueError, KeyError) as exc:  # InputError is a ValueError
            source.close()
            self.show_error(f"Cannot start {label}: {exc}")
            self._idle_after_start()
            return False
        # Show what the source resolved (the RL source's default policy, say).
        if self.settings_form is not None:
            self.settings_form.set_values(source.config)
        self._drop_session()
        self.session = session
        if record is not None:
            self._recording_started(record)
        else:  # an earlier session's "recorded: …" would read as this one's
            last = self.last_recording
            self.record_label.setText(
                "not recording" if last is None else
                f"not recording (the last recording, {last.name}, is what Export writes)")
        if source.notice:
            self.show_error(f"Note: {source.notice}")
        if source.metric_path != type(source).metric_path or \
                source.has_reward != bool(getattr(cls, "has_reward", False)):
            # A replay is what its recording holds: a dialogue's turns, an agent's reward.
            self._set_metric_path(source.metric_path, source.has_reward)
            self.returns.setVisible(source.has_reward)
            self.alarms.set_reward_visible(source.has_reward)
        self._show_pipeline()
        if source.view != self._view_name:
            self._set_view(source.view)  # a replay draws what it replays
        if cls.name == "replay":
            self._build_modulations(cls, source)  # a recorded agent or a passive loop
        recorded = getattr(source, "recorded_source", None)
        entry = self._entries.get(recorded) if recorded and recorded != cls.name else None
        if entry is not None:
            try:
                # A replay names its bands as the recorded source did ("Sensor noise").
                self._declare_switches(entry.load())
            except SourceLoadError:
                pass  # the raw names, then
        self.plots.clear_data()
        self.returns.clear_data()
        self.events.clear()
        self.alarms.reset()
        self.agency.set_passive(source.passive)
        self._error_shown = None
        if self.view is not None and hasattr(self.view, "_trace"):
            self.view._trace.clear()
        if self.view is not None and hasattr(self.view, "reset"):
            self.view.reset()
        for button in (*self.perturb_buttons.values(), *self.modulate_buttons.values()):
            _set_quietly(button, False)
        self.pause_button.setChecked(False)
        self._frames, self._fps_t0, self.fps = 0, time.monotonic(), 0.0
        self.plots.show_hint(f"Starting {label}…")
        self.session.start()
        if self.auto_check.isChecked():
            self._auto_toggled(True)
        self.timer.start()
        self._update_buttons()
        return True

    #: How long Stop waits for the worker before the window goes on without it (seconds).
    STOP_GRACE = 0.2
    #: After this long (seconds) a stopping worker is reported as stuck.
    STOP_TIMEOUT = 10.0

    def stop_session(self, wait: bool = False) -> None:
        """Stop the running session (or the loading); its plots stay for inspection.

        The worker ends at its next chunk boundary (milliseconds; a source inside a long
        step, a model's reply, takes that step's time). The window stays live meanwhile and
        says so; :meth:`refresh` settles the controls once the worker has ended. ``wait``:
        block until it has (Reset, following a new run).
        """
        if self._builder is not None:
            self.cancel_loading()
            return
        s = self.session
        if s is None:
            return
        if s.stopping and not wait:
            return  # asked already: refresh watches it
        if not wait and s.running:
            s.request_stop()
            if not s.wait(self.STOP_GRACE):
                self._stop_deadline = time.monotonic() + self.STOP_TIMEOUT
                self._update_buttons()
                self.refresh()
                return
        try:
            s.stop()
        except RuntimeError as exc:
            self.show_error(str(exc))
        self.refresh()
        self._session_ended()

    def _session_ended(self) -> None:
        """The worker is gone (stopped, finished or failed): settle the controls."""
        self.timer.stop()
        self._stop_deadline, self._stopping_seen = None, False
        self.fps = 0.0  # no frame rate to report: never a stale one
        self.fps_label.setText("GUI —")
        if self.session is not None and not self.session.snapshot(limit=1).n_windows:
            self.plots.show_hint(self._idle_hint(stopped=True))
        if self.record_button.isChecked():
            _set_quietly(self.record_button, False)
            self._show_record_size(recorded=True)
        self._update_buttons()
        self._collect_soon()

    def _drop_session(self) -> None:
        """Forget the (stopped) session; what it held is freed by the next collection."""
        if self.session is not None:
            self.session = None
            self._collect_soon()

    #: At most one full garbage collection a second (each takes ~0.2 s with torch loaded).
    COLLECT_EVERY = 1.0

    def _collect_soon(self) -> None:
        """Free a stopped session's memory: collect garbage once, shortly.

        A session and its source sit in reference cycles (the source reports through the
        session's methods; an SB3 model refers to itself), so they are freed only by
        Python's full collection, which a process holding torch's million long-lived objects
        runs rarely: every stopped RL session's MuJoCo data and policy tensors (~5 MB) stayed
        in memory (RSS 767 → 2,579 MiB after 449 Start/Stop clicks in a minute). Coalesced:
        a click storm triggers one collection a second, not one a click.
        """
        if self._collect_timer.isActive():
            return
        wait = self._last_collect + self.COLLECT_EVERY - time.monotonic()
        self._collect_timer.start(max(0, int(wait * 1000)))

    def _collect(self) -> None:
        gc.collect()
        self._last_collect = time.monotonic()

    def reset_session(self) -> None:
        """Stop, forget the session and clear the plots (asked first when not recorded)."""
        s = self.session
        if s is not None and not may_discard(
                self, s.snapshot(limit=1).n_windows, len(self.events.events),
                recorded=s.recording_path is not None):
            return
        self.stop_session(wait=True)
        self._drop_session()
        self.plots.clear_data()
        self.returns.clear_data()
        self.events.clear()
        self.plots.show_hint(self._idle_hint())
        self.alarms.reset()
        self.agency.reset()
        self.hide_error()
        self.status.setText("idle — press Start")
        self.rates.setText("")
        self._update_buttons()

    def shutdown(self) -> None:
        """Stop timers and the worker thread (on close and on application quit)."""
        self.timer.stop()
        self._watch_timer.stop()
        self._collect_timer.stop()
        self.cancel_loading()
        session = self.session
        # Once per session: the window's close, the application's aboutToQuit and the end
        # of run_gui each shut down, and a worker that cannot stop was waited for three
        # times over (a dialogue's SIGTERM mid-turn took 32 s).
        if session is not None and session.running and session is not self._given_up:
            try:
                session.stop()
            except RuntimeError as exc:
                # A worker inside a long numba compile cannot be interrupted; it is a daemon
                # thread and ends with the process.
                self._given_up = session
                print(f"idt-desk: {exc}", file=sys.stderr)
        if self.view is not None and hasattr(self.view, "close_view"):
            self.view.close_view()  # a live view's render thread (the cheetah's)

    #: Below this window height the event log starts folded (the plots keep the height).
    EVENTS_FOLDED_BELOW = 820
    #: The window's size when the screen has room for it.
    DEFAULT_SIZE = (1400, 900)
    #: Room kept for the window manager's title bar and borders (pixels).
    FRAME_ROOM = (16, 40)

    def fit_to_screen(self, available: Any = None) -> None:
        """Keep the whole window inside the screen's available geometry.

        ``available``: a ``QRect``; None: that of the screen the window is on. A size or
        position that does not fit (the 1400×900 default on a 1366×768 or 1024×700 screen, a
        remembered one from a larger screen) is shrunk and moved inside, and the three
        columns share the width so that the alarm column keeps its width.
        """
        if available is None:
            screen = self.screen() or QApplication.primaryScreen()
            if screen is None:
                return
            available = screen.availableGeometry()
        room_w, room_h = self.FRAME_ROOM
        w = max(min(self.width(), available.width() - room_w), 200)
        h = max(min(self.height(), available.height() - room_h), 200)
        if (w, h) != (self.width(), self.height()):
            self.resize(w, h)
        x = min(max(self.x(), available.x()), available.x() + available.width() - w - room_w)
        y = min(max(self.y(), available.y()), available.y() + available.height() - h - room_h)
        self.move(max(x, available.x()), max(y, available.y()))
        left, right = self.controls_scroll.minimumWidth(), self.right_scroll.minimumWidth()
        if w < self.DEFAULT_SIZE[0]:  # narrower than the default: the centre gives way
            extra = max(w - left - right, 0)
            self.main_split.setSizes([left + min(extra // 8, 20), max(extra - extra // 8, 0),
                                      right])

    def resizeEvent(self, event: Any) -> None:
        """Fold the event log on a short window, unless the user has opened or folded it."""
        super().resizeEvent(event)
        if not self._events_chosen:
            self.events.set_expanded(self.height() >= self.EVENTS_FOLDED_BELOW)
        self._fit_event_log()

    def showEvent(self, event: Any) -> None:
        """Give the event log its height once the splitter has one to share."""
        super().showEvent(event)
        self._fit_event_log()

    def _fit_event_log(self) -> None:
        """The plots take the centre's height but the event log's (its title line, folded).

        QSplitter leaves a pane's height beyond its maximum empty, so the shares are set here.
        """
        split = self.centre_split
        total = sum(split.sizes())
        if not split.isVisible() or total < 200:
            return  # not laid out yet: showEvent comes back
        if self.events.expanded:
            mine = max(min(self.events_height, total // 2), 90)
        else:
            mine = self.events.maximumHeight()
        if split.sizes()[1] != mine:
            split.setSizes([total - mine, mine])

    def _event_log_dragged(self, _pos: int, _index: int) -> None:
        if self.events.expanded:
            self.events_height = self.centre_split.sizes()[1]

    def may_quit(self) -> bool:
        """Whether the window may close: asked when its session is not recorded."""
        s = self.session
        return s is None or may_discard(self, s.snapshot(limit=1).n_windows,
                                        len(self.events.events),
                                        recorded=s.recording_path is not None, action="quit")

    def quit_asking(self) -> None:
        """Ctrl+Q: close the window, once the user says so if the session is not recorded."""
        if self.may_quit():
            self._quit_confirmed = True
            self.close()

    def closeEvent(self, event: Any) -> None:
        """Join the worker before the window goes (the close button asks as Ctrl+Q does)."""
        if event.spontaneous() and not getattr(self, "_quit_confirmed", False) and \
                not self.may_quit():
            event.ignore()
            return
        self.shutdown()
        super().closeEvent(event)

    def _update_buttons(self) -> None:
        loading = self._builder is not None
        # While a source loads, Stop cancels the loading; nothing else changes the session.
        self.stop_button.setText("Cancel" if loading else "Stop")
        running = loading or (self.session is not None and self.session.running)
        # A stopping worker scores its last windows: nothing but waiting is left to do.
        stopping = self.session is not None and self.session.stopping
        # A button that disables itself hands the focus on to the next one in the panel
        # (Start's and Stop's to Reset, where a Space would clear the session): Start's goes
        # to Stop, Stop's and Pause's to the plots.
        moving = any(b.hasFocus() for b in (self.start_button, self.pause_button,
                                             self.stop_button))
        if moving:
            self.plots.setFocus(Qt.FocusReason.OtherFocusReason)
        self.start_button.setEnabled(not running and self._source_cls is not None)
        self.pause_button.setEnabled(running and not loading and not stopping)
        self.stop_button.setEnabled(running and not stopping)
        if moving and running and not stopping:
            self.stop_button.setFocus(Qt.FocusReason.OtherFocusReason)
        self.source_combo.setEnabled(not running)
        if self.settings_form is not None:
            self.settings_form.setEnabled(not running)
        for b in (*self.perturb_buttons.values(), *self.modulate_buttons.values(),
                  self.baseline_button, self.apply_symbols_button):
            b.setEnabled(running and not loading and not stopping)
        # The build took the armed state; a stopping worker closes its recording itself.
        self.record_button.setEnabled(not loading and not stopping)
        self.auto_check.setEnabled(bool(self.modulate_buttons))
        # Without a recording, Export writes the session's own windows and events.
        can = (self.last_recording is not None or self.session is not None) and \
            not self.record_button.isChecked()
        self.export_csv_button.setEnabled(can)
        self.export_parquet_button.setEnabled(can)

    # -- keyboard shortcuts (idt_desk_widgets.keys) ------------------------------------------

    def toggle_running(self) -> None:
        """Start the session (building it in the background), or stop it or its loading."""
        if self._builder is not None or (self.session is not None and self.session.running):
            self.stop_session()
        elif self.start_button.isEnabled():
            self.start_session(background=True, ask=True)

    def toggle_frozen(self) -> None:
        """Freeze the plots' view, or follow the data again."""
        self.navigator.freeze_button.click()

    def toggle_recording(self) -> None:
        """Record, or stop recording (armed before Start)."""
        self.record_button.click()

    def save_plots(self) -> None:
        """Save the plots as a PNG (asks where)."""
        self._save_plots_dialog("png")

    def _pause_toggled(self, on: bool) -> None:
        if self.session is None:
            return
        if on:
            self.session.pause()
            self.pause_button.setText("Resume")
        else:
            self.session.resume()
            self.pause_button.setText("Pause")

    def _speed_changed(self, _index: int) -> None:
        if self.session is not None and self.session.running:
            self.session.set_speed(self.speed_combo.currentData())

    def _perturb_toggled(self, name: str, on: bool) -> None:
        button = self.perturb_buttons[name]
        if self.session is None or not self.session.running:
            return
        try:
            params = self.perturb_forms[name].values()
            impulse = on and self.is_impulse(name, params)
            self.session.perturb(name, params, on=on)
        except (ValueError, KeyError) as exc:
            self.show_error(f"{name}: {exc}")
            if on:
                _set_quietly(button, False)
            return
        if impulse:
            # A one-shot impulse (a kick with period 0) is an event, not a state: the button
            # does not stay pressed.
            _set_quietly(button, False)

    def is_impulse(self, name: str, params: dict[str, Any]) -> bool:
        """Whether switching perturbation ``name`` on with ``params`` is a one-shot impulse."""
        return self._source_cls is not None and \
            self._source_cls.perturbation(name).is_impulse(params)

    def _recalibrate(self) -> None:
        """Re-symbolise from the data that follows with the current pipeline (the notice)."""
        if self.session is None or not self.session.running:
            return
        warning = self.session.snapshot(1).out_of_range_warning or {}
        if (warning.get("recheck") or {}).get("verdict") == "shift" and not may_recalibrate(
                self, recheck_text(warning["recheck"])):
            return
        try:
            self.session.reconfigure()
        except ValueError as exc:
            self.show_error(str(exc))
        else:
            self.statusBar().showMessage("re-calibrating the symbols from the data that "
                                         "follows, then a new baseline", 8000)

    def _modulate_toggled(self, name: str, on: bool) -> None:
        if self.session is None or not self.session.running:
            return
        try:
            self.session.modulate(name, self.modulate_forms[name].values(), on=on)
        except (ValueError, KeyError) as exc:
            self.show_error(f"{name}: {exc}")

    def _auto_toggled(self, on: bool) -> None:
        if self.session is None or not self.session.running or not self.modulate_buttons:
            return
        name = self.auto_combo.currentData()
        self.session.set_auto(None if not on else {
            "modulation": name, "params": self.modulate_forms[name].values(),
            "persist": self.auto_persist.value(), "release": self.auto_release.value()})

    def _apply_symbols(self) -> None:
        if self.session is None or not self.session.running:
            return
        try:
            self.session.reconfigure(**self._pipeline())
        except ValueError as exc:
            self.show_error(str(exc))

    def _calibrate_baseline(self) -> None:
        if self.session is not None and self.session.running:
            self.session.calibrate_baseline(self.baseline_spin.value())

    def _add_note(self) -> None:
        text = self.note_edit.text().strip()
        if text and self.session is not None and self.session.running:
            self.session.note(text)
            self.note_edit.clear()

    # -- watching a folder of runs -----------------------------------------------------------

    def _watch(self, folder: Path, followed: str | None) -> None:
        """Begin watching ``folder``: the runs there now are not new.

        Except the one that started last when it is not ``followed``: it started after the
        run to follow was picked.
        """
        try:
            self.runs_seen = {d for d in folder.iterdir() if (d / "config.json").is_file()}
        except OSError:
            self.runs_seen = set()
        newest = newest_recording(folder)
        if newest is not None and (not followed or Path(followed) != newest):
            self.runs_seen.discard(newest)
        self._watch_timer.start()

    def _look_for_new_run(self) -> None:
        """The watch timer's slot: follow the run that started last, if it is new.

        Cheap enough for once a second: a listing of the folder and a stat or two a run
        (``newest_recording``; a run's start time is read once). Runs are ordered by when
        they started, so the previous run finishing later (its config.json rewritten) never
        takes the window back.
        """
        folder = self.watch_folder
        if folder is None or self._starting:
            return
        run = newest_recording(folder)
        # The watched path itself may become the run (watch RUN before its writer starts).
        if run is None or (run == folder and self.session is not None) or \
                run in self.runs_seen:
            return
        try:  # its writer has logged recording_start: following it starts at once
            with open(run / "events.jsonl", "rb") as f:
                if b'"recording_start"' not in f.read(1 << 16).partition(b"\n")[0]:
                    return
        except OSError:
            return
        self.runs_seen.add(run)
        self.follow_new_run(run)

    def follow_new_run(self, run: Path) -> bool:
        """A new run started in the watched folder: stop this session and follow ``run``.

        Says so in the status bar and in the new session's event log. Nothing changes when
        another source than the replay is selected (the user chose it); False then, or when
        the new run cannot be followed (the banner says why).
        """
        text = f"a new run started: {run.name}; following it"
        if self._source_cls is None or self._source_cls.name != "replay" or \
                self.settings_form is None:
            self.statusBar().showMessage(
                f"a new run started: {run.name} (not followed: another source is selected)",
                10_000)
            return False
        self.stop_session(wait=True)
        self.settings_form.set_values({"path": str(run), "follow": True})
        # The note leads the new session's event log (at its first transition).
        started = self.start_session(schedule=[(0, "note", {"text": text})])
        self.statusBar().showMessage(text, 10_000)
        return started

    # -- recording and export ---------------------------------------------------------------

    #: The next recording's folder itself (``gui --record DIR``: DIR, as ``run --record DIR``
    #: records into DIR); None: a new folder in the recordings folder.
    next_record_path: Path | None = None

    def _new_record_path(self) -> Path:
        if self.next_record_path is not None:
            path, self.next_record_path = self.next_record_path, None
            if not (path / "config.json").exists():
                return path
        base = Path(self.record_dir_edit.text()).expanduser()
        name = self._source_cls.name if self._source_cls else "session"
        stamp = time.strftime("%Y%m%d-%H%M%S")
        path = base / f"{name}-{stamp}"
        k = 1
        while path.exists():
            k += 1
            path = base / f"{name}-{stamp}-{k}"
        return path

    def _recording_started(self, path: Path) -> None:
        self.last_recording = path
        self._record_since = (time.monotonic(), 0.0)
        self.record_label.setText(f"recording into {path}")
        self._update_buttons()

    #: Seconds between two looks at the recording's size.
    RECORD_SIZE_EVERY = 1.0

    def _show_record_size(self, recorded: bool = False) -> None:
        """The recording's size on disk, and its growth while it records.

        Looked at once a second at most: a recording at max speed grows by tens of MB a
        second, which the user should see.
        """
        path = self.last_recording
        if path is None:
            return
        now = time.monotonic()
        t0, last = self._record_since
        if not recorded and now - last < self.RECORD_SIZE_EVERY:
            return
        self._record_since = (t0, now)
        total, size = recording_size(path)
        if recorded:
            text = f"recorded: {path} ({size})"
        else:
            rate = total / 1e6 / max(now - t0, 1e-3)
            text = f"recording into {path} — {size} so far ({rate:,.1f} MB/s)"
        if self.record_label.text() != text:
            self.record_label.setText(text)

    def _record_toggled(self, on: bool) -> None:
        if self.session is None or not self.session.running:
            self.record_label.setText("armed: recording starts with the session" if on
                                      else "not recording")
            return
        if on:
            path = self._new_record_path()
            self.session.start_recording(path)
            self._recording_started(path)
        else:
            self.session.stop_recording()
            self._show_record_size(recorded=True)
            self._update_buttons()

    def export_last_recording(self, fmt: str, out: str | Path | None = None) -> list[Path]:
        """Export the last recording's tables (next to it by default).

        Without a recording of the current session, the session's own windows and events
        (``Session.export_session``) go to a new folder in the recordings folder: a
        forgotten Record costs the transitions, not the results.
        """
        recorded = self.last_recording is not None and self.session is not None and \
            self.session.recording_path == self.last_recording
        if not recorded and self.session is not None:
            stamp = time.strftime("%Y%m%d-%H%M%S")
            out = Path(out) if out else self._record_dir / f"session-{stamp}-{fmt}"
            try:
                paths = self.session.export_session(out, fmt)
            except (OSError, ValueError) as exc:
                self.show_error(f"Export failed: {exc}")
                return []
            self.statusBar().showMessage(
                f"exported the session's windows and events (no recording: no transitions) "
                f"into {out}", 8000)
            return paths
        if self.last_recording is None:
            return []
        out = Path(out) if out else self.last_recording.with_name(
            f"{self.last_recording.name}-{fmt}")
        try:
            paths = export_recording(load_recording(self.last_recording), out, fmt)
        except (RecordingError, OSError, ValueError) as exc:
            self.show_error(f"Export failed: {exc}")
            return []
        self.statusBar().showMessage(f"exported {len(paths)} files into {out}", 8000)
        return paths

    def _save_plots_dialog(self, fmt: str) -> None:
        path, _ = QFileDialog.getSaveFileName(
            self, "Save plots", str(self.recordings_folder / f"idt-plots.{fmt}"),
            f"{fmt.upper()} (*.{fmt})")
        if path:
            self.save_figure(path)

    def figure_title_text(self) -> str:
        """What a figure says it shows: source, model, preset, baseline, detector."""
        if self.session is None:
            return ""
        s, c, p = self.session.source, self.session.config, self.session.preset
        model = ""
        for key in ("policy", "student_model", "path"):
            v = s.config.get(key)
            if v:
                model = f" · {Path(str(v)).name}"
                break
        det = self.session.snapshot(limit=1).detector or {}
        symbols = "token counts per turn" if c.metric_path == "turns" else (
            f"preset {p.name} ({p.bins} bins, W {p.window}, stride {p.stride})")
        return (f"{s.label}{model} · {symbols} · baseline {c.baseline_windows} "
                f"{'turns' if c.metric_path == 'turns' else 'windows'} · "
                f"{det.get('describe', c.detector)}")

    def save_figure(self, path: str | Path) -> None:
        """Save the plots with the chosen scale and, if ticked, the title line."""
        title = self.figure_title_text() if self.figure_title.isChecked() else None
        self.plots.export(str(path), scale=float(self.figure_scale.currentData()),
                          title=title or None)

    # -- errors -----------------------------------------------------------------------------

    def show_error(self, text: str) -> None:
        """Show a message in the red banner above the plots (never a traceback dialog)."""
        self.banner.setText(text)
        self.banner.show()

    def hide_error(self) -> None:
        """Hide the banner."""
        self.banner.hide()

    # -- the timer --------------------------------------------------------------------------

    def _show_status(self, snap: Snapshot) -> None:
        speed = "max speed" if not snap.speed else f"{snap.speed:g}× real time"
        text = (f"{snap.state} — {snap.source} at {speed} — t = {snap.sim_time:.2f} s — "
                f"{snap.n_transitions:,} transitions, {snap.n_windows:,} windows")
        if snap.info.get("following"):  # a recording another program writes
            run = Path(snap.info["following"]).name  # its path is in the Recording field
            text = (f"{snap.state} — following {run} (the writer: "
                    f"{snap.info.get('writer', '?')}) — t = {snap.sim_time:.2f} s — "
                    f"{snap.n_transitions:,} transitions, {snap.n_windows:,} windows")
        if snap.tokenizer is not None:  # one transition per turn
            n = snap.n_transitions
            text = f"{snap.state} — {snap.source} — {n:,} {plural('turn', n)}"
        if snap.paused_reason:
            n = snap.n_transitions
            text = f"paused by the source — {snap.source} — {n:,} {plural('turn', n)}"
        if self.session is not None and self.session.stopping:
            text = (f"stopping — {snap.source}: scoring the last windows and closing the "
                    "recording (nothing is lost)")
        elif snap.state == "running" and snap.n_transitions == 0:
            text = ("starting… (the first launch compiles the numba kernels, about 10 s; "
                    "they are cached afterwards)")
        running = snap.state in ("running", "paused") and self.session is not None \
            and self.session.running
        loop = snap.loop_rate if snap.state == "running" else None
        rates = (f"loop {_rate(loop)} tr/s  ·  compute {_rate(snap.throughput)} tr/s"
                 if snap.n_transitions else "")
        if snap.tokenizer is not None and snap.n_transitions:  # seconds a turn, not rates
            rates = (f"{1 / snap.throughput:.1f} s a turn" if snap.throughput > 0 else "")
        fps = f"GUI {self.fps:.0f} fps" if running and self.fps > 0 else "GUI —"
        for label, value in ((self.status, text), (self.rates, rates), (self.fps_label, fps)):
            if label.text() != value:
                label.setText(value)

    def refresh(self) -> None:
        """Pull a snapshot from the session and redraw (the GUI timer's slot)."""
        if self.session is None:
            return
        # Asked before the snapshot: a session that ends while this frame is drawn gets one
        # more, which shows its end (its last transitions, "stopped", the writer's end).
        running = self.session.running
        snap: Snapshot = self.session.snapshot(limit=self.history)
        behind = snap.n_windows - self.plots.history.total
        if behind > len(snap.windows["t"]):
            # More new windows than a refresh copies (a stalled frame at max speed): copy all
            # of them, or the whole history would have a hole.
            snap = self.session.snapshot(limit=behind + self.history)
        self.plots.update_snapshot(snap)
        new_events = self.session.events_since(len(self.events.events))
        self.events.add_events(new_events)
        for ev in new_events:
            if ev.get("kind") == "baseline_overlap":
                name = str(ev.get("name"))
                self.show_error(f"Note: {overlap_text(self.events.names.get(name, name), ev)}. "
                                "Perturb once the baseline is set, or press Calibrate "
                                "baseline now once the perturbation is over.")
        self.alarms.update_snapshot(snap, stopping=self.session.stopping)
        self.agency.update_snapshot(snap)
        if not self.returns.isHidden():
            self.returns.update_info(snap.info)
        # Buttons follow the loop's state (scheduled perturbations, auto modulation).
        for names, buttons in ((snap.active_perturbations, self.perturb_buttons),
                               (snap.active_modulations, self.modulate_buttons)):
            for name, button in buttons.items():
                if button.isChecked() != (name in names):
                    _set_quietly(button, name in names)
        if self.view is not None and snap.info:
            self.view.update_info(snap.info)
        self._frames += 1
        now = time.monotonic()
        if now - self._fps_t0 >= 1.0:
            self.fps = self._frames / (now - self._fps_t0)
            self._frames, self._fps_t0 = 0, now
        self._show_status(snap)
        if snap.recording is not None:
            self._show_record_size()
        if snap.error and snap.error != self._error_shown:
            self._error_shown = snap.error
            self.show_error(f"The source stopped with an error: {snap.error}")
        if snap.paused_reason and snap.paused_reason != self._error_shown:
            # The source paused the loop (a dialogue's server failed): say why, offer Resume.
            self._error_shown = snap.paused_reason
            self.show_error(f"Paused: {snap.paused_reason}. Nothing is lost; press Resume to "
                            "carry on.")
            if not self.pause_button.isChecked():
                _set_quietly(self.pause_button, True)
                self.pause_button.setText("Resume")
        elif not snap.paused_reason and self._error_shown and not snap.error \
                and snap.state == "running":
            self._error_shown = None
            self.hide_error()
        if not running:
            self._session_ended()
            return
        if self.session.stopping != self._stopping_seen:  # asked, or at a replay's end
            self._stopping_seen = self.session.stopping
            self._update_buttons()
        if self._stop_deadline is not None and time.monotonic() > self._stop_deadline and \
                self._given_up is not self.session:
            self._given_up = self.session
            self.show_error(f"The session's worker did not stop within "
                            f"{self.STOP_TIMEOUT:.0f} s; it ends with the program.")
