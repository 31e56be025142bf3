"""Building a session off the GUI thread: the window stays live while a source loads.

Building a source can take seconds to a minute (the RL source imports torch and loads its
policy and MuJoCo: 3.8 s on an idle machine, 31 s on a loaded one), during which a window
building it on its own thread paints nothing. :class:`SessionBuilder` builds the source and
its :class:`~idt_desk.live.session.Session` on a thread of its own; the window polls it on a
timer (no Qt here: the builder only sets fields) and may cancel it. A build cannot be
interrupted (an import, a model load); a cancelled one closes what it built when it ends.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

from idt_desk.live.session import Session, SessionConfig

__all__ = ["SessionBuilder", "build_session"]


def build_session(cls: Any, settings: dict[str, Any], config: dict[str, Any],
                  record: Path | None) -> Session:
    """The source ``cls(**settings)`` and a session around it (not started).

    ``config`` holds the :class:`~idt_desk.live.session.SessionConfig` fields besides the
    source and its settings.
    """
    source = cls(**settings)
    try:
        return Session(SessionConfig(source=cls.name, settings=settings, **config),
                       source=source, record=record)
    except BaseException:
        source.close()
        raise


class SessionBuilder:
    """:func:`build_session` on a daemon thread (``idt-load-NAME``), polled and cancellable.

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
                 record: Path | None) -> None:
        self.session: Session | None = None
        #: The recording the session opens when it starts (None: not recording).
        self.record = record
        self.error: BaseException | None = None
        self.started = time.monotonic()
        self._cancelled = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(
            target=self._run, args=(cls, settings, config, record),
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
            session.source.close()

    def _run(self, cls: Any, settings: dict[str, Any], config: dict[str, Any],
             record: Path | None) -> None:
        try:
            session = build_session(cls, settings, config, record)
        except Exception as exc:  # reported by the window, in its banner
            self.error = exc
            return
        with self._lock:
            if not self._cancelled.is_set():
                self.session = session
                return
        session.source.close()
