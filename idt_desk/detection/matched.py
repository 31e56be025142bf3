"""Detectors compared at a matched false-alarm rate across trials (the reproductions' tables).

A trial keeps the running-maximum records of a detector's statistic after its onset
(:func:`records`); any threshold can then be applied across trials afterwards: the one that
leaves at most a given share of the control trials alarmed (:func:`matched_threshold`), and
each perturbed trial's latency at it (:func:`first_above`).
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["first_above", "matched_threshold", "records"]


def records(statistic: np.ndarray) -> list[list[float]]:
    """The running-maximum records ``[[index, value], ...]`` of a statistic.

    A trial whose statistic is summarised so is detected at threshold θ iff its last record
    exceeds θ, and its latency is the index of the first record above θ: any threshold can be
    applied across trials afterwards (a ROC, a matched false-alarm rate). Non-finite values
    are recorded as 1e300.
    """
    s = np.asarray(statistic, dtype=np.float64)
    if not s.size:
        return []
    peak = np.maximum.accumulate(np.where(np.isnan(s), -np.inf, s))
    new = np.flatnonzero(peak > np.concatenate([[-np.inf], peak[:-1]]))
    return [[int(j), round(float(s[j]), 6) if math.isfinite(s[j]) else 1e300] for j in new]


def matched_threshold(control_max: np.ndarray, rate: float) -> tuple[float, int]:
    """The threshold matched to a per-trial false-alarm rate, and the alarms it allows.

    θ is the lowest threshold that leaves at most ⌊rate · n⌋ of the ``n`` control trials'
    largest statistics above it (−inf when every control may alarm).
    """
    c = np.sort(np.asarray(control_max, dtype=np.float64))[::-1]
    allowed = math.floor(rate * c.size + 1e-9)
    return (float(c[allowed]) if allowed < c.size else -math.inf), allowed


def first_above(recs: list[list[float]], theta: float) -> int | None:
    """Index of the first record above θ (the latency), or None."""
    return next((int(j) for j, v in recs if v > theta), None)
