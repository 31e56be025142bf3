"""``idt-desk bench calibrate``: the detectors' threshold fit against the reference, same run.

Two real baselines are gathered first, each by a headless session at maximum speed with the
paper's (uncalibrated) rule: the double pendulum's default (800 windows after the symbols'
20, budget 1 false alarm per hour) and the RL source's shipped default agent (2,015 windows,
the length MEWMA asks for at the RL budget of 1 per 10 hours, with reward). On each, every
calibrated detector is fitted as the live monitor fits it (the IDT components' group and
reward's) by :func:`~idt_desk.detection.detectors.calibrate` and by the reference kept in
:mod:`idt_desk.detection.reference`; the table gives both times, their ratio and the largest
relative difference between the two fits' thresholds (the MEWMA's T² threshold included).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np

from idt_desk.detection.detectors import DETECTORS, Calibration, calibrate
from idt_desk.detection.monitor import Monitor, metric_groups
from idt_desk.detection.reference import reference_calibrate

__all__ = ["BASELINES", "bench_calibrate", "gather_baseline"]

#: The benchmark's baselines: (name, source, baseline windows, budget).
BASELINES = (("pendulum", "pendulum", 800, "1/h"), ("rl", "gym", 2015, "1/10h"))


def gather_baseline(source: str, n_windows: int, budget: str,
                    print_fn: Callable[[str], None] = print) -> tuple[dict[str, np.ndarray],
                                                                      Monitor]:
    """Baseline windows of ``source`` (after its symbols' windows) and its monitor's settings.

    The monitor returned is what a session of that source builds with the budget given (the
    detector is set per fit); the windows are the ``n_windows`` that follow the symbols'
    calibration windows of a headless session at maximum speed.
    """
    from idt_desk.live.session import Session, SessionConfig

    config = SessionConfig(source=source, speed=None, detector="paper", false_alarms=budget,
                           baseline_windows=n_windows, history=4 * n_windows + 20_000)
    session = Session(config)
    need = config.calibration_windows + n_windows
    t0 = time.monotonic()
    session.start()
    try:
        while session.running:
            snap = session.snapshot(limit=1)
            if snap.n_windows >= need:
                break
            time.sleep(0.05)
    finally:
        session.stop()
    snap = session.snapshot(limit=config.history)
    if len(snap.windows["start"]) < snap.n_windows:
        raise RuntimeError(f"{source}: the loop ran past the window ring ({snap.n_windows} "
                           f"windows, {config.history} kept)")
    if snap.error or snap.n_windows < need:
        raise RuntimeError(f"{source}: {snap.n_windows} windows of {need} "
                           f"({snap.error or 'the source ended'})")
    first = config.calibration_windows  # the monitor's baseline follows the symbols' windows
    mon = session.monitor
    data = {m: np.asarray(snap.windows[m][first:first + n_windows], dtype=np.float64)
            for m in mon.metrics}
    print_fn(f"  {source}: {n_windows} baseline windows gathered in "
             f"{time.monotonic() - t0:.0f} s")
    return data, mon


def _fit(fn: Callable[..., Calibration], kind: str, mon: Monitor,
         data: dict[str, np.ndarray]) -> tuple[float, dict[str, Calibration]]:
    """Seconds to fit every group of ``mon`` to ``data`` with ``fn``, and the fits."""
    spec = type(mon.spec)(kind, k=mon.spec.k, m=mon.spec.m, drift=mon.spec.drift,
                          lam=mon.spec.lam)
    arl = mon.budget_windows()
    t0 = time.perf_counter()
    fits = {g: fn(spec, {m: data[m] for m in comps}, arl, overlap=mon.overlap)
            for g, comps in metric_groups(mon.metrics).items() if comps}
    return time.perf_counter() - t0, fits


def _largest_difference(new: dict[str, Calibration], ref: dict[str, Calibration]) -> float:
    """The largest |new − ref| / ref over every threshold (T²'s too)."""
    worst = 0.0
    for g, cal in new.items():
        pairs = [(cal.threshold[c], ref[g].threshold[c]) for c in cal.threshold]
        if cal.joint is not None:
            pairs.append((cal.joint["threshold"], ref[g].joint["threshold"]))
        worst = max([worst, *(abs(a - b) / abs(b) for a, b in pairs if b)])
    return worst


def bench_calibrate(
    detectors: tuple[str, ...] | None = None,
    baselines: tuple[tuple[str, str, int, str], ...] = BASELINES,
    print_fn: Callable[[str], None] = print,
) -> list[dict[str, Any]]:
    """Fit time of every detector, fast against the reference, on real baselines (module doc).

    ``detectors``: names (None: every calibrated one registered).
    """
    if detectors is None:
        detectors = tuple(k for k, c in DETECTORS.items() if c.calibrated)
    print_fn("calibration benchmark: every group of the live monitor fitted by the fast fit "
             "and by the reference (idt_desk.detection.reference), same run")
    gathered = []
    for name, source, n, budget in baselines:
        data, mon = gather_baseline(source, n, budget, print_fn)
        gathered.append((name, n, budget, data, mon))
        # The first fit of a process loads the compiled kernels: not the fit's cost.
        calibrate(type(mon.spec)("cusum"), {"x": np.sin(np.arange(50.0))}, 100.0)
    rows = []
    print_fn(f"{'baseline':>14} {'detector':>11} {'fast (s)':>9} {'reference (s)':>14} "
             f"{'ratio':>7} {'thresholds differ':>18} {'too short (fast/ref)':>21}")
    for name, n, budget, data, mon in gathered:
        for kind in detectors:
            t_new, new = _fit(calibrate, kind, mon, data)
            t_ref, ref = _fit(reference_calibrate, kind, mon, data)
            diff = _largest_difference(new, ref)
            short = (f"{new['IDT'].needed_windows or '-'}/"
                     f"{ref['IDT'].needed_windows or '-'}")
            rows.append({"baseline": name, "windows": n, "budget": budget, "detector": kind,
                         "fast": t_new, "reference": t_ref, "ratio": t_ref / t_new,
                         "difference": diff, "needed": (new["IDT"].needed_windows,
                                                        ref["IDT"].needed_windows)})
            print_fn(f"{f'{name} {n} {budget}':>14} {kind:>11} {t_new:>9.3f} {t_ref:>14.2f} "
                     f"{t_ref / t_new:>6.0f}x {100 * diff:>17.2f}% {short:>21}")
    return rows
