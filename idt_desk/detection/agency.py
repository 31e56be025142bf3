"""The paper's three agency conditions (§4.1, Table 5) on one window of symbols.

- **choice** H(A|S) > 0: the agent does not always act the same way in the same state. With
  plug-in entropies it is exactly 0 when every S symbol of the window comes with one A, so the
  test is exact: it holds when the value is > 0 (no null needed). Coarse symbols can make a
  deterministic policy look like choice (two states in one bin acting differently), and a
  window whose S symbols are all distinct shows no choice whatever the policy: the
  saturation bar says which.
- **effect** MI(A;S'|S) > 0: given the state, the action tells something about the outcome.
  Null: A permuted among the transitions that share an S symbol (a conditional shuffle: it
  keeps H(S), H(S,A) and H(S,S') and breaks only the A -> S' link given S; permuting S'
  instead would also break S -> S' and inflate the null's plug-in bias). Holds when the
  measured value exceeds the null in all but 5 % of draws (one-sided p, +1 smoothing). With
  every S distinct there is nothing to permute: not distinguishable, as it should be.
- **asymmetry** |ΔH| > 0, ΔH = H_f − H_b = H(S') − H(S,A). Every shuffle of S' keeps both
  marginals, so a shuffle cannot test it; a moving-block bootstrap over the window's
  transitions gives ΔH's sampling spread, and it holds when 0 lies outside all but 5 % of it
  (two-sided).
"""

from __future__ import annotations

import math

import numba
import numpy as np

__all__ = ["agency_conditions"]

_BLOCK = 25
#: Significance level of the effect and asymmetry tests.
ALPHA = 0.05


@numba.njit(cache=True, nogil=True)
def _entropy(code: np.ndarray) -> float:
    """Plug-in entropy (bits) of the symbols in ``code``: sort, then count runs."""
    x = np.sort(code)
    n = x.shape[0]
    acc = 0.0
    run = 1
    for i in range(1, n + 1):
        if i < n and x[i] == x[i - 1]:
            run += 1
        else:
            acc += run * math.log2(run)
            run = 1
    return math.log2(n) - acc / n


@numba.njit(cache=True, nogil=True)
def _terms(s: np.ndarray, a: np.ndarray, n: np.ndarray, ka: int, kn: int
           ) -> tuple[float, float, float]:
    """(H(A|S), MI(A;S'|S), ΔH) of dense codes."""
    sa = s * ka + a
    h_s, h_n, h_sa = _entropy(s), _entropy(n), _entropy(sa)
    h_sn, h_san = _entropy(s * kn + n), _entropy(sa * kn + n)
    return h_sa - h_s, max(h_sa + h_sn - h_s - h_san, 0.0), h_n - h_sa


class _Window:
    """Dense codes of one window's S, A, S' so joints are integer arithmetic."""

    def __init__(self, s: np.ndarray, a: np.ndarray, n: np.ndarray) -> None:
        self.s = np.unique(s, return_inverse=True)[1].astype(np.int64)
        self.a = np.unique(a, return_inverse=True)[1].astype(np.int64)
        self.n = np.unique(n, return_inverse=True)[1].astype(np.int64)
        self.ka, self.kn = np.int64(self.a.max() + 1), np.int64(self.n.max() + 1)

    def terms(self, idx: np.ndarray | None = None, a: np.ndarray | None = None
              ) -> tuple[float, float, float]:
        """(H(A|S), MI(A;S'|S), ΔH), on rows ``idx`` and/or with A replaced by ``a``."""
        s, n = (self.s, self.n) if idx is None else (self.s[idx], self.n[idx])
        if a is None:
            a = self.a if idx is None else self.a[idx]
        return _terms(s, a, n, self.ka, self.kn)


def agency_conditions(s: np.ndarray, a: np.ndarray, n: np.ndarray, draws: int = 200,
                      seed: int = 0) -> dict:
    """Choice, effect and asymmetry of the window (S, A, S') with their tests.

    Returns
    -------
    dict with ``choice``, ``effect`` and ``asymmetry``, each ``{"value", "null_mean",
    "null_std", "p", "holds", "method"}`` (values in bits; for asymmetry the value is |ΔH|
    and null_* describe the bootstrap of ΔH), and ``draws``.
    """
    s, a, n = (np.asarray(x, dtype=np.int64) for x in (s, a, n))
    if not (len(s) == len(a) == len(n)) or len(s) < 2:
        raise ValueError("s, a and s_next must have the same length >= 2")
    rng = np.random.default_rng(seed)
    win = _Window(s, a, n)
    choice, effect, dh = win.terms()
    w = len(s)
    # Effect: A permuted among the transitions of the same S (keeps H(S,A), H(S,S'), H(S)).
    by_state = np.argsort(win.s, kind="stable")
    null = np.empty(draws)
    for d in range(draws):
        shuffled = np.argsort(win.s + rng.random(w), kind="stable")
        a_perm = np.empty_like(win.a)
        a_perm[by_state] = win.a[shuffled]
        null[d] = win.terms(a=a_perm)[1]
    p_effect = (1 + int((null >= effect).sum())) / (1 + draws)
    block = min(_BLOCK, w)
    starts = np.arange(w - block + 1)
    boot = np.empty(draws)
    for d in range(draws):
        picks = rng.choice(starts, size=math.ceil(w / block))
        boot[d] = win.terms(idx=(picks[:, None] + np.arange(block)).ravel()[:w])[2]
    below, above = int((boot <= 0).sum()), int((boot >= 0).sum())
    p_asym = min(1.0, 2 * (1 + min(below, above)) / (1 + draws))
    return {
        "choice": {"value": choice, "null_mean": 0.0, "null_std": 0.0,
                   "p": math.nan, "holds": choice > 0, "method": "exact (plug-in)"},
        "effect": {"value": effect, "null_mean": float(null.mean()),
                   "null_std": float(null.std()), "p": p_effect,
                   "holds": bool(effect > 0 and p_effect < ALPHA),
                   "method": "A permuted within each S"},
        "asymmetry": {"value": abs(dh), "null_mean": float(boot.mean()),
                      "null_std": float(boot.std()), "p": p_asym,
                      "holds": bool(dh != 0 and p_asym < ALPHA), "method": "block bootstrap"},
        "draws": int(draws),
    }
