"""The agency panel: the paper's three agency conditions (§4.1, Table 5), live."""

from __future__ import annotations

import math
from typing import Any

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QGridLayout, QGroupBox, QLabel, QVBoxLayout, QWidget

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
_YES = "QLabel { background: #3aa757; color: white; border-radius: 5px; padding: 1px 4px; }"
_NO = "QLabel { background: #b9bec6; color: #202124; border-radius: 5px; padding: 1px 4px; }"
_WAIT = "QLabel { color: #6b7079; padding: 1px 4px; }"
PASSIVE_TEXT = ("<b>Passive system</b>: no action, so no choice or effect "
                "(Table 5's physical systems).")


def _bits(x: Any) -> str:
    try:
        v = float(x)
    except (TypeError, ValueError):
        return "—"
    return "—" if not math.isfinite(v) else f"{v:.3f}"


class AgencyPanel(QGroupBox):
    """A row per agency condition: value (bits), shuffle null mean ± sd, verdict.

    Fed by :meth:`update_snapshot` from the GUI timer with ``snap.agency`` (None for a
    passive source or before the first window; else {"choice", "effect", "asymmetry":
    {value, null_mean, null_std, p, holds}, "window_end", "draws"}). A passive source says
    so instead of the table. Labels change only when their text does.
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
        grid.setVerticalSpacing(2)
        for col, head in enumerate(("condition", "bits", "shuffle null", "≠ 0 ?")):
            h = QLabel(f"<span style='color:#6b7079; font-size:10px'>{head}</span>", self.table)
            grid.addWidget(h, 0, col)
        #: key -> (condition, value, null, verdict) labels
        self.rows: dict[str, tuple[QLabel, QLabel, QLabel, QLabel]] = {}
        for row, (key, name, formula, tip) in enumerate(CONDITIONS, start=1):
            cond = QLabel(f"{name} <span style='color:#6b7079'>{formula}</span>", self.table)
            cond.setToolTip(tip)
            value = QLabel("—", self.table)
            value.setAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
            null = QLabel("", self.table)
            verdict = QLabel("", self.table)
            verdict.setObjectName(f"agency_verdict_{key}")
            verdict.setAlignment(Qt.AlignmentFlag.AlignCenter)
            for col, w in enumerate((cond, value, null, verdict)):
                grid.addWidget(w, row, col)
            self.rows[key] = (cond, value, null, verdict)
        grid.setColumnStretch(0, 1)
        outer.addWidget(self.table)
        self.footer = QLabel("", self)
        self.footer.setObjectName("agency_footer")
        self.footer.setWordWrap(True)
        self.footer.setStyleSheet("QLabel { color: #6b7079; font-size: 10px; }")
        outer.addWidget(self.footer)
        self._verdicts: dict[str, str] = {}
        self._key: Any = object()
        self.passive = True
        self.set_passive(True)

    def set_passive(self, passive: bool) -> None:
        """Whether the selected source has no action channel (then there is nothing to fill)."""
        self.passive = passive
        self.reset()

    def reset(self) -> None:
        """No session / a new one: the passive message, or the table waiting for a window."""
        self._key = object()
        self.passive_label.setVisible(self.passive)
        self.table.setVisible(not self.passive)
        for key, (_c, value, null, verdict) in self.rows.items():
            self._text(value, "—")
            self._text(null, "")
            self._verdict(key, verdict, "waiting", "…")
        self._text(self.footer, "" if self.passive else
                   "Filled in from the first window: the shuffle null (actions permuted "
                   "within the window) decides whether each value is distinguishable "
                   "from 0.")
        self.footer.setVisible(not self.passive)

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
        """Refresh from a snapshot (``snap.agency``; absent means none yet)."""
        agency = getattr(snap, "agency", None)
        if not agency:
            return  # none yet (or a passive source): what reset() shows stays
        key = tuple(sorted((k, tuple(sorted(v.items())) if isinstance(v, dict) else v)
                           for k, v in agency.items()))
        if key == self._key:
            return
        self._key = key
        # Data wins: a source with an action channel in a replay shows its table too.
        self.passive_label.hide()
        self.table.show()
        self.footer.show()
        for k, (_c, value, null, verdict) in self.rows.items():
            c = agency.get(k) or {}
            self._text(value, _bits(c.get("value")))
            mean, sd = _bits(c.get("null_mean")), _bits(c.get("null_std"))
            self._text(null, f"{mean} ± {sd}" if mean != "—" else "—")
            p = c.get("p")
            ptxt = f"p = {float(p):.2f}" if isinstance(p, int | float) and math.isfinite(p) \
                else ""
            if c.get("holds"):
                self._verdict(k, verdict, "yes", "yes, p < 0.01")
                tip = f"Distinguishable from 0 against the shuffle null ({ptxt})"
            elif c:
                self._verdict(k, verdict, "no", "not distinguishable")
                tip = f"Within the shuffle null ({ptxt}; needs p < 0.01 and a value > 0)"
            else:
                self._verdict(k, verdict, "waiting", "…")
                tip = ""
            if verdict.toolTip() != tip:
                verdict.setToolTip(tip)
        held = sum(bool((agency.get(k) or {}).get("holds")) for k, *_ in CONDITIONS)
        end, draws = agency.get("window_end"), agency.get("draws")
        where = f"window ending at transition {int(end):,}" if end is not None else \
            "latest window"
        shuffles = f", {int(draws)} shuffles" if draws else ""
        self._text(self.footer, f"{held} of 3 conditions hold — {where}{shuffles}")
