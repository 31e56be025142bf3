"""What a change detector is, and the registry every front end reads them from.

A detector is one class (river's ``drift`` detectors are the model): its name, label and
help; the compiled kernel it drives (:mod:`~idt_desk.detection.kernels`) and the state that
kernel carries from batch to batch; how its threshold is fitted against the null
(:meth:`Detector.fit`); and how it is said (:meth:`Detector.describe`). Decorated with
:func:`register_detector`, it is a choice of the command line's ``--detector``, the window's
alarm detector, ``Monitor``, the plot's legend and the reproductions: adding a detector is one
class and its test.

Examples
--------
A detector that alarms on the window's |z| beyond a Gaussian quantile (for illustration:
it ignores the windows' autocorrelation, which the shipped ones account for):

>>> from statistics import NormalDist
>>> from idt_desk.detection.registry import DETECTORS, Detector, register_detector
>>> @register_detector
... class Naive(Detector):
...     name = "naive"
...     label = "naive |z|"
...     help = "naive (|z| beyond its Gaussian quantile, autocorrelation ignored)"
...     def fit(self, rho, arl, seed, max_samples):
...         q = NormalDist().inv_cdf(1 - 0.5 / arl)
...         return lambda nulls: [g * (q + abs(d)) for d, g in nulls]
...     def describe(self):
...         return "naive |z|"
>>> "naive" in DETECTORS
True
>>> del DETECTORS["naive"]
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any, ClassVar

import numpy as np

from idt_desk.detection.kernel_numbers import ABS

__all__ = ["DETECTORS", "DETECTOR_KINDS", "Detector", "NullFit", "register_detector"]

#: A fitted component's thresholds: one per null (δ, γ) asked for — the null path shifted by
#: δ σ and scaled by γ (:func:`idt_desk.detection.nulls.pessimism`; (0, 1) is the baseline
#: taken as exact).
NullFit = Callable[[list[tuple[float, float]]], list[float]]


class Detector:
    """The contract of a detector: class attributes say what it is, methods what it does.

    An instance holds its spec (:class:`~idt_desk.detection.detectors.DetectorSpec`: k, m,
    drift, λ, the parameters a user sets); the threshold comes from the false-alarm budget.

    Attributes
    ----------
    name
        What the settings, the command line and recordings call it.
    label
        The window's name for it (its choice in the alarm detector box).
    help
        One clause for the command line's ``--detector`` help.
    kernel
        The branch of :func:`~idt_desk.detection.kernels.statistic` it drives.
    calibrated
        Whether the budget sets its threshold (False: the paper's fixed k σ).
    joint
        One statistic for a group of components (the MEWMA's T²) besides each component's.
    band
        Its threshold is in σ of one window: the plot draws it as a band around the mean.
    """

    name: ClassVar[str]
    label: ClassVar[str]
    help: ClassVar[str]
    kernel: ClassVar[int] = ABS
    calibrated: ClassVar[bool] = True
    joint: ClassVar[bool] = False
    band: ClassVar[bool] = False

    def __init__(self, spec: Any) -> None:
        self.spec = spec

    def initial_state(self) -> np.ndarray:
        """The kernel's state before the first window (at rest: zeros)."""
        return np.zeros(2)

    def statistic(self, z: np.ndarray, state: np.ndarray) -> np.ndarray:
        """Each window's statistic of a standardised series; ``state`` carries on."""
        s = self.spec
        from idt_desk.detection import kernels  # compiled: imported when first run

        return kernels.statistic(z, np.int64(self.kernel), np.int64(s.m), float(s.drift),
                                 float(s.lam), state)

    def memory(self) -> int:
        """Windows its statistic mostly weighs (1: the alarm's own window).

        An alarm's severity is each component's mean z over that many windows up to it.
        """
        return 1

    def fit(self, rho: np.ndarray, arl: float, seed: int, max_samples: int) -> NullFit:
        """The thresholds whose up-crossings come once per ``arl`` windows on the null.

        ``rho``: the baseline's autocorrelation (the null is the stationary Gaussian process
        with it); ``seed`` and ``max_samples`` bound what is simulated.
        """
        raise NotImplementedError(f"{self.name} is calibrated but has no fit")

    def describe(self) -> str:
        """One line for a panel or a report."""
        return self.label


#: The registered detectors by name, in the order they were registered.
DETECTORS: dict[str, type[Detector]] = {}


def register_detector(cls: type[Detector]) -> type[Detector]:
    """Make ``cls`` a choice everywhere a detector is chosen; a class decorator.

    Raises
    ------
    ValueError
        A name already taken or not a plain word, or a contract attribute left out.
    """
    missing = [a for a in ("name", "label", "help") if not isinstance(getattr(cls, a, None),
                                                                          str)]
    if missing:
        raise ValueError(f"detector {cls.__name__}: set {', '.join(missing)}")
    if not cls.name.isidentifier() or cls.name == "none":
        raise ValueError(f"detector {cls.__name__}: name {cls.name!r} is not a plain word")
    if cls.name in DETECTORS and DETECTORS[cls.name] is not cls:
        raise ValueError(f"a detector named {cls.name!r} is registered already "
                         f"({DETECTORS[cls.name].__qualname__})")
    DETECTORS[cls.name] = cls
    return cls


class _Names(Sequence[str]):
    """The registered detectors' names, read when asked (a detector registered later is in)."""

    def __getitem__(self, i: Any) -> Any:
        return tuple(DETECTORS)[i]

    def __len__(self) -> int:
        return len(DETECTORS)

    def __iter__(self) -> Iterator[str]:
        return iter(tuple(DETECTORS))

    def __contains__(self, name: object) -> bool:
        return name in DETECTORS

    def __repr__(self) -> str:
        return repr(tuple(DETECTORS))


#: The detectors' names (a live view of :data:`DETECTORS`).
DETECTOR_KINDS: Sequence[str] = _Names()
