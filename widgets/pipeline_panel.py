"""The pipeline panel: symbolisation (or a dialogue's token metrics), baseline and detector.

It builds the pipeline settings a new session (or Apply) is given (:meth:`PipelinePanel.
settings`), shows the pipeline a session actually runs (:meth:`PipelinePanel.show_pipeline`)
and switches between a loop's windows and a dialogue's turns
(:meth:`PipelinePanel.set_metric_path`).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from idt_desk_widgets.forms import compact_combo, compact_form, setting_box
from PySide6.QtCore import QSignalBlocker, Signal
from PySide6.QtWidgets import (
    QComboBox,
    QFormLayout,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QWidget,
)

from idt_desk.detection.registry import DETECTORS
from idt_desk.live.session import Session
from idt_desk.live.source import Source
from idt_desk.metrics.presets import PRESETS
from idt_desk.metrics.tokens import TOKENIZER
from idt_desk.settings import SETTINGS, source_defaults

__all__ = ["CUSTOM", "PipelinePanel", "detector_choices"]

#: The preset choice that means "no preset: the numbers below".
CUSTOM = "(custom)"


def detector_choices() -> list[tuple[str, str]]:
    """The alarm detectors offered, (name, label): the registered ones, the calibrated first."""
    return [(c.name, c.label) for c in sorted(DETECTORS.values(), key=lambda c: not c.calibrated)]


class PipelinePanel(QGroupBox):
    """The "Symbolisation and baseline" group (a dialogue's "Token metrics and baseline").

    Preset, bins, window, stride, the symbols' calibration windows, the entropy correction
    and Apply; the baseline's length, the alarm detector, its EWMA λ, its false-alarm budget
    and the paper rule's k; "Calibrate baseline now". Apply emits ``apply_requested`` with
    :meth:`settings`; "Calibrate baseline now" emits ``calibrate_requested`` with the
    baseline's length.
    """

    #: Apply was clicked: the pipeline settings to re-symbolise with (:meth:`settings`).
    apply_requested = Signal(dict)
    #: "Calibrate baseline now" was clicked: the number of windows (turns) to take.
    calibrate_requested = Signal(int)
    #: "Load…", "Save…" and "Clear" of the baseline profile row (the window's Load baseline…,
    #: Save baseline…).
    profile_load_requested = Signal()
    profile_save_requested = Signal()
    profile_clear_requested = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__("Symbolisation and baseline", parent)
        form = compact_form(QFormLayout(self))
        self._form = form
        #: The selected source's own detector (a preset without one of its own shows it).
        self._source_detector: str | None = None
        self.tokens_label = QLabel("", self)
        self.tokens_label.setWordWrap(True)
        form.addRow(self.tokens_label)
        self.preset_combo = compact_combo(QComboBox(self))
        self.preset_combo.addItems([*PRESETS, CUSTOM])
        self.preset_combo.setToolTip("Paper configurations; '(custom)' uses the bins, window "
                                     "and stride below, each variable its own group")
        #: Whether a preset was chosen here (by the user or a caller), not shown as the
        #: source's default: an unchosen one is left to the source (its default depends on
        #: its settings: the gym source's on its env).
        self._preset_chosen = False
        self._showing_default = False
        self.preset_combo.currentTextChanged.connect(self._preset_changed)
        form.addRow(SETTINGS["preset"].label, self.preset_combo)
        self.bins_spin = setting_box(SETTINGS["bins"], 16, self)
        self.window_spin = setting_box(SETTINGS["window"], 300, self)
        self.stride_spin = setting_box(SETTINGS["stride"], 75, self)
        self.calib_spin = setting_box(SETTINGS["calibration_windows"], parent=self)
        for key, box in (("bins", self.bins_spin), ("window", self.window_spin),
                         ("stride", self.stride_spin), ("calibration_windows", self.calib_spin)):
            form.addRow(SETTINGS[key].label, box)
        self.correction_combo = QComboBox(self)
        self.correction_combo.addItems(["none", "miller-madow"])
        form.addRow(SETTINGS["correction"].label, self.correction_combo)
        self.apply_symbols_button = QPushButton("Apply (re-symbolise)", self)
        self.apply_symbols_button.setToolTip("Re-calibrate symbols and baseline from the data "
                                             "that follows, with these settings")
        self.apply_symbols_button.clicked.connect(
            lambda: self.apply_requested.emit(self.settings()))
        form.addRow(self.apply_symbols_button)
        # Rows that only symbols over windows use: hidden for a source whose metrics come
        # per turn from token counts (a dialogue), which shows its tokenizer instead.
        self._symbol_rows = (self.preset_combo, self.bins_spin, self.window_spin,
                             self.stride_spin, self.calib_spin, self.correction_combo,
                             self.apply_symbols_button)
        self.baseline_spin = setting_box(SETTINGS["baseline_windows"], Source.default_baseline,
                                         self)
        form.addRow(SETTINGS["baseline_windows"].label, self.baseline_spin)
        self.detector_combo = QComboBox(self)
        for kind, label in detector_choices():
            self.detector_combo.addItem(label, kind)
        self.detector_combo.setToolTip(SETTINGS["detector"].describe())
        form.addRow(SETTINGS["detector"].label, self.detector_combo)
        self.lambda_spin = setting_box(SETTINGS["ewma_lambda"], parent=self)
        form.addRow(SETTINGS["ewma_lambda"].label, self.lambda_spin)
        self.budget_edit = QLineEdit(self)
        self.budget_edit.setPlaceholderText(Source.default_budget)
        self.budget_edit.setToolTip(SETTINGS["false_alarms"].describe())
        form.addRow(SETTINGS["false_alarms"].label, self.budget_edit)
        self.k_spin = setting_box(SETTINGS["k"], parent=self)
        self.k_spin.setSuffix(" σ")
        form.addRow(SETTINGS["k"].label, self.k_spin)
        self.baseline_button = QPushButton("Calibrate baseline now", self)
        self.baseline_button.setToolTip("The next N windows become the new baseline")
        self.baseline_button.clicked.connect(
            lambda: self.calibrate_requested.emit(self.baseline_spin.value()))
        form.addRow(self.baseline_button)
        # A baseline profile: symbols, twin and baseline fitted once, every Start armed by it.
        self.profile_label = QLabel("", self)
        self.profile_label.setWordWrap(True)
        form.addRow("Baseline profile", self.profile_label)
        row = QHBoxLayout()
        self.profile_load_button = QPushButton("Load…", self)
        self.profile_load_button.setToolTip(
            "A baseline profile (idt-desk fit, or Save… of an earlier session): "
            "every Start then takes its symbols, twin and thresholds and judges from the "
            "first window, with no calibration and no baseline to gather")
        self.profile_save_button = QPushButton("Save…", self)
        self.profile_save_button.setToolTip(
            "Save what this session fitted (symbols, twin, baseline and thresholds) as a "
            "baseline profile, once its baseline is complete")
        self.profile_clear_button = QPushButton("Clear", self)
        self.profile_clear_button.setToolTip("Fit the baseline from each session's own first "
                                             "windows again")
        for button, signal in ((self.profile_load_button, self.profile_load_requested),
                               (self.profile_save_button, self.profile_save_requested),
                               (self.profile_clear_button, self.profile_clear_requested)):
            button.clicked.connect(signal.emit)
            row.addWidget(button)
        form.addRow(row)
        self.show_profile(None)

    def show_profile(self, profile: Any) -> None:
        """Say which baseline profile the next Start takes (None: its own first windows)."""
        if profile is None:
            self.profile_label.setText("none: each session fits its own")
            self.profile_label.setToolTip("")
        else:
            self.profile_label.setText(f"{Path(profile.name).name} · {profile.n_windows:,} "
                                       f"windows · {profile.digest[:8]}")
            self.profile_label.setToolTip(profile.describe())
        self.profile_clear_button.setEnabled(profile is not None)
        # What the profile fixes is its own (its thresholds are fitted to them): not offered.
        boxes = (self.calib_spin, self.baseline_spin, self.detector_combo, self.lambda_spin,
                 self.budget_edit, self.k_spin, self.correction_combo)
        if not hasattr(self, "_own_tips"):
            self._own_tips = [b.toolTip() for b in boxes]
        for box, own in zip(boxes, self._own_tips, strict=True):
            box.setEnabled(profile is None)
            box.setToolTip(own if profile is None else
                           f"the baseline profile's: {profile.describe()}")
        if profile is not None:
            p = profile.pipeline
            self.detector_combo.setCurrentIndex(
                max(0, self.detector_combo.findData(p.get("detector"))))
            self.budget_edit.setText(str(p.get("false_alarms") or ""))
            self.baseline_spin.setValue(profile.n_windows)

    # -- what a session is given ------------------------------------------------------------

    def settings(self) -> dict[str, Any]:
        """The pipeline settings shown: a session's ``preset``, ``bins`` ... ``correction``.

        With a preset, only the numbers that differ from it are given.
        """
        preset = self.preset_combo.currentText()
        base = PRESETS.get(preset)
        bins, window, stride = (self.bins_spin.value(), self.window_spin.value(),
                                self.stride_spin.value())
        if base is not None:  # a preset: the numbers that differ from it
            bins = bins if bins != base.bins else None
            window = window if window != base.window else None
            stride = stride if stride != base.stride else None
        correction = self.correction_combo.currentText()
        if not self._preset_chosen:
            preset = None  # the source's own default for its settings
        return {
            "preset": None if base is None else preset, "bins": bins, "window": window,
            "stride": stride, "calibration_windows": self.calib_spin.value(),
            "baseline_windows": self.baseline_spin.value(), "k": self.k_spin.value(),
            **self.alarm_settings(),
            "correction": None if correction == "none" else correction,
        }

    def alarm_settings(self) -> dict[str, Any]:
        """The detector and its budget (blank budget: the source's default)."""
        return {"detector": self.detector_combo.currentData(),
                "ewma_lambda": self.lambda_spin.value(),
                "false_alarms": self.budget_edit.text().strip() or None}

    def _preset_changed(self, name: str) -> None:
        if not self._showing_default:
            self._preset_chosen = True
        self.apply_preset(name)

    def apply_preset(self, name: str) -> None:
        """Show preset ``name``'s bins, window, stride and detector (nothing for "(custom)").

        A preset that names its detector (the live cheetah's) selects it; another, the
        source's default.
        """
        p = PRESETS.get(name)
        self._bins_role(p)
        if p is not None:
            self.bins_spin.setValue(p.bins)
            self.window_spin.setValue(p.window)
            self.stride_spin.setValue(p.stride)
            detector = p.detector or self._source_detector
            if detector is not None:
                self.detector_combo.setCurrentIndex(
                    max(0, self.detector_combo.findData(detector)))

    def _bins_role(self, preset: Any) -> None:
        """Say, for an ``auto`` preset, that its bins are only the first view it tries."""
        auto = preset is not None and preset.auto_view
        label = self._form.labelForField(self.bins_spin)
        if label is not None:
            label.setText(f"{SETTINGS['bins'].label} (first view)" if auto
                          else SETTINGS["bins"].label)
        self.bins_spin.setToolTip(
            "auto tries views from these bins a variable on down (fewer bins, principal "
            "components, quantile bins) and keeps the first that resolves its calibration "
            "windows: the alarm panel's Symbols line says the one it chose"
            if auto else SETTINGS["bins"].describe())

    def use_presets(self, presets: Sequence[str]) -> None:
        """List a source's presets and show its first (its own numbers), not chosen.

        A source without presets lists every one, "(custom)" selected. The preset shown is
        the class's default: until another is chosen, a session is given none and takes its
        source's default for its settings (shown once it is built).
        """
        names = [p for p in presets if p in PRESETS] or list(PRESETS)
        if [self.preset_combo.itemText(j) for j in range(self.preset_combo.count())] != \
                [*names, CUSTOM]:
            with QSignalBlocker(self.preset_combo):  # the selection below applies one
                self.preset_combo.clear()
                self.preset_combo.addItems([*names, CUSTOM])
        self._showing_default = True
        try:
            if presets:
                self.preset_combo.setCurrentText(presets[0])
                self.apply_preset(presets[0])
            else:
                self.preset_combo.setCurrentText(CUSTOM)
        finally:
            self._showing_default = False
        self._preset_chosen = not presets  # no default of the source's: the panel's numbers

    # -- what a session shows ---------------------------------------------------------------

    def set_metric_path(self, turns: bool, cls: Any) -> None:
        """Symbol settings over windows, or a dialogue's token metrics per turn.

        ``cls``: the selected source's class (None: none loaded): its default baseline,
        detector and budget are shown.
        """
        self.setTitle("Token metrics and baseline" if turns else "Symbolisation and baseline")
        self._form.setRowVisible(self.tokens_label, turns)
        self.tokens_label.setText(
            "Per turn, from the token counts of S (context), A (reply) and S' (next prompt): "
            f"tokenizer {TOKENIZER} (32,000 SentencePiece pieces). Baseline: turns 1 to N."
            if turns else "")
        for widget in self._symbol_rows:
            self._form.setRowVisible(widget, not turns)
        unset = source_defaults(cls or Source)  # what the source fills in
        self.baseline_spin.setValue(unset["baseline_windows"])
        self._form.labelForField(self.baseline_spin).setText(
            "Baseline turns" if turns else "Baseline windows")
        self._source_detector = (cls or Source).default_detector
        self.detector_combo.setCurrentIndex(max(0, self.detector_combo.findData(
            unset["detector"])))
        self.budget_edit.setPlaceholderText(
            "the recording's" if cls is not None and cls.replays else unset["false_alarms"])

    def show_pipeline(self, session: Session) -> None:
        """Show the session's actual symbolisation (a replay's is the recorded one)."""
        p, c = session.preset, session.config
        widgets = (self.preset_combo, self.bins_spin, self.window_spin, self.stride_spin,
                   self.calib_spin, self.baseline_spin)
        for w in widgets:
            w.blockSignals(True)
        if p.name in PRESETS and self.preset_combo.findText(p.name) < 0:
            # A replay's recorded preset, listed (signals are blocked above).
            self.preset_combo.insertItem(self.preset_combo.count() - 1, p.name)
        self.preset_combo.setCurrentText(p.name if p.name in PRESETS else CUSTOM)
        self._bins_role(p)
        self.bins_spin.setValue(p.bins)
        self.window_spin.setValue(p.window)
        self.stride_spin.setValue(p.stride)
        self.calib_spin.setValue(c.calibration_windows)
        self.baseline_spin.setValue(c.baseline_windows)
        self.detector_combo.setCurrentIndex(max(0, self.detector_combo.findData(c.detector)))
        self.lambda_spin.setValue(c.ewma_lambda)
        if session.source.replays:  # the budget the recording ran with
            self.budget_edit.setPlaceholderText(str(c.false_alarms or "—"))
        for w in widgets:
            w.blockSignals(False)

    def set_live(self, live: bool) -> None:
        """Apply and "Calibrate baseline now" act on a running session only."""
        for b in (self.baseline_button, self.apply_symbols_button):
            b.setEnabled(live)
