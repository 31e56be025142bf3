"""Phase-conditioned baselines for episodic loops.

In a loop that resets (an RL environment's episodes), most of a window's variation is the
episode's own cycle: the reset and the run-up after it. On the shipped HalfCheetah agents the
phase of the episode explains 89-98 % of the baseline variance of P, H_f, H_b and ΔH and
99.7 % of the per-window reward's (``assets/docs/rl-detection.md``). A baseline that pools
every phase measures that cycle as its noise; one that knows the phase compares each window
with the baseline's windows at the same point of the episode.

A window's **phase** is the episode step of its last transition, in strides
(:func:`window_phase`). :class:`PhaseBaseline` keeps, per metric and phase, the baseline's mean
and a scale, and turns a window into its residual standardised against its own phase:

    z = (x − μ_p) / σ_p,   σ_p = max(s_p, s_pool) · √(1 + 1/n_p)

with μ_p, s_p (ddof 1) and n_p the mean, standard deviation and count of the baseline's
windows in phase p, and s_pool the within-phase standard deviation pooled over all phases.
The floor at s_pool keeps a phase that never varied in the baseline (a settled gait repeats
its cycle exactly) from dividing by zero, and √(1 + 1/n_p) is the extra variance of a window
judged against a mean estimated from n_p others. So z has at most unit variance in every
phase, and the detectors are calibrated on z as a unit-variance stream
(``detectors.calibrate(..., standardised=True)``): exact where the phase varies most,
conservative elsewhere. A phase with fewer than ``min_count`` baseline windows (a rare
episode length), and any phase the baseline never saw, is judged against the pooled baseline
(mean and σ of every baseline window, unconditioned).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from idt_desk.detection.nulls import pessimism

__all__ = ["PHASE_MIN_COUNT", "PhaseBaseline", "episode_steps", "window_phase"]

#: Baseline windows a phase needs to get a mean and σ of its own.
PHASE_MIN_COUNT = 5


def episode_steps(episode: np.ndarray, carry: tuple[float, int] | None = None
                  ) -> tuple[np.ndarray, tuple[float, int]]:
    """Each row's step within its episode (0 at an episode's first row), and the carry.

    ``episode`` is the episode index of each row; a row starts an episode where the index
    changes (NaN: no episodes known, every row its own step 0). ``carry`` is the previous
    call's (last episode, its last row's step), so a stream cut into any batches gives the
    same steps.
    """
    ep = np.asarray(episode, dtype=np.float64)
    n = len(ep)
    if n == 0:
        return np.empty(0, dtype=np.int64), carry or (math.nan, -1)
    last_ep, last_step = carry or (math.nan, -1)
    new = np.empty(n, dtype=bool)
    new[0] = not ep[0] == last_ep
    new[1:] = ~(ep[1:] == ep[:-1])
    idx = np.arange(n, dtype=np.int64)
    start = np.maximum.accumulate(np.where(new, idx, -1))
    steps = np.where(start >= 0, idx - start, last_step + 1 + idx)
    return steps, (float(ep[-1]), int(steps[-1]))


def window_phase(end_step: np.ndarray, stride: int) -> np.ndarray:
    """The phase of windows whose last transition is at episode step ``end_step``."""
    return np.asarray(end_step, dtype=np.int64) // max(int(stride), 1)


@dataclass(frozen=True)
class PhaseBaseline:
    """Per metric and phase, the baseline's mean and scale (module docstring).

    ``mean[m][p]`` and ``scale[m][p]`` for the phases with a table of their own; ``pooled[m]``
    the (mean, σ) of every baseline window of m, for the others.
    """

    mean: dict[str, dict[int, float]]
    scale: dict[str, dict[int, float]]
    count: dict[int, int]
    pooled: dict[str, tuple[float, float]]
    min_count: int = PHASE_MIN_COUNT

    @classmethod
    def fit(cls, windows: Mapping[str, np.ndarray], phase: np.ndarray,
            min_count: int = PHASE_MIN_COUNT, pessimistic: bool = True) -> PhaseBaseline:
        """The phase table of baseline ``windows`` (metric -> values; NaN left out).

        ``pessimistic``: each phase's scale at the one-sided 97.7 % upper bound of its σ
        (χ² with n_p − 1 degrees of freedom), as the detectors take the pooled baseline's
        (``nulls.pessimism``): a phase's σ rests on a few windows (14 on the paper's
        275-window baseline of 1,000-step episodes, 40 on 800).
        """
        phase = np.asarray(phase, dtype=np.int64)
        phases, counts = np.unique(phase, return_counts=True)
        own = [int(p) for p, c in zip(phases, counts, strict=True) if c >= min_count]
        mean: dict[str, dict[int, float]] = {}
        scale: dict[str, dict[int, float]] = {}
        pooled: dict[str, tuple[float, float]] = {}
        for m, values in windows.items():
            x = np.asarray(values, dtype=np.float64)
            ok = np.isfinite(x)
            pooled[m] = (float(x[ok].mean()) if ok.any() else math.nan,
                         float(x[ok].std(ddof=1)) if ok.sum() > 1 else math.nan)
            mu, sd, n = {}, {}, {}
            ss, dof = 0.0, 0
            for p in own:
                xp = x[(phase == p) & ok]
                if xp.size < min_count:
                    continue
                mu[p], sd[p], n[p] = float(xp.mean()), float(xp.std(ddof=1)), xp.size
                ss += float(((xp - mu[p]) ** 2).sum())
                dof += xp.size - 1
            s_pool = math.sqrt(ss / dof) if dof > 0 else 0.0
            mean[m] = mu
            scale[m] = {p: max(sd[p], s_pool) * math.sqrt(1.0 + 1.0 / n[p])
                        * (pessimism(n[p])[1] if pessimistic else 1.0) for p in mu}
        return cls(mean, scale, {int(p): int(c) for p, c in zip(phases, counts, strict=True)},
                   pooled, int(min_count))

    @property
    def phases(self) -> int:
        """Phases with a table of their own (of the first metric)."""
        return len(next(iter(self.mean.values()), {}))

    def residuals(self, metric: str, x: np.ndarray, phase: np.ndarray) -> np.ndarray:
        """``x`` standardised against its phase (a scale of 0: 0 at the mean, else ±inf)."""
        x = np.asarray(x, dtype=np.float64)
        phase = np.asarray(phase, dtype=np.int64)
        mu_pool, sd_pool = self.pooled[metric]
        mu = np.full(x.shape, mu_pool)
        sd = np.full(x.shape, sd_pool)
        table_mu, table_sd = self.mean[metric], self.scale[metric]
        if table_mu:
            keys = np.fromiter(table_mu, dtype=np.int64)
            mus = np.fromiter(table_mu.values(), dtype=np.float64)
            sds = np.fromiter((table_sd[int(p)] for p in keys), dtype=np.float64)
            order = np.argsort(keys)
            keys, mus, sds = keys[order], mus[order], sds[order]
            j = np.clip(np.searchsorted(keys, phase), 0, len(keys) - 1)
            hit = keys[j] == phase
            mu[hit], sd[hit] = mus[j[hit]], sds[j[hit]]
        d = x - mu
        with np.errstate(divide="ignore", invalid="ignore"):
            z = d / sd
            flat = ~(sd > 0)
            z[flat] = np.where(d[flat] == 0, 0.0, np.sign(d[flat]) * np.inf)
        return z

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form (keys of phases as strings)."""
        return {"min_count": self.min_count, "count": {str(p): c for p, c in self.count.items()},
                "pooled": {m: list(v) for m, v in self.pooled.items()},
                "mean": {m: {str(p): v for p, v in t.items()} for m, t in self.mean.items()},
                "scale": {m: {str(p): v for p, v in t.items()} for m, t in self.scale.items()}}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> PhaseBaseline:
        """Rebuild a phase table written by :meth:`to_dict` (a value of None is NaN)."""
        def num(v: Any) -> float:
            return math.nan if v is None else float(v)

        try:
            return cls({m: {int(p): num(v) for p, v in t.items()} for m, t in d["mean"].items()},
                       {m: {int(p): num(v) for p, v in t.items()}
                        for m, t in d["scale"].items()},
                       {int(p): int(c) for p, c in d["count"].items()},
                       {m: (num(v[0]), num(v[1])) for m, v in d["pooled"].items()},
                       int(d["min_count"]))
        except (KeyError, TypeError, ValueError, AttributeError, IndexError) as exc:
            raise ValueError(f"a phase table: {type(exc).__name__}: {exc}") from None
