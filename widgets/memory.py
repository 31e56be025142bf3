"""Freeing a stopped session's memory: one full garbage collection a second at most.

A session and its source sit in reference cycles (the source reports through the session's
methods; an SB3 model refers to itself), so they are freed only by Python's full
collection, which a process holding torch's million long-lived objects runs rarely: every
stopped RL session's MuJoCo data and policy tensors (~5 MB) stayed in memory (RSS 767 →
2,579 MiB after 449 Start/Stop clicks in a minute). :class:`Collector` runs that collection
shortly after a session is stopped or dropped, coalesced: a click storm triggers one
collection a second, not one a click.
"""

from __future__ import annotations

import gc
import time

from PySide6.QtCore import QObject, QTimer

__all__ = ["Collector"]


class Collector(QObject):
    """Collects garbage once, shortly after :meth:`soon` is called (the main window's)."""

    #: At most one full garbage collection a second (each takes ~0.2 s with torch loaded).
    EVERY = 1.0

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._last = 0.0
        self.timer = QTimer(self)
        self.timer.setSingleShot(True)
        self.timer.timeout.connect(self._collect)

    def soon(self) -> None:
        """Free a stopped session's memory: collect garbage once, shortly."""
        if self.timer.isActive():
            return
        wait = self._last + self.EVERY - time.monotonic()
        self.timer.start(max(0, int(wait * 1000)))

    def stop(self) -> None:
        """Collect nothing more (the window shuts down)."""
        self.timer.stop()

    def _collect(self) -> None:
        gc.collect()
        self._last = time.monotonic()
