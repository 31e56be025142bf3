"""The pipeline's settings: their limits and their checks, wherever they come from.

The command line, the GUI, ``idt_desk.Recorder`` and a recording being replayed all build
pipelines from settings; every one is checked here, for its type and range, before anything
is allocated, with one line naming the setting (a window of 10**9 is refused, not tried).
Rows are checked here too: a value that is not finite is refused at the row that carries it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, fields
from typing import Any

import numpy as np

from idt_desk.detection.detectors import DETECTOR_KINDS, Budget, DetectorSpec, parse_budget
from idt_desk.metrics.presets import ANGLE_MODES, PRESETS

__all__ = ["BUFFER_CAP", "DEFAULTS", "LIMITS", "PIPELINE_KEYS", "PipelineSettings",
           "SettingError", "check_buffers", "check_finite", "check_limit", "check_pipeline",
           "check_preset_spec", "is_int", "is_number"]


class SettingError(ValueError):
    """A setting that cannot be used: ``field`` names it, ``value`` is what was given.

    The message is ``"{field} {value!r}: {why}"`` (or ``why`` alone when it names the
    field itself); a front end maps ``field`` to its own name for it (``--ewma-lambda``, a
    form's row) without reading the message.
    """

    def __init__(self, field: str, value: Any, why: str, message: str | None = None) -> None:
        super().__init__(message or f"{field} {value!r}: {why}")
        self.field, self.value, self.why = field, value, why


#: Allowed ranges (inclusive) of the pipeline's integer settings, wherever they come from
#: (the command line, the GUI, ``Recorder``, a recording being replayed). The upper bounds
#: keep one window's tables, the calibration buffer and the window history in memory (the
#: engine holds ~600 bytes per transition of W, the history ~400 bytes a window).
LIMITS: dict[str, tuple[int, int]] = {
    "bins": (2, 65_536),
    "window": (2, 100_000),
    "stride": (1, 100_000),
    "calibration_windows": (1, 10_000),
    "baseline_windows": (2, 10_000),
    "persist": (1, 1000),
    "history": (1, 1_000_000),
    "seed": (0, 2**63 - 1),
    "block": (1, 1_000_000),
}

#: The most memory (bytes) the rows held for the symbols' calibration may take: they are all
#: kept until the calibration windows are complete (measured ~216 bytes a transition for the
#: pendulum's 4 state variables, about twice their float64 values).
BUFFER_CAP = 2 * 2**30


_PRESET_FIELDS = ("name", "description", "bins", "window", "stride", "state_groups",
                  "action_groups", "angles", "angle_mode", "n_state", "n_action", "parts",
                  "range_margin", "detector")


def is_int(v: Any) -> bool:
    """An integer (a NumPy one too), never a bool."""
    return isinstance(v, int | np.integer) and not isinstance(v, bool)


def is_number(v: Any) -> bool:
    """A finite real number (int, float or NumPy), never a bool."""
    return isinstance(v, int | float | np.number) and not isinstance(v, bool) and \
        math.isfinite(v)


def _number(key: str, v: Any, lo: float, hi: float | None = None,
            lo_open: bool = False) -> None:
    ok = is_number(v) and (v > lo if lo_open else v >= lo) and (hi is None or v <= hi)
    if not ok:
        rng = f"{'>' if lo_open else '>='} {lo:g}" + ("" if hi is None else f" and <= {hi:g}")
        raise SettingError(key, v, f"must be a finite number {rng}")


def check_limit(key: str, value: Any) -> None:
    """``value`` must be None or an integer in ``LIMITS[key]``; ValueError (one line) if not.

    A whole float (20.0: how a table column holds a count) counts as an integer.
    """
    if value is None:
        return
    lo, hi = LIMITS[key]
    whole = is_int(value) or (isinstance(value, float) and value.is_integer())
    if not whole or not lo <= value <= hi:
        raise SettingError(key, value, f"must be an integer from {lo:,} to {hi:,}")


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

    preset: str | None = None
    bins: int | None = None
    window: int | None = None
    stride: int | None = None
    calibration_windows: int = 20
    baseline_windows: int | None = None
    correction: str | None = None
    #: The paper rule's threshold, in baseline σ.
    k: float = DetectorSpec.k
    preset_spec: Mapping[str, Any] | None = None
    detector: str | None = None
    false_alarms: str | None = None
    persist: int | None = None
    #: CUSUM's reference, in σ.
    drift: float = DetectorSpec.drift
    #: EWMA and MEWMA: the newest window's weight λ (it averages about 2/λ − 1 windows).
    ewma_lambda: float = DetectorSpec.lam
    phase_baseline: bool = False

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
        for key in ("bins", "window", "stride", "calibration_windows", "baseline_windows",
                    "persist"):
            check_limit(key, p.get(key))
        for key, lo, hi, lo_open in (("k", 0.0, None, True), ("drift", 0.0, None, False),
                                     ("ewma_lambda", 0.0, 1.0, True)):
            if p.get(key) is not None:
                _number(key, p[key], lo, hi, lo_open=lo_open)
        if p.get("phase_baseline") not in (None, True, False):
            raise SettingError("phase_baseline", p["phase_baseline"], "must be true or false")
        for key, allowed in (("detector", DETECTOR_KINDS),
                             ("correction", (None, "miller-madow")),
                             ("preset", (None, *PRESETS))):
            if key in p and p[key] not in allowed and not (key == "detector" and p[key] is None):
                known = ", ".join(str(a) for a in allowed if a is not None)
                raise SettingError(key, p[key], f"unknown; known: {known}",
                                   f"unknown {key} {p[key]!r}; known: {known}")
        budget = p.get("false_alarms")
        if budget is not None and not isinstance(budget, str):
            raise SettingError("false_alarms", budget, "must be a budget such as '1/h'")
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


#: The pipeline settings' defaults: the one table every front end's defaults come from.
DEFAULTS: dict[str, Any] = {f.name: f.default for f in fields(PipelineSettings)}
#: The settings a pipeline is made of (what a recording states and a replay re-applies).
PIPELINE_KEYS: tuple[str, ...] = tuple(DEFAULTS)


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
