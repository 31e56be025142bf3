"""What a user sets of a detector, light to import: the budget, the spec, the defaults.

The false-alarm budget (:class:`Budget`, :func:`parse_budget`), which detector and its fixed
parameters (:class:`DetectorSpec`) and the defaults each kind of loop gets. The command line's
parser and ``idt-desk --help`` read them without the calibration's compiled kernels
(:mod:`~idt_desk.detection.detectors`, which re-exports all of this).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from idt_desk.detection import kinds  # noqa: F401  (registers the shipped detectors)
from idt_desk.detection.registry import DETECTOR_KINDS, DETECTORS, Detector

__all__ = [
    "ANALYZE_BUDGET",
    "CONTROL_BASELINE_WINDOWS",
    "CONTROL_BUDGET",
    "CONTROL_DETECTOR",
    "COSTLY_RETURN",
    "DEFAULT_BASELINE_WINDOWS",
    "DEFAULT_BUDGET",
    "DEFAULT_DETECTOR",
    "EPISODE_BUDGET",
    "NO_RATE_BUDGET",
    "TOO_SHORT_INFLATION",
    "Budget",
    "DetectorSpec",
    "parse_budget",
]

#: The alarm a session uses unless its source or the user says otherwise: m windows in a row
#: beyond a calibrated kσ (the pendulum's and a dialogue's default).
DEFAULT_DETECTOR = "persistence"
#: The default alarm of a policy acting in an environment (the gym source, the gym wrapper and
#: callback): one multivariate EWMA of the whitened components. Chosen by the HalfCheetah
#: comparisons in ``assets/docs/rl-detection.md``: on the chaotic agent once shipped it saw 5
#: of 8 perturbed trials where persistence and EWMA saw 3; on the settled SAC seed 3 every
#: detector sees every trial, and at 600 k steps only MEWMA did (8 of 8 against EWMA's 2 at
#: 1/h; 7 against 0 at ``CONTROL_BUDGET``).
CONTROL_DETECTOR = "mewma"
#: The default false-alarm budget of a policy acting in an environment: one per ten hours of loop
#: time. A perturbation trial watched for half an hour after its onset is the unit of the RL
#: comparisons; at 1/h an exactly calibrated detector may alarm in 1 − e^−0.5 = 39 % of such
#: unperturbed runs, at 1/10h in 4.9 % (1 of 20). At 50× real time, as the dashboard runs
#: HalfCheetah, 1/h of loop time is one false alarm per 72 s on screen; 1/10h one per 12 min.
#: On the shipped default agent MEWMA sees 8 of 8 at both budgets with 4 of 20 controls alarmed
#: at 1/h and 1 of 20 at 1/10h (``assets/docs/rl-detection.md``, "The RL budget").
CONTROL_BUDGET = "1/10h"
#: The false-alarm budget of a loop that declares none (a source's ``default_budget``).
DEFAULT_BUDGET = "1/h"
#: The budget of a loop that has no loop time (no rate: its time is its step count), so its
#: windows are the unit: a finished trajectory's analysis (``idt-desk analyze``), a wrapped env
#: without ``dt``, a Python loop recorded without a rate. One for all of them.
NO_RATE_BUDGET = "1/10000windows"
#: The same for such a loop with a time limit (its episodes are the unit).
EPISODE_BUDGET = "1/100episodes"
ANALYZE_BUDGET = NO_RATE_BUDGET
#: Baseline windows by default (a windows path: W 300, stride 50-75). A calibrated detector
#: needs its baseline long enough that the baseline's finite size raises its thresholds by
#: at most 25 % (``detectors.TOO_SHORT_INFLATION``): with windows overlapping 4-6 times that
#: is 600 windows at the limit and 800 with a margin, whatever the budget (measured on three
#: pendulum and two HalfCheetah runs, 1/h: inflation 1.20-1.25 at 600, 1.17-1.19 at 800;
#: at the former default of 200, 1.48-1.59: every default run was "too short").
DEFAULT_BASELINE_WINDOWS = 800
#: Baseline windows by default of a policy acting in an environment (the gym source, the gym
#: wrapper and callback): long enough for its own calibration. The MEWMA at λ = 0.05 is a
#: long average, so the baseline's mean must be known far better than for persistence: on the
#: shipped HalfCheetah agent (W 300, stride 50, its windows' correlation time the overlap's
#: 6) its thresholds were 1.42× the known-baseline ones at 800 windows, 1.31 at 1,200 and
#: 1.23 at 1,980 (the IDT's group; the twin's a little less; 1/10h). On synthetic components
#: with that correlation time, 1.19-1.23 at 2,200 over nine seeds, each under the 1.25 limit
#: by more than the threshold's own uncertainty. At 800, every default session was told its
#: baseline was too short; 2,200 is 5,560 s of loop time with the symbols' calibration, 111 s
#: on screen at the dashboard's 50×.
CONTROL_BASELINE_WINDOWS = 2200
#: A perturbation whose fully perturbed episodes return this fraction less than the
#: baseline's episodes (or more) is *costly*; less is *cheap* (the cost said of a change).
COSTLY_RETURN = 0.01
#: Threshold inflation beyond which a baseline is reported as too short for its budget.
TOO_SHORT_INFLATION = 1.25

_UNITS = {"s": 1.0, "sec": 1.0, "second": 1.0, "seconds": 1.0, "min": 60.0, "minute": 60.0,
          "minutes": 60.0, "h": 3600.0, "hour": 3600.0, "hours": 3600.0, "d": 86400.0,
          "day": 86400.0, "days": 86400.0}
_COUNTS = {"window": "windows", "windows": "windows", "turn": "turns", "turns": "turns",
           "episode": "episodes", "episodes": "episodes"}


@dataclass(frozen=True)
class Budget:
    """At most ``alarms`` false alarms per ``per`` units of loop time.

    ``unit`` is ``"s"`` (seconds of loop time; minutes, hours and days are converted),
    ``"windows"``, ``"turns"`` (a dialogue) or ``"episodes"`` (an RL source).
    """

    alarms: float = 1.0
    per: float = 3600.0
    unit: str = "s"

    def __post_init__(self) -> None:
        if not (0 < self.alarms <= 1e6):
            raise ValueError("a false-alarm budget needs a count above 0 and at most "
                             f"1,000,000, got {self.alarms:g}")
        if not (0 < self.per <= 1e12):
            raise ValueError(f"a false-alarm budget needs a positive span up to 10^12, got "
                             f"{self.per:g}")
        if self.unit not in ("s", "windows", "turns", "episodes"):
            raise ValueError(f"unknown budget unit {self.unit!r}")

    def windows_per_alarm(self, windows_per_unit: float) -> float:
        """The budget in windows: how many windows one false alarm may take at most."""
        if not windows_per_unit > 0:
            raise ValueError(f"windows per {self.unit} must be > 0, got {windows_per_unit}")
        return self.per * windows_per_unit / self.alarms

    def __str__(self) -> str:
        n = f"{self.alarms:g} false alarm{'s' if self.alarms != 1 else ''}"
        if self.unit != "s":
            return f"≤ {n} / {self.per:g} {self.unit}"
        for unit, size in (("day", 86400.0), ("hour", 3600.0), ("min", 60.0)):
            if self.per >= size and self.per % size == 0:
                k = self.per / size
                return f"≤ {n} / {'' if k == 1 else f'{k:g} '}{unit}{'s' if k > 1 else ''}"
        return f"≤ {n} / {self.per:g} s"


def parse_budget(text: str) -> Budget:
    """``"1/h"``, ``"2/30min"``, ``"1/100 turns"``, ``"1/1000 windows"``, ``"1 per hour"``.

    Raises
    ------
    ValueError
        Anything else, with the accepted forms.

    Examples
    --------
    >>> from idt_desk.detection.detectors import parse_budget
    >>> b = parse_budget("1/10h")
    >>> b.alarms, b.per, b.unit
    (1.0, 36000.0, 's')
    >>> b.windows_per_alarm(20 / 50)  # 20 transitions a second, a window every 50
    14400.0
    >>> str(parse_budget("2/100episodes"))
    '≤ 2 false alarms / 100 episodes'

    """
    number = r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?"
    m = re.fullmatch(rf"\s*({number})\s*(?:/|per)\s*({number})?\s*([A-Za-z]+)\s*",
                     str(text))
    try:
        if m is None:
            raise ValueError
        alarms = float(m.group(1))
        span = float(m.group(2)) if m.group(2) else 1.0
        word = m.group(3).lower()
        if word not in _UNITS and word not in _COUNTS:
            raise ValueError
    except ValueError:
        raise ValueError(
            f"false-alarm budget {text!r}: write COUNT/[SPAN]UNIT, e.g. 1/h, 2/30min, "
            "1/100turns, 1/10episodes, 1/1000windows") from None
    try:
        if word in _UNITS:
            return Budget(alarms, span * _UNITS[word], "s")
        return Budget(alarms, span, _COUNTS[word])
    except ValueError as exc:
        raise ValueError(f"false-alarm budget {text!r}: {exc}") from None


@dataclass(frozen=True)
class DetectorSpec:
    """Which detector and its fixed parameters (the threshold comes from the budget).

    Parameters
    ----------
    kind
        A registered detector's name (:data:`~idt_desk.detection.registry.DETECTORS`):
        ``paper``, ``persistence``, ``cusum``, ``ewma``, ``mewma`` shipped.
    k
        The paper rule's threshold in σ (3). The other detectors calibrate their own.
    m
        Persistence: consecutive windows beyond the threshold (5).
    drift
        CUSUM: the reference value d in σ (0.5).
    lam
        EWMA and MEWMA: the weight λ of the newest window, 0 < λ ≤ 1 (0.05; 1 is the |z| of
        each window).

    """

    kind: str = DEFAULT_DETECTOR
    k: float = 3.0
    m: int = 5
    drift: float = 0.5
    lam: float = 0.05

    def __post_init__(self) -> None:
        if self.kind not in DETECTOR_KINDS:
            raise ValueError(f"unknown detector {self.kind!r}; known: "
                             f"{', '.join(DETECTOR_KINDS)}")
        if not self.k > 0:
            raise ValueError(f"k must be > 0, got {self.k}")
        if int(self.m) != self.m or self.m < 1:
            raise ValueError(f"m must be a whole number >= 1, got {self.m}")
        if not self.drift >= 0:
            raise ValueError(f"drift must be >= 0, got {self.drift}")
        if not 0 < self.lam <= 1:
            raise ValueError(f"the EWMA's λ must be in (0, 1], got {self.lam}")

    @property
    def detector(self) -> Detector:
        """The registered detector this spec names, holding these parameters."""
        return DETECTORS[self.kind](self)

    @property
    def calibrated(self) -> bool:
        """Whether the budget sets the threshold (every detector but the paper's rule)."""
        return DETECTORS[self.kind].calibrated

    def describe(self) -> str:
        """One line for a panel or a report: "CUSUM (d = 0.5σ)", "paper rule (3σ)"."""
        return self.detector.describe()
