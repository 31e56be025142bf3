"""Stacked, x-linked live plots of P, H_f, H_b, dH (and reward) with baseline bands."""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import pyqtgraph as pg
from pyqtgraph import exporters
from PySide6.QtCore import Qt
from PySide6.QtGui import QPainter
from PySide6.QtSvg import QSvgGenerator

from idt_desk.session import Snapshot

__all__ = ["METRICS", "MetricPlots"]

#: (window column, axis label, curve colour)
METRICS = (
    ("P", "P", (40, 110, 220)),
    ("H_f", "H_f (bits)", (200, 110, 20)),
    ("H_b", "H_b (bits)", (130, 60, 180)),
    ("dH", "ΔH (bits)", (20, 140, 120)),
    ("reward", "reward / step", (120, 120, 120)),
)
_BAND = (60, 170, 90, 45)
_PERTURB = (230, 80, 60, 38)
_MODULATE = (60, 120, 230, 32)


class MetricPlots(pg.GraphicsLayoutWidget):
    """The IDT's four metrics (plus reward) against the loop's time, sharing one x axis.

    Fed by :meth:`update_snapshot` from the GUI timer; draws the baseline mean and ±kσ band
    once calibrated, red dots on excursions, and shades perturbation (red) and modulation
    (blue) periods from the session's events.
    """

    def __init__(self, parent: Any = None) -> None:
        pg.setConfigOptions(antialias=False, useOpenGL=False)
        super().__init__(parent)
        self.setBackground("w")
        self.plots: dict[str, pg.PlotItem] = {}
        self.curves: dict[str, pg.PlotDataItem] = {}
        self.dots: dict[str, pg.ScatterPlotItem] = {}
        self.bands: dict[str, pg.LinearRegionItem] = {}
        self.means: dict[str, pg.InfiniteLine] = {}
        first = None
        for row, (key, label, color) in enumerate(METRICS):
            p = self.addPlot(row=row, col=0)
            p.setLabel("left", label)
            p.setClipToView(True)
            p.setDownsampling(auto=True, mode="peak")
            p.setMenuEnabled(False)
            p.hideButtons()
            # Ranges are managed here (see _follow): pyqtgraph's per-frame auto-range makes
            # every axis regenerate its ticks each frame, which halves the frame rate.
            p.disableAutoRange()
            for side in ("left", "bottom"):
                p.getAxis(side).enableAutoSIPrefix(False)
            p.getAxis("left").setWidth(62)  # equal widths keep the x-linked plots aligned
            if first is None:
                first = p
            else:
                p.setXLink(first)
            band = pg.LinearRegionItem((0, 0), orientation="horizontal", movable=False,
                                       brush=pg.mkBrush(*_BAND), pen=pg.mkPen(None))
            band.setZValue(-20)
            band.setVisible(False)
            p.addItem(band, ignoreBounds=True)
            dashed = pg.mkPen((60, 140, 70), width=1, style=Qt.PenStyle.DashLine)
            mean = pg.InfiniteLine(angle=0, pen=dashed)
            mean.setVisible(False)
            p.addItem(mean, ignoreBounds=True)
            curve = p.plot(pen=pg.mkPen(color, width=1))
            dots = pg.ScatterPlotItem(size=5, pen=None, brush=pg.mkBrush(220, 30, 30))
            p.addItem(dots)
            self.plots[key], self.curves[key], self.dots[key] = p, curve, dots
            self.bands[key], self.means[key] = band, mean
        self._yrange: dict[str, tuple[float, float, float]] = {}
        self._regions: list[tuple[pg.LinearRegionItem, ...]] = []
        self._periods_key: tuple = ()
        self.set_reward_visible(False)

    def set_reward_visible(self, visible: bool) -> None:
        """Show the reward plot (sources with reward) or hide it."""
        self.plots["reward"].setVisible(visible)
        bottom = "reward" if visible else "dH"
        for key, plot in self.plots.items():
            # One time axis for the x-linked stack: only the lowest plot shows it.
            if key == bottom:
                plot.showAxis("bottom")
                plot.setLabel("bottom", "loop time (s)")
            else:
                plot.hideAxis("bottom")

    def clear_data(self) -> None:
        """Forget everything drawn (a new session)."""
        self._yrange.clear()
        for key in self.plots:
            self.curves[key].setData([], [])
            self.dots[key].setData([], [])
            self.bands[key].setVisible(False)
            self.means[key].setVisible(False)
        self._set_periods([])

    def update_snapshot(self, snap: Snapshot) -> None:
        """Redraw from a session snapshot (called on the GUI timer)."""
        w = snap.windows
        x = w["t"]
        for key, _label, _color in METRICS:
            if not self.plots[key].isVisible():
                continue
            y = w[key]
            self.curves[key].setData(x, y, connect="finite")
            flag = w.get(f"x_{key}")
            if flag is not None:
                hit = flag == 1.0
                self.dots[key].setData(x[hit], y[hit])
            b = snap.baseline
            if b is not None and key in b.mean and np.isfinite(b.std.get(key, np.nan)):
                lo, hi = b.band(key)
                self.bands[key].setRegion((lo, hi))
                self.bands[key].setVisible(True)
                self.means[key].setValue(b.mean[key])
                self.means[key].setVisible(True)
            else:
                self.bands[key].setVisible(False)
                self.means[key].setVisible(False)
        now = float(x[-1]) if len(x) else snap.sim_time
        self._set_periods(_periods(snap.switches, now))
        self._follow(x, w, snap)

    def _follow(self, x: np.ndarray, w: dict[str, np.ndarray], snap: Snapshot) -> None:
        """Scroll x to the data; move y ranges only when the data leaves them.

        A y range also shrinks when the data has become much narrower (at most twice a
        second), so the y axes are rarely redrawn.
        """
        if len(x) == 0:
            return
        x0, x1 = float(x[0]), float(x[-1])
        self.plots["P"].setXRange(x0, x1 if x1 > x0 else x0 + 1.0, padding=0.01)
        now = time.monotonic()
        for key, plot in self.plots.items():
            if not plot.isVisible():
                continue
            y = w[key]
            y = y[np.isfinite(y)]
            if not y.size:
                continue
            lo, hi = float(y.min()), float(y.max())
            b = snap.baseline
            if b is not None and key in b.mean and np.isfinite(b.std.get(key, np.nan)):
                blo, bhi = b.band(key)
                lo, hi = min(lo, blo), max(hi, bhi)
            span = max(hi - lo, 1e-6 * max(abs(lo), abs(hi), 1e-9))
            cur = self._yrange.get(key)
            outside = cur is None or lo < cur[0] or hi > cur[1]
            loose = cur is not None and (cur[1] - cur[0]) > 3.0 * span and now - cur[2] > 0.5
            if outside or loose:
                new = (lo - 0.1 * span, hi + 0.1 * span, now)
                self._yrange[key] = new
                plot.setYRange(new[0], new[1], padding=0)

    def _set_periods(self, periods: list[tuple[float, float, str]]) -> None:
        key = tuple(periods)
        if key == self._periods_key:
            return
        same_shape = len(key) == len(self._periods_key) and all(
            a[0] == b[0] and a[2] == b[2] for a, b in zip(key, self._periods_key, strict=True))
        self._periods_key = key
        if same_shape and len(self._regions) == len(periods[-40:]):
            # Only open periods grew: move their ends instead of rebuilding the items.
            for (t0, t1, _k), items in zip(periods[-40:], self._regions, strict=True):
                for r in items:
                    r.setRegion((t0, t1))
            return
        for items in self._regions:
            for plot, item in zip(self.plots.values(), items, strict=True):
                plot.removeItem(item)
        self._regions = []
        for t0, t1, kind in periods[-40:]:  # bounded: long sessions keep the latest periods
            color = _PERTURB if kind == "perturbation" else _MODULATE
            items = []
            for plot in self.plots.values():
                r = pg.LinearRegionItem((t0, t1), movable=False, brush=pg.mkBrush(*color),
                                        pen=pg.mkPen(None))
                r.setZValue(-30)
                plot.addItem(r, ignoreBounds=True)
                items.append(r)
            self._regions.append(tuple(items))

    def export(self, path: str) -> None:
        """Save the plots as PNG or SVG (by the file's extension)."""
        if str(path).lower().endswith(".svg"):
            # Qt's own SVG painter: pyqtgraph 0.14's SVGExporter fails on the closed paths
            # Qt 6.11 writes ("Z"; pyqtgraph issue #3495).
            gen = QSvgGenerator()
            gen.setFileName(str(path))
            gen.setSize(self.size())
            gen.setViewBox(self.rect())
            gen.setTitle("IDT Desk metrics")
            painter = QPainter(gen)
            self.render(painter)
            painter.end()
        else:
            exporters.ImageExporter(self.ci).export(str(path))


def _periods(events: list[dict[str, Any]], now: float) -> list[tuple[float, float, str]]:
    """(start, end, kind) of every perturbation / modulation period in the event log."""
    open_: dict[tuple[str, str], float] = {}
    out = []
    for ev in events:
        kind = ev.get("kind", "")
        for what in ("perturbation", "modulation"):
            key = (what, str(ev.get("name")))
            if kind == f"{what}_on":
                open_.setdefault(key, float(ev.get("t", now)))
            elif kind == f"{what}_off" and key in open_:
                out.append((open_.pop(key), float(ev.get("t", now)), what))
    for (what, _name), t0 in open_.items():
        out.append((t0, now, what))
    # Round so an open period's growing end does not rebuild items every frame for nothing.
    return sorted((round(a, 2), round(b, 2), k) for a, b, k in out)
