"""A detector written as a newcomer would: one class, from the pieces the shipped ones use.

Two windows in a row beyond a kσ calibrated to the budget (persistence with m fixed at 2,
whatever the session's m): the statistic is the smaller |z| of the last two windows.
"""

from __future__ import annotations

import numpy as np

from idt_desk.detection import kernels, nulls
from idt_desk.plugin import Detector


class Pairs(Detector):
    """Two windows in a row beyond a calibrated kσ."""

    name = "pairs"
    label = "pairs (2 in a row)"
    help = "pairs (two windows in a row beyond a calibrated kσ: a test's detector)"
    kernel = kernels.MIN_OF_LAST
    band = True

    def statistic(self, z: np.ndarray, state: np.ndarray) -> np.ndarray:
        return kernels.statistic(z, np.int64(self.kernel), np.int64(2), 0.0, 1.0, state)

    def fit(self, rho, arl, seed, max_samples):
        return lambda targets: nulls.persistence_thresholds(rho, 2, arl, targets, seed)

    def describe(self) -> str:
        return "pairs (2 windows in a row)"
