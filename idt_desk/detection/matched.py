"""Detectors compared at a matched false-alarm rate across trials (the reproductions' tables).

A trial keeps the running-maximum records of a detector's statistic after its onset
(:func:`records`); any threshold can then be applied across trials afterwards: the one that
leaves at most a given share of the control trials alarmed (:func:`matched_threshold`), and
each perturbed trial's latency at it (:func:`first_above`). :func:`matched_comparison` is the
comparison every reproduction makes at :data:`MATCHED_RATE`: the threshold, the false alarms
it leaves, the trials it detects and their median latency.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = ["MATCHED_RATE", "first_above", "matched_comparison", "matched_threshold", "records"]

#: The per-trial false-alarm rate at which the reproductions compare detectors (5 %).
MATCHED_RATE = 0.05


def records(statistic: np.ndarray, digits: int | None = 6) -> list[list[float]]:
    """The running-maximum records ``[[index, value], ...]`` of a statistic.

    A trial whose statistic is summarised so is detected at threshold θ iff its last record
    exceeds θ, and its latency is the index of the first record above θ: any threshold can be
    applied across trials afterwards (a ROC, a matched false-alarm rate). NaN is skipped and
    +inf recorded as 1e300. Values are rounded to ``digits`` decimals (a table's JSON cells);
    None keeps them exact.
    """
    s = np.asarray(statistic, dtype=np.float64)
    if not s.size:
        return []
    peak = np.maximum.accumulate(np.where(np.isnan(s), -np.inf, s))
    new = np.flatnonzero(peak > np.concatenate([[-np.inf], peak[:-1]]))
    return [[int(j), (float(s[j]) if digits is None else round(float(s[j]), digits))
             if math.isfinite(s[j]) else 1e300] for j in new]


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


def matched_comparison(control: Sequence[list[list[float]]],
                       perturbed: Sequence[list[list[float]]], *,
                       fit: Sequence[list[list[float]]] | None = None,
                       rate: float = MATCHED_RATE) -> dict[str, Any]:
    """Detection and latency at the threshold matched to ``rate`` false alarms per trial.

    Each argument holds one :func:`records` list per trial; a trial's score is its last
    record's value (−inf: none). θ is :func:`matched_threshold` of the ``fit`` trials' scores
    (default: the ``control`` trials; out of sample, another batch's controls). A trial is
    alarmed when its score exceeds θ, with latency its first record above θ.

    Returns ``threshold_sigma`` (θ), ``allowed_false_alarms`` (of the ``fit`` trials),
    ``false_alarms`` (``alarms`` of ``trials``: the control trials above θ), ``detection``
    (``detected`` of ``trials``, and their ``rate``, NaN without perturbed trials) and
    ``median_latency`` over the detected trials (None: none detected).
    """
    def score(recs: Sequence[list[list[float]]]) -> np.ndarray:
        return np.array([r[-1][1] if r else -np.inf for r in recs])

    theta, allowed = matched_threshold(score(control if fit is None else fit), rate)
    c_scores, p_scores = score(control), score(perturbed)
    lat = [first_above(r, theta) for r, sc in zip(perturbed, p_scores, strict=True)
           if sc > theta]
    hits = int((p_scores > theta).sum())
    return {
        "threshold_sigma": theta,
        "allowed_false_alarms": allowed,
        "false_alarms": {"alarms": int((c_scores > theta).sum()), "trials": len(c_scores)},
        "detection": {"detected": hits, "trials": len(p_scores),
                      "rate": hits / len(p_scores) if len(p_scores) else math.nan},
        "median_latency": float(np.median(lat)) if lat else None,
    }
