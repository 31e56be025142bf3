"""Change detectors calibrated to a false-alarm budget in loop time.

The paper's rule (§10.4) flags a window more than 3σ from its baseline mean. Windows overlap
(stride 50-75 of W 300: neighbours share 75-83 % of their transitions), so over thousands of
windows something crosses 3σ by chance, and a union of four such tests more often still. The
detectors here turn one user-facing number, a **false-alarm budget** ("at most 1 false alarm
per hour of loop time"), into thresholds:

- ``paper``: ``|z| > k`` with the paper's fixed k (3): kept for the paper's tables, not
  calibrated;
- ``persistence``: the last ``m`` windows all beyond ``k`` σ (either side), k calibrated;
- ``cusum``: a two-sided CUSUM of the standardised component, ``S+ = max(0, S+ + z − d)``,
  ``S− = max(0, S− − z − d)``, alarm while ``max(S+, S−) > h``, h calibrated (reference value
  d in σ, 0.5 by default: tuned to shifts of about 1σ, as in SPC practice);
- ``ewma``: the exponentially weighted moving average of the standardised component,
  ``E = λ z + (1 − λ) E`` from 0, alarm while ``|E| > h``, h calibrated (λ 0.05 by default:
  it averages about 2/λ − 1 = 39 windows, so it sees a sustained shift of a fraction of σ
  that no single window shows; Roberts 1959, Lucas & Saccucci 1990 for its run lengths);
- ``mewma``: the multivariate EWMA (Lowry et al. 1992) of a group's standardised components
  after whitening them with the baseline's own correlation matrix (u = z W, W the inverse
  square root on its non-null eigenvectors: ΔH = H_f − H_b makes the IDT's four components
  rank three; the twin's channels, which have a resolution, their covariance with each
  resolution's variance added, so that no combination of them reads a change under every
  resolution as one of several σ), ``M = λ u + (1 − λ) M``, alarm while ``T² = |M|² > h``:
  one statistic for the whole group, so a shift that moves several components a little
  each adds up. Its group
  alarm (``IDT``) is T²'s; each component's own flag (the panel's lights) is its univariate
  EWMA, calibrated as ``ewma``.

Every detector is a statistic ``s_t`` and a threshold; the alarm is on while ``s_t`` is above
it, and **a false alarm is an alarm episode** (an up-crossing) on an unperturbed stream, so a
long excursion counts once.

Calibration (:func:`calibrate`), per component, from the baseline windows:

1. standardise with the baseline mean and σ (ddof 1);
2. take the baseline's autocorrelation up to its initial positive sequence (lags up to
   ``max_lag``) as the null's, a stationary Gaussian process simulated by circulant embedding:
   the autocorrelation overlapping windows create, and its long-run variance (a low-order AR
   fit misses it: measured, it let a CUSUM raise 1.3-1.7 times its budget), is what the null
   must have;
3. account for the baseline being finite: its effective size is n_eff = n / τ with
   τ = 1 + 2 Σ ρ_k summed over the initial positive autocorrelations (Bartlett, truncated as
   Geyer's initial sequence), and at least the windows' overlap W / stride (each transition
   of a white stream sits in that many windows); the null is simulated as if the true mean
   were two standard errors away (δ = 2/√n_eff, in σ) and the true σ at the one-sided 97.7 %
   bound of its estimate (γ = √(df / χ²_df(0.023)), df = n_eff − 1): the budget is meant to
   hold for a baseline two standard errors worse than the one measured, not only for the
   estimate (a CUSUM accumulates a wrong mean window after window, so this matters most to
   it);
4. simulate a long null path, compute the statistic, and take the threshold whose up-crossing
   rate is one per ``arl`` windows (the budget in windows, multiplied by the number of
   components: the union of c components with a c-times-smaller rate each keeps the budget).

The MEWMA's joint statistic is calibrated the same way on the whitened components: each
simulated with its own autocorrelation (independent of the others: whitening removes their
correlation at lag 0, not across lags, an approximation the budget test checks), the mean
error along one whitened direction and the σ bound on all, and the whole group's budget
(one statistic, one alarm).

Assumptions, stated: the in-control metric is a stationary Gaussian process whose
autocorrelation the baseline shows (heavy tails or slow drifts the baseline does not contain
are not covered); the paper rule is not calibrated. A baseline whose finite size inflates a
threshold by more than 25 % over what a perfectly known baseline would need is reported as
too short, with the length that would do (for MEWMA, the length T²'s threshold needs too).

Each detector is a class (:mod:`~idt_desk.detection.kinds`, registered in
:mod:`~idt_desk.detection.registry`): its kernel, its state and its fit against the null. This
module is what they share: the budget, the spec a user sets, the calibration against a
baseline (its autocorrelation, its finite size, the MEWMA's whitening) and the statistics
applied to a stream.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import numpy as np

from idt_desk.detection import kernels, nulls
from idt_desk.detection.registry import DETECTOR_KINDS, DETECTORS
from idt_desk.detection.spec import (
    ANALYZE_BUDGET,
    CONTROL_BASELINE_WINDOWS,
    CONTROL_BUDGET,
    CONTROL_DETECTOR,
    DEFAULT_BUDGET,
    DEFAULT_DETECTOR,
    TOO_SHORT_INFLATION,
    Budget,
    DetectorSpec,
    parse_budget,
)

__all__ = [
    "ANALYZE_BUDGET",
    "CONTROL_BASELINE_WINDOWS",
    "CONTROL_BUDGET",
    "CONTROL_DETECTOR",
    "DEFAULT_BUDGET",
    "DEFAULT_DETECTOR",
    "DETECTORS",
    "DETECTOR_KINDS",
    "Budget",
    "Calibration",
    "DetectorSpec",
    "alarm_episodes",
    "autocorrelation",
    "calibrate",
    "detector_statistic",
    "joint_statistic",
    "parse_budget",
    "standardise",
    "whitening",
]

#: The inflation the length a too-short baseline is told it needs is computed for: under the
#: limit by the threshold's own uncertainty (T²'s by importance sampling, ±0.02), so that a
#: baseline of the length said is not too short when its own correlation is measured again.
NEEDED_INFLATION = TOO_SHORT_INFLATION - 0.03


def detector_statistic(spec: DetectorSpec, z: np.ndarray,
                       state: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The statistic of a standardised series, and the state to continue from.

    ``state`` None starts afresh; pass the returned state to continue a stream in batches.
    """
    det = spec.detector
    z = np.ascontiguousarray(z, dtype=np.float64)
    state = det.initial_state() if state is None else np.array(state, dtype=np.float64)
    return det.statistic(z, state), state


def joint_statistic(lam: float, u: np.ndarray, state: np.ndarray | None = None
                    ) -> tuple[np.ndarray, np.ndarray]:
    """The MEWMA's T² of whitened rows ``u`` (n × r), and the state to continue from."""
    u = np.ascontiguousarray(np.atleast_2d(u), dtype=np.float64)
    state = np.zeros(u.shape[1]) if state is None else np.array(state, dtype=np.float64)
    return kernels.mewma(u, float(lam), state), state


def whitening(z: np.ndarray, rtol: float = 1e-8,
              resolution: np.ndarray | None = None) -> np.ndarray:
    """W (c × r) such that ``z @ W`` is uncorrelated with unit variance.

    ``z`` holds standardised components (n × c); W is the inverse square root of their
    correlation on its non-null eigenvectors (rows with a NaN left out; a component that is
    a combination of others, as ΔH = H_f − H_b, adds no direction).

    ``resolution`` (c, in the units of ``z``): each component's resolution, whose variance
    is added to the covariance's diagonal before it is inverted. No combination of the
    components is then scaled beyond what their resolutions allow: a change smaller than
    every component's resolution moves ``z @ W`` by at most √c, and ``z @ W`` has at most
    unit variance in every direction (the null's, so its threshold stays conservative).
    Without it, a covariance that one rare event made nearly singular (channels that sit on
    a floor and leave it together) is inverted as it is, and a direction of almost no
    variance reads a sub-resolution offset of the typical window from the baseline's mean
    (pulled off the floor by the event) as tens of σ, in every window (issue 78).
    """
    ok = np.isfinite(z).all(axis=1)
    x = z[ok] - z[ok].mean(axis=0)
    cov = x.T @ x / max(len(x) - 1, 1)
    if resolution is not None:
        cov = cov + np.diag(np.asarray(resolution, dtype=np.float64) ** 2)
    w, v = np.linalg.eigh(cov)
    keep = w > rtol * max(float(w.max()), 1e-300)
    return v[:, keep] / np.sqrt(w[keep])


def standardise(x: np.ndarray, mean: float, std: float) -> np.ndarray:
    """(x − mean) / σ (σ 0: 0 where x equals the mean, ±inf elsewhere)."""
    x = np.asarray(x, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        if std > 0:
            return (x - mean) / std
        d = x - mean
        return np.where(d == 0, 0.0, np.sign(d) * np.inf)


def alarm_episodes(statistic: np.ndarray, threshold: float, above: bool = False) -> int:
    """Alarm episodes: up-crossings of ``threshold`` (``above``: the alarm was already on)."""
    s = np.ascontiguousarray(statistic, dtype=np.float64)
    return int(kernels.episodes(s, float(threshold), bool(above)))


# -- calibration ------------------------------------------------------------------------------


def autocorrelation(z: np.ndarray, max_lag: int) -> np.ndarray:
    """Biased sample autocorrelation of ``z`` up to ``max_lag`` (the Toeplitz stays PD)."""
    n = z.size
    x = z - z.mean()
    c0 = float(x @ x) / n
    if c0 <= 0:
        return np.zeros(max_lag + 1)
    return np.array([1.0] + [float(x[:-k] @ x[k:]) / n / c0 for k in range(1, max_lag + 1)])


def _null_acf(z: np.ndarray, max_lag: int, overlap: float) -> tuple[np.ndarray, float]:
    """The null's autocorrelation (the initial positive sequence) and τ, windows per effective one.

    Lags up to ``max_lag`` and at most a fifth of the baseline; τ = 1 + 2 Σ ρ_k, at least the
    windows' overlap (module doc, step 3). A baseline without variance gets a white null (its
    windows are standardised to 0, and any other value to ±inf: the threshold hardly matters).
    """
    p = int(min(max_lag, max(1, z.size // 5)))
    rho = autocorrelation(z, p)
    if rho[0] <= 0:  # a constant baseline: any change is infinitely many σ off; a white null
        return np.ones(1), max(float(overlap), 1.0)
    cut = np.flatnonzero(rho[1:] <= 0)
    rho = rho[: 1 + (cut[0] if cut.size else p)]
    return rho, max(1.0 + 2.0 * float(rho[1:].sum()), float(overlap), 1.0)


@dataclass(frozen=True)
class Calibration:
    """A detector fitted to a baseline and a budget: what the monitor needs to flag windows.

    ``threshold`` is per component, in the statistic's units (σ for paper and persistence,
    CUSUM units for cusum, σ of a single window for the EWMA's |E|); ``inflation`` the factor
    the baseline's finite size added to it; ``too_short`` whether that factor exceeds 1.25,
    and ``needed_windows`` the baseline length that would bring it to 1.25 (None when it
    already does or cannot be said).
    """

    spec: DetectorSpec
    components: tuple[str, ...]
    mean: dict[str, float]
    std: dict[str, float]
    threshold: dict[str, float]
    n_windows: int
    n_eff: dict[str, float] = field(default_factory=dict)
    inflation: dict[str, float] = field(default_factory=dict)
    arl_windows: float | None = None
    needed_windows: int | None = None
    #: The MEWMA's joint detector: ``whitening`` (c × r, components in ``components``
    #: order), ``threshold`` on T², its ``inflation`` and ``n_eff``; None for the others.
    joint: dict[str, Any] | None = None

    @property
    def too_short(self) -> bool:
        """The baseline is too short for the budget to mean what it says."""
        return any(v > TOO_SHORT_INFLATION for v in self.inflation.values()) or bool(
            self.joint and self.joint["inflation"] > TOO_SHORT_INFLATION)

    def standardise(self, component: str, x: np.ndarray) -> np.ndarray:
        """(x − mean) / σ of a component against this baseline (see :func:`standardise`)."""
        return standardise(x, self.mean[component], self.std[component])

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form (recorded with the session, so replay flags the same windows)."""
        return {"detector": self.spec.kind, "k": self.spec.k, "m": self.spec.m,
                "drift": self.spec.drift, "lam": self.spec.lam,
                "components": list(self.components),
                "mean": self.mean, "std": self.std, "threshold": self.threshold,
                "n_windows": self.n_windows, "n_eff": self.n_eff, "inflation": self.inflation,
                "arl_windows": self.arl_windows, "needed_windows": self.needed_windows,
                "too_short": self.too_short, "joint": self.joint}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Calibration:
        """Rebuild a calibration written by :meth:`to_dict` (a value of None is NaN).

        Raises
        ------
        ValueError
            A field missing or of the wrong type, named.
        """
        try:
            spec = DetectorSpec(str(d["detector"]), k=float(d["k"]), m=int(d["m"]),
                                drift=float(d["drift"]), lam=float(d["lam"]))
            comps = tuple(str(c) for c in d["components"])

            def per(key: str) -> dict[str, float]:
                got = d.get(key) or {}
                return {str(m): math.nan if v is None else float(v) for m, v in got.items()}

            joint = d.get("joint")
            if joint is not None:
                joint = {**joint, "whitening": np.asarray(joint["whitening"], dtype=np.float64
                                                          ).tolist()}
            cal = cls(spec, comps, per("mean"), per("std"), per("threshold"),
                      int(d["n_windows"]), per("n_eff"), per("inflation"),
                      None if d.get("arl_windows") is None else float(d["arl_windows"]),
                      None if d.get("needed_windows") is None else int(d["needed_windows"]),
                      joint)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ValueError(f"a detector's calibration: {type(exc).__name__}: {exc}") from None
        missing = [m for m in comps if m not in cal.threshold or m not in cal.mean]
        if missing:
            raise ValueError(f"a detector's calibration has no threshold for {missing[0]}")
        return cal


def calibrate(
    spec: DetectorSpec,
    baseline: dict[str, np.ndarray],
    arl_windows: float | None,
    *,
    max_lag: int = 10,
    overlap: float = 1.0,
    seed: int = 0,
    max_samples: int = 4_000_000,
    standardised: bool = False,
    min_std: Mapping[str, float] | None = None,
) -> Calibration:
    """Fit ``spec`` to baseline windows so the union of components keeps ``arl_windows``.

    Each threshold's up-crossing rate on the null is computed by :mod:`~idt_desk.detection.nulls`
    (the EWMA's in closed form, persistence's and T²'s by importance sampling, the CUSUM's
    from a short path and its exponential tail): milliseconds where simulating the null long
    enough to see the budget took seconds (:mod:`~idt_desk.detection.reference`).

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
        Seed of the random draws (calibration is deterministic).
    max_samples
        Longest null path simulated where a CUSUM's crossings are counted directly.
    standardised
        The baseline is already a unit-variance residual (a phase-conditioned baseline,
        :mod:`~idt_desk.detection.phase`): its mean 0 and σ 1 are taken as given, not
        estimated (its own sample σ is below 1 where phases never varied; calibrating on it
        would make their variation the unit).
    min_std
        A component's resolution: its σ is taken as at least this (the twin's channels,
        ``idt_desk.metrics.twin.RESOLUTION``); its variation below it then stays below unit
        variance, for the MEWMA too (only the components' correlation is whitened).

    Raises
    ------
    ValueError
        Fewer than 3 finite baseline windows in a component, or no budget for a calibrated
        detector.

    Examples
    --------
    An EWMA fitted to one false alarm per 1,000 windows on 2,000 baseline windows; on 60 the
    baseline's own uncertainty raises its threshold by more than a quarter, and the
    calibration says so, with the length that would do:

    >>> import numpy as np
    >>> from idt_desk.detection.detectors import DetectorSpec, calibrate
    >>> p = np.random.default_rng(0).normal(0.3, 0.01, 2000)
    >>> cal = calibrate(DetectorSpec("ewma", lam=0.1), {"P": p}, arl_windows=1000)
    >>> round(cal.threshold["P"], 2), cal.too_short
    (0.75, False)
    >>> short = calibrate(DetectorSpec("ewma", lam=0.1), {"P": p[:60]}, arl_windows=1000)
    >>> short.too_short, short.needed_windows
    (True, 399)

    """
    comps = tuple(baseline)
    mean, std, threshold, n_eff, inflation = {}, {}, {}, {}, {}
    n_windows = 0
    if spec.calibrated and not (arl_windows and arl_windows > 0):
        raise ValueError(f"{spec.kind} needs a false-alarm budget (windows per alarm)")
    arl_c = None if arl_windows is None else float(arl_windows) * len(comps)
    tasks: dict[str, Callable[[], tuple[float, float, int]]] = {}
    for j, c in enumerate(comps):
        x = np.asarray(baseline[c], dtype=np.float64)
        n_windows = max(n_windows, x.size)
        x = x[np.isfinite(x)]
        if x.size < 3:
            raise ValueError(f"{c}: a baseline needs at least 3 defined windows, got {x.size}")
        mean[c], std[c] = (0.0, 1.0) if standardised else (float(x.mean()),
                                                            float(x.std(ddof=1)))
        std[c] = max(std[c], float((min_std or {}).get(c, 0.0)))
        if not spec.calibrated:
            threshold[c] = float(spec.k)
            continue
        assert arl_c is not None
        z = (x - mean[c]) / std[c] if std[c] > 0 else np.zeros_like(x)
        rho, tau = _null_acf(z, max_lag, overlap)
        n_eff[c] = float(min(max(x.size / tau, 2.0), x.size))
        tasks[c] = partial(_fit_component, spec, rho, arl_c, seed + 7919 * j, max_samples,
                           n_eff[c], x.size / n_eff[c])
    if spec.detector.joint and len(comps) > 1:
        # A component with a resolution (min_std; not on a phase's residuals, already in
        # units of their phase's σ): its resolution in σ of its baseline, for the whitening.
        res = None if standardised or not min_std else [
            float(min_std.get(c, 0.0)) / std[c] if std[c] > 0 else 0.0 for c in comps]
        tasks[""] = partial(_calibrate_joint, spec, baseline, comps, mean, std,
                            float(arl_windows), max_lag, overlap, seed,
                            standardised or bool(min_std), res)
    # The components are independent fits of compiled kernels and numpy that release the
    # GIL: two at a time, one per core of a small machine.
    try:
        with ThreadPoolExecutor(max_workers=2) as pool:
            done = dict(zip(tasks, pool.map(lambda task: task(), tasks.values()), strict=True))
    except RuntimeError:  # no new threads while the interpreter exits: the same, in turn
        done = {name: task() for name, task in tasks.items()}
    joint = done.pop("", None)
    needed = joint.pop("needed_windows", 0) if joint else 0
    for c, (known, threshold[c], needed_c) in done.items():
        inflation[c] = threshold[c] / known if known > 0 else 1.0
        needed = max(needed, needed_c)
    return Calibration(spec, comps, mean, std, threshold, n_windows, n_eff, inflation,
                       None if arl_c is None else float(arl_windows), needed or None, joint)


def _fit_component(spec: DetectorSpec, rho: np.ndarray, arl: float, seed: int,
                   max_samples: int, n_eff: float, windows_per_eff: float
                   ) -> tuple[float, float, int]:
    """(known-baseline threshold, pessimistic threshold, baseline windows needed or 0)."""
    fit = spec.detector.fit(rho, arl, seed, max_samples)  # its method against the null
    known, threshold = fit([(0.0, 1.0), nulls.pessimism(n_eff)])
    if known > 0 and threshold / known > TOO_SHORT_INFLATION:
        return known, threshold, nulls.first_n_eff(
            lambda n: fit([nulls.pessimism(n)])[0] <= NEEDED_INFLATION * known,
            windows_per_eff)
    return known, threshold, 0


def _calibrate_joint(spec: DetectorSpec, baseline: dict[str, np.ndarray],
                     comps: tuple[str, ...], mean: dict[str, float], std: dict[str, float],
                     arl: float, max_lag: int, overlap: float, seed: int,
                     standardised: bool = False,
                     resolution: Sequence[float] | None = None) -> dict[str, Any]:
    """The MEWMA's whitening and T² threshold for the group's whole budget (module doc).

    ``standardised``: the components are unit-variance residuals whose sample variance may
    be lower (phases that never varied, a channel under its resolution): only their
    correlation is whitened, each keeping
    the unit variance assumed of it, as the univariate detectors do. Whitening their
    sample covariance instead would scale the quiet phases up to the loud ones' variance and
    the loud ones beyond it: measured on a synthetic episodic loop, 7 of 40 unperturbed
    streams alarmed where 0.8 were allowed.

    ``resolution``: each component's resolution in σ of its baseline (the twin's channels,
    not on a phase's residuals): their covariance is whitened with each resolution's
    variance added (:func:`whitening`). The twin of a clean MuJoCo loop sits on its
    channels' floor but for rare windows that one transition lifts off it (a residual of
    1e-7 where the others' are 1e-12: 0.3 % of the windows of the shipped SAC 2 on
    HalfCheetah, six in a row); whitened as it was, the correlation those
    few windows made nearly singular put weights of 1,000-4,700 on a direction in which the
    floor's windows sit a quarter of a resolution from the baseline's mean: 12-95 σ in every
    window, so the twin alarmed within three windows of arming on 7 of 40 controls (20
    windows allowed 0.03) and stayed on (issue 78).
    """
    z = np.column_stack([standardise(np.asarray(baseline[c], dtype=np.float64),
                                     mean[c], std[c]) for c in comps])
    if resolution is not None:
        w = whitening(z, resolution=np.asarray(resolution, dtype=np.float64))
    elif standardised:
        sd = np.nanstd(z, axis=0, ddof=1)
        w = whitening(z / np.where(sd > 0, sd, 1.0))  # the correlation's, applied to z
    else:
        w = whitening(z)
    u = z[np.isfinite(z).all(axis=1)] @ w
    r = u.shape[1]
    moments, taus = [], []
    for j in range(r):
        rho, tau = _null_acf(u[:, j], max_lag, overlap)
        taus.append(tau)
        moments.append(nulls.ewma_moments(rho, spec.lam))
    var, corr = (np.array(v) for v in zip(*moments, strict=True))
    n_eff = float(min(max(u.shape[0] / max(taus), 2.0), u.shape[0]))

    def fit(targets: list[tuple[float, float]], near: float | None = None) -> list[float]:
        return nulls.joint_thresholds(var, corr, arl, targets, seed + 104_729, near)

    known = fit([(0.0, 1.0)])[0]
    h = fit([nulls.pessimism(n_eff)], known)[0]
    inflation = h / known if known > 0 else 1.0
    out = {"whitening": w.tolist(), "threshold": h, "n_eff": n_eff, "inflation": inflation}
    if inflation > TOO_SHORT_INFLATION:
        # The length at which the pessimism's inflation of T²'s threshold falls to the limit.
        out["needed_windows"] = nulls.first_n_eff(
            lambda n: fit([nulls.pessimism(n)], known)[0] <= NEEDED_INFLATION * known,
            u.shape[0] / n_eff)
    return out
