"""Baselines, 3-sigma excursions, the IDT alarm and detection latency (paper §10.4-10.5).

Offline: :func:`detect` over a whole table of windows. Live: :class:`Monitor` gathers the
first N windows as baseline, then flags every later window the same way; what it fitted is
saved and taken whole (:meth:`Monitor.fitted`, :meth:`Monitor.load_fitted`: a baseline
profile, ``idt_desk.recordings.profile``).

One file: the baseline, the live monitor and the form its fit is saved in are read and
changed together (a field the monitor fits is a field it saves).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from idt_desk.detection.detectors import (
    Budget,
    Calibration,
    DetectorSpec,
    calibrate,
    detector_statistic,
    joint_statistic,
    standardise,
)
from idt_desk.detection.phase import PhaseBaseline
from idt_desk.detection.spec import DEFAULT_BASELINE_WINDOWS
from idt_desk.metrics.tokens import ADJUSTED
from idt_desk.metrics.twin import RESOLUTION, TWIN_METRICS

__all__ = [
    "ADJUSTED_METRICS",
    "DEFAULT_BASELINE_WINDOWS",
    "IDT_METRICS",
    "JOINS",
    "UNIONS",
    "Baseline",
    "Detection",
    "Monitor",
    "base_metric",
    "detect",
    "detection_latency",
    "first_post_onset_window",
]

#: The IDT alarm is the union of excursions of these four.
IDT_METRICS = ("P", "H_f", "H_b", "dH")


#: A dialogue's length-adjusted metrics (``idt_desk.metrics.tokens``): a detector group of
#: their own, with its own false-alarm budget and its union alarm ``IDT_adj``.
ADJUSTED_METRICS = tuple(ADJUSTED.values())

#: The union alarm of each group of metrics that shares a budget (the rest: one group each):
#: the IDT's components, a dialogue's length-adjusted ones, and the twin's residual channels
#: (``idt_desk.metrics.twin``), each with a baseline and a calibration of its own.
UNIONS = {"IDT": IDT_METRICS, "IDT_adj": ADJUSTED_METRICS, "twin": TWIN_METRICS}
#: Groups whose alarm joins another's: the twin's joins the IDT's (``x_IDT`` is then the IDT's
#: components or its twin), and the two share that alarm's budget, half each, so the joined
#: alarm keeps it (``x_twin`` stays the twin's own).
JOINS = {"twin": "IDT"}


def base_metric(metric: str) -> str:
    """A component's metric: ``P`` of ``P@torso`` (one part's IDT, ``Preset.parts``)."""
    return metric.split("@", 1)[0]


def metric_groups(metrics: Iterable[str]) -> dict[str, list[str]]:
    """Detector groups: each shares one false-alarm budget; its alarm is its metrics' union.

    ``IDT`` and ``IDT_adj`` (:data:`UNIONS`; a part's components, ``P@torso`` …, belong to
    their metric's group); ``reward`` is the rest.
    """
    metrics = list(metrics)
    groups = {g: [m for m in metrics if base_metric(m) in members]
              for g, members in UNIONS.items()}
    groups["reward"] = [m for m in metrics
                        if not any(base_metric(m) in v for v in UNIONS.values())]
    return groups


def part_flag_names(metrics: Iterable[str]) -> list[str]:
    """The plain metrics whose flags are the union of their parts' (``P`` of ``P@torso``…)."""
    metrics = list(metrics)
    return [b for b in dict.fromkeys(base_metric(m) for m in metrics if "@" in m)
            if b not in metrics]


def union_flags(flags: dict[str, np.ndarray], metrics: Iterable[str]) -> None:
    """Add each group's union alarm (``IDT``, ``IDT_adj``) to per-metric ``flags``.

    A plain metric watched per part gets its parts' union (``P`` from ``P@torso`` …).
    """
    metrics = list(metrics)
    for b in part_flag_names(metrics):
        flags[b] = np.logical_or.reduce([flags[m] for m in metrics
                                         if base_metric(m) == b and m in flags])
    for g, members in UNIONS.items():
        part = [flags[m] for m in metrics if base_metric(m) in members and m in flags]
        if part:
            flags[g] = np.logical_or.reduce(part)


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
    #: Per-metric band half-widths in σ where a calibrated detector set them (persistence);
    #: None: ``k`` for every metric.
    thresholds: dict[str, float] | None = None
    #: The detector in force, in words (the live monitor's); None for the paper's rule.
    detector: str | None = None
    #: Its registered name (``idt_desk.detection.registry.DETECTORS``); None: the paper's
    #: rule of a baseline fitted alone (:meth:`fit`).
    kind: str | None = None

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
        k = self.k_of(metric)
        return (self.mean[metric] - k * self.std[metric],
                self.mean[metric] + k * self.std[metric])

    def k_of(self, metric: str) -> float:
        """The band's half-width in σ for a metric."""
        return float(self.thresholds.get(metric, self.k)) if self.thresholds else self.k

    def excursions(self, windows: Mapping[str, Any]) -> dict[str, np.ndarray]:
        """Boolean excursion flags per metric, plus the unions (``"IDT"``, ``"IDT_adj"``)."""
        flags: dict[str, np.ndarray] = {}
        for m in self.mean:
            x = np.asarray(windows[m], dtype=np.float64)
            with np.errstate(invalid="ignore"):
                flags[m] = np.abs(x - self.mean[m]) > self.k * self.std[m]
        union_flags(flags, self.mean)
        return flags

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form."""
        return {"mean": self.mean, "std": self.std, "n_windows": self.n_windows, "k": self.k,
                **({"thresholds": self.thresholds} if self.thresholds else {})}


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
    #: The calibrated detector (``Monitor.to_dict()``); None for the paper's rule.
    detector: dict[str, Any] | None = None

    @property
    def detected(self) -> dict[str, bool]:
        """Per detector, whether it fired after the onset."""
        return {m: not math.isnan(v) for m, v in self.latency.items()}

    def summary(self) -> dict[str, Any]:
        """JSON-able summary: baseline, latency and detection per detector."""
        return {
            "baseline": self.baseline.to_dict(),
            **({"detector": self.detector} if self.detector is not None else {}),
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
    monitor: Monitor | None = None,
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
    monitor
        A live monitor (its detector and budget) to flag the windows with, exactly as a
        session would: fed the baseline windows, then the rest. None: the paper's rule.

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
    if monitor is not None:
        if tuple(metrics) != monitor.metrics:
            raise ValueError(f"the monitor tracks {monitor.metrics}, the table {metrics}")
        monitor.recalibrate(select.stop)
        flags = monitor.update({m: np.asarray(windows[m])
                                for m in (*metrics, "phase") if m in windows})
        det = Detection(monitor.baseline, flags, onset_index, detector=monitor.to_dict())
    else:
        baseline = Baseline.fit(windows, select, metrics, k)
        det = Detection(baseline, baseline.excursions(windows), onset_index)
    if onset_index is not None:
        det.latency = {m: detection_latency(f, onset_index) for m, f in det.flags.items()}
    return det


class Monitor:
    """Live detector: the first ``n_baseline`` windows set the baseline, later ones are flagged.

    The baseline windows calibrate a detector (``idt_desk.detection.detectors``) to a false-alarm
    budget in loop time: the four IDT components share the budget (their union is the IDT alarm); a
    dialogue's four length-adjusted metrics share another, the same (their union is ``IDT_adj``);
    reward, when tracked, is a detector of its own with the same budget. A component's flag is its
    detector's alarm (for the paper rule a window beyond kσ; for persistence the last m windows; for
    CUSUM and EWMA the accumulated statistic), and the flags of a stream do not depend on how it was
    cut into batches.

    Parameters
    ----------
    n_baseline
        Windows gathered before the baseline freezes.
    k
        The paper rule's threshold in baseline standard deviations.
    metrics
        Detectors to track (add ``"reward"`` for a source with reward).
    spec
        The detector (default: the paper's rule with ``k``).
    budget
        False alarms allowed per span of loop time (``Budget``; calibrated detectors need it).
    windows_per_unit
        Windows per unit of the budget (``{"s": 13.3, "turns": 1.0, "episodes": 20.0}``;
        seconds of loop time convert through the source's rate: ``rate / stride``).
    overlap
        W / stride of the windows (the least correlation time the calibration assumes).
    phased
        An episodic loop: each window is judged against the baseline's windows at the same
        phase of the episode (``windows["phase"]``, :mod:`~idt_desk.detection.phase`), and
        the detectors are calibrated on those residuals. Windows without a phase count as
        phase 0.

    Examples
    --------
    The first 400 windows set the baseline and calibrate an EWMA to one false alarm per
    1,000 windows; a shift of 2σ is alarmed a few windows after it starts:

    >>> import numpy as np
    >>> from idt_desk.pipeline import build_monitor
    >>> mon = build_monitor(["P"], baseline_windows=400, detector="ewma",
    ...                     false_alarms="1/1000windows")
    >>> rng = np.random.default_rng(1)
    >>> flags = mon.update({"P": rng.normal(0.3, 0.01, 600)})
    >>> mon.baseline is not None, int(flags["P"].sum())
    (True, 0)
    >>> flags = mon.update({"P": rng.normal(0.32, 0.01, 100)})
    >>> int(np.argmax(flags["P"]))  # the first alarmed window of the shift
    6

    """

    def __init__(
        self,
        n_baseline: int = 20,
        k: float = 3.0,
        metrics: Sequence[str] = IDT_METRICS,
        *,
        spec: DetectorSpec | None = None,
        budget: Budget | None = None,
        windows_per_unit: Mapping[str, float] | None = None,
        overlap: float = 1.0,
        phased: bool = False,
    ) -> None:
        if n_baseline < 2:
            raise ValueError(f"n_baseline must be >= 2, got {n_baseline}")
        self.n_baseline = int(n_baseline)
        self.spec = DetectorSpec("paper", k=k) if spec is None else spec
        self.k = float(self.spec.k)
        if self.spec.calibrated and budget is None:
            raise ValueError(f"the {self.spec.kind} detector needs a false-alarm budget")
        self.budget = budget
        self.windows_per_unit = dict(windows_per_unit or {})
        if budget is not None and budget.unit != "windows" \
                and budget.unit not in self.windows_per_unit:
            what = "loop time (rate / stride)" if budget.unit == "s" else budget.unit
            raise ValueError(f"a budget per {budget.unit} needs windows per {what} "
                             "(windows_per_unit); or give it per windows")
        self.overlap = float(overlap)
        self.metrics = tuple(metrics)
        self.phased = bool(phased)
        #: The phase table (``phased`` only; None before the baseline).
        self.phase_baseline: PhaseBaseline | None = None
        self.baseline: Baseline | None = None
        #: The detector fitted to the baseline per group (:func:`metric_groups`).
        self.calibrations: dict[str, Calibration] = {}
        #: Windows per false alarm the budget allows (None for the paper rule or before).
        self.arl_windows: float | None = None
        self._state: dict[str, np.ndarray | None] = {}
        self._joint_flags: dict[str, np.ndarray] = {}
        self._pending: dict[str, list[float]] = {m: [] for m in self.metrics}
        self._pending_phase: list[int] = []
        #: Groups whose alarm does not join the one :data:`JOINS` names ("twin": a twin that is
        #: not exact): each keeps its whole budget and its own light; set before the baseline.
        self.apart: set[str] = set()

    def recalibrate(self, n_baseline: int | None = None) -> None:
        """Drop the baseline and gather a new one from the next windows."""
        if n_baseline is not None:
            if n_baseline < 2:
                raise ValueError(f"n_baseline must be >= 2, got {n_baseline}")
            self.n_baseline = int(n_baseline)
        self.baseline = None
        self.calibrations = {}
        self.arl_windows = None
        self.phase_baseline = None
        self._state = {}
        self._pending = {m: [] for m in self.metrics}
        self._pending_phase = []

    @property
    def baseline_progress(self) -> tuple[int, int]:
        """(windows gathered, windows needed) while calibrating."""
        n = len(self._pending[self.metrics[0]]) if self.metrics else 0
        return (self.n_baseline if self.baseline else n, self.n_baseline)

    @property
    def calibration(self) -> Calibration | None:
        """The IDT components' calibration (None before the baseline)."""
        return self.calibrations.get("IDT")

    def describe(self) -> str:
        """"persistence (5 windows in a row), ≤ 1 false alarm / hour"."""
        phase = ", against the episode's phase" if self.phased else ""
        if not self.spec.calibrated:
            return self.spec.describe() + phase
        groups = metric_groups(self.metrics)
        joined = "".join(f", shared with its {g} (half each)" if g not in self.apart else
                         f"; its {g} apart (not exact)" for g, into in JOINS.items()
                         if groups.get(g) and groups.get(into))
        return f"{self.spec.describe()}, {self.budget}{joined}{phase}"

    def to_dict(self) -> dict[str, Any]:
        """The detector's configuration and calibration (recorded with the baseline)."""
        return {"detector": self.spec.kind, "k": self.spec.k, "m": self.spec.m,
                "drift": self.spec.drift, "lam": self.spec.lam,
                "budget": None if self.budget is None else str(self.budget),
                "arl_windows": self.arl_windows, "describe": self.describe(),
                "calibrations": {g: c.to_dict() for g, c in self.calibrations.items()},
                **({"phase_baseline": None if self.phase_baseline is None
                    else self.phase_baseline.to_dict()} if self.phased else {})}

    def fitted(self) -> dict[str, Any]:
        """What the baseline fitted, whole (JSON-able; NaN stays NaN): :meth:`load_fitted`'s.

        Raises
        ------
        ValueError
            No baseline yet.
        """
        if self.baseline is None:
            got, need = self.baseline_progress
            raise ValueError(f"the baseline is not complete: {got:,} of {need:,} windows "
                             "gathered")
        b = self.baseline
        return {"metrics": list(self.metrics), "n_windows": b.n_windows, "k": b.k,
                "mean": dict(b.mean), "std": dict(b.std), "arl_windows": self.arl_windows,
                "apart": sorted(self.apart), "describe": self.describe(),
                "calibrations": {g: c.to_dict() for g, c in self.calibrations.items()},
                "phase_baseline": None if self.phase_baseline is None
                else self.phase_baseline.to_dict()}

    def load_fitted(self, d: Mapping[str, Any]) -> None:
        """Take a baseline :meth:`fitted` elsewhere: every later window is judged against it.

        The detector (its kind and parameters) and the metrics must be this monitor's; the
        detectors' running statistics start afresh.

        Raises
        ------
        ValueError
            Other metrics, another detector, or a malformed field, named in one line.
        """
        theirs = tuple(str(m) for m in d.get("metrics") or ())
        if theirs != self.metrics:
            lost = [m for m in theirs if m not in self.metrics]
            new = [m for m in self.metrics if m not in theirs]
            what = (f"it judges {', '.join(lost)}, which this loop has not" if lost else
                    f"this loop has {', '.join(new)}, which it never saw" if new else
                    "its metrics are in another order")
            raise ValueError(f"the baseline was fitted on other metrics: {what}")
        cals = {g: Calibration.from_dict(c) for g, c in (d.get("calibrations") or {}).items()}
        for g, c in cals.items():
            if c.spec != self.spec:
                raise ValueError(f"the baseline's {g} detector is {c.spec.describe()}; this "
                                 f"monitor's is {self.spec.describe()}")
        try:
            n = int(d["n_windows"])
            mean = {m: math.nan if v is None else float(v) for m, v in d["mean"].items()}
            std = {m: math.nan if v is None else float(v) for m, v in d["std"].items()}
            arl = d.get("arl_windows")
            arl = None if arl is None else float(arl)
            phase = d.get("phase_baseline")
            apart = {str(g) for g in d.get("apart") or ()}
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ValueError(f"the baseline: {type(exc).__name__}: {exc}") from None
        if self.spec.calibrated and arl is not None and \
                not math.isclose(self.budget_windows(), arl, rel_tol=1e-9):
            raise ValueError(f"the baseline was calibrated to {arl:,.6g} windows a false alarm; "
                             f"this monitor's budget ({self.budget}) is "
                             f"{self.budget_windows():,.6g}")
        if self.phased != (phase is not None):
            raise ValueError("the baseline was fitted " + (
                "per phase of the episode; this monitor is not phased" if phase is not None
                else "without phases; this monitor judges each window by its phase"))
        self.recalibrate(max(n, 2))
        self.phase_baseline = None if phase is None else PhaseBaseline.from_dict(phase)
        self.apart = apart
        self.arl_windows = arl
        self.calibrations = cals
        self.baseline = self._baseline(mean, std, n)

    def budget_windows(self) -> float:
        """Windows per false alarm the budget allows (a calibrated detector's)."""
        unit = self.budget.unit
        per = 1.0 if unit == "windows" else float(self.windows_per_unit[unit])
        return self.budget.windows_per_alarm(per)

    def _fit(self) -> None:
        data = {m: np.asarray(v, dtype=np.float64) for m, v in self._pending.items()}
        # Set once, complete: another thread may read ``baseline`` at any moment.
        fitted = Baseline.fit(data, metrics=self.metrics, k=self.k)
        if self.phased:  # the detectors see each window against its own phase
            phases = np.asarray(self._pending_phase, dtype=np.int64)
            self.phase_baseline = pb = PhaseBaseline.fit(data, phases)
            data = {m: pb.residuals(m, x, phases) for m, x in data.items()}
        if self.spec.calibrated:
            self.arl_windows = self.budget_windows()
        calibrations = {}
        groups = metric_groups(self.metrics)
        # A group whose alarm another joins shares its budget with it: half each.
        share = {g: 2.0 for j, into in JOINS.items() if groups.get(j) and groups.get(into)
                 and j not in self.apart for g in (j, into)}
        for g, comps in groups.items():
            # A component with fewer than 3 defined windows (P undefined all along) cannot
            # be judged: it never alarms, and the budget is shared by the others.
            comps = [m for m in comps if np.isfinite(data[m]).sum() >= 3]
            if comps:
                arl = None if self.arl_windows is None else self.arl_windows * share.get(g, 1.0)
                calibrations[g] = calibrate(
                    self.spec, {m: data[m] for m in comps}, arl,
                    overlap=self.overlap, standardised=self.phased,
                    min_std={m: RESOLUTION for m in comps if base_metric(m) in TWIN_METRICS})
        self.calibrations = calibrations
        self.baseline = self._baseline(fitted.mean, fitted.std, fitted.n_windows)

    def _baseline(self, mean: dict[str, float], std: dict[str, float], n: int) -> Baseline:
        """The baseline of these statistics and the calibrations in force.

        Set once, whole: another thread may read ``baseline`` at any moment.
        """
        return Baseline(
            mean, std, n, self.k,
            thresholds={m: c.threshold[m] for c in self.calibrations.values()
                        for m in c.components} if self.spec.detector.band else None,
            detector=self.describe(), kind=self.spec.kind)

    def _flag(self, windows: Mapping[str, Any], lo: int, n: int) -> dict[str, np.ndarray]:
        flags: dict[str, np.ndarray] = {}
        self._joint_flags = {}
        for g, cal in self.calibrations.items():
            zs = []  # the standardised components, for a joint (multivariate) detector
            for m in cal.components:
                x = np.asarray(windows[m][lo:], dtype=np.float64)
                if self.phase_baseline is not None:
                    x = self._against_phase(m, x, self._phase(windows, lo, n))
                z = cal.standardise(m, x)
                s, self._state[m] = detector_statistic(self.spec, z, self._state.get(m))
                flags[m] = s > cal.threshold[m]
                if cal.joint is not None:
                    zs.append(z)
            if cal.joint is not None:
                u = np.column_stack(zs) @ np.asarray(cal.joint["whitening"])
                t2, self._state[f"joint:{g}"] = joint_statistic(
                    self.spec.lam, u, self._state.get(f"joint:{g}"))
                self._joint_flags[g] = t2 > cal.joint["threshold"]
        for m in self.metrics:
            flags.setdefault(m, np.zeros(n - lo, dtype=bool))
        return flags

    def zscores(self, windows: Mapping[str, Any]) -> dict[str, np.ndarray]:
        """Each tracked metric of ``windows`` in σ of its baseline, as the detectors see it.

        Against the window's phase when ``phased``: how far a change moved each component.
        Empty before the baseline is set.
        """
        if self.baseline is None:
            return {}
        out = {}
        for m in self.metrics:
            x = np.asarray(windows[m], dtype=np.float64)
            if self.phase_baseline is not None:
                x = self._against_phase(m, x, self._phase(windows, 0, len(x)))
            cal = next((c for c in self.calibrations.values() if m in c.components), None)
            out[m] = cal.standardise(m, x) if cal is not None else standardise(
                x, self.baseline.mean[m], self.baseline.std[m])
        return out

    def _against_phase(self, m: str, x: np.ndarray, phase: np.ndarray) -> np.ndarray:
        return self.phase_baseline.residuals(m, x, phase)

    @staticmethod
    def _phase(windows: Mapping[str, Any], lo: int, n: int) -> np.ndarray:
        """Windows ``lo:n``'s phases (0 where the table has none)."""
        if "phase" not in windows:
            return np.zeros(n - lo, dtype=np.int64)
        return np.asarray(windows["phase"][lo:n], dtype=np.int64)

    @property
    def flag_names(self) -> tuple[str, ...]:
        """The flags :meth:`update` returns: each metric's, ``IDT`` and ``IDT_adj`` if tracked."""
        unions = [g for g, members in UNIONS.items()
                  if g == "IDT" or any(base_metric(m) in members for m in self.metrics)]
        return (*self.metrics, *part_flag_names(self.metrics), *unions)

    def update(self, windows: Mapping[str, Any]) -> dict[str, np.ndarray]:
        """Flag a batch of new windows; windows used for the baseline are not flagged."""
        n = len(np.asarray(windows[self.metrics[0]]))
        flags = {m: np.zeros(n, dtype=bool) for m in self.flag_names}
        i = 0
        if self.baseline is None:
            need = self.n_baseline - len(self._pending[self.metrics[0]])
            take = min(need, n)
            for m in self._pending:
                self._pending[m].extend(np.asarray(windows[m][:take], dtype=np.float64))
            if self.phased:
                self._pending_phase.extend(self._phase(windows, 0, take))
            i = take
            if take == need:
                self._fit()
        if self.baseline is not None and i < n:
            for m, f in self._flag(windows, i, n).items():
                flags[m][i:] = f
            union_flags(flags, self.metrics)
            for g, f in self._joint_flags.items():  # a multivariate group's own alarm
                if g in flags:
                    flags[g][i:] = f
            for g, into in JOINS.items():
                if g in flags and into in flags and g not in self.apart:
                    flags[into][i:] |= flags[g][i:]
        return flags
