"""The shipped detectors, one class each (the contract: :mod:`~idt_desk.detection.registry`).

The paper's rule, persistence, CUSUM, EWMA and the multivariate EWMA: what each statistic is,
what its threshold is calibrated on and why, is :mod:`~idt_desk.detection.detectors`' module
doc; how each is fitted against the null, :mod:`~idt_desk.detection.nulls`.
"""

from __future__ import annotations

import numpy as np

from idt_desk.detection.kernel_numbers import ABS, CUSUM, EWMA, MIN_OF_LAST
from idt_desk.detection.registry import Detector, NullFit, register_detector

__all__ = ["CUSUM", "EWMA", "MEWMA", "PaperRule", "Persistence"]


@register_detector
class PaperRule(Detector):
    """The paper's rule (§10.4): the first window more than k σ from the baseline mean.

    Not calibrated: its k is fixed (3), kept for the paper's tables.
    """

    name = "paper"
    label = "paper rule (3σ, uncalibrated)"
    help = "paper (the first window beyond k σ: the paper's rule, not calibrated)"
    kernel = ABS
    calibrated = False

    def describe(self) -> str:
        """How the panel and the reports say it."""
        return f"paper rule (|z| > {self.spec.k:g}σ, first crossing)"


@register_detector
class Persistence(Detector):
    """The last m windows all beyond k σ (either side), k calibrated to the budget."""

    name = "persistence"
    label = "persistence (m in a row)"
    help = "persistence (m windows in a row beyond a calibrated kσ)"
    kernel = MIN_OF_LAST
    band = True

    def initial_state(self) -> np.ndarray:
        """The last m windows' |z| (none beyond yet: zeros)."""
        return np.zeros(int(self.spec.m))

    def memory(self) -> int:
        """The m windows that must all be beyond."""
        return int(self.spec.m)

    def fit(self, rho: np.ndarray, arl: float, seed: int, max_samples: int) -> NullFit:
        """Its thresholds against the null (the module doc of ``nulls`` says how)."""
        from idt_desk.detection import nulls  # compiled: imported when first fitted

        m = int(self.spec.m)
        return lambda targets: nulls.persistence_thresholds(rho, m, arl, targets, seed)

    def describe(self) -> str:
        """How the panel and the reports say it."""
        if self.spec.m == 1:
            return "calibrated |z| > k (each window)"
        return f"persistence ({self.spec.m} windows in a row)"


@register_detector
class CUSUM(Detector):
    """The two-sided CUSUM of the standardised component, reference d σ; h calibrated."""

    name = "cusum"
    label = "CUSUM"
    help = "cusum (two-sided CUSUM, calibrated)"
    kernel = CUSUM

    def fit(self, rho: np.ndarray, arl: float, seed: int, max_samples: int) -> NullFit:
        """Its thresholds against the null (the module doc of ``nulls`` says how)."""
        from idt_desk.detection import nulls  # compiled: imported when first fitted

        path = nulls.simulate(rho, nulls.CUSUM_PATH, seed)  # one short path for every target
        drift = float(self.spec.drift)
        return lambda targets: nulls.cusum_thresholds(rho, drift, arl, targets, seed,
                                                      max_samples, path)

    def describe(self) -> str:
        """How the panel and the reports say it."""
        return f"CUSUM (d = {self.spec.drift:g}σ)"


@register_detector
class EWMA(Detector):
    """The EWMA of the standardised component, weight λ; |E|'s threshold calibrated."""

    name = "ewma"
    label = "EWMA of z (λ)"
    help = "ewma (EWMA of each component's z, calibrated)"
    kernel = EWMA

    def memory(self) -> int:
        """1/λ windows: the newest ones, which carry 1 − 1/e of its weight."""
        return max(1, round(1.0 / float(self.spec.lam)))

    def fit(self, rho: np.ndarray, arl: float, seed: int, max_samples: int) -> NullFit:
        """Its thresholds against the null (the module doc of ``nulls`` says how)."""
        from idt_desk.detection import nulls  # compiled: imported when first fitted

        var, corr = nulls.ewma_moments(rho, self.spec.lam)  # in closed form
        return lambda targets: [nulls.ewma_threshold(var, corr, arl, d, g) for d, g in targets]

    def describe(self) -> str:
        """How the panel and the reports say it."""
        return f"EWMA of z (λ = {self.spec.lam:g})"


@register_detector
class MEWMA(EWMA):
    """One EWMA of a group's whitened components, T² = |M|² (Lowry et al. 1992).

    The group's alarm is T²'s (:func:`~idt_desk.detection.detectors.calibrate` fits it on
    the whitened baseline); each component's own flag is its EWMA, calibrated as ``ewma``.
    """

    name = "mewma"
    label = "MEWMA, whitened (λ)"
    help = "mewma (one EWMA of the whitened components, calibrated)"
    joint = True

    def describe(self) -> str:
        """How the panel and the reports say it."""
        return f"MEWMA of the whitened components (λ = {self.spec.lam:g})"
