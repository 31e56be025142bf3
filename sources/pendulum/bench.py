"""Speed of the pendulum integrator against scipy's ``solve_ivp`` in the same run.

``idt-desk bench pendulum``: simulated seconds per wall second of
:func:`idt_desk_sources.pendulum._dynamics.integrate` on a 20 s chaotic run (θ1 = 2.0, θ2 = 2.5 rad,
released from rest, equal masses), against ``scipy.integrate.solve_ivp`` with ``RK45`` (the
same Dormand–Prince pair) and ``DOP853`` at the same tolerances (``rtol = atol = 1e-9``,
``max_step = 1 ms``, output at the 1 kHz samples). scipy gets an independent plain-Python
right-hand side (the myphysicslab closed form, written with the ``math`` module, which is
faster than numpy for four scalars), so the baseline is fair and also checks the equations.
"""

from __future__ import annotations

import argparse
import math
import time
from collections.abc import Callable
from typing import Any

import numpy as np
from idt_desk_sources.pendulum._dynamics import PendulumParams, integrate

__all__ = ["HELP", "add_arguments", "bench_pendulum", "run"]

#: ``idt-desk bench pendulum``'s one-line help.
HELP = "pendulum integrator vs scipy solve_ivp"

_Y0 = np.array([2.0, 2.5, 0.0, 0.0])
_G = 9.81

#: A baseline slower than this (s) is timed once, not best-of-``repeats``.
_SLOW = 2.0


def _rhs(t: float, y: np.ndarray) -> list[float]:
    """Double pendulum, m1 = m2 = l1 = l2 = 1, g = 9.81 (myphysicslab's closed form)."""
    th1, th2, w1, w2 = y
    m1 = m2 = l1 = l2 = 1.0
    d = th1 - th2
    sd, cd = math.sin(d), math.cos(d)
    den = 2.0 * m1 + m2 - m2 * math.cos(2.0 * d)
    a1 = (
        -_G * (2.0 * m1 + m2) * math.sin(th1)
        - m2 * _G * math.sin(th1 - 2.0 * th2)
        - 2.0 * sd * m2 * (w2 * w2 * l2 + w1 * w1 * l1 * cd)
    ) / (l1 * den)
    a2 = (
        2.0 * sd
        * (w1 * w1 * l1 * (m1 + m2) + _G * (m1 + m2) * math.cos(th1) + w2 * w2 * l2 * m2 * cd)
    ) / (l2 * den)
    return [w1, w2, a1, a2]


def _timed(fn: Callable[[], Any], repeats: int, slow: float = math.inf) -> tuple[float, int, Any]:
    """Best wall time of up to ``repeats`` calls; stop after one call slower than ``slow``."""
    best = math.inf
    done = 0
    result = None
    for _ in range(max(1, repeats)):
        t0 = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - t0)
        done += 1
        if best > slow:
            break
    return best, done, result


def bench_pendulum(
    seconds: float = 20.0,
    repeats: int = 3,
    print_fn: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Simulated seconds per wall second: ours vs scipy ``solve_ivp`` (RK45 and DOP853).

    Parameters
    ----------
    seconds : float, optional
        Simulated time of the chaotic run.
    repeats : int, optional
        Best-of count for our integrator, and for a scipy method as long as one call takes
        at most 2 s (a slower one is timed once).
    print_fn : callable, optional
        Receives each line of the printed table.

    Returns
    -------
    dict
        ``seconds``; ``rates`` (simulated s per wall s) and ``walls`` (s) per method
        (``ours``, ``scipy RK45``, ``scipy DOP853``); ``ratio`` = ours / scipy RK45;
        ``ratio_dop853`` = ours / scipy DOP853; ``max_abs_diff`` of each scipy solution to
        ours over the first simulated second (the runs are chaotic, so only early agreement
        is meaningful).

    """
    from scipy.integrate import solve_ivp

    params = PendulumParams()
    t0 = time.perf_counter()
    integrate(_Y0, params, 0.01)  # JIT compile or cache load
    warm = time.perf_counter() - t0

    wall_ours, n_ours, traj = _timed(lambda: integrate(_Y0, params, seconds), repeats)
    t_eval = traj.t
    first = t_eval <= 1.0

    walls = {"ours": wall_ours}
    counts = {"ours": n_ours}
    diffs: dict[str, float] = {}
    for method in ("RK45", "DOP853"):
        wall, n, sol = _timed(
            lambda m=method: solve_ivp(
                _rhs, (0.0, float(t_eval[-1])), _Y0, method=m, rtol=1e-9, atol=1e-9,
                max_step=1e-3, t_eval=t_eval,
            ),
            repeats, _SLOW,
        )
        name = f"scipy {method}"
        walls[name] = wall
        counts[name] = n
        diffs[name] = float(np.max(np.abs(sol.y.T[first] - traj.y[first])))

    rates = {k: seconds / w for k, w in walls.items()}
    ratio = rates["ours"] / rates["scipy RK45"]
    ratio_853 = rates["ours"] / rates["scipy DOP853"]
    print_fn(
        f"pendulum integrator: {seconds:g} s chaotic run (theta1=2.0, theta2=2.5 rad from "
        f"rest, m1=m2=1), {len(t_eval)} samples at 1 kHz, rtol=atol=1e-9, max_step=1e-3 "
        f"(JIT warm-up {warm:.2f} s)"
    )
    print_fn(f"{'method':<40} {'wall (s)':>9} {'sim s / wall s':>15} {'ours is':>9}")
    labels = {
        "ours": "ours (numba Dormand-Prince)",
        "scipy RK45": "scipy solve_ivp RK45",
        "scipy DOP853": "scipy solve_ivp DOP853",
    }
    for key, wall in walls.items():
        times = rates["ours"] / rates[key]
        label = f"{labels[key]} [best of {counts[key]}]" if counts[key] > 1 else labels[key]
        print_fn(f"{label:<40} {wall:>9.3f} {rates[key]:>15,.1f} {times:>8,.1f}x")
    print_fn(
        f"max |scipy - ours| over the first second: RK45 {diffs['scipy RK45']:.1e}, "
        f"DOP853 {diffs['scipy DOP853']:.1e}"
    )
    print_fn(f"ratio ours/scipy RK45: {ratio:,.1f}x (ours/scipy DOP853: {ratio_853:,.1f}x)")
    return {
        "seconds": seconds,
        "rates": rates,
        "walls": walls,
        "ratio": ratio,
        "ratio_dop853": ratio_853,
        "max_abs_diff": diffs,
        "energy_drift": float(traj.energy_drift),
    }


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the ``idt-desk bench pendulum`` options to ``parser`` (and ``func=run``)."""
    parser.add_argument("--seconds", type=float, default=20.0,
                        help="simulated seconds of the chaotic run (default 20)")
    parser.add_argument("--repeats", type=int, default=3, help="best-of count (default 3)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Run ``idt-desk bench pendulum`` from parsed arguments."""
    bench_pendulum(seconds=args.seconds, repeats=args.repeats)
    return 0
