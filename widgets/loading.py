"""Building a session off the GUI thread: the window stays live while a source loads.

Building a source can take seconds to a minute (the RL source imports torch and loads its
policy and MuJoCo: 3.8 s on an idle machine, 31 s on a loaded one), during which a window
building it on its own thread paints nothing. :class:`SessionBuilder` builds the source and
its session (:func:`~idt_desk.live.process.build_session`: a process of its own for a source
that declares one) on a thread of its own; the window polls it on a
timer (no Qt here: the builder only sets fields) and may cancel it. A build cannot be
interrupted (an import, a model load); a cancelled one closes what it built when it ends.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

from idt_desk.live.process import build_session

__all__ = ["SessionBuilder"]


class SessionBuilder:
    """:func:`build_session` on a daemon thread (``idt-load-NAME``), polled and cancellable.

    Its arguments are :func:`build_session`'s (``process``: a process of its own; None: as
    the source declares).

    Attributes
    ----------
    session
        The built session (None until done, or when the build failed or was cancelled).
    error
        The exception the build raised (None when it did not).
    started
        ``time.monotonic()`` when the build began (the window says how long it takes).
    """

    def __init__(self, cls: Any, settings: dict[str, Any], config: dict[str, Any],
                 record: Path | None, process: bool | None = None) -> None:
        self.session: Any = None  # a Session, or a SessionProcess
        #: The recording the session opens when it starts (None: not recording).
        self.record = record
        self.error: BaseException | None = None
        self.started = time.monotonic()
        self._cancelled = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(
            target=self._run, args=(cls, settings, config, record, process),
            name=f"idt-load-{cls.name}", daemon=True)
        self._thread.start()

    @property
    def done(self) -> bool:
        """Whether the build has ended (built, failed or cancelled)."""
        return not self._thread.is_alive()

    def wait(self, timeout: float | None = None) -> bool:
        """Wait for the build to end; True if it has."""
        self._thread.join(timeout)
        return self.done

    def cancel(self) -> None:
        """Give the build up: what it builds is closed when it ends, never handed over."""
        with self._lock:
            self._cancelled.set()
            session, self.session = self.session, None
        if session is not None:
            session.close()

    def _run(self, cls: Any, settings: dict[str, Any], config: dict[str, Any],
             record: Path | None, process: bool | None) -> None:
        try:
            session = build_session(cls, settings, config, record, process,
                                    self._cancelled.is_set)
        except Exception as exc:  # reported by the window, in its banner
            self.error = exc
            return
        with self._lock:
            if not self._cancelled.is_set():
                self.session = session
                return
        session.close()
