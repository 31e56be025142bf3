"""The status line: what the session is doing, its rates and the dashboard's frame rate.

:class:`StatusLine` puts three labels in the window's status bar: the session's state
(a normal widget, so a temporary message such as "exported ..." shows in its place
briefly), and the loop's and the pipeline's rates and the GUI's frames per second (permanent
widgets, on the right).
"""

from __future__ import annotations

import math
import os
import time
from pathlib import Path

from idt_desk_widgets.alarms import plural
from idt_desk_widgets.forms import ElidedLabel
from PySide6.QtCore import QObject, QTimer
from PySide6.QtWidgets import QLabel, QStatusBar

from idt_desk.live.session import Snapshot

__all__ = ["StatusLine", "rate", "speed_text"]


def rate(per_s: float | None) -> str:
    """Transitions per second, short: 1,000 / 12.3 k / 1.2 M."""
    if per_s is None or not math.isfinite(per_s) or per_s <= 0:
        return "—"
    if per_s >= 1e6:
        return f"{per_s / 1e6:.1f} M"
    if per_s >= 1e4:
        return f"{per_s / 1e3:.0f} k"
    return f"{per_s:,.0f}"


#: Below this share of the speed asked, the status line says the loop cannot keep up.
SLOW = 0.9


#: The window's refresh interval (ms): 30 frames a second.
FRAME_MS = 33
#: At maximum speed, the longest interval the window waits between frames (ms).
SLOWEST_FRAME_MS = 200
#: At maximum speed, the share of a core the window's own thread may take (drawing,
#: snapshots): the rest is the loop's.
GUI_SHARE = 0.25


def speed_text(snap: Snapshot) -> str:
    """The speed asked and, when it differs, the speed the loop runs at, in words.

    "4× real time"; "asked 100×, running 52×: the loop cannot go faster on this machine"
    (or "…: the machine is busy (load 3.1 on 2 cores)" when other work holds its cores); at
    maximum speed "max speed (64× real time)".
    """
    got = snap.achieved_speed
    if not snap.speed:
        return "max speed" if got is None else f"max speed ({_times(got)} real time)"
    if got is not None and got < SLOW * snap.speed:
        load, cores = busy()
        why = f"the machine is busy (load {load:.1f} on {cores} cores)" if load >= cores \
            else "the loop cannot go faster on this machine"
        return f"asked {snap.speed:g}×, running {_times(got)}: {why}"
    if got is not None and got > snap.speed / SLOW:
        return f"asked {snap.speed:g}×, running {_times(got)}"
    return f"{snap.speed:g}× real time"


def busy() -> tuple[float, int]:
    """The machine's load (runnable processes, the last minute's mean) and its cores."""
    try:
        load = os.getloadavg()[0]
    except OSError:  # not known here
        load = 0.0
    return load, os.cpu_count() or 1


def _times(x: float) -> str:
    return f"{x:.0f}×" if x >= 10 else f"{x:.2g}×"


class StatusLine(QObject):
    """The status bar's labels: ``status`` (the state), ``rates`` and ``fps_label``.

    The frame rate is counted here: the window calls :meth:`count_frame` once a refresh.
    """

    def __init__(self, bar: QStatusBar) -> None:
        super().__init__(bar)
        self.status = ElidedLabel("idle — choose a source and press Start", bar)
        # A normal widget: a temporary message ("exported ...") shows in its place briefly.
        bar.addWidget(self.status, 1)
        self.rates = QLabel("", bar)
        self.rates.setObjectName("rates")
        self.rates.setToolTip(
            "<b>loop</b>: transitions per second the loop actually advances (about speed × "
            "the source's rate at real time).<br><b>compute</b>: transitions per second the "
            "IDT pipeline can process (its compute throughput; the loop can go no faster "
            "at max speed).")
        bar.addPermanentWidget(self.rates)
        self.fps_label = QLabel("GUI —", bar)
        self.fps_label.setObjectName("fps")
        self.fps_label.setToolTip("Frames per second the dashboard redraws: 30, or at max "
                                  "speed as few as 10, so that drawing keeps to a quarter of "
                                  "a core and the loop has the rest; — when no session is "
                                  "running")
        self.fps_label.setMinimumWidth(90)
        for label in (self.rates, self.fps_label):
            label.setStyleSheet("QLabel { border-left: 1px solid #b9bec6; padding: 0 8px; }")
        bar.addPermanentWidget(self.fps_label)
        #: Frames per second the dashboard redrew over the last second (0: none yet).
        self.fps = 0.0
        self._frames = 0
        self._fps_t0 = time.monotonic()
        #: The refresh interval (ms) the window's timer should keep (:meth:`count_frame`).
        self.interval = FRAME_MS
        self._cpu0 = time.thread_time()

    def say(self, text: str) -> None:
        """Show ``text`` as the session's state."""
        self.status.setText(text)

    def reset_fps(self) -> None:
        """Count frames afresh (a new session)."""
        self._frames, self._fps_t0, self.fps = 0, time.monotonic(), 0.0

    def stop_fps(self) -> None:
        """No frame rate to report: never a stale one (the session ended)."""
        self.fps = 0.0
        self.fps_label.setText("GUI —")

    def count_frame(self, timer: QTimer | None = None, max_speed: bool = False) -> None:
        """One more frame drawn; the rate and ``timer``'s interval are updated once a second.

        ``max_speed``: the loop runs as fast as the machine goes. Then the window draws no
        more often than keeps its own thread within :data:`GUI_SHARE` of a core (from 30 down
        to 5 frames a second): on two cores, drawing at 30 Hz took the loop's core (the RL
        loop recording in the window ran at 0.84-0.89× its headless rate; the RL window's
        frames cost more than 25 ms, so at the 10 Hz floor it ran at 0.74-1.06×, median 0.82
        of five; at 5 Hz 0.80-1.02×, median 1.02 of three).
        """
        self._frames += 1
        now = time.monotonic()
        if now - self._fps_t0 >= 1.0:
            cpu = time.thread_time()
            share = (cpu - self._cpu0) / (now - self._fps_t0)
            self.fps = self._frames / (now - self._fps_t0)
            self._frames, self._fps_t0, self._cpu0 = 0, now, cpu
            self.interval = min(SLOWEST_FRAME_MS, max(FRAME_MS, round(
                self.interval * share / GUI_SHARE))) if max_speed else FRAME_MS
            if timer is not None and timer.interval() != self.interval:
                timer.setInterval(self.interval)

    def show_snapshot(self, snap: Snapshot, running: bool, stopping: bool) -> None:
        """Say what ``snap`` shows: state, source, speed, time, counts, rates.

        ``running``: the session's worker runs; ``stopping``: it was asked to stop.
        """
        speed = speed_text(snap)
        text = (f"{snap.state} — {snap.source} at {speed} — t = {snap.sim_time:.2f} s — "
                f"{snap.n_transitions:,} transitions, {snap.n_windows:,} windows")
        if snap.info.get("following"):  # a recording another program writes
            run = Path(snap.info["following"]).name  # its path is in the Recording field
            text = (f"{snap.state} — following {run} (the writer: "
                    f"{snap.info.get('writer', '?')}) — t = {snap.sim_time:.2f} s — "
                    f"{snap.n_transitions:,} transitions, {snap.n_windows:,} windows")
        if snap.tokenizer is not None:  # one transition per turn
            n = snap.n_transitions
            text = f"{snap.state} — {snap.source} — {n:,} {plural('turn', n)}"
        if snap.paused_reason:
            n = snap.n_transitions
            text = f"paused by the source — {snap.source} — {n:,} {plural('turn', n)}"
        if stopping:
            text = (f"stopping — {snap.source}: scoring the last windows and closing the "
                    "recording (nothing is lost)")
        elif snap.state == "running" and snap.n_transitions == 0:
            text = ("starting… (the first launch compiles the numba kernels, about 10 s; "
                    "they are cached afterwards)")
        running = snap.state in ("running", "paused") and running
        loop = snap.loop_rate if snap.state == "running" else None
        rates = (f"loop {rate(loop)} tr/s  ·  compute {rate(snap.throughput)} tr/s"
                 if snap.n_transitions else "")
        if snap.tokenizer is not None and snap.n_transitions:  # seconds a turn, not rates
            rates = (f"{1 / snap.throughput:.1f} s a turn" if snap.throughput > 0 else "")
        fps = f"GUI {self.fps:.0f} fps" if running and self.fps > 0 else "GUI —"
        for label, value in ((self.status, text), (self.rates, rates), (self.fps_label, fps)):
            if label.text() != value:
                label.setText(value)
