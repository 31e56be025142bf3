"""The returns plot: the return of every finished episode, for sources with a reward."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pyqtgraph as pg

__all__ = ["MAX_EPISODES", "ReturnPlot"]

#: Finished episodes shown on the return plot (the latest ones; bounded).
MAX_EPISODES = 500


class ReturnPlot(pg.PlotWidget):
    """Return of every finished episode (x: episode, y: return), for sources with reward.

    Fed with the source's info (``episode_returns``: [episode, return] pairs of the latest
    finished episodes); redrawn only when that list changes.
    """

    def __init__(self, parent: Any = None) -> None:
        super().__init__(parent, background="w")
        self.setObjectName("return_plot")
        p = self.getPlotItem()
        p.setMenuEnabled(False)
        p.hideButtons()
        p.setLabel("left", "return")
        p.setLabel("bottom", "episode")
        p.getAxis("left").setWidth(62)  # aligned with the metric plots above
        for side in ("left", "bottom"):
            p.getAxis(side).enableAutoSIPrefix(False)
        p.showGrid(x=False, y=True, alpha=0.15)
        self.curve = p.plot(pen=pg.mkPen((90, 90, 90), width=1), symbol="o", symbolSize=5,
                            symbolPen=None, symbolBrush=pg.mkBrush(30, 130, 80))
        self.setMinimumHeight(120)
        self.setMaximumHeight(190)
        self._key: tuple = ()
        self.clear_data()

    def clear_data(self) -> None:
        """No episodes (a new session)."""
        self._key = ()
        self.curve.setData([], [])
        self._title("Episode return — no episode finished yet")

    def _title(self, text: str) -> None:
        self.getPlotItem().setTitle(f"<span style='color:#3c4043; font-size:9pt'>{text}</span>")

    def update_info(self, info: dict[str, Any]) -> None:
        """Plot ``info["episode_returns"]`` when it has changed."""
        pairs = info.get("episode_returns")
        if pairs is None or len(pairs) == 0:
            return
        key = (len(pairs), tuple(np.asarray(pairs[-1]).tolist()),
               tuple(np.asarray(pairs[0]).tolist()))
        if key == self._key:
            return
        self._key = key
        arr = np.asarray(pairs[-MAX_EPISODES:], dtype=float).reshape(-1, 2)
        x, y = arr[:, 0], arr[:, 1]
        # Many episodes: the line alone (dots would blot it out).
        self.curve.setSymbol("o" if len(x) <= 60 else None)
        self.curve.setData(x, y)
        # Episodes are whole numbers: ticks on integers, about eight of them.
        step = max(1, math.ceil((x[-1] - x[0] + 1) / 8))
        self.getPlotItem().getAxis("bottom").setTickSpacing(step, step)
        # The x range spans at least two episodes: one episode's single point left to the
        # auto-range gave a range of a hair's width and a smear of tick labels.
        self.setXRange(x[0] - 0.5, max(x[-1], x[0] + 1) + 0.5, padding=0)
        best = float(np.nanmax(y)) if len(y) else math.nan
        # Short enough for the narrowest centre pane (about 300 px at 1024 wide).
        self._title(f"Return: last {y[-1]:,.0f}, best {best:,.0f} "
                    f"({len(x)} ep.)")
