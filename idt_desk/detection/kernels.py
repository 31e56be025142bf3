"""The compiled statistics the detectors drive (numba, ``nogil``: a worker thread runs them).

:func:`statistic` is each window's statistic of one standardised component, by kernel number
(:attr:`idt_desk.detection.registry.Detector.kernel`); :func:`mewma` the multivariate EWMA's
T² of whitened rows; :func:`episodes` counts alarm episodes (up-crossings). State arrays carry
a stream on from one batch to the next.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from idt_desk.detection.kernel_numbers import ABS, CUSUM, EWMA, MIN_OF_LAST

__all__ = ["ABS", "CUSUM", "EWMA", "MIN_OF_LAST", "episodes", "mewma", "statistic"]


@njit(cache=True, nogil=True)
def statistic(z: np.ndarray, kind: int, m: int, drift: float, lam: float,
              state: np.ndarray) -> np.ndarray:
    """The detector statistic of each window of a standardised series; ``state`` carries on.

    kind 0 (:data:`ABS`): |z|; 1 (:data:`MIN_OF_LAST`): the smallest |z| of the last m windows
    (state: those |z|, oldest first); 2 (:data:`CUSUM`): max(S+, S−) of the two-sided CUSUM
    (state: S+, S−); 3 (:data:`EWMA`): |E| of the EWMA E = λ z + (1 − λ) E (state: E). NaN z
    counts as 0 (no evidence).
    """
    n = z.shape[0]
    s = np.empty(n)
    for t in range(n):
        x = z[t]
        if not np.isfinite(x):
            x = 0.0
        if kind == 0:
            s[t] = abs(x)
        elif kind == 1:
            for j in range(m - 1):
                state[j] = state[j + 1]
            state[m - 1] = abs(x)
            lo = state[0]
            for j in range(1, m):
                lo = min(lo, state[j])
            s[t] = lo
        elif kind == 2:
            state[0] = max(0.0, state[0] + x - drift)
            state[1] = max(0.0, state[1] - x - drift)
            s[t] = max(state[0], state[1])
        else:
            state[0] = lam * x + (1.0 - lam) * state[0]
            s[t] = abs(state[0])
    return s


@njit(cache=True, nogil=True)
def mewma(u: np.ndarray, lam: float, state: np.ndarray) -> np.ndarray:
    """T² = |M|² of M = λ u + (1 − λ) M over the rows of ``u``; ``state`` (M) carries on.

    A NaN (an undefined component) counts as 0, no evidence.
    """
    n, r = u.shape
    out = np.empty(n)
    for t in range(n):
        acc = 0.0
        for j in range(r):
            x = u[t, j]
            if not np.isfinite(x):
                x = 0.0
            state[j] = lam * x + (1.0 - lam) * state[j]
            acc += state[j] * state[j]
        out[t] = acc
    return out


@njit(cache=True, nogil=True)
def episodes(s: np.ndarray, threshold: float, above: bool) -> int:
    """Up-crossings of ``threshold`` (``above``: the alarm was already on before ``s[0]``)."""
    n = 0
    prev = above
    for t in range(s.shape[0]):
        on = s[t] > threshold
        if on and not prev:
            n += 1
        prev = on
    return n
