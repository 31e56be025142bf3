"""A click storm: random actions on every enabled control of the main window, seeded.

Used by the test suite (``tests/test_click_storm.py``, 20 s a source) and by the soak
benchmark ``idt-desk bench storm`` (minutes a source, with the memory curve). Every action
goes through the control as a click would (``QAbstractButton.click``, a combo box's
``setCurrentIndex``), one action every ``interval_ms`` on the window's own event loop, so
refreshes, worker threads and Qt slots interleave with the actions as they do for a user.

The lifecycle buttons (Start, Stop, Reset, Pause) take a fixed share of the actions
(``lifecycle_share``), since a session started and stopped is where resources are opened
and must be released; the other actions are uniform over the remaining enabled buttons,
check boxes and combo boxes (the source picker excepted: a storm is per source).
File dialogs are answered without a dialog: a save goes to ``scratch``, a folder chooser
is cancelled, so nothing modal stops the storm.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import random
import sys
import threading
import time
import traceback
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from PySide6.QtCore import QtMsgType, qInstallMessageHandler
from PySide6.QtWidgets import (
    QAbstractButton,
    QApplication,
    QComboBox,
    QFileDialog,
    QMessageBox,
    QWidget,
)

__all__ = ["ClickStorm", "StormReport", "print_report", "rss_mib"]


def rss_mib() -> float:
    """Resident memory this process holds, in MiB, after the C heap gives back its free pages.

    glibc's malloc keeps freed memory in its arenas (a 4× PNG export, a numpy buffer a worker
    thread freed); ``malloc_trim(0)`` returns it to the system first, so the figure counts
    memory still in use rather than the heap's high-water mark. Measured on a 20 s RL storm:
    growth 123–186 MiB without the trim, 26–27 MiB with it. Elsewhere than glibc the RSS is
    read as it is.
    """
    import psutil

    if (trim := _malloc_trim()) is not None:
        trim(0)
    return psutil.Process().memory_info().rss / 2**20


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    """The C library's ``malloc_trim`` (glibc), or None where it has none."""
    try:
        return ctypes.CDLL("libc.so.6").malloc_trim
    except (OSError, AttributeError):
        return None


@dataclass
class StormReport:
    """What a storm did and saw."""

    seed: int
    source: str
    actions: int = 0
    #: (control, action) counts, e.g. ("Start", "click").
    by_control: dict[str, int] = field(default_factory=dict)
    #: Exceptions raised in worker threads and session errors, with the action log's tail.
    errors: list[str] = field(default_factory=list)
    #: (seconds since the start, RSS MiB), one per ``sample_every`` seconds.
    memory: list[tuple[float, float]] = field(default_factory=list)
    sessions_started: int = 0
    #: Stopped sessions' sources still in memory after the storm (0: all released).
    sources_alive: int = 0
    #: The last actions, newest last (for a failure message).
    log: list[str] = field(default_factory=list)

    def summary(self) -> str:
        """One paragraph: actions, sessions, errors, memory from first to last sample."""
        mem = ""
        if self.memory:
            lo = min(m for _, m in self.memory)
            hi = max(m for _, m in self.memory)
            mem = (f"; RSS {self.memory[0][1]:,.0f} → {self.memory[-1][1]:,.0f} MiB "
                   f"(min {lo:,.0f}, max {hi:,.0f})")
        return (f"storm seed {self.seed}, source {self.source}: {self.actions} actions, "
                f"{self.sessions_started} sessions started, {self.sources_alive} stopped "
                f"sessions' sources still in memory, {len(self.errors)} errors{mem}")


class ClickStorm:
    """Random actions on a :class:`idt_desk_widgets.main_window.MainWindow`, one per tick.

    Parameters
    ----------
    window
        The main window (shown, with its source selected).
    seed
        The random seed: the same seed replays the same choices (timing may differ).
    scratch
        Where file dialogs "save" (figures, event logs) and exports go.
    interval_ms
        Time between actions.
    lifecycle_share
        Fraction of actions spent on the lifecycle buttons (when enabled).
    lifecycle
        The lifecycle buttons, by attribute name in the window's source panel (default
        Start, Stop, Reset, Pause).
    """

    LIFECYCLE = ("start_button", "stop_button", "reset_button", "pause_button")

    def __init__(self, window: Any, seed: int, scratch: str | Path, interval_ms: int = 50,
                 lifecycle_share: float = 0.35,
                 lifecycle: tuple[str, ...] = LIFECYCLE) -> None:
        self.window = window
        self.rng = random.Random(seed)
        self.scratch = Path(scratch)
        self.scratch.mkdir(parents=True, exist_ok=True)
        self.interval_ms = int(interval_ms)
        self.lifecycle_share = float(lifecycle_share)
        self.lifecycle = tuple(lifecycle)
        name = window.source_panel.source_combo.currentData() or "?"
        self.report = StormReport(seed=seed, source=str(name))
        # Weakly: a new session may take a freed one's address (an id() set missed them).
        self._sessions: weakref.WeakSet[Any] = weakref.WeakSet()
        #: Every session's source the storm saw, weakly: the stopped ones must be freed.
        self._sources: list[weakref.ref] = []
        self._lock = threading.Lock()

    # -- the controls -----------------------------------------------------------------------

    def controls(self) -> tuple[list[QAbstractButton], list[QWidget]]:
        """(lifecycle buttons, other controls) that are enabled and visible now."""
        w = self.window
        life = [getattr(w.source_panel, n) for n in self.lifecycle]
        life = [b for b in life if b.isEnabled() and b.isVisible()]
        skip = {id(b) for b in life} | {id(w.source_panel.source_combo)}
        others: list[QWidget] = []
        for c in (*w.findChildren(QAbstractButton), *w.findChildren(QComboBox)):
            if id(c) in skip or not c.isEnabled() or not c.isVisible():
                continue
            if isinstance(c, QComboBox) and c.count() < 2:
                continue
            others.append(c)
        return life, others

    @staticmethod
    def _name(c: QWidget) -> str:
        text = c.text() if isinstance(c, QAbstractButton) else ""
        return text or c.objectName() or type(c).__name__

    def step(self) -> None:
        """One random action."""
        life, others = self.controls()
        pool = life if life and (not others or self.rng.random() < self.lifecycle_share) \
            else others
        if not pool:
            return
        c = self.rng.choice(pool)
        if isinstance(c, QComboBox):
            i = self.rng.randrange(c.count())
            what = f"{self._name(c)} → {c.itemText(i)!r}"
            c.setCurrentIndex(i)
        else:
            what = self._name(c)
            c.click()
        self.report.actions += 1
        self.report.by_control[what.split(" → ")[0]] = \
            self.report.by_control.get(what.split(" → ")[0], 0) + 1
        self.report.log.append(what)
        del self.report.log[:-40]
        self._watch_session()

    def _watch_session(self) -> None:
        """Count sessions; a session that ended in error is a failure of the storm."""
        s = self.window.session
        if s is None:
            return
        if s not in self._sessions:
            self._sessions.add(s)
            self._sources.append(weakref.ref(s.source))
            self.report.sessions_started += 1
        if s.state == "error" and s.error and not any(s.error in e for e in
                                                        self.report.errors):
            self._fail(f"session ended in error: {s.error}")

    def _fail(self, text: str) -> None:
        with self._lock:
            tail = " | ".join(self.report.log[-12:])
            self.report.errors.append(f"{text} (after: {tail})")

    # -- running ----------------------------------------------------------------------------

    @contextlib.contextmanager
    def _no_dialogs(self) -> Iterator[None]:
        """Dialogs answer at once: saves go to scratch, folder and file choosers cancel.

        A question gets a random answer (Reset's: clear the unrecorded session, or not).
        """
        saved = (QFileDialog.getSaveFileName, QFileDialog.getExistingDirectory,
                 QFileDialog.getOpenFileName)
        question = QMessageBox.question
        count = {"n": 0}

        def save(_parent: Any = None, _caption: str = "", name: str = "", *_a: Any,
                 **_k: Any) -> tuple[str, str]:
            count["n"] += 1
            return str(self.scratch / f"{count['n']:05d}-{Path(name or 'file').name}"), ""

        QFileDialog.getSaveFileName = staticmethod(save)  # type: ignore[method-assign]
        QFileDialog.getExistingDirectory = staticmethod(  # type: ignore[method-assign]
            lambda *_a, **_k: "")
        QFileDialog.getOpenFileName = staticmethod(  # type: ignore[method-assign]
            lambda *_a, **_k: ("", ""))

        def answer(_parent: Any, _title: str, _text: str, buttons: Any, default: Any,
                   ) -> QMessageBox.StandardButton:
            options = [b for b in QMessageBox.StandardButton
                       if b.value and (buttons & b) == b]
            return self.rng.choice(options) if options else default

        QMessageBox.question = staticmethod(answer)  # type: ignore[method-assign]
        try:
            yield
        finally:
            (QFileDialog.getSaveFileName, QFileDialog.getExistingDirectory,
             QFileDialog.getOpenFileName) = saved
            QMessageBox.question = question  # type: ignore[method-assign]

    #: Qt messages that are not the program's fault (the offscreen platform's).
    IGNORED_QT = ("This plugin does not support propagateSizeHints",)

    @contextlib.contextmanager
    def _errors(self) -> Iterator[None]:
        """Fail the storm on exceptions in Qt slots and other threads, and on Qt warnings.

        They would otherwise only print. The hooks before the storm's are still called
        (pytest-qt's among them).
        """
        before_thread, before_sys = threading.excepthook, sys.excepthook

        def thread_hook(args: threading.ExceptHookArgs) -> None:
            lines = traceback.format_exception(args.exc_type, args.exc_value,
                                               args.exc_traceback)
            name = args.thread.name if args.thread else "?"
            self._fail(f"exception in thread {name}: {''.join(lines[-3:]).strip()}")
            before_thread(args)

        def sys_hook(kind: type[BaseException], value: BaseException, tb: Any) -> None:
            lines = traceback.format_exception(kind, value, tb)
            self._fail(f"exception in a Qt slot: {''.join(lines[-3:]).strip()}")
            before_sys(kind, value, tb)

        def qt_hook(mode: QtMsgType, context: Any, message: str) -> None:
            if mode != QtMsgType.QtDebugMsg and mode != QtMsgType.QtInfoMsg and \
                    not message.startswith(self.IGNORED_QT):
                self._fail(f"Qt {mode.name}: {message}")
            if previous is not None:
                previous(mode, context, message)

        threading.excepthook, sys.excepthook = thread_hook, sys_hook
        previous = qInstallMessageHandler(qt_hook)
        try:
            yield
        finally:
            threading.excepthook, sys.excepthook = before_thread, before_sys
            qInstallMessageHandler(previous)

    def warm_up(self, timeout: float = 90.0) -> float:
        """Run one session to its first window (or turn), stop it, return the RSS then.

        The libraries, models and kernels a source loads once are loaded by then.
        """
        w = self.window
        app = QApplication.instance()
        if not w.start_session():
            raise RuntimeError(f"warm-up: the session did not start: {w.banner.text()}")
        end = time.monotonic() + timeout
        while time.monotonic() < end and w.session is not None and w.session.running and \
                not w.session.snapshot(limit=1).n_windows:
            app.processEvents()
            time.sleep(0.01)
        self.settle()
        return rss_mib()

    def run(self, seconds: float, sample_every: float = 1.0,
            on_sample: Callable[[float, float], None] | None = None,
            min_actions: int = 0, max_seconds: float | None = None,
            min_sessions: int = 0) -> StormReport:
        """Act every ``interval_ms`` for ``seconds``, then :meth:`settle`.

        Runs the window's event loop meanwhile; memory is sampled every ``sample_every`` s.
        With ``min_actions`` the storm goes on past ``seconds`` until it has acted that
        often, for at most ``max_seconds`` (default 4 × ``seconds``) in all: on a loaded
        machine one Stop can wait seconds for a detector's thresholds, and a storm measured
        in seconds alone would then exercise the window less. ``min_sessions`` likewise: the
        storm goes on until that many sessions started (an RL session takes seconds to load
        on a busy machine, and its Start clicks meanwhile start nothing).
        """
        limit = 4 * seconds if max_seconds is None else max_seconds
        app = QApplication.instance()
        rep = self.report
        t0 = time.monotonic()
        next_act = next_sample = t0
        with self._no_dialogs(), self._errors():
            while True:
                now = time.monotonic()
                if now - t0 >= seconds and ((rep.actions >= min_actions
                                              and rep.sessions_started >= min_sessions)
                                             or now - t0 >= limit):
                    break
                if now >= next_act:
                    self.step()
                    next_act = now + self.interval_ms / 1000
                if now >= next_sample:
                    m = rss_mib()
                    rep.memory.append((now - t0, m))
                    if on_sample is not None:
                        on_sample(now - t0, m)
                    next_sample = now + sample_every
                app.processEvents()
                time.sleep(0.002)
            self.settle()
        rep.memory.append((time.monotonic() - t0, rss_mib()))
        return rep

    def settle(self) -> None:
        """Stop the session, let queued events run, count the stopped sources still alive.

        The window's own garbage collection runs among those events: the storm collects
        nothing itself.
        """
        w = self.window
        w.stop_session()
        app = QApplication.instance()
        # A stopping worker may wait for its thresholds' fit first; the window stays live.
        end = time.monotonic() + getattr(w, "STOP_TIMEOUT", 10.0)
        while w.session is not None and w.session.running and time.monotonic() < end:
            app.processEvents()
            time.sleep(0.01)
        end = time.monotonic() + 0.5 + getattr(getattr(w, "collector", None), "EVERY", 0.0)
        while time.monotonic() < end:
            app.processEvents()
            time.sleep(0.01)
        self._watch_session()
        current = w.session.source if w.session is not None else None
        self.report.sources_alive = sum(1 for r in self._sources
                                        if r() is not None and r() is not current)


def print_report(rep: StormReport, out: Any = sys.stdout) -> None:
    """The storm's report for a terminal: summary, errors, the busiest controls."""
    print(rep.summary(), file=out)
    for e in rep.errors:
        print(f"  error: {e}", file=out)
    top = sorted(rep.by_control.items(), key=lambda kv: -kv[1])[:12]
    print("  actions: " + ", ".join(f"{k} {v}" for k, v in top), file=out)
