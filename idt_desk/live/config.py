"""What a session is: its configuration, its window ring, its event journal, its constants.

:class:`SessionConfig` is everything that defines a session (recorded in full with every
recording); :class:`WindowRing` is the bounded buffer of its latest windows (memory stays
flat over hours); :class:`EventJournal` the events its consumers read. What it shows, the
snapshot, is :mod:`idt_desk.live.snapshot`. Plain data: no thread, no source.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from idt_desk.detection.monitor import ADJUSTED_METRICS
from idt_desk.metrics.tokens import LENGTH_COLUMNS
from idt_desk.metrics.twin import TWIN_COLUMNS
from idt_desk.settings import DEFAULTS, source_defaults

__all__ = [
    "AGENCY_EVERY",
    "MAX_SPEED_CHUNKS",
    "PACE_SLICE",
    "TURN_COLUMNS",
    "WINDOW_COLUMNS",
    "EventJournal",
    "SessionConfig",
    "WindowRing",
    "undefined_reason",
    "versions",
    "window_columns",
]

#: Columns only a dialogue's windows (turns) have: its structural baselines
#: (idt_desk.metrics.embeddings) and its token counts, length-adjusted metrics and their flags
#: (idt_desk.metrics.tokens). NaN elsewhere in the ring; left out of a windows path's files.
TURN_COLUMNS = (
    "cos_sim", "adjacent", "drift",
    *LENGTH_COLUMNS, *ADJUSTED_METRICS, *(f"x_{m}" for m in (*ADJUSTED_METRICS, "IDT_adj")),
)
#: Columns of the session's windows (ring buffer, recording, snapshot).
WINDOW_COLUMNS = (
    "start", "end", "t", "P", "H_f", "H_b", "dH", "MI", "H_S", "H_A", "H_S_next", "H_SA",
    "H_SAS", "H_A_given_S", "MI_A_S_next_given_S", "K_SAS", "unique_frac", "out_of_range",
    "motion", "reward", "x_P", "x_H_f", "x_H_b", "x_dH", "x_IDT", "x_reward", *TWIN_COLUMNS,
    *TURN_COLUMNS,
)


def window_columns(turns: bool) -> tuple[str, ...]:
    """The window columns a recording or an export of a session has (a dialogue's: all)."""
    return WINDOW_COLUMNS if turns else tuple(c for c in WINDOW_COLUMNS
                                              if c not in TURN_COLUMNS)
#: Wall-clock granularity of real-time pacing (s).
PACE_SLICE = 0.02
#: At maximum speed, chunks of this many ``source.chunk`` per step (fast sources).
MAX_SPEED_CHUNKS = 40
#: Wall seconds between two computations of the agency conditions (about 40 ms each: <1 %).
AGENCY_EVERY = 5.0


@dataclass
class SessionConfig:
    """Everything that defines a session; recorded in full with every recording.

    Attributes
    ----------
    source, settings
        Source name and its declared settings.
    preset, bins, window, stride
        Symbolisation preset (default: the source's first) and overrides.
    calibration_windows
        The symboliser's statistics are frozen from the first this-many windows of data.
    baseline_windows
        The monitor's baseline is the this-many windows that follow the calibration windows
        (windows the symbols were fitted on cannot show data leaving the calibrated range);
        None: the source's ``default_baseline`` (800 windows; 2,200 for a policy in an
        environment; a dialogue's 30 turns, the paper's dialogue baseline: each long enough
        for its default alarm).
    detector
        ``persistence`` (``persist`` windows in a row beyond a calibrated kσ), ``cusum``
        (two-sided, reference ``drift`` σ), ``ewma`` (of each component's z, weight
        ``ewma_lambda``), ``mewma`` (one EWMA of the whitened components, weight
        ``ewma_lambda``) or ``paper`` (the first window beyond ``k`` σ, uncalibrated: the
        paper's rule). See ``idt_desk.detection.detectors``. None: the source's
        ``default_detector`` (persistence; MEWMA for a policy in an environment).
    false_alarms
        The false-alarm budget in loop time ("1/h", "1/100turns", "1/10episodes"); None: the
        source's ``default_budget``. The IDT components share it; reward has its own.
    phase_baseline
        An episodic loop (a source with ``episode_steps``): judge each window against the
        baseline's windows at the same phase of the episode (``idt_desk.detection.phase``),
        the IDT components and reward alike. Off by default: on the shipped HalfCheetah
        agents it did not detect more than the pooled baseline (``assets/docs/rl-detection.md``).
    twin
        Step the source's nominal model (``Source.twin``) beside the IDT: each window's
        residual of the physics and, at an alarm, the class of change. On by default.
    k
        The paper rule's threshold in baseline standard deviations.
    correction
        None or "miller-madow".
    speed
        Multiple of real time; None (or 0) for as fast as possible.
    seed
        Seed of the source.
    history
        Windows kept in memory for consumers (memory stays flat over hours).
    auto
        Automatic modulation: {"modulation", "params", "persist", "release"} or None.
    """

    source: str = "pendulum"
    settings: dict[str, Any] = field(default_factory=dict)
    preset: str | None = None
    bins: int | None = None
    window: int | None = None
    stride: int | None = None
    calibration_windows: int = DEFAULTS["calibration_windows"]
    baseline_windows: int | None = None
    detector: str | None = None
    false_alarms: str | None = None
    #: Persistence's m; None: 5 windows, or 1 on the turn path (an injection is one turn).
    persist: int | None = None
    drift: float = DEFAULTS["drift"]
    #: The EWMA detector's λ (the newest window's weight).
    ewma_lambda: float = DEFAULTS["ewma_lambda"]
    phase_baseline: bool = False
    #: Step the source's twin beside the IDT (``idt_desk.metrics.twin``).
    twin: bool = DEFAULTS["twin"]
    k: float = DEFAULTS["k"]
    correction: str | None = None
    speed: float | None = 1.0
    seed: int = 0
    history: int = 20000
    auto: dict[str, Any] | None = None
    #: A full preset (``Preset.to_dict()``) used instead of looking ``preset`` up by name; a
    #: replay sets it to the recorded one.
    preset_spec: dict[str, Any] | None = None
    #: A baseline profile by value (``idt_desk.recordings.profile.Profile.setting``): the
    #: symbols, twin and baseline fitted on another run, so the first window is judged.
    profile: dict[str, Any] | None = None
    #: The metric stage, set from the source: "windows" (symbols over sliding windows; the
    #: preset, calibration and window settings apply) or "turns" (token counts per turn;
    #: ``tokenizer`` applies, no calibration, the baseline is the first ``baseline_windows``
    #: turns).
    metric_path: str = "windows"
    #: Tokenizer of the "turns" path (``idt_desk.metrics.tokens.load_tokenizer``); None: the
    #: default.
    tokenizer: str | None = None
    #: The "turns" path's structural baselines (``idt_desk.metrics.embeddings``: cosine similarities
    #: of sentence embeddings, extra columns beside the metrics): None computes them when the
    #: embeddings extra is installed, True requires it, False never.
    baselines: bool | None = None

    #: Settings only the windows path uses (symbols over sliding windows).
    SYMBOL_FIELDS = ("preset", "bins", "window", "stride", "calibration_windows", "correction",
                     "preset_spec")

    def resolve_defaults(self, source: Any) -> None:
        """Fill the settings left None from ``source`` (:func:`idt_desk.settings.source_defaults`).

        Its metric path, baseline, budget and detector (the preset's, if it names one);
        persistence's m.
        """
        self.metric_path = source.metric_path
        preset = self.preset_spec if self.preset is None and self.preset_spec else self.preset
        for key, value in source_defaults(source, preset).items():
            if getattr(self, key) is None:
                setattr(self, key, value)

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form; a turn path's leaves out the symbol settings, which do not apply."""
        out = asdict(self)
        if self.metric_path == "turns":
            for key in self.SYMBOL_FIELDS:
                out.pop(key, None)
        return out


class WindowRing:
    """Fixed-capacity column store of the latest windows."""

    def __init__(self, capacity: int, columns: tuple[str, ...]) -> None:
        self.capacity = int(capacity)
        self.columns = columns
        self.data = {c: np.full(self.capacity, np.nan) for c in columns}
        self.total = 0

    def append(self, block: Mapping[str, np.ndarray], n: int) -> None:
        """Add ``n`` windows (columns missing from ``block`` are NaN)."""
        if n >= self.capacity:
            block = {c: np.asarray(v)[-self.capacity:] for c, v in block.items()}
            self.total += n - self.capacity
            n = self.capacity
        pos = np.arange(self.total, self.total + n) % self.capacity
        for c in self.columns:
            self.data[c][pos] = block[c] if c in block else np.nan
        self.total += n

    def tail(self, limit: int) -> dict[str, np.ndarray]:
        """Copies of the latest ``limit`` windows, oldest first."""
        n = min(limit, self.total, self.capacity)
        pos = np.arange(self.total - n, self.total) % self.capacity
        return {c: self.data[c][pos] for c in self.columns}


class EventJournal:
    """A session's events: every one kept (a few a minute), the latest few for a snapshot.

    Perturbation and modulation switches are also kept apart, so alarm chatter cannot push
    the start of a long perturbation out of the bounded recent events. Thread-safe: the loop
    appends, consumers copy.
    """

    def __init__(self, recent: int = 500, switches: int = 200) -> None:
        self._lock = threading.Lock()
        self._all: list[dict[str, Any]] = []
        self._recent: deque[dict[str, Any]] = deque(maxlen=recent)
        self._switches: deque[dict[str, Any]] = deque(maxlen=switches)
        self._listeners: list[Callable[[dict[str, Any]], None]] = []

    def add_listener(self, fn: Callable[[dict[str, Any]], None]) -> None:
        """Call ``fn(event)`` with every event as it is logged (in the loop's thread)."""
        self._listeners.append(fn)

    def log(self, ev: dict[str, Any]) -> None:
        """Keep ``ev`` and hand it to the listeners."""
        with self._lock:
            self._all.append(ev)
            self._recent.append(ev)
            if ev["kind"].startswith(("perturbation_", "modulation_")):
                self._switches.append(ev)
        for fn in self._listeners:
            fn(ev)

    def since(self, n: int) -> list[dict[str, Any]]:
        """The events from the ``n``-th on (all of them from 0), oldest first."""
        with self._lock:
            return self._all[max(0, int(n)):]

    def recent(self) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """Copies of the latest events and of the latest switches."""
        with self._lock:
            return list(self._recent), list(self._switches)


def versions() -> dict[str, str]:
    """Versions of Python, the platform and the libraries a recording states."""
    import platform
    import sys

    out = {"python": sys.version.split()[0], "platform": platform.platform()}
    for mod in ("numpy", "numba", "idt_desk"):
        try:
            out[mod] = __import__(mod).__version__
        except Exception:
            out[mod] = "?"
    return out


def undefined_reason(windows: Mapping[str, np.ndarray], j: int) -> str | None:
    """Why window ``j``'s P is undefined (NaN), in one line; None when it is defined.

    P = MI / (H(S) + H(A) + H(S')) has no value when the denominator is 0: every S, A and S'
    symbol in the window is the same (a constant signal, or values clamped into one edge
    bin). Such a window is a gap, never a measured 0.
    """
    p = float(windows["P"][j])
    if p == p:
        return None
    parts = [float(windows[c][j]) for c in ("H_S", "H_A", "H_S_next") if c in windows]
    if all(x == x for x in parts) and sum(abs(x) for x in parts) == 0.0:
        return ("constant window: every S, A and S' symbol is the same "
                "(H(S) + H(A) + H(S') = 0)")
    return "P is not a number in this window (its entropies could not be computed)"
