"""The agency panel: the paper's three agency conditions (§4.1, Table 5), live."""

from __future__ import annotations

import math
from collections import deque
from typing import Any

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QGridLayout, QGroupBox, QLabel, QVBoxLayout, QWidget

from idt_desk.live.config import AGENCY_EVERY
from idt_desk.metrics.regime import CYCLE, SATURATED

__all__ = ["CONDITIONS", "AgencyPanel"]

#: (key in Snapshot.agency, condition, formula (rich text), what it means)
CONDITIONS = (
    ("choice", "Choice", "H(A|S)",
     "Choice: the action is not a fixed function of the state; H(A|S) > 0 bits."),
    ("effect", "Effect", "MI(A;S'|S)",
     "Effect: the action changes what follows; MI(A;S'|S) > 0 bits."),
    ("asymmetry", "Asymmetry", "|ΔH|",
     "Asymmetry: forward and backward predictability differ; |ΔH| = |H_f − H_b| > 0 bits."),
)
#: Verdict badges: yes (green), not distinguishable (grey), no data yet.
_YES = ("QLabel { background: #3aa757; color: white; border-radius: 5px; padding: 1px 5px; "
        "font-size: 11px; }")
_NO = ("QLabel { background: #b9bec6; color: #202124; border-radius: 5px; padding: 1px 5px; "
       "font-size: 11px; }")
_WAIT = "QLabel { color: #6b7079; padding: 1px 5px; font-size: 11px; }"
#: Looks (agency computations, one every few seconds) the verdicts are judged over: one
#: window of a gait catches its ambiguous states or not, so a verdict of the latest window
#: alone flips with the gait's phase ("0 of 3" and "2 of 3" in turn on a healthy cheetah).
LOOKS = 10
PASSIVE_TEXT = ("<b>Passive system</b>: no action, so no choice or effect "
                "(Table 5's physical systems).")
UNKNOWN_TEXT = "Filled in once the session runs (a replay shows what its recording holds)."


def _bits(x: Any) -> str:
    try:
        v = float(x)
    except (TypeError, ValueError):
        return "—"
    if not math.isfinite(v):
        return "—"
    if v != 0 and abs(v) < 0.0005:
        return f"{v:.1e}"  # never "0.000" beside a verdict that it is above 0
    return f"{v:.3f}"


def _saturation(snap: Any) -> float | None:
    """The latest window's distinct (S, A, S') fraction, rounded (None: unknown)."""
    u = (getattr(snap, "windows", None) or {}).get("unique_frac")
    if u is None or not len(u) or not math.isfinite(float(u[-1])):
        return None
    return round(float(u[-1]), 2)


def _verdict_text(c: dict[str, Any]) -> tuple[str, str]:
    """(state, text) of one condition: yes (holds), no, or waiting (no data)."""
    if not c:
        return "waiting", "…"
    if not c.get("holds"):
        return "no", "not distinguishable"
    p = c.get("p")
    if isinstance(p, int | float) and math.isfinite(p):
        for level in (0.001, 0.01, 0.05):
            if p < level:
                return "yes", f"yes, p < {level:g}"
        return "yes", f"yes, p = {p:.2f}"
    if str(c.get("method", "")).startswith("exact"):
        return "yes", "yes (exact)"
    return "yes", "> 0 (no test)"


def _null_text(key: str, c: dict[str, Any]) -> str:
    """The reference the value is tested against, by the test's method."""
    method = str(c.get("method", ""))
    mean, sd = c.get("null_mean"), c.get("null_std")
    if method.startswith("exact"):
        return "exact: 0 iff no choice"
    if mean is None or _bits(mean) == "—":
        return ""
    if "bootstrap" in method:
        return f"bootstrap ΔH {float(mean):+.3f} ± {_bits(sd)}"
    return f"null {_bits(mean)} ± {_bits(sd)}"


class AgencyPanel(QGroupBox):
    """A row per agency condition: value (bits), its null (or bootstrap), the verdict.

    Fed by :meth:`update_snapshot` from the GUI timer with ``snap.agency`` (None for a
    passive source or before the first window; else {"choice", "effect", "asymmetry":
    {value, null_mean, null_std, p, holds[, method]}, "window_end", "draws"}). A passive
    source says so instead of the table. Labels change only when their text does.
    """

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__("Agency (paper §4.1, Table 5)", parent)
        self.setObjectName("agency_panel")
        outer = QVBoxLayout(self)
        outer.setContentsMargins(6, 4, 6, 4)
        outer.setSpacing(3)
        self.passive_label = QLabel(PASSIVE_TEXT, self)
        self.passive_label.setObjectName("agency_passive")
        self.passive_label.setWordWrap(True)
        self.passive_label.setStyleSheet("QLabel { color: #555b63; }")
        outer.addWidget(self.passive_label)
        self.table = QWidget(self)
        grid = QGridLayout(self.table)
        grid.setContentsMargins(0, 0, 0, 0)
        grid.setHorizontalSpacing(6)
        grid.setVerticalSpacing(1)
        #: key -> (condition, value, null, verdict) labels
        self.rows: dict[str, tuple[QLabel, QLabel, QLabel, QLabel]] = {}
        for k, (key, name, formula, tip) in enumerate(CONDITIONS):
            row = 2 * k
            cond = QLabel(f"<b>{name}</b><br><span style='color:#5f6368'>{formula}</span>",
                          self.table)
            cond.setToolTip(tip)
            value = QLabel("—", self.table)
            value.setObjectName(f"agency_value_{key}")
            value.setToolTip(f"{formula} of the latest window, in bits")
            null = QLabel("", self.table)
            null.setObjectName(f"agency_null_{key}")
            null.setStyleSheet("QLabel { color: #6b7079; font-size: 10px; }")
            verdict = QLabel("", self.table)
            verdict.setObjectName(f"agency_verdict_{key}")
            verdict.setAlignment(Qt.AlignmentFlag.AlignCenter)
            verdict.setWordWrap(True)  # a narrow side column wraps it, never clips it
            grid.addWidget(cond, row, 0, 2, 1)
            grid.addWidget(value, row, 1)
            grid.addWidget(verdict, row, 2)
            grid.addWidget(null, row + 1, 1, 1, 2)
            self.rows[key] = (cond, value, null, verdict)
        grid.setColumnStretch(1, 1)
        outer.addWidget(self.table)
        self.footer = QLabel("", self)
        self.footer.setObjectName("agency_footer")
        self.footer.setWordWrap(True)
        self.footer.setStyleSheet("QLabel { color: #6b7079; font-size: 10px; }")
        outer.addWidget(self.footer)
        self._verdicts: dict[str, str] = {}
        self._key: Any = None
        #: The latest looks: (window_end, {condition: holds}), newest last.
        self.looks: deque[tuple[Any, dict[str, bool]]] = deque(maxlen=LOOKS)
        self.passive = True
        self.set_passive(True)

    def set_passive(self, passive: bool | None) -> None:
        """Whether the selected source has no action channel (then there is nothing to fill).

        None: not known before the session runs (a replay: its recording decides).
        """
        self.passive = passive
        self.passive_label.setText(UNKNOWN_TEXT if passive is None else PASSIVE_TEXT)
        self.reset()

    def reset(self) -> None:
        """No session / a new one: the passive message, or the table waiting for a window."""
        self._key = None
        self.looks.clear()
        shown = self.passive is not False  # the message, for passive or not yet known
        self.passive_label.setVisible(shown)
        self.table.setVisible(not shown)
        self.footer.setVisible(not shown)
        for key, (_c, value, null, verdict) in self.rows.items():
            self._text(value, "—")
            self._text(null, "")
            self._verdict(key, verdict, "waiting", "…")
        self._text(self.footer, "Filled in from the first window, from the stream's own "
                                "symbols: is each value distinguishable from 0?")

    def _holds(self, key: str) -> bool:
        """Whether condition ``key`` held in most of the looks (a tie: as in the latest)."""
        times, n = sum(look[key] for _end, look in self.looks), len(self.looks)
        return 2 * times > n or (2 * times == n and self.looks[-1][1][key])

    @staticmethod
    def _text(label: QLabel, text: str) -> None:
        if label.text() != text:
            label.setText(text)

    def _verdict(self, key: str, label: QLabel, state: str, text: str) -> None:
        if self._verdicts.get(key) != state:
            self._verdicts[key] = state
            label.setStyleSheet({"yes": _YES, "no": _NO}.get(state, _WAIT))
        self._text(label, text)

    def update_snapshot(self, snap: Any) -> None:
        """Refresh from a snapshot (``snap.agency``; absent or None means none yet)."""
        agency = getattr(snap, "agency", None)
        if not agency:
            return  # none yet (or a passive source): what reset() shows stays
        sat = _saturation(snap)
        key = (agency.get("window_end"), sat, *(tuple(sorted((agency.get(k) or {}).items()))
                                                 for k, *_ in CONDITIONS))
        if key == self._key:
            return
        self._key = key
        # Data wins: a replay of an agent's recording shows its table too.
        self.passive_label.hide()
        self.table.show()
        self.footer.show()
        end = agency.get("window_end")
        if agency.get("where"):
            self.looks.clear()  # a dialogue's turn is its own verdict, never pooled
        elif self.looks and self.looks[-1][0] == end:
            self.looks.pop()  # the same look again (its numbers restated)
        self.looks.append((end, {k: bool((agency.get(k) or {}).get("holds"))
                                 for k, *_ in CONDITIONS}))
        n = len(self.looks)
        for k, (_c, value, null, verdict) in self.rows.items():
            c = agency.get(k) or {}
            self._text(value, f"{_bits(c.get('value'))} bits" if c else "—")
            self._text(null, _null_text(k, c))
            latest, text = _verdict_text(c)
            state = latest
            times = sum(look[k] for _end, look in self.looks)
            if c and n > 1:  # judged over the looks: it does not flip with the phase
                state = "yes" if self._holds(k) else "no"
                if state == "yes" and not c.get("holds"):
                    # The value shown is the latest look's; never "0.000 bits — yes" (the
                    # tooltip says the latest look's verdict).
                    text = f"yes in {times} of {n} looks"
                elif state == "no" and c.get("holds"):
                    text = f"not in {n - times} of {n} looks"
                elif state == "no":
                    text = "not distinguishable"
            self._verdict(k, verdict, state, text)
            p = c.get("p")
            ptxt = f"p = {float(p):.3f}" if isinstance(p, int | float) and math.isfinite(p) \
                else "exact test"
            method = c.get("method", "shuffle null")
            tip = {"yes": f"Distinguishable from 0 ({method}, {ptxt})",
                   "no": f"Not distinguishable from 0 ({method}, {ptxt})"}.get(latest, "")
            if n > 1:
                tip = f"The latest look: {tip[0].lower()}{tip[1:]}" if tip else tip
                tip += (f"; held in {times} of the last {n} looks (one every "
                        f"{AGENCY_EVERY:g} s of wall time), the verdict shown")
            if verdict.toolTip() != tip:
                verdict.setToolTip(tip)
        held = sum(self._holds(k) for k, *_ in CONDITIONS)
        draws = agency.get("draws")
        where = agency.get("where") or (f"the W transitions up to {int(end):,}"
                                         if end is not None else "the latest window")
        if n > 1:
            where = (f"most of the last {n} looks (the latest: {where}; "
                     f"one every {AGENCY_EVERY:g} s)")
        shuffles = f"; {int(draws)} draws" if draws else ""
        text = f"<b>{held} of 3</b> conditions hold on {where}{shuffles}"
        if sat is not None and sat >= SATURATED:
            text += (f"<br><span style='color:#8a5a00'>Saturation {sat:.0%}: nearly all "
                     "transitions distinct; the estimates cannot show choice or effect "
                     "here (estimator limit).</span>")
            tip = ("Nearly every (S, A, S') of the window is distinct: plug-in entropies "
                   "saturate, so H(A|S) and MI(A;S'|S) are near 0 whatever the policy does. "
                   "An estimator limit, not a finding: fewer bins, a larger window or "
                   "dimensionality reduction.")
        else:
            tip = ""
        choice = (agency.get("choice") or {}).get("value")
        if held == 0 and sat is not None and sat <= CYCLE and choice == 0:
            # A settled deterministic agent repeating one gait: the conditions are about
            # variation, and a window of one repeated cycle holds none.
            text += (f"<br>The agent acts, but on one repeated cycle: {sat:.0%} of the "
                     "window's transitions are distinct, and in each state it takes one "
                     "action to one next state. Choice, effect and asymmetry measure how "
                     "action and outcome vary, and here nothing varies; a perturbation (or "
                     "action noise) makes them show.")
            tip = ("A deterministic policy on a settled gait: every S symbol of the window "
                   "comes with one A and one S', so H(A|S), MI(A;S'|S) and ΔH are exactly 0 "
                   "(paper §4.1: the conditions are properties of the loop's variation, not "
                   "of whether the agent moves).")
        negative = [label for k, label in (("choice", "H(A|S)"), ("effect", "MI(A;S'|S)"))
                    if isinstance((agency.get(k) or {}).get("value"), int | float)
                    and agency[k]["value"] < 0]
        if negative:
            # A dialogue's conditions come from one turn's pooled token counts, which are not
            # one joint distribution: a difference of entropies can fall below 0.
            text += (f"<br>{' and '.join(negative)} below 0: pooled token counts are not one "
                     "joint distribution, so a difference of their entropies can be "
                     "negative; read it as 0 (no choice or effect shown).")
        self._text(self.footer, text)
        if self.footer.toolTip() != tip:
            self.footer.setToolTip(tip)
