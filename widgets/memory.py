"""The window's garbage collection: on the GUI thread only, and soon after a session stops.

**On the GUI thread only.** CPython's cyclic collector runs in whichever thread crosses its
allocation threshold. A session's worker allocates all the time, so about half of a GUI
process's collections ran on that worker (measured: 125 of 257 in an 8-second pendulum
session, a full collection among them). A collection there finalises whatever Qt objects
sit in reference cycles — a cleared panel's plot items, a closure connected to a signal —
from the wrong thread, which may crash the process (it did once, in a session switched to
a newly started run; pyqtgraph's ``GarbageCollector`` and several Qt applications avoid
this the same way). While a :class:`Collector` lives, automatic collection is therefore off
and the Collector's timer runs the same generational collection on the GUI thread: a young
generation when its count is over Python's threshold (``gc.get_threshold``), the older ones
as often as Python itself would. A full collection (~0.2 s with torch loaded) is held back
so that full collections take at most 2 % of the GUI thread's time.

**Soon after a session stops.** A session and its source sit in reference cycles (the
source reports through the session's methods; an SB3 model refers to itself), so they are
freed only by a full collection: every stopped RL session's MuJoCo data and policy tensors
(~5 MB) stayed in memory (RSS 767 → 2,579 MiB after 449 Start/Stop clicks in a minute).
:meth:`Collector.soon` runs that collection shortly after a session is stopped or dropped,
coalesced: a click storm triggers one collection a second, not one a click.

When the last Collector stops (its window shuts down) or is destroyed, automatic collection
is on again, as it was.
"""

from __future__ import annotations

import gc
import time

from PySide6.QtCore import QObject, QTimer

__all__ = ["Collector"]

#: The Collectors that hold automatic collection off (by id); it is on again without them.
_HOLDING: set[int] = set()
#: Whether automatic collection was on when the first Collector took it over.
_WAS_ENABLED = [True]


def _hold(key: int) -> None:
    if not _HOLDING:
        _WAS_ENABLED[0] = gc.isenabled()
        gc.disable()
    _HOLDING.add(key)


def _release(key: int) -> None:
    if key in _HOLDING:
        _HOLDING.discard(key)
        if not _HOLDING and _WAS_ENABLED[0]:
            gc.enable()


class Collector(QObject):
    """Runs the process's garbage collection on the GUI thread (the main window's).

    Automatic collection is off from construction until :meth:`stop`; :meth:`soon` asks
    for one full collection shortly (a session stopped or dropped).
    """

    #: At most one requested full collection a second (each takes ~0.2 s with torch loaded).
    EVERY = 1.0
    #: How often the generations' counts are looked at (ms): Python's own thresholds then
    #: decide what is collected, as its automatic collection would.
    CHECK_MS = 100
    #: Full collections take at most this share of the GUI thread's time.
    FULL_SHARE = 0.02

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._last = 0.0
        #: When the generational collection may next collect the oldest generation.
        self._next_full = 0.0
        self.timer = QTimer(self)
        self.timer.setSingleShot(True)
        self.timer.timeout.connect(self._collect)
        self.ticker = QTimer(self)
        self.ticker.setInterval(self.CHECK_MS)
        self.ticker.timeout.connect(self.collect_due)
        key = id(self)
        _hold(key)
        # A window dropped without its shutdown gives automatic collection back too.
        self.destroyed.connect(lambda *_: _release(key))
        self._key = key
        self.ticker.start()

    def soon(self) -> None:
        """Free a stopped session's memory: collect garbage once, shortly."""
        if self.timer.isActive():
            return
        wait = self._last + self.EVERY - time.monotonic()
        self.timer.start(max(0, int(wait * 1000)))

    def stop(self) -> None:
        """Collect nothing more here: automatic collection is on again (the window shuts down)."""
        self.timer.stop()
        self.ticker.stop()
        _release(self._key)

    def collect_due(self) -> int:
        """The ticker's slot: collect the generations Python's thresholds say are due.

        Returns the oldest generation collected (-1: none).
        """
        t0, t1, t2 = gc.get_threshold()
        c0, c1, c2 = gc.get_count()
        if t0 <= 0 or c0 <= t0:
            return -1
        generation = 0
        if c1 + 1 > t1:
            generation = 1
            if c2 + 1 > t2 and time.monotonic() >= self._next_full:
                generation = 2
        self._timed(generation)
        return generation

    def _collect(self) -> None:
        self._timed(2)
        self._last = time.monotonic()

    def _timed(self, generation: int) -> None:
        t = time.monotonic()
        gc.collect(generation)
        if generation == 2:
            now = time.monotonic()
            self._next_full = now + (now - t) / self.FULL_SHARE
