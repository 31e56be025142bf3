"""Baselines, 3-sigma excursions, the IDT alarm and detection latency (paper §10.4-10.5).

Offline: :func:`detect` over a whole table of windows. Live: :class:`Monitor` gathers the
first N windows as baseline, then flags every later window the same way.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = [
    "IDT_METRICS",
    "Baseline",
    "Detection",
    "Monitor",
    "detect",
    "detection_latency",
    "first_post_onset_window",
]

#: The IDT alarm is the union of excursions of these four.
IDT_METRICS = ("P", "H_f", "H_b", "dH")


@dataclass(frozen=True)
class Baseline:
    """Per-metric baseline mean and standard deviation (ddof = 1) and the threshold k.

    A window is an excursion of metric m when ``|x_m - mean_m| > k * std_m``. NaN values
    (undefined P) are left out of the statistics and never count as excursions.
    """

    mean: dict[str, float]
    std: dict[str, float]
    n_windows: int
    k: float = 3.0

    @classmethod
    def fit(
        cls,
        windows: Mapping[str, Any],
        select: slice | np.ndarray | None = None,
        metrics: Iterable[str] = IDT_METRICS,
        k: float = 3.0,
    ) -> Baseline:
        """Baseline from the selected windows (a slice, a boolean mask, or all)."""
        if k <= 0:
            raise ValueError(f"k must be > 0, got {k}")
        mean: dict[str, float] = {}
        std: dict[str, float] = {}
        n = 0
        for m in metrics:
            x = np.asarray(windows[m], dtype=np.float64)
            x = x[select] if select is not None else x
            n = max(n, x.shape[0])
            x = x[np.isfinite(x)]
            mean[m] = float(x.mean()) if x.size else math.nan
            std[m] = float(x.std(ddof=1)) if x.size > 1 else math.nan
        if n < 2:
            raise ValueError(f"a baseline needs at least 2 windows, got {n}")
        return cls(mean, std, n, float(k))

    @property
    def metrics(self) -> tuple[str, ...]:
        """Metrics this baseline covers."""
        return tuple(self.mean)

    def band(self, metric: str) -> tuple[float, float]:
        """(lower, upper) threshold of a metric."""
        return (self.mean[metric] - self.k * self.std[metric],
                self.mean[metric] + self.k * self.std[metric])

    def excursions(self, windows: Mapping[str, Any]) -> dict[str, np.ndarray]:
        """Boolean excursion flags per metric, plus ``"IDT"`` (union of the IDT metrics)."""
        flags: dict[str, np.ndarray] = {}
        for m in self.mean:
            x = np.asarray(windows[m], dtype=np.float64)
            with np.errstate(invalid="ignore"):
                flags[m] = np.abs(x - self.mean[m]) > self.k * self.std[m]
        idt = [flags[m] for m in IDT_METRICS if m in flags]
        if idt:
            flags["IDT"] = np.logical_or.reduce(idt)
        return flags

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form."""
        return {"mean": self.mean, "std": self.std, "n_windows": self.n_windows, "k": self.k}


def first_post_onset_window(starts: np.ndarray, window: int, onset: int) -> int:
    """Index of the first window holding any transition at or after ``onset``.

    Windows before it lie wholly before the perturbation (they form the baseline); latency
    is counted in windows from it (0 = detected in the first window that sees the onset).
    """
    starts = np.asarray(starts)
    return int(np.searchsorted(starts + window, onset, side="right"))


def detection_latency(flags: np.ndarray, onset_index: int) -> float:
    """Windows from ``onset_index`` to the first True flag at or after it; NaN if never."""
    hits = np.flatnonzero(np.asarray(flags)[onset_index:])
    return float(hits[0]) if hits.size else math.nan


@dataclass
class Detection:
    """The outcome of :func:`detect`."""

    baseline: Baseline
    flags: dict[str, np.ndarray]
    onset_index: int | None
    latency: dict[str, float] = field(default_factory=dict)

    @property
    def detected(self) -> dict[str, bool]:
        """Per detector, whether it fired after the onset."""
        return {m: not math.isnan(v) for m, v in self.latency.items()}

    def summary(self) -> dict[str, Any]:
        """JSON-able summary: baseline, latency and detection per detector."""
        return {
            "baseline": self.baseline.to_dict(),
            "onset_window": self.onset_index,
            "latency_windows": {m: (None if math.isnan(v) else v)
                                for m, v in self.latency.items()},
            "detected": self.detected,
            "excursion_windows": {m: int(f.sum()) for m, f in self.flags.items()},
        }


def detect(
    windows: Mapping[str, Any],
    *,
    window: int,
    onset: int | None = None,
    n_baseline: int | None = None,
    k: float = 3.0,
    metrics: Sequence[str] = IDT_METRICS,
) -> Detection:
    """Baseline, excursions and latency over a table of windows.

    Parameters
    ----------
    windows
        Per-window metrics with a ``start`` column (and ``reward`` for the reward detector).
    window
        Window length in transitions (to find the windows that see the onset).
    onset
        Transition index where the perturbation begins: the baseline is every window wholly
        before it, and latency is measured from the first window that sees it.
    n_baseline
        Without an onset: the baseline is the first ``n_baseline`` windows.
    k
        Threshold in baseline standard deviations.
    metrics
        Detectors; ``"reward"`` is added when the table has it.

    """
    metrics = list(metrics)
    if "reward" in windows and "reward" not in metrics:
        metrics.append("reward")
    starts = np.asarray(windows["start"])
    if onset is not None:
        onset_index = first_post_onset_window(starts, window, onset)
        select = slice(0, onset_index)
    elif n_baseline is not None:
        onset_index = None
        select = slice(0, n_baseline)
    else:
        raise ValueError("give the perturbation onset or the number of baseline windows")
    baseline = Baseline.fit(windows, select, metrics, k)
    flags = baseline.excursions(windows)
    det = Detection(baseline, flags, onset_index)
    if onset_index is not None:
        det.latency = {m: detection_latency(f, onset_index) for m, f in flags.items()}
    return det


class Monitor:
    """Live detector: the first ``n_baseline`` windows set the baseline, later ones are flagged.

    Parameters
    ----------
    n_baseline
        Windows gathered before the baseline freezes.
    k
        Threshold in baseline standard deviations.
    metrics
        Detectors to track (add ``"reward"`` for a source with reward).

    """

    def __init__(
        self, n_baseline: int = 20, k: float = 3.0, metrics: Sequence[str] = IDT_METRICS
    ) -> None:
        if n_baseline < 2:
            raise ValueError(f"n_baseline must be >= 2, got {n_baseline}")
        self.n_baseline = int(n_baseline)
        self.k = float(k)
        self.metrics = tuple(metrics)
        self.baseline: Baseline | None = None
        self._pending: dict[str, list[float]] = {m: [] for m in self.metrics}

    def recalibrate(self, n_baseline: int | None = None) -> None:
        """Drop the baseline and gather a new one from the next windows."""
        if n_baseline is not None:
            if n_baseline < 2:
                raise ValueError(f"n_baseline must be >= 2, got {n_baseline}")
            self.n_baseline = int(n_baseline)
        self.baseline = None
        self._pending = {m: [] for m in self.metrics}

    @property
    def baseline_progress(self) -> tuple[int, int]:
        """(windows gathered, windows needed) while calibrating."""
        n = len(next(iter(self._pending.values()))) if self._pending else 0
        return (self.n_baseline if self.baseline else n, self.n_baseline)

    def update(self, windows: Mapping[str, Any]) -> dict[str, np.ndarray]:
        """Flag a batch of new windows; windows used for the baseline are not flagged."""
        n = len(np.asarray(windows[self.metrics[0]]))
        flags = {m: np.zeros(n, dtype=bool) for m in (*self.metrics, "IDT")}
        i = 0
        if self.baseline is None:
            need = self.n_baseline - len(self._pending[self.metrics[0]])
            take = min(need, n)
            for m in self.metrics:
                self._pending[m].extend(np.asarray(windows[m][:take], dtype=np.float64))
            i = take
            if take == need:
                self.baseline = Baseline.fit(
                    {m: np.asarray(v) for m, v in self._pending.items()},
                    metrics=self.metrics,
                    k=self.k,
                )
        if self.baseline is not None and i < n:
            rest = {m: np.asarray(windows[m][i:]) for m in self.metrics}
            for m, f in self.baseline.excursions(rest).items():
                flags[m][i:] = f
        return flags
