"""The metric plots' legend: its hand-drawn samples, its short words and the band's name.

The one legend row above the plots (:class:`.plots.MetricPlots`) explains the band, the mean,
the alarmed windows and the shaded periods with samples drawn here; a narrow centre pane
gets the short words, and the band is named after the baseline's detector.
"""

from __future__ import annotations

from typing import Any

import pyqtgraph as pg
from PySide6.QtCore import QPointF, QRectF, Qt
from PySide6.QtGui import QPainter, QPolygonF

from idt_desk.detection.registry import DETECTORS

__all__ = ["SHORT_WORDS", "Legend", "Swatch", "band_label"]


class Swatch(pg.ItemSample):
    """A legend sample drawn by hand (dashed line, filled box, dot, marker); not clickable."""

    def __init__(self, kind: str, color: tuple[int, ...]) -> None:
        super().__init__(None)
        self.kind, self.color = kind, color
        self.setFixedWidth(22)
        self.setFixedHeight(16)

    def mouseClickEvent(self, event: Any) -> None:
        """Not clickable (pyqtgraph's samples hide their curve on a click)."""
        event.ignore()

    def boundingRect(self) -> QRectF:
        """The sample's fixed 22 × 16 px box."""
        return QRectF(0, 0, 22, 16)

    def paint(self, p: QPainter, *args: Any) -> None:
        """Draw the sample of its ``kind`` in its colour."""
        if self.kind == "dash":
            p.setPen(pg.mkPen(self.color, width=1.5, style=Qt.PenStyle.DashLine))
            p.drawLine(1, 8, 21, 8)
        elif self.kind == "box":
            p.setPen(pg.mkPen(None))
            p.setBrush(pg.mkBrush(*self.color[:3], max(self.color[3] * 2, 70)))
            p.drawRect(QRectF(1, 2, 20, 12))
        elif self.kind == "dot":
            p.setPen(pg.mkPen(None))
            p.setBrush(pg.mkBrush(*self.color))
            p.drawEllipse(QPointF(11, 8), 3, 3)
        elif self.kind == "vline":
            p.setPen(pg.mkPen(self.color, width=1.5))
            p.drawLine(11, 1, 11, 15)
        elif self.kind == "tri":
            p.setPen(pg.mkPen(None))
            p.setBrush(pg.mkBrush(*self.color))
            p.drawPolygon(QPolygonF([QPointF(6, 14), QPointF(16, 14), QPointF(11, 5)]))


class Legend(pg.LegendItem):
    """A legend that sits in its own row above the plots (not draggable)."""

    def mouseDragEvent(self, ev: Any) -> None:
        """Not draggable: the legend keeps its row."""
        ev.ignore()


#: The legend's short words, for a narrow centre pane.
SHORT_WORDS = {"baseline mean": "mean", "alarm band (kσ)": "alarm band",
               "alarmed window": "alarmed", "impulse (kick)": "kick", "perturbation": "perturbed",
               "modulation": "modulated"}


def band_label(b: Any) -> str:
    """The legend's words for the band: the detector's calibrated band, or kσ."""
    if b is None:
        return "alarm band"
    kind = DETECTORS.get(getattr(b, "kind", None) or "")
    if kind is None or not kind.calibrated:  # the paper's rule, or a baseline fitted alone
        return f"baseline ±{b.k:g}σ"
    if getattr(b, "thresholds", None):
        # k calibrated to the budget (the alarm panel says how); short enough that the five
        # entries fit one row of a 1400-px window's plots.
        return "alarm band (kσ)"
    return f"baseline ±{b.k:g}σ (reference)"
