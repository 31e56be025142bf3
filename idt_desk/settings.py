"""The settings table: every setting's type, range, default, words and flag, written once.

:data:`SETTINGS` gives each setting a user can pass — the pipeline's (symbols, baseline,
detector, budget) and the loop's (seed, history, rate, episode length) — as one
:class:`Setting`: the command line's options (``idt-desk run``), the window's boxes
(``widgets/pipeline_panel.py``), :class:`PipelineSettings` (and through it ``SessionConfig``,
``idt_desk.Recorder``, ``IDTMonitor``, ``IDTCallback`` and a recording being replayed) read
it, so a limit exists once and every front end refuses the same values with the same words
(:meth:`Setting.check`, a :class:`SettingError` naming the field). Checked before anything is
allocated: a window of 10**9 is refused, not tried. Rows are checked here too: a value that is
not finite is refused at the row that carries it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, fields
from typing import Any

import numpy as np

from idt_desk.detection.auto import AutoController
from idt_desk.detection.registry import DETECTOR_KINDS, DETECTORS
from idt_desk.detection.spec import (
    CONTROL_BASELINE_WINDOWS,
    CONTROL_DETECTOR,
    DEFAULT_BASELINE_WINDOWS,
    DEFAULT_BUDGET,
    DEFAULT_DETECTOR,
    Budget,
    DetectorSpec,
    parse_budget,
)
from idt_desk.metrics.presets import ANGLE_MODES, PRESETS
from idt_desk.metrics.tokens import BASELINE_TURNS

__all__ = ["BUFFER_CAP", "BY_VALUE", "DEFAULTS", "LIMITS", "PIPELINE_KEYS", "SETTINGS",
           "PipelineSettings",
           "Setting", "SettingError", "check_buffers", "check_finite", "check_limit",
           "check_pipeline", "check_preset_spec", "is_int", "is_number", "source_defaults"]


class SettingError(ValueError):
    """A setting that cannot be used: ``field`` names it, ``value`` is what was given.

    The message is ``"{field} {value!r}: {why}"`` (or ``why`` alone when it names the
    field itself); a front end maps ``field`` to its own name for it (``--ewma-lambda``, a
    form's row) without reading the message.
    """

    def __init__(self, field: str, value: Any, why: str, message: str | None = None) -> None:
        super().__init__(message or f"{field} {value!r}: {why}")
        self.field, self.value, self.why = field, value, why

    def __reduce__(self) -> tuple[Any, ...]:
        # Pickled whole (a session's process raises it in the window's).
        return (type(self), (self.field, self.value, self.why, str(self)))


def is_int(v: Any) -> bool:
    """An integer (a NumPy one too), never a bool."""
    return isinstance(v, int | np.integer) and not isinstance(v, bool)


def is_number(v: Any) -> bool:
    """A finite real number (int, float or NumPy), never a bool."""
    return isinstance(v, int | float | np.number) and not isinstance(v, bool) and \
        math.isfinite(v)


@dataclass(frozen=True)
class Setting:
    """One setting as every front end sees it: its type, range, default, words and flag.

    ``kind`` is ``int``, ``float``, ``bool`` or ``str``; ``lo``/``hi`` bound a number
    (inclusive, or ``lo_open``); ``choices`` are a text setting's values; ``unset`` says what
    None means (the source decides, say), "" when None is not a value.
    """

    name: str
    kind: type
    default: Any
    label: str
    #: Its words; a function of nothing for words read when said (the detectors registered).
    help: str | Callable[[], str]
    lo: float | None = None
    hi: float | None = None
    lo_open: bool = False
    choices: Sequence[str] = ()
    unset: str = ""
    #: Decimal places the window's box shows (a float there moves on that grid).
    decimals: int = 2

    @property
    def flag(self) -> str:
        """The command line's option for it."""
        return "--" + self.name.replace("_", "-")

    def range_text(self) -> str:
        """What it takes, in words: "an integer from 2 to 65,536"."""
        if self.kind is int:
            return f"an integer from {int(self.lo):,} to {int(self.hi):,}"
        if self.kind is float:
            low = f"{'>' if self.lo_open else '>='} {self.lo:g}"
            return f"a finite number {low}" + ("" if self.hi is None else f" and <= {self.hi:g}")
        if self.kind is bool:
            return "true or false"
        return f"one of {', '.join(self.choices)}" if self.choices else "text"

    def describe(self, default: Any = ..., note: str = "") -> str:
        """Its help, what it takes and its default: the option's help, the box's tooltip.

        ``default``: a command's own default, said instead of the table's; ``note``: what the
        setting is for in that command, said first.
        """
        default = self.default if default is ... else default
        default = self.unset if default is None else f"{default:g}" \
            if isinstance(default, float) else ("on" if default else "off") \
            if self.kind is bool else str(default)
        takes = f"{self.range_text()}; " if self.kind in (int, float) else ""
        words = self.help() if callable(self.help) else self.help
        return f"{note + ': ' if note else ''}{words} ({takes}default: {default})"

    def check(self, value: Any) -> Any:
        """``value`` if this setting takes it; a one-line :class:`SettingError` if not.

        None is taken when the setting may be unset. A whole float (20.0: how a table column
        holds a count) counts as an integer.
        """
        if value is None:
            if self.unset or self.default is None:
                return None
            raise SettingError(self.name, value, f"must be {self.range_text()}")
        if self.kind is int:
            whole = is_int(value) or (isinstance(value, float) and value.is_integer())
            if not whole or not self.lo <= value <= self.hi:
                raise SettingError(self.name, value, f"must be {self.range_text()}")
        elif self.kind is float:
            low_ok = is_number(value) and (value > self.lo if self.lo_open else value >= self.lo)
            if not (low_ok and (self.hi is None or value <= self.hi)):
                raise SettingError(self.name, value, f"must be {self.range_text()}")
        elif self.kind is bool:
            if value not in (True, False) or not isinstance(value, bool | np.bool_):
                raise SettingError(self.name, value, "must be true or false")
        elif self.choices:
            if value not in self.choices:
                known = ", ".join(self.choices)
                raise SettingError(self.name, value, f"unknown; known: {known}",
                                   f"unknown {self.name} {value!r}; known: {known}")
        elif not isinstance(value, str):
            raise SettingError(self.name, value, "must be text")
        return value


_MAX = 2**63 - 1

#: Every setting a user can pass, once: the command line, the window, ``PipelineSettings``,
#: ``SessionConfig``, ``Recorder``, ``IDTMonitor`` and ``IDTCallback`` read them here. The
#: upper bounds keep one window's tables, the calibration buffer and the window history in
#: memory (the engine holds ~600 bytes per transition of W, the history ~400 bytes a window).
SETTINGS: dict[str, Setting] = {s.name: s for s in (
    Setting("preset", str, None, "Preset", "symbolisation preset (the paper's configurations)",
            choices=tuple(PRESETS), unset="the source's first"),
    Setting("bins", int, None, "Bins", "equal-width bins per variable", 2, 65_536,
            unset="the preset's"),
    Setting("window", int, None, "Window W", "window length W in transitions", 2, 100_000,
            unset="the preset's"),
    Setting("stride", int, None, "Stride", "window step in transitions (at most W: no "
            "transition left out)", 1, 100_000, unset="the preset's"),
    Setting("calibration_windows", int, 20, "Calibrate on first N windows",
            "symbol statistics (z-score, bin edges) frozen from the first N windows of data",
            1, 10_000),
    Setting("baseline_windows", int, None, "Baseline windows",
            "the N windows after the calibration windows that set the baseline and calibrate "
            "the detector", 2, 10_000,
            unset=f"the source's: {DEFAULT_BASELINE_WINDOWS}; {CONTROL_BASELINE_WINDOWS:,} for "
                  f"a policy in an environment; a dialogue's {BASELINE_TURNS} turns: each long "
                  "enough for its default alarm"),
    Setting("correction", str, None, "Entropy correction", "entropy bias correction",
            choices=("miller-madow",), unset="none"),
    Setting("k", float, DetectorSpec.k, "Paper rule k",
            "the paper rule's threshold in baseline σ (the calibrated detectors set their own "
            "from the budget)", 0.0, 100.0, lo_open=True),
    Setting("detector", str, None, "Alarm detector",
            lambda: "the alarm: " + ", ".join(c.help for c in DETECTORS.values()),
            choices=DETECTOR_KINDS,
            unset=f"the source's: {DEFAULT_DETECTOR}; {CONTROL_DETECTOR} for a policy in an "
                  "environment"),
    Setting("false_alarms", str, None, "False alarms ≤",
            "false-alarm budget in loop time: 1/h, 2/30min, 1/10episodes, 1/100turns, "
            "1/1000windows", unset=f"the source's: {DEFAULT_BUDGET}; a dialogue's 1/100turns"),
    Setting("persist", int, None, "Persistence m", "persistence: windows in a row beyond kσ",
            1, 1000, unset="5 windows; a dialogue's 1 turn"),
    Setting("drift", float, DetectorSpec.drift, "CUSUM drift",
            "CUSUM: its reference, in σ", 0.0, 100.0),
    Setting("ewma_lambda", float, DetectorSpec.lam, "EWMA λ",
            "EWMA, MEWMA: the newest window's weight λ (it averages about 2/λ − 1 windows; "
            "smaller sees smaller sustained shifts, later)", 0.0, 1.0, lo_open=True,
            decimals=3),
    Setting("phase_baseline", bool, False, "Phase baseline",
            "an episodic loop: judge each window against the baseline at the same phase of "
            "the episode"),
    Setting("twin", bool, True, "Twin",
            "step the loop's nominal model beside the IDT, where the source declares one: "
            "each window's residual of the physics, and at every alarm the class of change "
            "(sensor, actuator, force, dynamics); off saves its cost (about one physics step "
            "a transition)"),
    Setting("seed", int, 0, "Seed", "seed of the source", 0, _MAX),
    Setting("history", int, 20_000, "History", "windows kept in memory for the window's "
            "plots (memory stays flat over hours)", 1, 1_000_000),
    Setting("block", int, None, "Block", "transitions the engine takes at a time", 1,
            1_000_000, unset="the window"),
    Setting("rate", float, None, "Rate", "transitions per second of the loop's own time",
            0.0, 1e9, lo_open=True, unset="none: the loop's time is its step count"),
    Setting("episode_steps", int, None, "Episode steps", "steps of an episode, for budgets "
            "per episode", 1, 10**12, unset="no episodes"),
    Setting("auto_persist", int, AutoController.persist, "Engage after",
            "automatic modulation: alarmed windows in a row before it engages", 1, 1000),
    Setting("auto_release", int, AutoController.release, "Release after quiet",
            "automatic modulation: quiet windows in a row before it releases", 1, 10_000),
)}

#: The integer settings' ranges (inclusive), from :data:`SETTINGS`.
LIMITS: dict[str, tuple[int, int]] = {
    k: (int(s.lo), int(s.hi)) for k, s in SETTINGS.items() if s.kind is int}

#: The most memory (bytes) the rows held for the symbols' calibration may take: they are all
#: kept until the calibration windows are complete (measured ~216 bytes a transition for the
#: pendulum's 4 state variables, about twice their float64 values).
BUFFER_CAP = 2 * 2**30


_PRESET_FIELDS = ("name", "description", "bins", "window", "stride", "state_groups",
                  "action_groups", "angles", "angle_mode", "n_state", "n_action", "parts",
                  "range_margin", "detector", "caveat", "auto_view")


def check_limit(key: str, value: Any) -> None:
    """``value`` must be None or what ``SETTINGS[key]`` takes; SettingError (one line) if not."""
    if value is not None:
        SETTINGS[key].check(value)


def check_buffers(window: int, stride: int, calibration_windows: int, n_state: int,
                  n_action: int) -> None:
    """Refuse settings whose calibration buffer would exceed :data:`BUFFER_CAP`, naming them.

    The symbols are fitted on the first ``window + (calibration_windows - 1) * stride`` rows,
    all held until then: S, A and S' as float64 and their copies when they are joined.
    """
    for key, value in (("window", window), ("stride", stride),
                       ("calibration_windows", calibration_windows)):
        check_limit(key, value)
    rows = int(window) + (int(calibration_windows) - 1) * int(stride)
    size = rows * 16 * (2 * int(n_state) + int(n_action) + 4)
    if size > BUFFER_CAP:
        text = (f"window {int(window):,}, stride {int(stride):,} and calibration_windows "
                f"{int(calibration_windows):,} calibrate the symbols on {rows:,} transitions, "
                f"about {size / 2**30:,.0f} GiB held until then (at most "
                f"{BUFFER_CAP / 2**30:g} GiB): fewer calibration windows or a shorter window "
                "or stride")
        raise SettingError("calibration_windows", calibration_windows, text, text)


@dataclass(frozen=True)
class PipelineSettings:
    """A pipeline's settings, checked: the one table of their defaults and their one parse.

    Built by :meth:`parse` from a mapping (the command line's options, the GUI's panels, a
    recording's pipeline), which checks every value's type and range (:data:`LIMITS`) and
    reads the false-alarm budget once (:attr:`budget`); an error names the field
    (:class:`SettingError`). None leaves a setting to the source (its preset, detector,
    budget, baseline) or to the detector (persistence's m).
    """

    preset: str | None = SETTINGS["preset"].default
    bins: int | None = SETTINGS["bins"].default
    window: int | None = SETTINGS["window"].default
    stride: int | None = SETTINGS["stride"].default
    calibration_windows: int = SETTINGS["calibration_windows"].default
    baseline_windows: int | None = SETTINGS["baseline_windows"].default
    correction: str | None = SETTINGS["correction"].default
    #: The paper rule's threshold, in baseline σ.
    k: float = SETTINGS["k"].default
    preset_spec: Mapping[str, Any] | None = None
    detector: str | None = SETTINGS["detector"].default
    false_alarms: str | None = SETTINGS["false_alarms"].default
    persist: int | None = SETTINGS["persist"].default
    #: CUSUM's reference, in σ.
    drift: float = SETTINGS["drift"].default
    #: EWMA and MEWMA: the newest window's weight λ (it averages about 2/λ − 1 windows).
    ewma_lambda: float = SETTINGS["ewma_lambda"].default
    phase_baseline: bool = SETTINGS["phase_baseline"].default
    #: Step the source's twin (``Source.twin``) beside the IDT.
    twin: bool = SETTINGS["twin"].default
    #: A baseline profile (``idt_desk.recordings.profile``) by value, as a recording holds it:
    #: ``{"path", "digest", "document"}``; checked whole when the pipeline is built. None:
    #: the session fits its own symbols and baseline.
    profile: Mapping[str, Any] | None = None

    def __post_init__(self) -> None:
        # Read once (parse checked it): the monitor takes it as it is.
        object.__setattr__(self, "_budget", None if self.false_alarms is None
                           else parse_budget(self.false_alarms))

    @property
    def budget(self) -> Budget | None:
        """The false-alarm budget, read (None: the source's default)."""
        return self._budget

    @classmethod
    def parse(cls, p: Mapping[str, Any], *, strict: bool = False) -> PipelineSettings:
        """Check ``p`` and fill what it leaves out from :data:`DEFAULTS`.

        ``strict``: every key must be one of :data:`PIPELINE_KEYS` (a recorded pipeline);
        otherwise keys that are not pipeline settings are ignored. Checked before anything
        is allocated: a window of 10**9 is refused, not tried.

        Raises
        ------
        SettingError
            An unknown key (strict), a wrong type, or a value out of range, named.
        """
        if not isinstance(p, Mapping):
            raise SettingError("pipeline", p, "", "pipeline settings must be a mapping, got "
                               f"{type(p).__name__}")
        if strict and (bad := [k for k in p if k not in PIPELINE_KEYS]):
            raise SettingError(bad[0], p[bad[0]], "", f"unknown pipeline setting {bad[0]!r}; "
                               f"known: {', '.join(PIPELINE_KEYS)}")
        for key in PIPELINE_KEYS:
            if key not in BY_VALUE and p.get(key) is not None:  # None: the default
                SETTINGS[key].check(p[key])
        prof = p.get("profile")
        if prof is not None and not (isinstance(prof, Mapping) and
                                     isinstance(prof.get("document"), Mapping)):
            raise SettingError("profile", "…", "", "profile: a baseline profile by value "
                               "({'path', 'digest', 'document'}); give a profile's path to "
                               "the front end (--baseline, baseline=)")
        window, stride = p.get("window"), p.get("stride")
        if window is not None and stride is not None and stride > window:
            raise SettingError("stride", stride, f"is longer than the window ({window}): the "
                               "transitions between windows would never be judged")
        budget = p.get("false_alarms")
        spec = p.get("preset_spec")
        if spec is not None:
            try:
                check_preset_spec(spec)
            except ValueError as exc:
                raise SettingError("preset_spec", spec, str(exc), str(exc)) from None
        given = {k: p[k] for k in PIPELINE_KEYS if k in p and p[k] is not None}
        try:
            return cls(**{**DEFAULTS, **given})  # the budget is read here, once
        except ValueError as exc:
            raise SettingError("false_alarms", budget, str(exc), str(exc)) from None

    def to_dict(self) -> dict[str, Any]:
        """The settings as a recording states them."""
        return asdict(self)


#: Pipeline settings given by value (a preset, a baseline profile), not in the settings table.
BY_VALUE = ("preset_spec", "profile")

#: The pipeline settings' defaults: the one table every front end's defaults come from.
DEFAULTS: dict[str, Any] = {f.name: f.default for f in fields(PipelineSettings)}
#: The settings a pipeline is made of (what a recording states and a replay re-applies).
PIPELINE_KEYS: tuple[str, ...] = tuple(DEFAULTS)


def source_defaults(source: Any, preset: Any = None) -> dict[str, Any]:
    """What the settings left unset become for ``source`` (an instance or its class): once.

    The baseline, budget and detector the source declares (``default_baseline``,
    ``default_budget``, ``default_detector``) — the detector the preset names first, when
    it names one (``preset``: a :class:`~idt_desk.metrics.presets.Preset`, a preset by value
    as a recording states it, a name, or None for the source's first) — and persistence's m:
    one turn on a dialogue's turn path (an injection is one turn), else
    :attr:`DetectorSpec.m <idt_desk.detection.detectors.DetectorSpec>` windows.
    ``SessionConfig``, the monitor a pipeline builds, the window's boxes and the studies read
    them here.
    """
    if preset is None or isinstance(preset, str):
        name = preset or (source.presets[0] if source.presets else None)
        preset = PRESETS.get(name)
    named = preset.get("detector") if isinstance(preset, Mapping) else \
        getattr(preset, "detector", None)
    turns = source.metric_path == "turns"
    return {"baseline_windows": int(source.default_baseline),
            "false_alarms": source.default_budget,
            "detector": named or source.default_detector,
            "persist": 1 if turns else DetectorSpec.m}


def check_pipeline(p: Mapping[str, Any], *, strict: bool = False) -> None:
    """Check pipeline settings (:meth:`PipelineSettings.parse`), one line naming the first bad.

    Raises
    ------
    SettingError
        An unknown key (strict), a wrong type, or a value out of range.
    """
    PipelineSettings.parse(p, strict=strict)


def check_preset_spec(spec: Any, n_state: int | None = None,
                      n_action: int | None = None) -> None:
    """A preset given by value (as a recording states it): known fields of the right types.

    With the loop's ``n_state`` and ``n_action``, its angles and groups must index them.
    """
    if not isinstance(spec, Mapping):
        raise ValueError(f"preset_spec must be a mapping, got {type(spec).__name__}")
    if bad := [k for k in spec if k not in _PRESET_FIELDS]:
        raise ValueError(f"preset_spec: unknown field {bad[0]!r}")
    for key in ("bins", "window", "stride"):
        if key not in spec:
            raise ValueError(f"preset_spec: no {key}")
        check_limit(key, spec[key])
    for key in ("name", "description"):
        if not isinstance(spec.get(key), str):
            raise ValueError(f"preset_spec: {key} must be text")
    if spec.get("angle_mode", "none") not in ANGLE_MODES:
        raise ValueError(f"preset_spec: angle_mode {spec['angle_mode']!r}: must be one of "
                         f"{', '.join(ANGLE_MODES)}")
    for key in ("n_state", "n_action"):
        if spec.get(key) is not None and not (is_int(spec[key]) and 0 <= spec[key] <= 10**6):
            raise ValueError(f"preset_spec: {key} {spec[key]!r}: must be a count of variables")
    index = range(10**6)
    if not (isinstance(spec.get("angles", []), list | tuple)
            and all(is_int(j) and j in index for j in spec.get("angles", []))):
        raise ValueError("preset_spec: angles must be variable indices")
    for key in ("state_groups", "action_groups"):
        groups = spec.get(key)
        if groups is not None and not (
                isinstance(groups, list | tuple) and len(groups) <= 10**6 and all(
                    isinstance(g, list | tuple) and all(is_int(j) and j in index for j in g)
                    for g in groups)):
            raise ValueError(f"preset_spec: {key} must be lists of variable indices")
    parts = spec.get("parts", ())
    if not (isinstance(parts, list | tuple) and all(isinstance(p, str) for p in parts)
            and (not parts or len(parts) == len(spec.get("state_groups") or ()))):
        raise ValueError("preset_spec: parts must name each state group")
    margin = spec.get("range_margin", 0.0)
    if isinstance(margin, bool) or not isinstance(margin, int | float) or not 0 <= margin <= 10:
        raise ValueError(f"preset_spec: range_margin {margin!r}: must be a number from 0 to 10")
    if spec.get("detector") is not None and not isinstance(spec["detector"], str):
        raise ValueError("preset_spec: detector must be a detector's name")
    if not isinstance(spec.get("caveat", ""), str) or len(spec.get("caveat", "")) > 1000:
        raise ValueError("preset_spec: caveat must be text of at most 1,000 characters")
    if not isinstance(spec.get("auto_view", False), bool):
        raise ValueError("preset_spec: auto_view must be true or false")
    if spec.get("auto_view") and (spec.get("state_groups") or spec.get("action_groups")):
        raise ValueError("preset_spec: a view chosen on the calibration windows (auto_view) "
                         "takes no groups")
    for key, count in (("angles", n_state), ("state_groups", n_state),
                       ("action_groups", n_action)):
        value = spec.get(key) or []
        used = value if key == "angles" else [j for g in value for j in g]
        if count is not None and any(j >= count for j in used):
            raise ValueError(f"preset_spec: {key} {_cut(value)}: the loop has {count} "
                             f"{'state' if key != 'action_groups' else 'action'} variables")


def _cut(v: Any) -> str:
    text = repr(v)
    return text if len(text) <= 60 else text[:57] + "..."


def check_finite(what: str, rows: np.ndarray, names: Sequence[str], first: int) -> None:
    """Refuse a non-finite value at the row that carries it.

    ``rows`` (n × len(names)) are transitions ``first``, ``first + 1``, ...: the error names
    the transition, the row of this batch and the variable, in one line.

    Raises
    ------
    ValueError
        The first NaN or infinity in ``rows``.
    """
    bad = ~np.isfinite(rows)
    if bad.any():
        row, col = (int(x) for x in np.argwhere(bad)[0])
        name = names[col] if col < len(names) else f"column {col}"
        raise ValueError(f"{what} of transition {first + row:,} (row {row} of this batch): "
                         f"{name} is {rows[row, col]}; the IDT metrics need finite numbers")
