"""What waits for the detector's thresholds while they are fitted off the loop's thread.

A calibrated detector's fit takes seconds (``Pipeline(background=True)`` runs it in a child
process). Meanwhile the loop goes on and its transitions and its own events reach the
recording at once; the windows that complete the baseline and every later one wait here,
with the alarm state's changes made after them (an onset starts or ends), and are emitted
in order as soon as the thresholds are there: the same windows, flags and events as if the
loop had waited for them.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from idt_desk.pipeline import Step

__all__ = ["Backlog"]


class Backlog:
    """A session's windows waiting for the thresholds, and what came after them, in order.

    Parameters
    ----------
    session
        The session: its pipeline fits, its ``_emit_step`` emits.
    """

    def __init__(self, session: Any) -> None:
        self.session = session
        # ("windows", (step, offset)) and ("call", fn), in the order they happened.
        self._items: deque[tuple[str, Any]] = deque()
        self._settling = False
        #: The session's last turn is emitting what waits (``stop`` waits for it).
        self.at_end = False
        self._hold_at = 0  # the session's transition count when the backlog began
        #: Windows waiting (a loop racing ahead of the fit must not outrun the window ring:
        #: the plots would miss what it let go; see ``full``).
        self.n_waiting = 0

    def __bool__(self) -> bool:
        return bool(self._items)

    @property
    def span(self) -> int:
        """Transitions since the backlog began (their loop times are still needed)."""
        return self.session.n_transitions - self._hold_at if self._items else 0

    @property
    def waits_for_fit(self) -> bool:
        """Windows wait for the thresholds, or the session's last turn emits them."""
        return self.session._pipe.fitting or self.at_end

    #: Longest extra wait in :meth:`join` for the thresholds to be fitted (their windows go
    #: on record before the recording closes): the fit is progress, not a hang.
    FIT_WAIT = 120.0

    def join(self, thread: threading.Thread, timeout: float) -> None:
        """Wait for the session's worker: ``timeout`` s, and while it waits for the fit."""
        thread.join(timeout)
        if thread.is_alive() and self.waits_for_fit:
            deadline = time.monotonic() + self.FIT_WAIT
            while thread.is_alive() and self.waits_for_fit and time.monotonic() < deadline:
                thread.join(0.1)
            thread.join(timeout)  # then the held windows go on record

    def hold(self, step: Step, offset: int, n: int) -> bool:
        """Keep a pipeline step's windows if they (or earlier ones) wait; False: emit now.

        ``n``: the transitions of the batch that made them (the backlog begins before it).
        """
        if not (step.pending or self._items):
            return False
        if not self._items:
            self._hold_at = self.session.n_transitions - n
        self._items.append(("windows", (step, offset)))
        self.n_waiting += len(step.windows["start"])
        return True

    @property
    def full(self) -> bool:
        """Half the session's window ring waits: the loop waits for the fit before more.

        At max speed a loop makes hundreds of thousands of windows in the seconds a fit
        takes; emitted at once they would push the session's first windows out of the ring
        before a viewer (the plots' whole history) read them, and their transitions are kept
        in memory until then.
        """
        return self.n_waiting >= self.session.config.history // 2

    def in_order(self, fn: Callable[[], None]) -> None:
        """Run ``fn`` now, or after the windows that wait (it changes the alarm state)."""
        if self._items and not self._settling:
            self._items.append(("call", fn))
        else:
            fn()

    def settle(self, wait: bool = False) -> None:
        """Emit what waits, in order, once the thresholds are fitted (``wait``: wait for it).

        Called at every chunk boundary; with ``wait`` where the loop must (Auto, a change
        of pipeline or recording, the end). A fit that failed raises here, and what waited
        for it is dropped (its windows have no verdict to give).
        """
        if not self._items or self._settling:
            return
        try:
            if not self.session._pipe.settle(wait):
                return
        except Exception:
            self._items.clear()
            self.n_waiting = 0
            raise
        self.n_waiting = 0
        self._settling = True
        try:
            while self._items:
                kind, item = self._items.popleft()
                if kind == "windows":
                    self.session._emit_step(*item)
                else:
                    item()
        finally:
            self._settling = False
