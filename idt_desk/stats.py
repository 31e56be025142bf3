"""The statistics the reproductions and the dialogue's length confound report, from scipy.stats.

Each function takes two series, keeps the pairs (or values) that are finite, and returns a
plain dict or float for the JSON reports: Student's paired t-test
(:func:`scipy.stats.ttest_rel`), Pearson's r with its Fisher confidence interval and p
(:func:`scipy.stats.pearsonr`), and Cohen's d (scipy.stats has no function for it; the
pooled-σ formula below). Edge cases scipy answers with NaN and a warning (fewer pairs than
the statistic needs, a constant series) are answered here with None or ±inf, as documented.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = ["cohens_d", "correlation", "paired_t_test"]


def _finite_pairs(x: Sequence[float], y: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    ok = np.isfinite(x) & np.isfinite(y)
    return x[ok], y[ok]


def paired_t_test(x: Sequence[float], y: Sequence[float]) -> dict[str, float | int | None]:
    """Student's paired t-test of ``x`` against ``y`` (two-sided), over pairs both finite.

    Returns ``{"t", "p", "n", "df", "mean_difference"}``; t and p are None with fewer than
    two pairs, and when every difference is the same (no spread) t is ±inf (p = 0) or, when
    they are all 0, None (p = 1).
    """
    from scipy import stats

    x, y = _finite_pairs(x, y)
    d = x - y
    n = int(d.size)
    out: dict[str, float | int | None] = {"t": None, "p": None, "n": n, "df": max(n - 1, 0),
                                          "mean_difference": float(d.mean()) if n else None}
    if n < 2:
        return out
    if float(d.std(ddof=1)) == 0.0:
        mean = float(d.mean())
        out.update(t=math.copysign(math.inf, mean), p=0.0) if mean else out.update(p=1.0)
        return out
    res = stats.ttest_rel(x, y)
    out.update(t=float(res.statistic), p=float(res.pvalue))
    return out


def correlation(x: Sequence[float], y: Sequence[float], level: float = 0.95
                ) -> dict[str, Any]:
    """Pearson's r of ``x`` and ``y`` over pairs both finite, its confidence interval and p.

    The interval is Fisher's, tanh(atanh(r) ± z / sqrt(n − 3)) (scipy's default method; None
    with fewer than 4 pairs); p is the two-sided test of r = 0 with n − 2 degrees of freedom
    (None with fewer than 3 pairs). A constant series has no r (None). Returns
    ``{"r", "ci", "p", "n", "level"}``: the layout of the paper's Table 6 and §11.5
    ("r = 0.838, 95 % CI [0.77, 0.89]").
    """
    from scipy import stats

    x, y = _finite_pairs(x, y)
    n = int(x.size)
    out: dict[str, Any] = {"r": None, "ci": None, "p": None, "n": n, "level": level}
    if n < 3 or np.ptp(x) == 0.0 or np.ptp(y) == 0.0:
        return out
    res = stats.pearsonr(x, y)
    r = float(res.statistic)
    out.update(r=r, p=float(res.pvalue))
    if n >= 4:
        if abs(r) == 1.0:
            out["ci"] = (r, r)
        else:
            ci = res.confidence_interval(confidence_level=level)
            out["ci"] = (float(ci.low), float(ci.high))
    return out


def cohens_d(x: Sequence[float], y: Sequence[float]) -> float | None:
    """Cohen's d of ``x`` against ``y``: (mean x − mean y) / pooled σ, over finite values.

    The pooled σ is sqrt(((n_x − 1) s_x² + (n_y − 1) s_y²) / (n_x + n_y − 2)), each s with
    ddof 1. None with fewer than two values in either group; ±inf (0 difference: None) when
    both groups are constant.
    """
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    x, y = x[np.isfinite(x)], y[np.isfinite(y)]
    nx, ny = x.size, y.size
    if nx < 2 or ny < 2:
        return None
    pooled = math.sqrt(((nx - 1) * x.var(ddof=1) + (ny - 1) * y.var(ddof=1)) / (nx + ny - 2))
    diff = float(x.mean() - y.mean())
    if pooled == 0.0:
        return None if diff == 0.0 else math.copysign(math.inf, diff)
    return diff / pooled
