"""The per-turn 3σ rule of a dialogue (paper §11.4): ``reproduce dialogue``, ``analyze``.

A turn's metric leaves its baseline's mean ± 3σ (turns 1..30, σ with ddof 1) at the injected
turn or one of the next two. Per turn, not per window: a dialogue is one window a turn.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from idt_desk.metrics import tokens

__all__ = ["BASELINE_TURNS", "RESPONSE_TURNS", "detect_injection", "response_z"]


#: Turns 1..BASELINE_TURNS are a dialogue's baseline (paper §11.4; defined with the token
#: metrics, ``idt_desk.metrics.tokens``).
BASELINE_TURNS = tokens.BASELINE_TURNS
#: Turns after an injection looked at: the injected turn k, k + 1 and k + 2.
RESPONSE_TURNS = 3


def detect_injection(values: Sequence[float], k: int, *, baseline_turns: int = BASELINE_TURNS,
                     response: int = RESPONSE_TURNS, sigmas: float = 3.0
                     ) -> tuple[bool, int | None]:
    """Whether a series leaves its baseline's mean ± ``sigmas``·σ soon after turn ``k``.

    ``values`` start at turn 1. Looked at: turns ``k`` .. ``k + response − 1``; returns
    (detected, latency = first such turn − k, or None). The baseline is turns
    1..``baseline_turns`` (finite values, σ with ddof 1).
    """
    v = np.asarray(values, dtype=np.float64)
    mu, sd = _baseline(v, baseline_turns)
    if math.isnan(sd):
        return False, None
    for j in range(k, min(k + response, len(v) + 1)):
        x = v[j - 1]
        if np.isfinite(x) and abs(x - mu) > sigmas * sd:
            return True, j - k
    return False, None


def response_z(values: Sequence[float], k: int, *, baseline_turns: int = BASELINE_TURNS,
               response: int = RESPONSE_TURNS) -> list[float | None]:
    """Signed distance of turns ``k`` .. ``k + response − 1`` from the baseline mean, in σ.

    None for a missing or undefined turn. The direction of an excursion, detected or not.
    """
    v = np.asarray(values, dtype=np.float64)
    mu, sd = _baseline(v, baseline_turns)
    out: list[float | None] = []
    for j in range(k, k + response):
        x = v[j - 1] if j <= len(v) else np.nan
        out.append(float((x - mu) / sd) if sd > 0 and np.isfinite(x) else None)
    return out


def _baseline(v: Any, turns: int) -> tuple[float, float]:
    """Mean and σ (ddof 1) of the finite values of turns 1..``turns`` (NaN σ: under two)."""
    base = v[:turns]
    base = base[np.isfinite(base)]
    if base.size < 2:
        return math.nan, math.nan
    return float(base.mean()), float(base.std(ddof=1))
