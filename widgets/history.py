"""Every window of a session for the plots, in bounded memory (no Qt here).

A session's snapshot copies only its latest windows (a refresh 30 times a second cannot copy
an hour of them, nor draw it); :class:`PlotHistory` gathers them as they come, so "Whole
history" really is the whole session: the newest windows as they are, older ones merged in
groups drawn as each column's lowest and highest value, so a peak, a dip or an alarmed window
far back stays on the plots at a coarser resolution.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

__all__ = ["PlotHistory"]


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
