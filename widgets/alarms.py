"""The alarm panel: a light per component, the IDT ensemble alarm, latency, saturation."""

from __future__ import annotations

import html
import math

import numpy as np
from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QFrame,
    QGridLayout,
    QGroupBox,
    QLabel,
    QProgressBar,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from idt_desk.detection.monitor import IDT_METRICS
from idt_desk.detection.registry import DETECTORS
from idt_desk.live.alarms import DURING_ALARM, attribution_text, impact_text, severity_text
from idt_desk.live.ranges import RangeWatch, recheck_text
from idt_desk.live.session import Session, Snapshot, undefined_reason
from idt_desk.metrics.regime import STILL, regime, regime_text
from idt_desk.words import METRIC_WORDS, eta_text

#: The notice's button by the range re-check's verdict (None: no re-check yet): its label and
#: tooltip. After a ``shift`` the button says what re-calibrating would do to the detection.
_RECALIBRATE = {
    None: ("Re-calibrate symbols", "Re-symbolise from the data that follows with the current "
           "pipeline: new bin edges, then a new baseline"),
    "shift": ("Re-calibrate anyway…", "The re-check found the loop itself changed: "
              "re-calibrating now takes the changed loop as the new baseline (asks first)"),
}

__all__ = ["AlarmPanel"]

_GREY, _GREEN, _RED, _AMBER = "#b9bec6", "#3aa757", "#d93025", "#b06f00"
_DARK_GREY = "#7d838c"
#: (window column, name as rich text, name as plain text)
_LIGHTS = (("P", "P", "P"), ("H_f", "H<sub>f</sub>", "H_f"), ("H_b", "H<sub>b</sub>", "H_b"),
           ("dH", "ΔH", "ΔH"), ("twin", "twin", "twin"), ("reward", "reward", "reward"))
#: What a component light says in each state (the colour says it too).
_WORDS = {"idle": "waiting", "ok": "ok", "alarm": "alarm", "undefined": "undefined",
          "still": "still"}
#: An alarm says its direction (short enough for five lights side by side).
_DIRECTION = {1: "▲ high", -1: "▼ low", 0: "alarm"}
_COLORS = {"idle": _GREY, "ok": _GREEN, "alarm": _RED, "undefined": _DARK_GREY,
           "still": _AMBER}
#: Why a light says "still" rather than "ok" (``idt_desk.metrics.regime``'s ``still``).
_STILL = ("the loop is still: its state moved less than one bin in every variable over the "
          "latest window (at rest, or moving below the bins). The entropies see no motion, so "
          "no change of coupling can show until it moves again: not the same as ok")
#: Every value P can take: I(S,A;S') is at most H(S) + H(A) and at most H(S'), so twice it
#: is at most the denominator H(S) + H(A) + H(S').
P_RANGE = (0.0, 0.5)
#: Out-of-range fraction above which the symbols no longer describe the data (the core's).
OUT_OF_RANGE_WARN = Session.OUT_OF_RANGE_WARN
#: Light chunk colours of the bars (their text stays readable over them).
_BAR_OK, _BAR_WARN, _BAR_BAD = "#9fd8ab", "#f7d774", "#f29b93"
#: Component lights a row in the alarm panel.
LIGHTS_A_ROW = 3

#: A bar whose text stays readable over its chunk.
_BAR = ("QProgressBar {{ border: 1px solid #b9bec6; border-radius: 3px; background: white; "
        "text-align: center; color: #202124; min-height: 16px; }} "
        "QProgressBar::chunk {{ background: {color}; border-radius: 2px; }}")


def _too_short(det: dict, b: object, unit: str) -> str:
    """A baseline too short for its budget, plainly: by how much, and what it costs.

    The raised thresholds in σ (persistence's bands), and that P cannot alarm at all when
    its band covers every value P can take.
    """
    need = det.get("needed_windows")
    text = "<b>too short</b> for this budget" + (f" (about {need:,} {unit} needed)"
                                                   if need else "")
    thresholds = det.get("thresholds") or {}
    if not getattr(DETECTORS.get(det.get("kind") or ""), "band", False) or not thresholds:
        return text + "; its thresholds are raised to keep it"
    names = {key: html for key, html, _plain in _LIGHTS}
    text += ": its thresholds are raised to " + ", ".join(
        f"{names[m]} {v:.1f}σ" for m, v in thresholds.items() if m in names)
    text += ", so it fires only on a change larger than that"
    lo, hi = b.band("P") if "P" in getattr(b, "mean", {}) else (math.nan, math.nan)
    if lo <= P_RANGE[0] and hi >= P_RANGE[1]:
        text += ". <b>P cannot alarm</b>: its band covers every value P can take (0 to ½)"
    return text


class _Light(QLabel):
    """A coloured label whose text says its state (colour is never the only cue)."""

    def __init__(self, big: bool = False, parent: QWidget | None = None) -> None:
        super().__init__("", parent)
        self.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.setTextFormat(Qt.TextFormat.RichText)
        self.setWordWrap(True)  # a narrow panel wraps the state, never clips it
        self.setMinimumHeight(34 if big else 38)
        self._big = big
        self.state = ""

    def set_state(self, state: str, text: str, tip: str = "") -> None:
        """Idle (grey: nothing to compare with yet), ok (green), alarm (red) or undefined."""
        if state != self.state:  # style sheets are costly to re-apply at 30 Hz
            self.state = state
            size = "15px" if self._big else "12px"
            self.setStyleSheet(
                f"QLabel {{ background: {_COLORS[state]}; color: white; border-radius: 6px; "
                f"font-weight: bold; font-size: {size}; padding: 2px 2px; }}"
            )
        if text != self.text():
            self.setText(text)
        if tip != self.toolTip():
            self.setToolTip(tip)


def plural(unit: str, n: object) -> str:
    return unit if n == 1 else f"{unit}s"


def _side(values: object, b: object, key: str) -> int:
    """+1 / -1 when the latest value lies above / below the baseline mean (0: unknown)."""
    mean = getattr(b, "mean", {}).get(key, math.nan)
    if values is None or not len(values) or not math.isfinite(mean):
        return 0
    v = float(values[-1])
    return 0 if not math.isfinite(v) else (1 if v > mean else -1)


_SATURATION_TIP = ("Distinct (S, A, S') symbols / W in the latest window. Near 100 % every "
                   "transition is unique and plug-in entropies saturate (all-unique gives "
                   "P = 1/3): estimator artefact, not coupling.")


class AlarmPanel(QGroupBox):
    """Excursion lights, the IDT alarm, latency since the last onset, saturation, calibration.

    ``recalibrate`` is emitted when the user asks to re-calibrate the symbols (from the
    out-of-range notice).
    """

    recalibrate = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__("IDT alarms", parent)
        outer = QVBoxLayout(self)
        grid = QGridLayout()
        grid.setHorizontalSpacing(4)
        outer.addLayout(grid)
        self.lights: dict[str, _Light] = {}
        #: Display names of perturbations (name -> label) for the latency line.
        self.names: dict[str, str] = {}
        self._names: dict[str, tuple[str, str]] = {}
        for col, (key, rich, plain) in enumerate(_LIGHTS):
            light = _Light(parent=self)
            light.setObjectName(f"light_{key}")
            self.lights[key] = light
            self._names[key] = (rich, plain)
            # Three a row: six lights (P, H_f, H_b, ΔH, twin, reward) in one row needed more
            # than the side column's 300 px, and the reward light was cut off.
            grid.addWidget(light, col // LIGHTS_A_ROW, col % LIGHTS_A_ROW)
            grid.setColumnStretch(col % LIGHTS_A_ROW, 1)  # equal widths, whatever each says
        self.idt = _Light(big=True, parent=self)
        self.idt.setObjectName("light_IDT")
        outer.addWidget(self.idt)
        self.latency = QLabel("No perturbation yet", self)
        self.latency.setObjectName("latency")
        self.latency.setWordWrap(True)
        outer.addWidget(self.latency)
        self.saturation = QProgressBar(self)
        self.saturation.setObjectName("saturation")
        self.saturation.setRange(0, 100)
        self.saturation.setFormat("saturation %p %")
        self.saturation.setToolTip(_SATURATION_TIP)
        outer.addWidget(self.saturation)
        self.out_of_range = QProgressBar(self)
        self.out_of_range.setObjectName("out_of_range")
        self.out_of_range.setRange(0, 1000)
        self.out_of_range.setFormat("out of calibrated range: 0 %")
        self.out_of_range.setToolTip(
            "Fraction of the latest window's transitions in which an S, A or S' value fell "
            "outside the range the symbols were calibrated on (clamped into an edge bin). "
            f"Above {OUT_OF_RANGE_WARN:.0%} for long, metric changes can be edge-bin "
            "artefacts rather than a change of coupling: re-calibrate."
        )
        outer.addWidget(self.out_of_range)
        self._chunks = {"saturation": "", "out_of_range": ""}
        for which in self._chunks:
            self._chunk(which, _BAR_OK)
        self.notice = QFrame(self)
        self.notice.setObjectName("out_of_range_notice")
        self.notice.setStyleSheet(
            "QFrame#out_of_range_notice { background: #fff4c2; border: 1px solid #e0b400; "
            "border-radius: 6px; } QLabel { color: #5c4400; }")
        nl = QVBoxLayout(self.notice)
        nl.setContentsMargins(8, 6, 8, 6)
        self.notice_text = QLabel("", self.notice)
        self.notice_text.setWordWrap(True)
        nl.addWidget(self.notice_text)
        self.recalibrate_button = QPushButton(_RECALIBRATE[None][0], self.notice)
        self.recalibrate_button.setObjectName("recalibrate")
        self.recalibrate_button.setToolTip(_RECALIBRATE[None][1])
        self.recalibrate_button.clicked.connect(self.recalibrate.emit)
        nl.addWidget(self.recalibrate_button)
        self.notice.hide()
        outer.addWidget(self.notice)
        self.undefined = QLabel("", self)
        self.undefined.setObjectName("undefined")
        self.undefined.setWordWrap(True)
        self.undefined.setStyleSheet("QLabel { color: #555b63; }")
        self.undefined.hide()
        outer.addWidget(self.undefined)
        self.calibration = QLabel("", self)
        self.calibration.setObjectName("calibration")
        self.calibration.setWordWrap(True)
        outer.addWidget(self.calibration)
        self.set_reward_visible(False)
        self.lights["twin"].setVisible(False)  # shown for a session with a twin
        self.reset()

    def set_reward_visible(self, visible: bool) -> None:
        """Show the reward light only for sources with reward."""
        self.lights["reward"].setVisible(visible)

    def reset(self) -> None:
        """Back to the idle look (no session)."""
        for key in self.lights:
            self._set_light(key, "idle", "no session running")
        self.idt.set_state("idle", "IDT: not running",
                           "The IDT alarm (union of the P, H_f, H_b and ΔH excursions, paper "
                           "§10.5) lights once a session has a baseline")
        self.latency.setText("No perturbation yet")
        self.saturation.setValue(0)
        self.saturation.setFormat("saturation %p %")
        self.saturation.setToolTip(_SATURATION_TIP)
        self.out_of_range.setValue(0)
        self.out_of_range.setFormat("out of calibrated range: —")
        self.notice.hide()
        self.undefined.hide()
        self.calibration.setText("")

    def update_saturation(self, snap: Snapshot) -> None:
        """The saturation bar: the latest window's distinct share, named by its regime.

        The bar names the estimator's regime (``idt_desk.metrics.regime``); its tip says what
        it means and what to do.
        """
        w = getattr(snap, "windows", None) or {}
        u = w.get("unique_frac")
        if u is None or not len(u) or u[-1] != u[-1]:
            return
        hf, moved = w.get("H_f"), w.get("motion")
        name = regime(float(u[-1]), float(hf[-1]) if hf is not None and len(hf) else math.nan,
                      float(moved[-1]) if moved is not None and len(moved) else math.nan)
        self.saturation.setValue(round(100 * float(u[-1])))
        self.saturation.setFormat(f"saturation %p % — {name}")
        tip = regime_text(name, float(u[-1]), (getattr(snap, "preset", None) or {}).get("window"))
        self.saturation.setToolTip(tip[0].upper() + tip[1:] if tip else _SATURATION_TIP)
        self._chunk("saturation", {"saturated": _BAR_BAD, "sparse": _BAR_WARN,
                                   "still": _BAR_WARN}.get(name, _BAR_OK))

    def _twin_light(self, ready: bool, waiting: str, alarm: bool | None, detector: str) -> None:
        """The twin's own alarm: the residual of the physics against its baseline."""
        what = ("the residual of the physics (S' against the loop's own model, its twin); "
                "its alarm joins the IDT alarm")
        if not ready:
            self._set_light("twin", "idle", f"{what}; no baseline yet: {waiting}")
        elif alarm:
            self._set_light("twin", "alarm", f"{detector}: the residual moved; {what}")
        else:
            self._set_light("twin", "ok", f"{detector}: no alarm; {what}")

    def _set_light(self, key: str, state: str, why: str, word: str = "") -> None:
        rich, plain = self._names[key]
        word = word or _WORDS[state]
        # What the metric is first (a tile names it by its symbol only), then its state.
        name, meaning = METRIC_WORDS.get(key, ("", ""))
        what = f"{plain}, {name}: {meaning}.\n" if name else ""
        self.lights[key].set_state(
            state, f"{rich}<br><span style='font-size:10px'>{word}</span>",
            f"{what}{plain}: {_WORDS[state]} — {why}")

    def update_snapshot(self, snap: Snapshot, stopping: bool = False) -> None:
        """Refresh from a session snapshot.

        ``stopping``: the loop is over but its worker still scores the last windows, so the
        verdict can still change: said so, rather than "session stopped".
        """
        w = snap.windows
        b = snap.baseline
        ready = b is not None
        cal, need = snap.calibration
        got, want = snap.baseline_progress
        # What is left, in time at the loop's measured rate (nothing while it is held).
        per_s = snap.loop_rate if snap.state == "running" else 0.0
        turns = getattr(snap, "tokenizer", None) is not None
        stride = 1 if turns else int((snap.preset or {}).get("stride") or 1)
        if cal < need:
            left = eta_text(need - cal, per_s)
            waiting = (f"calibrating symbols ({cal:,}/{need:,} transitions"
                       f"{f'; {left} left' if left else ''})")
        else:
            units = "turns" if turns else "windows"
            left = eta_text((want - got) * stride, per_s)
            waiting = (f"gathering baseline ({got:,}/{want:,} {units}"
                       f"{f'; {left} left' if left else ''})")
        per_window_s = stride / per_s if per_s > 0 else 0.0  # wall seconds a window
        det = getattr(snap, "detector", None) or {}
        detector = det.get("describe") or f"paper rule (|z| > {3 if b is None else b.k:g}σ)"
        p = w.get("P")
        p_undefined = p is not None and len(p) > 0 and math.isnan(float(p[-1]))
        motion = w.get("motion")
        still = motion is not None and len(motion) > 0 and float(motion[-1]) < STILL
        twin = w.get("R_spread_pos")
        has_twin = twin is not None and bool(np.isfinite(twin).any())
        if has_twin != self.lights["twin"].isVisibleTo(self):
            self.lights["twin"].setVisible(has_twin)
        for key in self.lights:
            if key == "twin":
                self._twin_light(ready, waiting, snap.alarm.get("twin"), detector)
            elif key == "P" and p_undefined:
                self._set_light(key, "undefined", "the latest window's P is undefined")
            elif not ready:
                self._set_light(key, "idle", f"no baseline yet: {waiting}")
            elif key in IDT_METRICS and still and not snap.alarm.get(key):
                self._set_light(key, "still", _STILL)
            elif snap.alarm.get(key):
                side = _side(w.get(key), b, key)
                where = {1: "above", -1: "below", 0: "outside"}[side]
                self._set_light(key, "alarm", f"{detector}: alarm; the latest window is "
                                f"{where} the baseline's ±{b.k_of(key):.1f}σ band",
                                _DIRECTION[side])
            else:
                self._set_light(key, "ok", f"{detector}: no alarm")
        note = ""
        if stopping:
            note = "stopping: scoring the last windows"
        elif snap.state in ("stopped", "error"):
            note = "session stopped"
        elif snap.out_of_range_warning and ready:
            # Never let an edge-bin artefact pass for a change of coupling.
            note = "symbols out of calibrated range: see below"
        stopped = (f"<br><span style='font-size:11px; font-weight:normal'>{note}</span>"
                   if note else "")
        tip = ("Union of the P, H_f, H_b and ΔH alarms (paper §10.5), and of the twin's where "
               f"the loop has one: an alarm when any of them fires — {detector}")
        if not ready:
            self.idt.set_state("idle", f"IDT: {waiting.split(' (')[0]}{stopped}",
                               f"{tip}. No verdict yet: {waiting}.")
        elif snap.alarm.get("IDT"):
            moving = "<br><span style='font-size:11px; font-weight:normal'>the loop is still" \
                "</span>" if still and not stopped else ""
            self.idt.set_state("alarm", f"IDT ALARM{stopped}{moving}", tip)
        elif still:
            self.idt.set_state("still", f"IDT: the loop is still{stopped}",
                               f"{tip}. No alarm, but {_STILL}.")
        else:
            self.idt.set_state("ok", f"IDT: no alarm{stopped}", tip)
        onset = snap.onset
        unit = (onset or {}).get("unit") or (
            "turn" if getattr(snap, "tokenizer", None) is not None else "window")
        text = "No perturbation yet" if onset is None else self._onset_text(snap, onset, unit, b)
        later = self._latest_alarm_text(snap, onset, b)
        if later:
            text += f"<br>{later}"
        cost = impact_text((onset or {}).get("impact"))
        if cost:
            text += f"<br>{html.escape(cost[0].upper() + cost[1:])}"
        if text != self.latency.text():
            self.latency.setText(text)
        self.update_saturation(snap)
        tokens = getattr(snap, "tokenizer", None)
        self.out_of_range.setVisible(tokens is None)  # token counts have no bins to leave
        self._update_out_of_range(snap)
        self._update_undefined(snap, p_undefined)
        if tokens is not None:
            text = f"Tokens: {tokens} — one row per turn"
        elif cal < need:
            text = f"Symbols: calibrating {cal:,}/{need:,} transitions"
        else:
            pr = snap.preset
            view = html.escape(str(pr["view"])) if pr.get("view") else f"{pr['bins']} bins"
            text = (f"Symbols: {html.escape(str(pr['name']))} — {view}, "
                    f"W = {pr['window']}, "
                    f"stride {pr['stride']}")
        text += f"<br>Alarm: {detector}"
        unit = "turns" if tokens is not None else "windows"
        if b is None:
            text += f"<br>Baseline: {waiting.split('(', 1)[1].rstrip(')')}" if cal >= need \
                else f"<br>Baseline: {want:,} {unit} after the symbols"
        elif not getattr(DETECTORS.get(det.get("kind") or ""), "calibrated", True):
            text += (f"<br>Baseline: {b.n_windows} {unit} (the paper rule is not calibrated: "
                     "no false-alarm budget)")
        elif det.get("too_short"):
            text += f"<br>Baseline: {b.n_windows} {unit} — " + _too_short(det, b, unit)
            more = (det.get("needed_windows") or 0) - b.n_windows
            later = eta_text(more * per_window_s, 1.0) if per_window_s else ""
            if more > 0 and later:
                text += (f". A baseline long enough takes {later} more of the loop at its "
                         f"current rate: <i>Calibrate baseline now</i> gathers the "
                         f"{det['needed_windows']:,} {unit} it needs")
        else:
            text += f"<br>Baseline: {b.n_windows} {unit}, long enough for the budget"
        caveat = (snap.preset or {}).get("caveat") if tokens is None else None
        if caveat:  # said beside the alarm it qualifies
            text += f"<br><b>Caveat</b> ({html.escape(str(snap.preset['name']))}): " \
                    f"{html.escape(str(caveat))}"
        if text != self.calibration.text():
            self.calibration.setText(text)

    def _onset_text(self, snap: Snapshot, onset: dict, unit: str, b: object) -> str:
        """The latest perturbation's verdict, or how long it still waits for one.

        Detected (how far it moved, what changed), a second change during an alarm, not
        detected, or waiting.
        """
        # A recording's names are data: shown as text, never read as markup.
        name = html.escape(str(self.names.get(onset["name"], onset["name"])))
        first = onset.get("first_window")
        state = "injected" if onset.get("impulse") else "on"
        if onset.get("latency") is not None:
            n = onset["latency"]
            text = f"Detected <b>{n}</b> {plural(unit, n)} after the onset of <i>{name}</i>"
            moved = severity_text(onset.get("severity"), top=2,
                                  beyond=None if b is None else b.k_of)
            text += f"; moved {html.escape(moved)}" if moved else ""
            named = attribution_text(onset.get("attribution"))
            return text + (f"<br>What changed: {html.escape(named)}" if named else
                           "<br>What changed: named once a window holds only changed data")
        during = ""
        if onset.get("during_alarm"):
            named = attribution_text(onset.get("attribution"))
            during = f"{html.escape(DURING_ALARM)}" + (
                f"<br>What changed after it: {html.escape(named)}" if named else "")
        if onset.get("expired"):
            h = onset.get("horizon")
            text = f"<i>{name}</i>: not detected within {h} {plural(unit, h)}"
            return text + (f": {during}" if during else
                           " (the alarm stayed on from an earlier change)"
                           if onset.get("carried") else "")
        if onset.get("off_i") is not None:
            text = f"<i>{name}</i> is off again: not detected while it was on"
            return text + (f": {during}" if during else "")
        n = None if first is None else snap.n_windows - first
        h = onset.get("horizon")
        if during:
            left = "" if n is None or not h else f" ({n} of {h} {plural(unit, h)})"
            return (f"<i>{name}</i> {state} during an alarm already on: {during}<br>"
                    f"Detected only if the alarm clears and rises again{left}")
        if onset.get("carried"):
            # The earlier alarm is on: say that this change is judged all the same, and when.
            pr = snap.preset or {}
            need = -(-int(pr.get("window") or 1) // int(pr.get("stride") or 1))
            wait = "" if n is None else f" ({min(n, need)} of {need} {plural(unit, need)})"
            return (f"<i>{name}</i> {state} during an alarm already on: "
                    f"{html.escape(DURING_ALARM)}. What changed is named once a window holds "
                    f"only data after it{wait}")
        since = "" if n is None else (
            f" ({n} of {h} {plural(unit, h)} since the onset)" if h
            else f" ({n} {plural(unit, n)} since the onset)")
        if snap.state in ("stopped", "error"):  # no window more is coming
            return f"<i>{name}</i> {state}: not detected before the session ended{since}"
        return f"<i>{name}</i> {state}: not detected yet{since}"

    @staticmethod
    def _latest_alarm_text(snap: Snapshot, onset: dict | None, b: object) -> str:
        """The latest alarm where it is not the onset's own detection ("" otherwise).

        How far it moved and its class (or that its class is still to be named), so the panel
        never keeps an earlier alarm's explanation (an alarm a modulation raised after a
        perturbation's).
        """
        latest = getattr(snap, "latest_alarm", None)
        if not latest:
            return ""
        i = latest.get("i")
        if onset is not None and (i == onset.get("alarm_i") or i <= onset["i"]):
            return ""  # the onset's detection, or the alarm it came during: said with it
        at = latest.get("t")
        turns = getattr(snap, "tokenizer", None) is not None
        parts = ([] if at is None else [f"turn {at:.0f}" if turns else f"at {at:,.1f} s"]) + (
            ["after this one's"] if onset is not None else [])
        head = "The latest alarm" + (f" ({', '.join(parts)})" if parts else "")
        moved = severity_text(getattr(snap, "severity", None), top=2,
                              beyond=None if b is None else b.k_of)
        text = head + (f" moved {html.escape(moved)}" if moved else "")
        got = getattr(snap, "attribution", None)
        if got and got.get("alarm_i") == i:
            named = attribution_text(got)
            return text + (f" — what changed: {html.escape(named)}" if named else "")
        return text + " — what changed: named once a window holds only changed data"

    def _chunk(self, which: str, color: str) -> None:
        if color != self._chunks[which]:
            self._chunks[which] = color
            getattr(self, which).setStyleSheet(_BAR.format(color=color))

    def _update_out_of_range(self, snap: Snapshot) -> None:
        oor = snap.windows["out_of_range"]
        if len(oor) and oor[-1] == oor[-1]:
            frac = float(oor[-1])
            self.out_of_range.setValue(round(1000 * frac))
            fmt = f"out of calibrated range: {100 * frac:.0f} %"
            if 0 < frac < 0.01:
                fmt = f"out of calibrated range: {100 * frac:.1f} %"
            if fmt != self.out_of_range.format():
                self.out_of_range.setFormat(fmt)
            # Coloured as the notice judges it (RangeWatch): clamping a healthy loop shows
            # now and then stays green; yellow or red only while the notice is said.
            heavy = RangeWatch.HEAVY * OUT_OF_RANGE_WARN
            said = snap.out_of_range_warning is not None
            self._chunk("out_of_range", _BAR_OK if not said else
                        _BAR_BAD if frac >= heavy else _BAR_WARN)
        warning = snap.out_of_range_warning
        if warning:
            mean = float(warning["fraction"])
            latest = f"; latest window: {float(oor[-1]):.0%}" if len(oor) else ""
            text = (
                "<b>The symbols' calibrated range no longer covers the data.</b> "
                f"Over the latest {Session.OUT_OF_RANGE_PERSIST} windows, {mean:.0%} of the "
                "transitions had a value outside the range the bins were calibrated on, "
                f"clamped into an edge bin{latest}. "
            )
            verdict = (warning.get("recheck") or {}).get("verdict")
            label, tip = _RECALIBRATE.get(verdict, _RECALIBRATE[None])
            if label != self.recalibrate_button.text():
                self.recalibrate_button.setText(label)
                self.recalibrate_button.setToolTip(tip)
            if warning.get("recheck"):  # the change seen with bins that cover the data
                text += html.escape(recheck_text(warning["recheck"]))
            else:
                text += ("Changes of P, H<sub>f</sub> and H<sub>b</sub> now may be that "
                         "artefact, <i>not</i> a change of coupling. Re-calibrate to "
                         "re-symbolise from the data that follows.")
            if text != self.notice_text.text():
                self.notice_text.setText(text)
            self.notice.show()
        else:
            self.notice.hide()

    def _update_undefined(self, snap: Snapshot, latest: bool) -> None:
        n = snap.n_undefined
        if not latest and not n:
            self.undefined.hide()
            return
        parts = []
        if latest:
            parts.append(f"<b>Latest window: P undefined</b> — {self._reason(snap)}")
        if n:
            parts.append(f"P undefined in {n:,} window{'s' if n != 1 else ''} so far "
                         "(grey triangles on the P plot)")
        text = "<br>".join(parts)
        if text != self.undefined.text():
            self.undefined.setText(text)
        self.undefined.show()

    @staticmethod
    def _reason(snap: Snapshot) -> str:
        w = snap.windows
        return undefined_reason(w, len(w["P"]) - 1) or "P is not a number in this window"
