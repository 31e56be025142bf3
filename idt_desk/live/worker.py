"""A session's worker thread, and running a session headless.

:func:`run_loop` is the thread's body: it paces the loop to the session's speed (real time,
a multiple of it, or as fast as the machine goes) with a :class:`Pacer`, steps the source in
chunks the session's :meth:`~idt_desk.live.session.Session.plan` allows, hands each batch to
:meth:`~idt_desk.live.session.Session.advance`, and ends the session cleanly on a stop, the
source's end or an exception (its message in ``error``). :class:`LoopState` says where the
loop is; :func:`run_headless` drives a session without a window (``idt-desk run``).
"""

from __future__ import annotations

import threading
import time
import traceback
from collections.abc import Callable
from typing import TYPE_CHECKING

from idt_desk.live.config import AGENCY_EVERY, MAX_SPEED_CHUNKS, PACE_SLICE
from idt_desk.live.snapshot import Snapshot
from idt_desk.live.source import SourcePaused

if TYPE_CHECKING:
    from idt_desk.live.seams import LoopHost, Runnable

__all__ = ["LoopState", "Pacer", "run_headless", "run_loop"]


class LoopState:
    """Where a session's loop is, and the two flags its worker waits on.

    ``state`` is idle, running, paused, stopped or error; ``error`` the message that stopped
    it; ``paused_reason`` why the source paused it (None: paused by hand, or running).
    """

    def __init__(self) -> None:
        self.state = "idle"
        self.error: str | None = None
        self.paused_reason: str | None = None
        self._stop = threading.Event()
        self._go = threading.Event()
        self._go.set()

    @property
    def stop_requested(self) -> bool:
        """Asked to stop (the worker ends after the step it is in)."""
        return self._stop.is_set()

    @property
    def held(self) -> bool:
        """Paused: the worker does not step the source."""
        return not self._go.is_set()

    def start(self) -> None:
        """The worker thread runs."""
        self.state = "running"

    def pause(self, reason: str | None = None) -> None:
        """Hold the loop (``reason``: the source cannot go on for now)."""
        self.state = "paused"
        self.paused_reason = reason
        self._go.clear()

    def resume(self) -> None:
        """Go on after a pause."""
        self.state = "running"
        self.paused_reason = None
        self._go.set()

    def wake(self) -> None:
        """Let a held worker look at its commands now (a resume is queued)."""
        self._go.set()

    def wait_held(self, seconds: float) -> None:
        """Wait while held, up to ``seconds``."""
        self._go.wait(seconds)

    def request_stop(self) -> None:
        """Ask the worker to stop (a held one too)."""
        self._stop.set()
        self._go.set()

    def finish(self, error: str | None = None) -> None:
        """The loop is over: stopped, or in error with ``error``."""
        self.state = "error" if error else "stopped"
        self.error = error

    def fail(self, message: str) -> None:
        """End in error with ``message`` (the first error is kept)."""
        if self.error is None:
            self.error = message
        self.state = "error"


#: Seconds of loop time a paced loop that fell behind may make up (faster than asked).
CATCH_UP = 0.1


class Pacer:
    """Loop time against the wall clock: how many steps are due, and the loop's rate.

    At a speed (a multiple of real time) the worker steps in slices of at least
    :data:`~idt_desk.live.config.PACE_SLICE` of wall time; as fast as possible in big
    chunks. :meth:`reset` re-anchors the pace (after a pause or a speed change), so the
    loop never races to catch up the time it was held.
    """

    def __init__(self) -> None:
        #: Transitions per second of wall time while running (0 while held).
        self.loop_rate = 0.0
        #: Transitions per second of the source's step alone (an EMA).
        self.throughput = 0.0
        self._reset_due = True
        self._wall0, self._sim0 = 0.0, 0
        self._rate_t0, self._rate_n0 = time.perf_counter(), 0
        self._agency_at = 0.0

    def reset(self) -> None:
        """Pace from the next step on (a resume, a new speed)."""
        self._reset_due = True

    def idle(self, n_done: int) -> None:
        """The loop is held: no rate, and measure afresh from ``n_done`` when it goes on."""
        self.loop_rate = 0.0
        self._rate_t0, self._rate_n0 = time.perf_counter(), n_done

    def allowance(self, n_done: int, speed: float | None, rate: float, chunk: int) -> int:
        """Steps due now after ``n_done``; 0 after sleeping a slice (none were due yet)."""
        if self._reset_due:
            self._wall0, self._sim0, self._reset_due = time.monotonic(), n_done, False
        # As fast as possible: big slices keep the worker's Python (GIL-holding) overhead
        # per transition low; each still takes only ~10 ms.
        most = chunk * MAX_SPEED_CHUNKS if rate >= 100 else chunk
        if not speed:
            return most
        per_s = speed * rate
        now = time.monotonic()
        due = (now - self._wall0) * per_s - (n_done - self._sim0)
        # Step in slices of >= PACE_SLICE of wall time (or one transition): a worker waking
        # a thousand times a second to make one step keeps taking the GIL from the GUI
        # thread (measured: 10 frames/s instead of 30).
        need = max(1.0, per_s * PACE_SLICE)
        behind = max(per_s * CATCH_UP, need)  # the most it may make up (one slice at least)
        if due > behind:
            # Behind by more than it may catch up (the machine was busy): the debt is
            # dropped, so the loop never runs faster than asked to make it up (a window
            # asking 50× then showed the loop at 75× for seconds).
            self._wall0, self._sim0 = now - behind / per_s, n_done
            due = behind
        if due < need:
            time.sleep(min(PACE_SLICE, (need - due) / per_s))
            return 0
        # Never a larger slice than maximum speed takes: a speed the machine cannot keep
        # (100,000× the pendulum asks 10^8 a second) would otherwise hand the source millions
        # of transitions a step, seconds each, and the window would see a step every few.
        return int(min(due, max(chunk, min(per_s * 2 * PACE_SLICE, most))))

    def stepped(self, k: int, t0: float, n_done: int) -> None:
        """The source made ``k`` transitions from ``t0`` (``perf_counter``) on."""
        now = time.perf_counter()
        if now > t0 and k:
            self.throughput = 0.9 * self.throughput + 0.1 * k / (now - t0)
        if self._rate_n0 == 0 and now - t0 > 0.1:
            # A slow first step (kernels loading from numba's cache) is start-up, not
            # loop: pace and measure from its end rather than catch up after it.
            self._reset_due = True
            self._rate_t0, self._rate_n0 = now, n_done
        elif now - self._rate_t0 >= 0.5:
            self.loop_rate = (n_done - self._rate_n0) / (now - self._rate_t0)
            self._rate_t0, self._rate_n0 = now, n_done

    def agency_due(self) -> bool:
        """Time to recompute the agency conditions (every ``AGENCY_EVERY`` s of wall time)."""
        return time.perf_counter() - self._agency_at >= AGENCY_EVERY

    def agency_done(self) -> None:
        """The agency conditions were just recomputed."""
        self._agency_at = time.perf_counter()


def run_loop(host: LoopHost) -> None:
    """The worker thread's loop: pace, plan, step the source, take its batch in, repeat."""
    run, pacer, src = host.loop_state, host.pacer, host.source
    try:
        host.begin()
        pacer.reset()
        pacer.idle(0)
        while not run.stop_requested:
            host.commands.drain(host)
            if run.held:
                run.wait_held(0.05)
                pacer.idle(host.n_transitions)
                continue
            n = pacer.allowance(host.n_transitions, host.config.speed, src.rate, src.chunk)
            if n == 0:
                continue
            n = host.plan(n)
            if n == 0:
                break
            t0 = time.perf_counter()
            try:
                b = src.step(n)
            except SourcePaused as exc:
                _source_paused(host, exc)
                continue
            host.advance(b)
            pacer.stepped(len(b), t0, host.n_transitions)
            if not src.passive and pacer.agency_due():
                host.update_agency()
                pacer.agency_done()
            if b.done:
                host.event("source_done")
                break
        # Commands sent just before stop() still count (a button pressed, then Stop).
        host.commands.drain(host)
        if not src.passive:
            # The agency of the session's last W transitions (a fast replay took one look,
            # 5 s of wall time being its whole run, near its start).
            host.update_agency()
        run.finish()
        pacer.loop_rate = 0.0
    except Exception as exc:  # reported, the thread ends cleanly
        run.finish(f"{type(exc).__name__}: {exc}")
        tb = traceback.format_exc(limit=8)
        try:
            host.event("error", message=run.error, traceback=tb)
        except Exception:
            pass
    finally:
        host.end()


def _source_paused(host: LoopHost, exc: SourcePaused) -> None:
    """The source cannot go on for now: pause, keep what it made, wait for a resume."""
    host.loop_state.pause(str(exc))
    host.pacer.loop_rate = 0.0
    host.event("source_paused", message=str(exc), **exc.record)


def run_headless(
    session: Runnable,
    *,
    steps: int | None = None,
    progress: Callable[[Snapshot], None] | None = None,
    interval: float = 0.25,
) -> Snapshot:
    """Run a session for ``steps`` transitions (or until the source ends), reporting progress.

    ``progress`` gets a snapshot every ``interval`` seconds and the final one: a session that
    ends before the first interval (a short run at maximum speed) still reports its end.
    """
    session.limit = steps
    session.start()
    try:
        while session.running:
            session.wait(interval)
            if progress is not None and session.running:
                progress(session.snapshot(limit=1))
    finally:
        session.stop()
    snap = session.snapshot(limit=1)
    if progress is not None:
        progress(snap)
    return snap
