"""The event log: every event of the session in one table, clickable, exportable."""

from __future__ import annotations

import bisect
import csv
import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

from idt_desk_widgets.alarms import plural
from idt_desk_widgets.forms import compact_combo
from idt_desk_widgets.periods import event_x, format_params
from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QColor
from PySide6.QtWidgets import (
    QAbstractItemView,
    QComboBox,
    QFileDialog,
    QFrame,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QPushButton,
    QSizePolicy,
    QTableWidget,
    QTableWidgetItem,
    QToolButton,
    QVBoxLayout,
)

from idt_desk.live.alarms import (
    attribution_text,
    during_alarm_text,
    impact_text,
    severity_text,
)
from idt_desk.live.ranges import VERDICTS

__all__ = ["COLUMNS", "FILTERS", "EventLog", "describe_event"]

#: The table's columns.
COLUMNS = ("time", "event", "name", "details", "latency")
#: Filter choices: label -> kinds shown (None: all).
FILTERS: dict[str, frozenset[str] | None] = {
    "all but episode ends": None,
    "all events": None,
    "perturbations and modulations": frozenset({
        "perturbation_on", "perturbation_off", "perturbation_pulse", "modulation_on",
        "modulation_off", "auto"}),
    "alarms and detections": frozenset({"alarm_on", "alarm_off", "attributed", "detected",
                                        "not_detected", "impact"}),
    "notes and calibration": frozenset({
        "note", "session_start", "session_end", "calibrated", "baseline", "baseline_overlap",
        "calibrate_baseline",
        "reconfigure", "symbols_out_of_range", "symbols_in_range", "symbols_recheck",
        "profile_check", "recording_start",
        "recording_stop", "error", "source_paused", "source_done"}),
}
#: Kinds the default filter leaves out: an episode's end comes every few seconds of an RL
#: loop and would bury everything else.
_ROUTINE = frozenset({"episode_end"})
#: Row tints by kind (perturbations red, modulations blue, alarms amber).
_TINT = {"perturbation": QColor(253, 236, 234), "modulation": QColor(234, 240, 253),
         "alarm": QColor(255, 244, 214), "note": QColor(238, 246, 238)}
#: Event kinds in words.
_WORDS = {
    "session_start": "session start", "session_end": "session end",
    "calibrated": "symbols calibrated", "baseline": "baseline set",
    "alarm_on": "IDT alarm", "alarm_off": "alarm cleared",
    "perturbation_on": "perturbation on", "perturbation_off": "perturbation off",
    "perturbation_pulse": "impulse", "modulation_on": "modulation on",
    "modulation_off": "modulation off", "auto": "auto modulation", "note": "note",
    "detected": "detected", "not_detected": "not detected", "pause": "paused",
    "attributed": "what changed",
    "impact": "return change",
    "episode_end": "episode end",
    "resume": "resumed", "speed": "speed", "calibrate_baseline": "baseline asked for",
    "reconfigure": "re-symbolised", "symbols_out_of_range": "symbols out of range",
    "symbols_in_range": "symbols in range", "symbols_recheck": "range re-checked",
    "recording_start": "recording started",
    "recording_stop": "recording stopped", "error": "error", "source_paused":
    "source paused", "source_done": "source done",
    "baseline_overlap": "perturbed baseline", "profile_check": "profile check",
}


def describe_event(ev: dict[str, Any], turns: bool = False) -> tuple[str, str]:
    """(event, details) of a logged event in words, for the table and its export."""
    kind = str(ev.get("kind", ""))
    word = _WORDS.get(kind, kind.replace("_", " "))
    if kind == "perturbation_pulse" and turns:
        word = "injection"
    if kind in ("alarm_on", "alarm_off") and ev.get("metric") == "reward":
        word = "reward alarm" if kind == "alarm_on" else "reward alarm cleared"
    if kind in ("modulation_on", "modulation_off") and ev.get("auto"):
        word += " (auto)"
    if kind.startswith(("perturbation_", "modulation_")):
        details = format_params(ev.get("params"))
    elif kind == "note":
        details = str(ev.get("text", ""))
    elif kind == "baseline":
        det = ev.get("detector") or {}
        unit = "turns" if turns else "windows"
        details = f"{ev.get('n_windows', '?')} {unit}; {det.get('describe', 'paper rule')}"
        ref = ev.get("profile")
        if isinstance(ref, dict):  # a baseline profile's, in force from the first window
            name = Path(str(ref.get("path") or "by value")).name
            details += f"; from profile {name} ({str(ref.get('digest', ''))[:8]})"
    elif kind == "profile_check":
        details = str(ev.get("said", ""))
    elif kind == "calibrated" and isinstance(ev.get("profile"), dict):
        details = "from the baseline profile"
    elif kind == "calibrated":
        details = f"from {ev.get('transitions', '?'):,} transitions" \
            if isinstance(ev.get("transitions"), int) else ""
        if isinstance(ev.get("view"), str) and ev["view"]:  # an auto preset's choice
            details += f"; view {ev['view'][:120]}"
    elif kind == "not_detected":
        unit = str(ev.get("unit", "window"))
        h = ev.get("horizon")
        details = ("went off undetected" if ev.get("off")
                   else f"within {h} {plural(unit, h)}")
        details += f": {during_alarm_text(ev)}" if ev.get("during_alarm") else ""
    elif kind == "detected":
        n, unit = ev.get("latency"), str(ev.get("unit", "window"))
        details = f"{n} {plural(unit, n)} after the onset"
        moved = severity_text(ev.get("severity"))
        details += f"; moved {moved}" if moved else ""
    elif kind == "attributed":
        details = attribution_text(ev)
    elif kind == "impact":
        details = impact_text(ev)
    elif kind == "speed":
        v = ev.get("speed")
        details = "max" if v is None else f"{v:g}× real time"
    elif kind in ("symbols_out_of_range", "symbols_in_range"):
        f = ev.get("fraction")
        details = f"{100 * f:.0f} % of values clamped" if isinstance(f, float) else ""
        verdict = VERDICTS.get((ev.get("recheck") or {}).get("verdict"))
        details += f"; {verdict}" if verdict else ""
    elif kind == "symbols_recheck":
        check = ev.get("recheck") or {}
        details = VERDICTS.get(check.get("verdict"), "")
        if check.get("shifted"):
            details += ": " + ", ".join(f"{m} {check['shift'][m]['widened']:+.1f} sd"
                                        for m in check["shifted"])
    elif kind in ("error", "source_paused"):
        details = str(ev.get("message", ""))
    elif kind == "recording_start":
        details = str(ev.get("path", ""))
    elif kind == "auto":
        auto = ev.get("auto") or {}
        details = ("off" if not auto else
                   f"{auto.get('modulation')} after {auto.get('persist')} alarmed windows")
    elif kind == "session_start":
        details = f"{ev.get('source', '')} {format_params(ev.get('settings'))}".strip()
    elif kind == "episode_end":
        ret = ev.get("return")
        details = f"episode {ev.get('episode', '?')}" + (
            f", return {ret:,.0f}" if isinstance(ret, int | float) else "")
    elif kind == "session_end":
        details = str(ev.get("state", ""))
    elif kind == "baseline_overlap":
        until = (f"turn {ev.get('end')}" if ev.get("unit") == "turn"
                 else f"{float(ev.get('end_t', math.nan)):,.2f} s")
        details = f"on while the symbols and baseline are calibrated (until {until})"
    else:
        details = ""
    return word, details


class EventLog(QFrame):
    """Every perturbation, modulation, alarm, detection, note and calibration of the session.

    One row per event (its time or turn, what, the perturbation's name, its parameters and,
    for a perturbation, the latency of its detection once the session has judged it). A
    click emits ``selected`` with the event's x (the plots centre on it); ``Export…`` writes
    the rows shown as CSV. Fed incrementally with :meth:`add_events` from the GUI timer.
    Its title button folds it to one line (:meth:`set_expanded`), giving the plots the
    height on a small screen.
    """

    #: The x (loop time or turn) of a clicked event.
    selected = Signal(float)
    #: What an export did, in words (for the status bar), or why it failed.
    message = Signal(str)
    #: The log was folded to its title line (True) or opened (False).
    folded = Signal(bool)

    def __init__(self, parent: Any = None) -> None:
        super().__init__(parent)
        self.setObjectName("event_log")
        self.turns = False
        #: Display names (name -> label) of the source's perturbations and modulations.
        self.names: dict[str, str] = {}
        self.events: list[dict[str, Any]] = []
        #: Where the export dialog opens (the window's recordings folder).
        self.folder: Callable[[], Path] = Path.cwd
        self._shown: list[int] = []  # indexes into self.events, row order
        self._keys: list[tuple[float, int]] = []  # each row's (loop time, index), sorted
        self._onset_row: dict[tuple[int, str], int] = {}  # (i, name) -> event index
        self._latency: dict[int, str] = {}  # event index -> latency text
        lay = QVBoxLayout(self)
        lay.setContentsMargins(4, 2, 4, 4)
        lay.setSpacing(2)
        bar = QHBoxLayout()
        self.toggle = QToolButton(self)
        self.toggle.setObjectName("event_log_toggle")
        self.toggle.setText("Event log")
        self.toggle.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextBesideIcon)
        self.toggle.setAutoRaise(True)
        self.toggle.setCheckable(True)
        self.toggle.setChecked(True)
        self.toggle.setStyleSheet("QToolButton { font-weight: bold; border: none; }")
        self.toggle.setToolTip("Show or fold the event log")
        self.toggle.toggled.connect(self.set_expanded)
        bar.addWidget(self.toggle)
        self.filter = compact_combo(QComboBox(self), 14)
        self.filter.addItems(list(FILTERS))
        self.filter.setToolTip("Which events the table lists")
        self.filter.currentIndexChanged.connect(self._rebuild)
        self.count = QLabel("", self)
        self.count.setObjectName("event_count")
        self.count.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.export_button = QPushButton("Export…", self)
        self.export_button.setToolTip("Save the rows shown as CSV")
        self.export_button.clicked.connect(self._export_dialog)
        bar.addWidget(self.filter)
        bar.addWidget(self.count, 1)
        bar.addWidget(self.export_button)
        lay.addLayout(bar)
        self.table = QTableWidget(0, len(COLUMNS), self)
        self.table.setHorizontalHeaderLabels([c.capitalize() for c in COLUMNS])
        self.table.verticalHeader().hide()
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.table.setWordWrap(False)
        self.table.verticalHeader().setDefaultSectionSize(20)
        header = self.table.horizontalHeader()
        for col in range(len(COLUMNS)):
            header.setSectionResizeMode(col, QHeaderView.ResizeMode.Interactive)
        header.setSectionResizeMode(3, QHeaderView.ResizeMode.Stretch)
        for col, width in enumerate((88, 140, 110, 0, 160)):
            if width:
                self.table.setColumnWidth(col, width)
        self.table.setToolTip("Click an event to centre the plots on it")
        self.table.cellClicked.connect(self._clicked)
        lay.addWidget(self.table, 1)
        self._bar = bar
        self.set_expanded(True)
        self._update_count()

    def set_expanded(self, on: bool) -> None:
        """Show the table (and its filter and export) or fold the log to its title line."""
        self.toggle.blockSignals(True)
        self.toggle.setChecked(on)
        self.toggle.blockSignals(False)
        self.toggle.setArrowType(Qt.ArrowType.DownArrow if on else Qt.ArrowType.RightArrow)
        for w in (self.table, self.filter, self.export_button):
            w.setVisible(on)
        if on:
            self.setMaximumHeight(16_777_215)
        else:
            self.layout().activate()
            self.setMaximumHeight(self.toggle.sizeHint().height() + 8)
        self.folded.emit(not on)

    @property
    def expanded(self) -> bool:
        """Whether the table shows."""
        return self.toggle.isChecked()

    # -- feeding ----------------------------------------------------------------------------

    def clear(self) -> None:
        """A new session: no events."""
        self.events = []
        self._shown, self._keys = [], []
        self._onset_row = {}
        self._latency = {}
        self.table.setRowCount(0)
        self._update_count()

    def set_turns(self, turns: bool) -> None:
        """Turns (a dialogue) or loop time on the time column."""
        if turns != self.turns:
            self.turns = turns
            self._rebuild()

    def add_events(self, events: list[dict[str, Any]]) -> None:
        """Append the session's new events (oldest first) and fill in latencies."""
        if not events:
            return
        bar = self.table.verticalScrollBar()
        at_end = bar.value() >= bar.maximum() - 2
        for ev in events:
            k = len(self.events)
            self.events.append(ev)
            kind = ev.get("kind")
            if kind in ("perturbation_on", "perturbation_pulse"):
                self._onset_row[(int(ev.get("i", -1)), str(ev.get("name")))] = k
            elif kind in ("detected", "not_detected"):
                onset = self._onset_row.get((int(ev.get("onset_i", -1)), str(ev.get("name"))))
                if onset is not None:
                    self._latency[onset] = self._latency_text(self.events[onset], ev)
                    row = self._row_of(onset)
                    if row is not None:
                        self.table.setItem(row, 4, QTableWidgetItem(self._latency[onset]))
            if self._shows(ev):
                self._append_row(k)
        self._update_count()
        if at_end:
            self.table.scrollToBottom()

    def _latency_text(self, onset: dict[str, Any], verdict: dict[str, Any]) -> str:
        unit = str(verdict.get("unit", "window"))
        if verdict.get("kind") == "not_detected":
            if verdict.get("during_alarm"):
                return f"during an alarm ({verdict.get('attribution') or 'no class'})"
            if verdict.get("off"):
                return "not detected while on"
            h = verdict.get("horizon")
            carried = " (alarm already on)" if verdict.get("alarm_carried") else ""
            return f"not within {h} {plural(unit, h)}{carried}"
        n = verdict.get("latency")
        text = f"{n} {plural(unit, n)}"
        dt = float(verdict.get("t", math.nan)) - float(onset.get("t", math.nan))
        if not self.turns and math.isfinite(dt):
            text += f" ({dt:,.2f} s)"
        return text

    # -- rows -------------------------------------------------------------------------------

    def row_texts(self, k: int) -> list[str]:
        """The cells of event ``k``: time, event, name, details, latency."""
        ev = self.events[k]
        x = event_x(ev, self.turns)
        digits = 2 if abs(x) < 1000 else 1  # 14,250.0 s fits the column
        when = (f"turn {x:.0f}" if self.turns else f"{x:,.{digits}f} s") \
            if math.isfinite(x) else ""
        word, details = describe_event(ev, self.turns)
        name = ev.get("name")
        label = "" if name is None else self.names.get(str(name), str(name))
        return [when, word, label, details, self._latency.get(k, "")]

    def _sort_key(self, k: int) -> tuple[float, int]:
        """Where event ``k``'s row goes: by loop time (turn), then by arrival.

        An event without a time goes after the ones before it.
        """
        x = event_x(self.events[k], self.turns)
        if not math.isfinite(x):
            x = self._keys[-1][0] if self._keys else -math.inf
        return (x, k)

    def _append_row(self, k: int) -> None:
        """Event ``k``'s row, in loop-time order.

        A window's verdict or a source's event that arrives after later ones (``source
        done`` before ``baseline set``) takes its place.
        """
        key = self._sort_key(k)
        row = bisect.bisect_right(self._keys, key)
        self.table.insertRow(row)
        self._shown.insert(row, k)
        self._keys.insert(row, key)
        kind = str(self.events[k].get("kind", ""))
        tint = next((c for prefix, c in _TINT.items() if kind.startswith(prefix)), None)
        if kind in ("detected", "not_detected", "baseline_overlap", "impact", "attributed"):
            tint = _TINT["alarm"]
        for col, text in enumerate(self.row_texts(k)):
            item = QTableWidgetItem(text)
            if col >= 1:
                item.setToolTip(text)
            if tint is not None:
                item.setBackground(tint)
            if col == 0:
                item.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
            self.table.setItem(row, col, item)

    def _shows(self, ev: dict[str, Any]) -> bool:
        """Whether the filter chosen lists this event."""
        choice = self.filter.currentText()
        if choice == "all but episode ends":  # and the cost's update at each episode's end
            return ev.get("kind") not in _ROUTINE and not (
                ev.get("kind") == "impact" and ev.get("episodes_after", 1) != 1)
        kinds = FILTERS.get(choice)
        return kinds is None or ev.get("kind") in kinds

    def _row_of(self, k: int) -> int | None:
        try:
            return self._shown.index(k)
        except ValueError:
            return None

    def _rebuild(self, *_args: Any) -> None:
        self.table.setRowCount(0)
        self._shown, self._keys = [], []
        for k, ev in enumerate(self.events):
            if self._shows(ev):
                self._append_row(k)
        self._update_count()
        self.table.scrollToBottom()

    def _update_count(self) -> None:
        n, shown = len(self.events), len(self._shown)
        text = f"{n:,} {plural('event', n)}" if shown == n else \
            f"{shown:,} of {n:,} {plural('event', n)}"
        if self.count.text() != text:
            self.count.setText(text)

    def _clicked(self, row: int, _col: int) -> None:
        if 0 <= row < len(self._shown):
            x = event_x(self.events[self._shown[row]], self.turns)
            if math.isfinite(x):
                self.selected.emit(x)

    # -- export -----------------------------------------------------------------------------

    def export(self, path: str | Path) -> Path:
        """Write the rows shown as CSV.

        The table's columns, then the event's kind, transition index, x and own fields (JSON).
        """
        path = Path(path)
        with open(path, "w", newline="", encoding="utf-8") as fh:
            out = csv.writer(fh)
            out.writerow([*COLUMNS, "kind", "i", "x", "fields"])
            for k in self._shown:
                ev = self.events[k]
                fields = {key: v for key, v in ev.items() if key not in ("kind", "i")}
                out.writerow([*self.row_texts(k), ev.get("kind"), ev.get("i"),
                              event_x(ev, self.turns),
                              json.dumps(fields, default=str, sort_keys=True)])
        return path

    def _export_dialog(self) -> None:
        path, _ = QFileDialog.getSaveFileName(
            self, "Export the event log", str(Path(self.folder()) / "events.csv"),
            "CSV (*.csv)")
        if path:
            try:
                self.export(path)
            except OSError as exc:
                self.message.emit(f"Export failed: {exc}")
            else:
                self.message.emit(f"exported {len(self._shown):,} events into {path}")
