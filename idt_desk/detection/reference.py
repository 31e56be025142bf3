"""The first threshold fit, kept as a reference: long null paths and a bisection of full passes.

This is how :func:`idt_desk.detection.detectors.calibrate` fitted thresholds before it
computed the EWMA's up-crossing rate in closed form and counted every threshold's
up-crossings from one pass: per component, a simulated null path of up to 4 M samples and a
45-step bisection of the threshold, each step a full pass over the path (twice: the known
baseline and the pessimistic one), then a grid of such searches for the baseline length
needed. Slow and obviously what the module doc of ``detectors`` describes. The tests compare
the fast fit's thresholds with it; ``idt-desk bench calibrate`` measures the fast fit's speed
against it in the same run.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from idt_desk.detection.detectors import (
    TOO_SHORT_INFLATION,
    Calibration,
    DetectorSpec,
    alarm_episodes,
    autocorrelation,
    detector_statistic,
    joint_statistic,
    standardise,
    whitening,
)
from idt_desk.detection.nulls import pessimism as _pessimism
from idt_desk.detection.nulls import simulate as _simulate_acf

__all__ = ["reference_calibrate"]


def _bisected_threshold(s: np.ndarray, count: float) -> float:
    """The threshold above which ``s`` up-crosses at most ``count`` times.

    Up-crossings rise and then fall as the threshold rises (a threshold below everything is
    one long episode); the search is on the falling side, from the busiest quantile up.
    """
    grid = np.quantile(s[:: max(1, s.size // 100_000)], np.linspace(0.02, 0.98, 25))
    lo = float(grid[int(np.argmax([alarm_episodes(s, g) for g in grid]))])
    hi = float(np.max(s)) + 1e-9
    if alarm_episodes(s, lo) <= count:
        return lo
    for _ in range(45):
        mid = 0.5 * (lo + hi)
        if alarm_episodes(s, mid) > count:
            lo = mid
        else:
            hi = mid
    return hi


def reference_calibrate(
    spec: DetectorSpec,
    baseline: dict[str, np.ndarray],
    arl_windows: float | None,
    *,
    max_lag: int = 10,
    overlap: float = 1.0,
    seed: int = 0,
    max_samples: int = 4_000_000,
) -> Calibration:
    """Fit ``spec`` to baseline windows so the union of components keeps ``arl_windows``.

    Parameters
    ----------
    spec
        The detector.
    baseline
        Component name -> its baseline windows (NaN left out).
    arl_windows
        Windows per false alarm allowed for the union of the components (the budget in
        windows); each component gets ``len(baseline)`` times that. Ignored by the paper rule.
    max_lag
        The highest lag of the autocorrelation kept (and summed for n_eff); at most a fifth
        of the baseline's length is used.
    overlap
        W / stride of the windows: the least τ (windows per independent one) assumed.
    seed
        Seed of the simulated null paths (calibration is deterministic).
    max_samples
        Longest null path simulated per component; a budget asking for more up-crossing
        precision than that gives is estimated from it all the same (at least 20 crossings
        are kept in view by lengthening the path up to this cap).

    Raises
    ------
    ValueError
        Fewer than 3 finite baseline windows in a component, or no budget for a calibrated
        detector.

    """
    comps = tuple(baseline)
    mean, std, threshold, n_eff, inflation = {}, {}, {}, {}, {}
    n_windows = 0
    if spec.calibrated and not (arl_windows and arl_windows > 0):
        raise ValueError(f"{spec.kind} needs a false-alarm budget (windows per alarm)")
    arl_c = None if arl_windows is None else float(arl_windows) * len(comps)
    needed = 0
    for j, c in enumerate(comps):
        x = np.asarray(baseline[c], dtype=np.float64)
        n_windows = max(n_windows, x.size)
        x = x[np.isfinite(x)]
        if x.size < 3:
            raise ValueError(f"{c}: a baseline needs at least 3 defined windows, got {x.size}")
        mean[c] = float(x.mean())
        std[c] = float(x.std(ddof=1))
        if not spec.calibrated:
            threshold[c] = float(spec.k)
            continue
        z = (x - mean[c]) / std[c] if std[c] > 0 else np.zeros_like(x)
        p = int(min(max_lag, max(1, x.size // 5)))
        rho = autocorrelation(z, p)
        cut = np.flatnonzero(rho[1:] <= 0)
        rho = rho[: 1 + (cut[0] if cut.size else p)]  # the initial positive sequence
        tau = max(1.0 + 2.0 * float(rho[1:].sum()), float(overlap), 1.0)
        n_eff[c] = float(min(max(x.size / tau, 2.0), x.size))
        length = int(min(max_samples, max(200_000, 20.0 * arl_c)))
        path = _simulate_acf(rho, length, seed + 7919 * j)
        known = _bisected_threshold(detector_statistic(spec, path)[0], length / arl_c)
        delta, gamma = _pessimism(n_eff[c])
        s = detector_statistic(spec, (path + delta) * gamma)[0]
        threshold[c] = _bisected_threshold(s, length / arl_c)
        inflation[c] = threshold[c] / known if known > 0 else 1.0
        if inflation[c] > TOO_SHORT_INFLATION:
            needed = max(needed, _reference_needed(spec, path, length / arl_c, known,
                                                 x.size / n_eff[c]))
    joint = None
    if spec.detector.joint and len(comps) > 1:
        joint = _reference_joint(spec, baseline, comps, mean, std, float(arl_windows),
                                 max_lag, overlap, seed, max_samples)
        needed = max(needed, joint.pop("needed_windows", 0))
    return Calibration(spec, comps, mean, std, threshold, n_windows, n_eff, inflation,
                       None if arl_c is None else float(arl_windows), needed or None, joint)


def _reference_joint(spec: DetectorSpec, baseline: dict[str, np.ndarray],
                     comps: tuple[str, ...], mean: dict[str, float], std: dict[str, float],
                     arl: float, max_lag: int, overlap: float, seed: int, max_samples: int
                     ) -> dict[str, Any]:
    """The MEWMA's whitening and T² threshold for the group's whole budget (module doc)."""
    z = np.column_stack([standardise(np.asarray(baseline[c], dtype=np.float64),
                                     mean[c], std[c]) for c in comps])
    w = whitening(z)
    u = z[np.isfinite(z).all(axis=1)] @ w
    r = u.shape[1]
    length = int(min(max_samples // max(r, 1), max(200_000, 20.0 * arl)))
    paths, taus = [], []
    for j in range(r):
        x = u[:, j]
        p = int(min(max_lag, max(1, x.size // 5)))
        rho = autocorrelation(x, p)
        cut = np.flatnonzero(rho[1:] <= 0)
        rho = rho[: 1 + (cut[0] if cut.size else p)]
        taus.append(max(1.0 + 2.0 * float(rho[1:].sum()), float(overlap), 1.0))
        paths.append(_simulate_acf(rho, length, seed + 104_729 + 7919 * j))
    path = np.column_stack(paths)
    n_eff = float(min(max(u.shape[0] / max(taus), 2.0), u.shape[0]))
    count = length / arl
    known = _bisected_threshold(joint_statistic(spec.lam, path)[0], count)
    h = _bisected_threshold(joint_statistic(spec.lam, _worse_joint(path, n_eff))[0], count)
    inflation = h / known if known > 0 else 1.0
    out = {"whitening": w.tolist(), "threshold": h, "n_eff": n_eff, "inflation": inflation}
    if inflation > TOO_SHORT_INFLATION:
        # The length at which the pessimism's inflation of T²'s threshold falls to the limit.
        sub = path[: min(len(path), 400_000 // max(r, 1))]
        count_sub = count * len(sub) / len(path)
        base = _bisected_threshold(joint_statistic(spec.lam, sub)[0], count_sub) or known
        out["needed_windows"] = _first_n_eff(
            lambda n: _bisected_threshold(joint_statistic(spec.lam, _worse_joint(sub, n))[0],
                                          count_sub) <= TOO_SHORT_INFLATION * base,
            u.shape[0] / n_eff)
    return out


def _reference_needed(spec: DetectorSpec, path: np.ndarray, count: float, known: float,
                    windows_per_eff: float) -> int:
    """Baseline windows at which the finite-baseline inflation falls to the limit."""
    sub = path[: min(path.size, 400_000)]
    count_sub = count * sub.size / path.size
    base = _bisected_threshold(detector_statistic(spec, sub)[0], count_sub) or known

    def good_enough(n_eff: float) -> bool:
        delta, gamma = _pessimism(n_eff)
        thr = _bisected_threshold(detector_statistic(spec, (sub + delta) * gamma)[0],
                                  count_sub)
        return thr <= TOO_SHORT_INFLATION * base

    return _first_n_eff(good_enough, windows_per_eff)


def _worse_joint(path: np.ndarray, n_eff: float) -> np.ndarray:
    """Whitened null rows as a baseline of ``n_eff`` effective windows may misread them.

    σ at its upper bound, the mean two standard errors off along one whitened direction.
    """
    delta, gamma = _pessimism(n_eff)
    worse = path * gamma
    worse[:, 0] += delta * gamma
    return worse


def _first_n_eff(good_enough: Callable[[float], bool], windows_per_eff: float) -> int:
    """Baseline windows at the first effective size on a fixed grid that is good enough."""
    for n_eff in (10, 15, 20, 30, 45, 70, 100, 150, 220, 330, 500, 750, 1000, 2000, 5000):
        if good_enough(float(n_eff)):
            return math.ceil(n_eff * windows_per_eff)
    return math.ceil(5000 * windows_per_eff)
