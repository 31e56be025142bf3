"""A session's worker thread, and running a session headless.

:func:`run_loop` is the thread's body: it paces the loop to the session's speed (real time,
a multiple of it, or as fast as the machine goes), steps the source in chunks the session's
:meth:`~idt_desk.live.session.Session.plan` allows, hands each batch to
:meth:`~idt_desk.live.session.Session.advance`, keeps the loop-rate figures and ends the
session cleanly on a stop, the source's end or an exception (its message in ``error``).
:func:`run_headless` drives a session without a window (``idt-desk run``).
"""

from __future__ import annotations

import time
import traceback
from collections.abc import Callable
from typing import Any

from idt_desk.live.commands import drain
from idt_desk.live.config import AGENCY_EVERY, MAX_SPEED_CHUNKS, PACE_SLICE, Snapshot
from idt_desk.live.source import SourcePaused

__all__ = ["run_headless", "run_loop"]


def run_loop(session: Any) -> None:
    """The worker thread's loop: pace, plan, step the source, take its batch in, repeat."""
    src = session.source
    try:
        session.begin()
        session._pace_reset = True
        rate_t0, rate_n0 = time.perf_counter(), 0
        while not session._stop.is_set():
            drain(session)
            if not session._resume.is_set():
                session._resume.wait(0.05)
                session._loop_rate = 0.0
                rate_t0, rate_n0 = time.perf_counter(), session.n_transitions
                continue
            if session._pace_reset:
                wall0, sim0, session._pace_reset = time.monotonic(), session.n_transitions, False
            speed = session.config.speed
            if speed:
                per_s = speed * src.rate
                due = (time.monotonic() - wall0) * per_s - (session.n_transitions - sim0)
                # Step in slices of >= PACE_SLICE of wall time (or one transition): a
                # worker waking a thousand times a second to make one step keeps taking
                # the GIL from the GUI thread (measured: 10 frames/s instead of 30).
                need = max(1.0, per_s * PACE_SLICE)
                if due < need:
                    time.sleep(min(PACE_SLICE, (need - due) / per_s))
                    continue
                n = int(min(due, max(src.chunk, per_s * 2 * PACE_SLICE)))
            else:
                # As fast as possible: big slices keep the worker's Python (GIL-holding)
                # overhead per transition low; each still takes only ~10 ms.
                n = src.chunk * MAX_SPEED_CHUNKS if src.rate >= 100 else src.chunk
            n = session.plan(n)
            if n == 0:
                break
            t0 = time.perf_counter()
            try:
                b = src.step(n)
            except SourcePaused as exc:
                _source_paused(session, exc)
                continue
            session.advance(b)
            now = time.perf_counter()
            if now > t0 and len(b):
                session._throughput = 0.9 * session._throughput + 0.1 * len(b) / (now - t0)
            if rate_n0 == 0 and now - t0 > 0.1:
                # A slow first step (kernels loading from numba's cache) is start-up,
                # not loop: pace and measure from its end rather than catch up after it.
                session._pace_reset = True
                rate_t0, rate_n0 = now, session.n_transitions
            elif now - rate_t0 >= 0.5:
                session._loop_rate = (session.n_transitions - rate_n0) / (now - rate_t0)
                rate_t0, rate_n0 = now, session.n_transitions
            if not src.passive and now - session._agency_at >= AGENCY_EVERY:
                session._update_agency()
                session._agency_at = time.perf_counter()
            if b.done:
                session._event("source_done")
                break
        # Commands sent just before stop() still count (a button pressed, then Stop).
        drain(session)
        session._state = "stopped"
        session._loop_rate = 0.0
    except Exception as exc:  # reported, the thread ends cleanly
        session._error = f"{type(exc).__name__}: {exc}"
        session._state = "error"
        tb = traceback.format_exc(limit=8)
        try:
            session._event("error", message=session._error, traceback=tb)
        except Exception:
            pass
    finally:
        session._finish()

def _source_paused(session: Any, exc: SourcePaused) -> None:
    """The source cannot go on for now: pause, keep what it made, wait for a resume."""
    session._state = "paused"
    session._resume.clear()
    session._paused_reason = str(exc)
    session._loop_rate = 0.0
    session._event("source_paused", message=str(exc), **exc.record)


def run_headless(
    session: Any,
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

