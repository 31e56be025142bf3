"""Where the session's events stand on the plots' time axis, and the periods they shade.

Plain Python (no Qt): an event's x (its loop time, or its turn), its scalar parameters in
words, the perturbation / modulation periods an event log switches on and off, and the
one-shot impulses among its switches. The metric plots shade and mark these
(:mod:`.plots`); the event log places its rows with the same x (:mod:`.events`).
"""

from __future__ import annotations

import math
from typing import Any

from idt_desk.recordings import WINDOW_EVENTS

__all__ = ["event_x", "format_params", "periods_of", "pulses_of"]


def event_x(ev: dict[str, Any], turns: bool) -> float:
    """Where an event stands on the plots' x axis: its loop time, or its turn.

    On the turn path a command at transition i acts on turn i + 1 (an injection is the S' of
    turn i + 1) and is drawn on that turn, as the transcript and the docs number them; a
    window's event (an alarm) stands on the turn it judged.
    """
    if not turns:
        return float(ev.get("t", math.nan))
    i = int(ev.get("i", 0))
    return float(i if ev.get("kind") in WINDOW_EVENTS else i + 1)


def format_params(params: dict[str, Any] | None) -> str:
    """Scalar parameters as "k=v, k=v" (floats short: 0.05, 1e-06)."""
    return ", ".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}"
                     for k, v in (params or {}).items()
                     if isinstance(v, bool | int | float | str))


def periods_of(events: list[dict[str, Any]], now: float
               ) -> list[tuple[float, float, str, str, tuple]]:
    """(start, end, kind, name, params) of every perturbation / modulation period.

    From the event log; ``params`` are the switch-on event's scalar parameters, sorted.
    """
    open_: dict[tuple[str, str], tuple[float, tuple]] = {}
    out = []
    for ev in events:
        kind = ev.get("kind", "")
        for what in ("perturbation", "modulation"):
            key = (what, str(ev.get("name")))
            if kind == f"{what}_on" and key not in open_ and not ev.get("scheduled"):
                # (An armed schedule perturbs nothing: its impulses are marked instead.)
                params = tuple(sorted((k, v) for k, v in (ev.get("params") or {}).items()
                                      if isinstance(v, bool | int | float | str)))
                open_[key] = (float(ev.get("t", now)), params)
            elif kind == f"{what}_off" and key in open_:
                t0, params = open_.pop(key)
                out.append((t0, float(ev.get("t", now)), what, key[1], params))
    for (what, name), (t0, params) in open_.items():
        # An onset after the latest window's end: a zero-width period until windows catch up.
        out.append((t0, max(now, t0), what, name, params))
    # Round so an open period's growing end does not rebuild items every frame for nothing.
    return sorted((round(a, 2), round(b, 2), k, n, p) for a, b, k, n, p in out)


def pulses_of(switches: list[dict[str, Any]]) -> list[tuple[float, str]]:
    """(t, name) of every one-shot impulse (``perturbation_pulse``) among the switches."""
    return [(round(float(ev["t"]), 3), str(ev.get("name"))) for ev in switches
            if ev.get("kind") == "perturbation_pulse"]
