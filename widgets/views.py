"""Live views of the system behind the source (the pendulum drawn moving, ...)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from PySide6.QtCore import QPointF, Qt
from PySide6.QtGui import QBrush, QColor, QPainter, QPen
from PySide6.QtWidgets import QLabel, QVBoxLayout, QWidget

__all__ = ["VIEWS", "PendulumView", "StateView", "make_view"]


class PendulumView(QWidget):
    """The double pendulum as it moves: rods, bobs and a fading trace of the second bob."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setMinimumSize(200, 200)
        self._y: np.ndarray | None = None
        self._l1, self._l2 = 1.0, 1.0
        self._trace: list[tuple[float, float]] = []
        self._text = ""

    def update_info(self, info: dict[str, Any]) -> None:
        """Take the source's latest info (``y``, ``l1``, ``l2``, ``energy_drift``)."""
        if "y" not in info:
            return
        self._y = np.asarray(info["y"], dtype=float)
        self._l1, self._l2 = float(info.get("l1", 1.0)), float(info.get("l2", 1.0))
        th1, th2 = self._y[0], self._y[1]
        x2 = self._l1 * math.sin(th1) + self._l2 * math.sin(th2)
        y2 = self._l1 * math.cos(th1) + self._l2 * math.cos(th2)
        self._trace.append((x2, y2))
        del self._trace[:-120]
        drift = info.get("energy_drift")
        self._text = (f"t = {info.get('time', 0.0):.2f} s"
                      + (f"   |ΔE/E0| = {drift:.1e}" if drift is not None else ""))
        self.update()

    def paintEvent(self, event: Any) -> None:
        """Draw the pendulum."""
        p = QPainter(self)
        p.setRenderHint(QPainter.RenderHint.Antialiasing)
        p.fillRect(self.rect(), QColor(250, 250, 252))
        w, h = self.width(), self.height()
        scale = 0.45 * min(w, h) / max(self._l1 + self._l2, 1e-9)
        cx, cy = w / 2, h / 2

        def pt(x: float, y: float) -> QPointF:
            return QPointF(cx + scale * x, cy + scale * y)

        p.setPen(QPen(QColor(120, 120, 120)))
        p.drawText(8, 16, self._text or "waiting for data")
        if self._y is None:
            p.end()
            return
        th1, th2 = self._y[0], self._y[1]
        x1, y1 = self._l1 * math.sin(th1), self._l1 * math.cos(th1)
        x2, y2 = x1 + self._l2 * math.sin(th2), y1 + self._l2 * math.cos(th2)
        for k, (tx, ty) in enumerate(self._trace):
            c = QColor(40, 110, 220)
            c.setAlpha(int(200 * (k + 1) / len(self._trace)))
            p.setPen(QPen(c, 2))
            p.drawPoint(pt(tx, ty))
        p.setPen(QPen(QColor(40, 40, 40), 3))
        p.drawLine(pt(0, 0), pt(x1, y1))
        p.drawLine(pt(x1, y1), pt(x2, y2))
        p.setPen(Qt.PenStyle.NoPen)
        p.setBrush(QBrush(QColor(30, 30, 30)))
        p.drawEllipse(pt(0, 0), 4, 4)
        p.setBrush(QBrush(QColor(220, 90, 40)))
        p.drawEllipse(pt(x1, y1), 9, 9)
        p.setBrush(QBrush(QColor(40, 110, 220)))
        p.drawEllipse(pt(x2, y2), 9, 9)
        p.end()


class StateView(QWidget):
    """Fallback view: the latest info values as text."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._label = QLabel("no live view for this source", self)
        self._label.setWordWrap(True)
        QVBoxLayout(self).addWidget(self._label)

    def update_info(self, info: dict[str, Any]) -> None:
        """Show the scalar entries of the source's info."""
        parts = [f"{k}: {v:.4g}" for k, v in info.items() if isinstance(v, float | int)
                 and not isinstance(v, bool)]
        if parts:
            self._label.setText("\n".join(parts))


VIEWS: dict[str, type[QWidget]] = {"pendulum": PendulumView}


def make_view(name: str, parent: QWidget | None = None) -> QWidget:
    """The live view registered for a source's ``view`` name (or the fallback)."""
    return VIEWS.get(name, StateView)(parent)
