"""Ctrl-C and SIGTERM as requests a long command answers at a safe point.

``idt-desk run`` closes its recording whole; ``idt-desk train`` writes a checkpoint first.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["deferred_signals"]


@contextmanager
def deferred_signals() -> Iterator[list[int]]:
    """SIGINT and SIGTERM only note themselves in the yielded list while the block runs.

    The caller polls the list and stops itself where stopping loses nothing. Python 3.11's
    ``Thread.join`` marks a still-running thread as finished when a KeyboardInterrupt
    interrupts it (cpython#90882), so a stop raised inside a join would exit with a worker
    still writing; here nothing is raised, and a second signal cannot break the stop. Off
    the main thread (where no handler can be set) the list stays empty.
    """
    received: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield received
        return
    previous = {s: signal.signal(s, lambda signum, frame: received.append(signum))
                for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield received
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
