"""Every window of a session for the plots, in bounded memory (no Qt here).

A session's snapshot copies only its latest windows (a refresh 30 times a second cannot copy
an hour of them, nor draw it); :class:`PlotHistory` gathers them as they come, so "Whole
history" really is the whole session: the newest windows as they are, older ones merged in
groups drawn as each column's lowest and highest value, so a peak, a dip or an alarmed window
far back stays on the plots at a coarser resolution.

The plots draw no more of it than their pixels show: :func:`peak_rows` picks a curve's rows
for a view (each pixel column's lowest and highest), :func:`cell_rows` the markers' (one a
few-pixel cell).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

__all__ = ["PixelColumns", "PlotHistory", "cell_rows", "grid_step", "peak_rows"]


class PlotHistory:
    """The whole session's windows: the newest as they are, older ones merged.

    The newest ``capacity / 2`` windows (at least) are held as they are. Older ones go to an
    archive in groups of ``factor`` windows, each group as two rows: one holding each
    column's lowest value in the group, one its highest (NaN ignored; an all-NaN group stays
    NaN, so a gap stays a gap). Times stay in order (the lowest t is the group's first, the
    highest its last); an alarm flag (``x_*``) is the group's highest in both rows, so an
    alarmed window's dot survives at its group's extremes. When the archive is full
    (``capacity / 2`` rows) neighbouring groups merge and ``factor`` doubles: the whole
    session is always drawn at one resolution, bounded in memory.

    Parameters
    ----------
    capacity
        Rows held besides a group being filled (a multiple of 8); memory is about
        ``capacity`` × columns floats.
    """

    #: Windows in an archived group at first (four windows become two rows).
    FIRST_FACTOR = 4

    def __init__(self, capacity: int = 4096) -> None:
        if capacity < 8 or capacity % 8:
            raise ValueError(f"capacity must be a positive multiple of 8, got {capacity}")
        self.capacity = int(capacity)
        self.clear()

    def clear(self) -> None:
        """Forget every window (a new session)."""
        self._exact: dict[str, np.ndarray] = {}
        self._archive: dict[str, np.ndarray] = {}
        #: Rows of the archive in use (merged groups, the oldest rows of :meth:`view`).
        self.merged = 0
        #: Windows per archived group.
        self.factor = self.FIRST_FACTOR
        #: The session's windows taken in so far (its ``n_windows`` at the last update).
        self.total = 0
        #: Windows never seen: the consumer fell behind by more than a snapshot holds.
        self.missed = 0
        #: Changes whenever the rows do: what was drawn from them may be kept while it holds.
        self.version = getattr(self, "version", 0) + 1
        self._view: dict[str, np.ndarray] | None = None

    @property
    def n(self) -> int:
        """Rows held: merged ones, then windows as they are."""
        return self.merged + (len(next(iter(self._exact.values()))) if self._exact else 0)

    def update(self, windows: Mapping[str, np.ndarray], total: int) -> dict[str, np.ndarray]:
        """Take a snapshot's latest windows in; return the history (oldest first).

        ``windows`` are the session's latest windows (any number); ``total`` the number it
        has made so far (``Snapshot.n_windows``): the ones not taken in yet are appended. The
        returned arrays are read-only.
        """
        new = int(total) - self.total
        if new < 0:  # another session's windows: start again
            self.clear()
            new = int(total)
        held = len(windows["t"]) if "t" in windows else 0
        take = min(new, held)
        self.missed += new - take
        self.total = int(total)
        if not self._exact:
            half = self.capacity // 2
            self._exact = {c: np.empty(0) for c in windows}
            self._archive = {c: np.full(half, np.nan) for c in windows}
        if take:
            self._exact = {c: np.concatenate([v, np.asarray(windows[c], dtype=np.float64)
                                              [held - take:] if c in windows
                                              else np.full(take, np.nan)])
                           for c, v in self._exact.items()}
            self._archive_old()
            self._view = None
            self.version += 1
        return self.view()

    def view(self) -> dict[str, np.ndarray]:
        """The rows held, oldest first (read-only)."""
        if self._view is None:
            self._view = {}
            for c, v in self._exact.items():
                out = np.concatenate([self._archive[c][:self.merged], v])
                out.flags.writeable = False
                self._view[c] = out
        return self._view

    def _archive_old(self) -> None:
        """Move whole groups of windows beyond the newest ``capacity / 2`` to the archive."""
        half = self.capacity // 2
        while True:
            extra = len(self._exact["t"]) - half if "t" in self._exact else 0
            groups = min(extra // self.factor, (half - self.merged) // 2)
            if extra < self.factor:
                return
            if groups == 0:  # the archive is full: neighbouring groups merge
                self._coarsen()
                continue
            k = groups * self.factor
            for c, v in self._exact.items():
                block = v[:k].reshape(groups, self.factor)
                hi = np.fmax.reduce(block, axis=1)
                lo = hi if c.startswith("x_") else np.fmin.reduce(block, axis=1)
                rows = self._archive[c][self.merged:self.merged + 2 * groups]
                rows[0::2], rows[1::2] = lo, hi
                self._exact[c] = v[k:]
            self.merged += 2 * groups

    def _coarsen(self) -> None:
        """Merge neighbouring archived groups: half the rows, twice the windows a group."""
        m = self.merged
        for c, v in self._archive.items():
            # Rows: (lo, hi) of group 2j, then (lo, hi) of group 2j + 1.
            hi = np.fmax(v[1:m:4], v[3:m:4])
            lo = hi if c.startswith("x_") else np.fmin(v[0:m:4], v[2:m:4])
            out = np.full(len(v), np.nan)
            out[0:m // 2:2], out[1:m // 2:2] = lo, hi
            self._archive[c] = out
        self.merged = m // 2
        self.factor *= 2


class PixelColumns:
    """A view's pixel columns over the history's rows, shared by the curves drawn in it.

    ``x`` ascending; the x range [lo, hi] is ``columns`` pixels wide. :meth:`rows` picks a
    curve's rows: those in view and one on each side (the line runs on to the edges); where
    they outnumber twice the columns, each column keeps its lowest and its highest row, and
    its first NaN one where it has values too (a gap stays a gap), in their order. Peaks and
    dips are drawn as they are, and what is drawn is bounded by the width, not by the
    history. Min/max per pixel column is the usual reduction for line charts (the M4
    aggregation of Jugel et al., VLDB 2014, less its first and last rows: these columns are
    as fine as the pixels).
    """

    def __init__(self, x: np.ndarray, lo: float, hi: float, columns: int) -> None:
        n = len(x)
        self.i0 = max(int(np.searchsorted(x, lo, "left")) - 1, 0)
        self.i1 = min(int(np.searchsorted(x, hi, "right")) + 1, n)
        columns = max(int(columns), 1)
        #: Few enough rows in view: drawn as they are.
        self.whole = self.i1 - self.i0 <= 2 * columns or not hi > lo
        if self.whole:
            return
        # Columns -1 and ``columns`` hold the rows beyond the edges.
        col = np.clip(np.floor((x[self.i0:self.i1] - lo) * (columns / (hi - lo))),
                      -1, columns)
        self.starts = np.flatnonzero(np.r_[True, col[1:] != col[:-1]])
        m = self.i1 - self.i0
        #: Each row's column (the index of its run), and each row's index.
        self.run = np.repeat(np.arange(len(self.starts)), np.diff(np.r_[self.starts, m]))
        self.at = np.arange(m)

    def rows(self, y: np.ndarray) -> np.ndarray:
        """The rows of ``y`` (the history's values, NaN a gap) to draw, ascending."""
        if self.whole:
            return np.arange(self.i0, self.i1)
        ys = y[self.i0:self.i1]
        starts, big = self.starts, len(ys)
        nan = np.isnan(ys)
        some_nan = bool(nan.any())
        low = np.where(nan, np.inf, ys) if some_nan else ys
        high = np.where(nan, -np.inf, ys) if some_nan else ys
        # A column's first row holding its lowest (highest) value: reduceat over the
        # columns' contiguous runs, no Python loop. (An all-NaN column's is its first row.)
        lowest = np.minimum.reduceat(low, starts)
        highest = np.maximum.reduceat(high, starts)
        first_lo = np.minimum.reduceat(np.where(low == lowest[self.run], self.at, big), starts)
        first_hi = np.minimum.reduceat(np.where(high == highest[self.run], self.at, big),
                                       starts)
        picks = [first_lo, first_hi]
        if some_nan:
            picks.append(np.minimum.reduceat(np.where(nan, self.at, big), starts))
        # Columns ascend: sorted within each, the picks are sorted; repeats go.
        out = np.sort(np.stack(picks, axis=1), axis=1).ravel()
        out = out[np.r_[True, out[1:] != out[:-1]] & (out < big)]
        return self.i0 + out


def peak_rows(x: np.ndarray, y: np.ndarray, lo: float, hi: float, columns: int) -> np.ndarray:
    """The rows of a curve to draw in the x range [lo, hi], ``columns`` pixels wide.

    One curve's :meth:`PixelColumns.rows` (see there).
    """
    return PixelColumns(x, lo, hi, columns).rows(y)


def grid_step(span: float, pixels: float, cell: float) -> float:
    """The width in data units of a marker grid's cells: a power of two, ``cell`` pixels or more.

    Cells of 1-2 ``cell`` pixels anchored at 0 hold while the view grows with the data: they
    change only when its span doubles or halves.
    """
    if not (span > 0 and pixels > 0 and np.isfinite(span)):
        return 1.0
    return float(2.0 ** np.ceil(np.log2(cell * span / pixels)))


def cell_rows(rows: np.ndarray, x: np.ndarray, dx: float, y: np.ndarray | None = None,
              dy: float = 1.0) -> np.ndarray:
    """Of ``rows`` (ascending), the first of each grid cell ``dx`` × ``dy`` (x only without y).

    Markers a few pixels apart hide one another: one a cell is what is seen, and their
    number is bounded by the cells in view, not by the history.
    """
    if len(rows) < 2:
        return rows
    cx = np.floor(x[rows] / dx)
    if y is None:
        keep = np.r_[True, cx[1:] != cx[:-1]]  # rows ascend: a cell's rows are together
        return rows[keep]
    cx = cx.astype(np.int64)
    cy = np.floor(np.nan_to_num(y[rows], nan=0.0, posinf=0.0, neginf=0.0) / dy)
    cy = (cy - cy.min()).astype(np.int64)
    _, first = np.unique(cx * (int(cy.max()) + 1) + cy, return_index=True)
    return rows[np.sort(first)]
