"""The wrapper's and the callback's shared parts: spaces, presets, the stream, recording.

A Gymnasium space becomes symbol-ready columns (:class:`SpaceCodec`), a preset is chosen
for the env (:func:`resolve_preset`), and :class:`Stream` buffers one env's transitions
into blocks for the :class:`~idt_desk.pipeline.Pipeline`. See :mod:`idt_desk.gym`.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import gymnasium
import numpy as np
from gymnasium import spaces

from idt_desk.detection.attribution import attribute
from idt_desk.detection.detectors import (
    CONTROL_BASELINE_WINDOWS,
    CONTROL_BUDGET,
    CONTROL_DETECTOR,
    DetectorSpec,
    parse_budget,
)
from idt_desk.detection.monitor import IDT_METRICS, Monitor
from idt_desk.metrics.engine import WINDOW_KEYS
from idt_desk.metrics.presets import PRESETS, Preset
from idt_desk.metrics.regime import regime, regime_text
from idt_desk.metrics.twin import TWIN_COLUMNS, TWIN_METRICS, Twin
from idt_desk.pipeline import Pipeline, build_monitor
from idt_desk.settings import SETTINGS, PipelineSettings, check_finite, check_limit

if TYPE_CHECKING:
    import pandas as pd

    from idt_desk.live.recorder import Recorder

__all__ = ["ALARM_DEFAULTS", "GENERIC_PRESET", "IDT_COLUMNS", "LOGGED_METRICS", "SpaceCodec",
           "Stream", "alarm_monitor", "check_options", "check_recordable", "flat", "frame",
           "loop_rate", "open_recording", "record_path", "resolve_preset", "resolve_twin"]

#: Keys of a window, in order (``info["idt"]``, the rows of ``windows``): ``start`` and
#: ``end`` (first transition and one past the last: the number of transitions seen when the
#: window finished), ``episode`` (episode of the window's last transition), the engine's
#: :data:`~idt_desk.WINDOW_KEYS`, ``reward`` (mean reward over the window),
#: ``out_of_range`` (fraction of its transitions with a value clamped into an edge bin),
#: ``motion`` (how far S moved in the window, in bins: under 1, the loop is ``still``) and
#: the alarm's flags ``x_P`` … ``x_IDT`` (1.0 alarm, 0.0 none, NaN no verdict: calibration
#: and baseline windows, or no detector), exactly as a live session flags them, and the
#: twin's residual channels and alarm (``idt_desk.metrics.twin``; NaN without a twin).
IDT_COLUMNS = ("start", "end", "episode", *WINDOW_KEYS[1:], "reward", "out_of_range",
               "motion", "x_P", "x_H_f", "x_H_b", "x_dH", "x_IDT", *TWIN_COLUMNS)
_INT_COLUMNS = frozenset({"start", "end", "episode", "K_S", "K_A", "K_S_next", "K_SAS"})

#: What the SB3 callback logs (as ``idt/<key>``) by default.
LOGGED_METRICS = ("P", "H_f", "H_b", "dH", "unique_frac")

#: The preset used when none is given (``"auto"``): W = 300, stride 50 (the paper's
#: HalfCheetah numbers) and the view that resolves the calibration windows, 3 bins a
#: variable first (:mod:`idt_desk.metrics.views`). ``bins`` given fixes the view.
GENERIC_PRESET = PRESETS["auto"]


# ---------------------------------------------------------------------------------------------
# Spaces and presets
# ---------------------------------------------------------------------------------------------


#: Most variables a space may have (an observation's or an action's): a robot's state has
#: tens; more is an image or a sensor array, which the IDT's bins do not describe.
MAX_VARIABLES = 1024


class SpaceCodec:
    """How one Gymnasium space becomes a row of variables."""

    def __init__(self, space: gymnasium.Space, role: str) -> None:
        self.space = space
        self.discrete_n: int | None = None
        self.ranges: dict[int, tuple[float, float]] = {}
        if isinstance(space, spaces.Discrete):
            n, start = int(space.n), int(space.start)
            self.shape: tuple[int, ...] = ()
            self.dim = 1
            self.discrete_n = n
            self.ranges = {0: (float(start), float(start + n - 1))}
        elif isinstance(space, spaces.Box):
            self.shape = tuple(int(d) for d in space.shape)
            self.dim = math.prod(self.shape)
            if self.dim < 1:
                raise ValueError(f"the {role} space {space} has no variables")
            if self.dim > MAX_VARIABLES:
                # An image (64×64×3: 12,288 variables) grew the wrapper past 5.9 GB: each
                # variable is binned and kept; the IDT reads a state, not pixels.
                raise ValueError(
                    f"the {role} space {space} has {self.dim:,} variables, more than the "
                    f"{MAX_VARIABLES:,} the IDT symbolises: give it a state (a feature "
                    "extractor's output, a projection such as gymnasium.wrappers."
                    "ResizeObservation and FlattenObservation to a few numbers, or the "
                    "simulator's own state)")
        else:
            hint = ("flatten it first (gymnasium.wrappers.FlattenObservation)"
                    if role == "observation" else "wrap the env to act through one")
            raise ValueError(f"IDT metrics need a Box or Discrete {role} space, got {space}; "
                             f"{hint}")

    def bins(self, preset_bins: int) -> int:
        """Bins per variable: a Discrete space's n values are each their own bin."""
        return self.discrete_n if self.discrete_n is not None else preset_bins

    def buffer(self, capacity: int) -> np.ndarray:
        """An empty float64 store of ``capacity`` rows of this space."""
        return np.empty((capacity, *self.shape), dtype=np.float64)


def resolve_preset(
    preset: str | Preset | None,
    observation_space: gymnasium.Space,
    action_space: gymnasium.Space,
    bins: int | None = None,
    window: int | None = None,
    stride: int | None = None,
) -> Preset:
    """The preset to use on these spaces, with overrides applied and checked.

    Parameters
    ----------
    preset
        A name in :data:`~idt_desk.PRESETS`, a :class:`~idt_desk.Preset`, or None for
        :data:`GENERIC_PRESET` (each variable its own group).
    observation_space, action_space
        The env's spaces (Box or Discrete).
    bins, window, stride
        Overrides of the preset's values.

    Returns
    -------
    Preset
        With ``n_state`` / ``n_action`` set to the spaces' variable counts.

    Raises
    ------
    ValueError
        Unknown preset name, an unsupported space, bad overrides, or a preset whose
        ``n_state`` / ``n_action`` or groups do not fit the spaces.

    """
    obs = SpaceCodec(observation_space, "observation")
    act = SpaceCodec(action_space, "action")
    if preset is None:
        base = GENERIC_PRESET
    elif isinstance(preset, str):
        if preset not in PRESETS:
            raise ValueError(f"unknown preset {preset!r}; known: {', '.join(PRESETS)}")
        base = PRESETS[preset]
    elif isinstance(preset, Preset):
        base = preset
    else:
        raise TypeError(f"preset must be a name, a Preset or None, got {type(preset).__name__}")
    changes = {k: v for k, v in (("bins", bins), ("window", window), ("stride", stride))
               if v is not None}
    for key, value in changes.items():
        if isinstance(value, bool) or int(value) != value:
            raise ValueError(f"{key} must be an integer, got {value!r}")
    p = replace(base, **{k: int(v) for k, v in changes.items()})
    if "bins" in changes and p.auto_view:  # the user's bins: the view is theirs, not chosen
        p = replace(PRESETS["gym"], bins=p.bins, window=p.window, stride=p.stride)
    if p.bins < 1 or p.window < 2 or p.stride < 1:
        raise ValueError(f"need bins >= 1, window >= 2, stride >= 1; got bins={p.bins}, "
                         f"window={p.window}, stride={p.stride}")
    if (p.n_state is not None and p.n_state != obs.dim) or (
            p.n_action is not None and p.n_action != act.dim):
        want_s = "any number of" if p.n_state is None else str(p.n_state)
        want_a = "any number of" if p.n_action is None else str(p.n_action)
        raise ValueError(
            f"preset {p.name!r} expects {want_s} state variables and {want_a} action "
            f"variables; the env has {obs.dim} observation variables ({observation_space}) "
            f"and {act.dim} action variables ({action_space})"
        )
    for what, groups, dim in (("state", p.state_groups, obs.dim),
                              ("action", p.action_groups, act.dim)):
        flat = [j for g in groups or () for j in g]
        if flat and (min(flat) < 0 or max(flat) >= dim):
            raise ValueError(f"preset {p.name!r}: {what} groups use variable {max(flat)}, "
                             f"but the env has {dim} {what} variables")
    if p.angle_mode == "wrap" and p.angles and max(p.angles) >= obs.dim:
        raise ValueError(f"preset {p.name!r}: angle variable {max(p.angles)} out of range for "
                         f"{obs.dim} observation variables")
    return replace(p, n_state=obs.dim, n_action=act.dim)


# ---------------------------------------------------------------------------------------------
# The stream: shared by the wrapper and the callback
# ---------------------------------------------------------------------------------------------


class _Columns:
    """Growable column store of windows (8 bytes per column per window)."""

    def __init__(self) -> None:
        self.n = 0
        self._data = {c: np.empty(64, dtype=np.int64 if c in _INT_COLUMNS else np.float64)
                      for c in IDT_COLUMNS}

    def extend(self, block: Mapping[str, np.ndarray], k: int) -> None:
        cap = len(self._data["start"])
        if self.n + k > cap:
            new = max(2 * cap, self.n + k)
            for c, v in self._data.items():
                grown = np.empty(new, dtype=v.dtype)
                grown[: self.n] = v[: self.n]
                self._data[c] = grown
        for c, v in self._data.items():
            v[self.n: self.n + k] = block[c]
        self.n += k

    def arrays(self) -> dict[str, np.ndarray]:
        return {c: v[: self.n].copy() for c, v in self._data.items()}


class Stream:
    """One (S, A, S') stream: a buffer before the window stage and its monitor.

    :meth:`add` copies a transition into a buffer; when the buffer completes the calibration
    or a window, the block goes through the same :class:`~idt_desk.pipeline.Pipeline` as a
    live session's, and the windows it finished are returned. With a ``twin`` every IDT
    alarm is attributed as a session's are (:attr:`alarms`; ``twin_note`` says why not
    without one).
    """

    def __init__(
        self,
        preset: Preset,
        state: SpaceCodec,
        action: SpaceCodec,
        calibration_windows: int = 20,
        correction: str | None = None,
        block: int | None = None,
        monitor: Monitor | None = None,
        twin: Twin | None = None,
        twin_note: str = "",
    ) -> None:
        cw = calibration_windows
        if isinstance(cw, bool) or int(cw) != cw or cw < 1:
            raise ValueError(f"calibration_windows must be an integer >= 1, "
                             f"got {calibration_windows!r}")
        self.preset = preset
        self._state, self._action = state, action
        self._names = ([f"obs_{j}" for j in range(state.dim)],
                       [f"act_{j}" for j in range(action.dim)])
        self.pipeline = Pipeline(
            preset, monitor, state_names=self._names[0], action_names=self._names[1],
            state_bins=state.discrete_n, action_bins=action.discrete_n,
            calibration_windows=int(calibration_windows), correction=correction,
            mean_columns=("reward",), end_columns=("episode",), twin=twin)
        #: Why alarms are not attributed ("" with a twin).
        self.twin_note = twin_note
        #: Each IDT alarm: ``end`` of its first window, ``attribution`` and ``evidence`` (named
        #: a window length less a stride after it).
        self.alarms: list[dict[str, Any]] = []
        self._alarmed = False
        self._naming: list[tuple[int, int]] = []  # (window to name it at, the alarm's end)
        self.engine = self.pipeline.engine
        self.monitor = monitor
        self.calibration_windows = int(calibration_windows)
        #: Transitions the symbols are calibrated on.
        self.calibration_transitions = self.pipeline.calibration_transitions
        if block is not None:
            check_limit("block", block)
        #: At least this many transitions per symbolise + push (blocks end at window ends).
        self.block = preset.stride if block is None else int(block)
        cap = max(self.calibration_transitions, self.block + preset.stride)
        self._s, self._n = state.buffer(cap), state.buffer(cap)
        self._a = action.buffer(cap)
        #: Values a transition's S, A and S' hold (checked at each step, before numpy would
        #: broadcast a wrong one silently or fail naming nothing).
        self._widths = tuple(int(np.prod(b.shape[1:])) for b in (self._s, self._a, self._n))
        self._r = np.empty(cap)
        self._ep = np.empty(cap)
        self._k = 0  # rows buffered
        self._due = self.calibration_transitions  # rows that complete the next block
        self._windows = _Columns()
        self.latest: dict[str, float | int] | None = None

    @property
    def calibrated(self) -> bool:
        """Whether the symbols are frozen (the first windows have been computed)."""
        return self.pipeline.calibrated

    @property
    def n_transitions(self) -> int:
        """Transitions added so far."""
        return self.engine.n_seen + self._k

    def add(self, s: Any, a: Any, s_next: Any, reward: float, episode: int
            ) -> dict[str, np.ndarray] | None:
        """Add one transition; return the windows it finished (columns), or None."""
        k = self._k
        ws, wa, wn = self._widths
        if np.size(s) != ws or np.size(a) != wa or np.size(s_next) != wn:
            self._wrong_shape(s, a, s_next)
        self._s[k] = s
        self._a[k] = a
        self._n[k] = s_next
        self._r[k] = reward
        self._ep[k] = episode
        for what, buf, names in (("s", self._s, self._names[0]), ("a", self._a, self._names[1]),
                                 ("s_next", self._n, self._names[0])):
            # Refused at this step, not a block later inside the pipeline.
            check_finite(what, buf[k].reshape(1, -1), names, self.n_transitions)
        self._k = k = k + 1
        if k < self._due:
            return None
        return self._flush()

    def _wrong_shape(self, s: Any, a: Any, s_next: Any) -> None:
        """Raise, naming the value whose size is not its space's (off the per-step path)."""
        for what, value, width in zip(("observation", "action", "next observation"),
                                      (s, a, s_next), self._widths, strict=True):
            if np.size(value) != width:
                raise ValueError(f"{what} of transition {self.n_transitions:,}: "
                                 f"{np.size(value)} value(s), shape {np.shape(value)}; the "
                                 f"space has {width} variable(s)")

    def flush(self) -> dict[str, np.ndarray] | None:
        """Symbolise and push what is buffered (after calibration); return new windows."""
        if not self.calibrated or self._k == 0:
            return None
        return self._flush()

    def _flush(self) -> dict[str, np.ndarray] | None:
        k, self._k = self._k, 0
        s = self._s[:k].reshape(k, -1)
        a = self._a[:k].reshape(k, -1)
        n = self._n[:k].reshape(k, -1)
        w = self.pipeline.push(s, a, n, {"reward": self._r[:k], "episode": self._ep[:k]},
                               ranges=(self._state.ranges, self._action.ranges)).windows
        W, stride = self.preset.window, self.preset.stride
        # The next block ends at the first window end at least `block` transitions away.
        due = self.engine.next_window_start + W - self.engine.n_seen
        self._due = due + max(0, -(-(self.block - due) // stride)) * stride
        if w is None:
            return None
        m = len(w["start"])
        table = dict(w)
        table["episode"] = table["episode"].astype(np.int64)
        table = {c: table[c] if c in table else np.full(m, np.nan) for c in IDT_COLUMNS}
        self._windows.extend(table, m)
        self._attribute(table["x_IDT"], table["end"])
        self.latest = {c: v[-1].item() for c, v in table.items()}
        # The estimator's regime of this window, and what it means (never silent when blind).
        name = regime(self.latest["unique_frac"], self.latest["H_f"], self.latest["motion"])
        self.latest["regime"] = name
        self.latest["regime_text"] = regime_text(name, self.latest["unique_frac"], W)
        if self.pipeline.view:  # an auto preset's choice, made on the calibration windows
            self.latest["view"] = self.pipeline.view
        if self._alarmed and self.alarms:  # the alarm in force says what changed
            self.latest.update({k: self.alarms[-1][k] for k in ("attribution", "evidence")})
        return table

    def _attribute(self, flags: np.ndarray, ends: np.ndarray) -> None:
        """Each rising IDT alarm, attributed from the twin (or said why not) as a session does.

        A window length less a stride after the alarm's first window (the first that holds
        only what followed the change): an alarm is listed in :attr:`alarms` then.
        """
        W, stride = self.preset.window, self.preset.stride
        after = max(-(-W // stride) - 1, 0)
        first = self.pipeline.n_windows - len(flags)  # the block's first window's index
        for j, f in enumerate(flags):
            on = bool(f == 1.0)
            if on and not self._alarmed:
                self._naming.append((first + j + after, int(ends[j])))
            if np.isfinite(f):
                self._alarmed = on
        while self._naming and self._naming[0][0] < first + len(flags):
            due, end = self._naming.pop(0)
            got = attribute(self.pipeline.evidence(due - first), passive=False,
                            note=self.twin_note)
            self.alarms.append({"end": end, "attribution": got["attribution"],
                                "evidence": got["evidence"]})

    def windows(self) -> dict[str, np.ndarray]:
        """Every window finished so far (buffered transitions flushed), as columns (copies)."""
        self.flush()
        return self._windows.arrays()


#: The alarm's options of the wrapper and the callback, with the gym source's defaults.
ALARM_DEFAULTS: dict[str, Any] = {"detector": CONTROL_DETECTOR, "false_alarms": None,
                                  "baseline_windows": CONTROL_BASELINE_WINDOWS,
                                  "persist": DetectorSpec.m, "k": SETTINGS["k"].default,
                                  "phase_baseline": False}


def check_settings(given: Mapping[str, Any]) -> None:
    """The wrapper's and the callback's settings, checked as every front end checks them.

    ``given`` holds pipeline settings (a ``preset`` given as a :class:`Preset` is the caller's
    to check) and ``block``; an error is the settings table's, naming the field.

    Raises
    ------
    SettingError
        A value the settings table (``idt_desk.settings.SETTINGS``) does not take.
    """
    pipeline = {k: v for k, v in given.items() if k != "block" and
                not (k == "preset" and isinstance(v, Preset))}
    PipelineSettings.parse(pipeline, strict=True)
    check_limit("block", given.get("block"))


def loop_rate(env: Any) -> float | None:
    """Steps per second of the env's own time: 1 / ``dt``, else its ``render_fps``."""
    dt = getattr(getattr(env, "unwrapped", env), "dt", None)
    if isinstance(dt, int | float) and dt > 0:
        return 1.0 / float(dt)
    fps = (getattr(env, "metadata", None) or {}).get("render_fps")
    return float(fps) if isinstance(fps, int | float) and fps > 0 else None


def alarm_monitor(options: Mapping[str, Any], preset: Preset, rate: float | None,
                   episode_steps: int | None, twin: bool = False) -> Monitor | None:
    """A session's monitor for a wrapped stream (``detector`` None: windows only).

    ``twin``: the stream has one; its channels are a group of their own.
    """
    if options["detector"] is None:
        return None
    return build_monitor(
        (*IDT_METRICS, *(TWIN_METRICS if twin else ())),
        baseline_windows=options["baseline_windows"],
        detector=options["detector"], false_alarms=_budget(options, rate, episode_steps),
        k=options["k"], persist=options["persist"], rate=rate, stride=preset.stride,
        window=preset.window, episode_steps=episode_steps, what="this env",
        phased=_phased(options, episode_steps))


def resolve_twin(twin: Any, env: Any) -> tuple[Twin | None, str]:
    """The wrapper's and the callback's ``twin=``: the twin and, without one, why not.

    True: the env's own, where it is a MuJoCo env whose observation is its state
    (:func:`idt_desk.gym.twin.mujoco_twin`); False: none; a :class:`Twin`: that one.
    """
    if twin is False or twin is None:
        return None, "twin=False: no model of the loop, no class of change"
    if twin is True:
        from idt_desk.gym.twin import mujoco_twin

        got, why = mujoco_twin(env)
        return got, "" if got is not None else f"{why}: no class of change"
    if not isinstance(twin, Twin):
        raise TypeError(f"twin must be True, False or an idt_desk.Twin (predict, hypotheses, "
                        f"kinds, description), got {type(twin).__name__}")
    return twin, ""


def _phased(options: Mapping[str, Any], episode_steps: int | None) -> bool:
    """``phase_baseline`` asked for, checked: the env needs a time limit to have phases."""
    if options.get("phase_baseline") and not episode_steps:
        raise ValueError("phase_baseline=True: the env has no time limit (max_episode_steps) "
                         "to take an episode's phase from")
    return bool(options.get("phase_baseline"))


def _budget(options: Mapping[str, Any], rate: float | None, episode_steps: int | None) -> str:
    """The false-alarm budget: the one given, else ``CONTROL_BUDGET``, per episodes or windows."""
    return options["false_alarms"] or (CONTROL_BUDGET if rate else
                                       "1/100episodes" if episode_steps else "1/10000windows")


# ---------------------------------------------------------------------------------------------
# Recordings: record= of the wrapper and the callback
# ---------------------------------------------------------------------------------------------


def record_path(record: Any) -> Path | None:
    """``record`` as a Path (None: no recording); a path already holding one is refused."""
    if record is None:
        return None
    if not isinstance(record, str | os.PathLike):
        raise TypeError(f"record must be a path (str or os.PathLike) or None, "
                        f"got {type(record).__name__}")
    if not str(record).strip():  # Path("") is the working directory: never meant
        raise ValueError("record: a recording needs a folder's name (got an empty one)")
    path = Path(record)
    if (path / "config.json").exists():
        from idt_desk.recordings import RecordingError

        raise RecordingError(f"record={str(record)!r}: {path} already holds a recording; "
                             f"choose a new path")
    return path


def check_options(correction: str | None, alarm: Mapping[str, Any]) -> None:
    """Refuse options :class:`~idt_desk.Recorder` does not take (it runs their defaults)."""
    fixed = [f"{key}={alarm[key]!r}" for key in ("persist", "k")
             if alarm[key] != ALARM_DEFAULTS[key]]
    if correction is not None:
        fixed.append(f"correction={correction!r}")
    if fixed:
        raise ValueError(f"record= writes through idt_desk.Recorder, which runs persist=5, "
                         f"k=3.0 and no entropy correction; {', '.join(fixed)} cannot be "
                         f"recorded: leave it at its default or drop record=")


def check_recordable(preset: Preset, state: SpaceCodec, action: SpaceCodec,
                      correction: str | None, alarm: Mapping[str, Any]) -> None:
    """Refuse what :class:`~idt_desk.Recorder`'s pipeline cannot reproduce exactly."""
    check_options(correction, alarm)
    for role, codec in (("observation", state), ("action", action)):
        n = codec.discrete_n
        if n is not None and n > preset.bins:
            raise ValueError(
                f"record=: the {role} space {codec.space} has {n} values but bins={preset.bins}; "
                f"a recording bins every variable alike, so it needs bins >= {n} to keep "
                f"each value its own symbol (pass bins={n} or more, or drop record=)")


def _recorder_preset(given: str | Preset | None, preset: Preset, state: SpaceCodec) -> str:
    """The preset name :class:`~idt_desk.Recorder` takes for the resolved ``preset``.

    The recording states its preset by name (with ``bins``, ``window`` and ``stride`` given
    apart): a name, None (the generic preset, registered as ``"gym"``), or a
    :class:`~idt_desk.Preset` whose symbols are those of a registered preset of its name
    or, without groups and wrapped angles, of ``"gym"``.
    """
    if isinstance(given, str):
        return given
    if given is None:
        return preset.name

    def symbols(p: Preset) -> tuple:
        return (p.state_groups, p.action_groups, p.angles if p.angle_mode == "wrap" else ())

    same = PRESETS.get(preset.name)
    if same is not None and symbols(same) == symbols(preset) and \
            same.n_state in (None, state.dim):
        return preset.name
    if symbols(preset) == symbols(PRESETS["gym"]):
        return "gym"
    raise ValueError(
        f"record=: preset {preset.name!r} is not a registered preset and has groups or "
        f"wrapped angles; idt_desk.Recorder takes a preset by name, so pass a name from "
        f"idt_desk.PRESETS (or a Preset without groups and wrapped angles), or drop record=")


def open_recording(
    path: Path,
    given: str | Preset | None,
    preset: Preset,
    state: SpaceCodec,
    action: SpaceCodec,
    calibration_windows: int,
    alarm: Mapping[str, Any],
    rate: float | None,
    episode_steps: int | None,
    twin: Twin | None = None,
) -> Recorder:
    """An :class:`~idt_desk.Recorder` at ``path`` running the stream's own pipeline.

    Its windows equal the stream's: the same preset, calibration, baseline, detector,
    twin and budget (a budget per episode is handed over in windows, which the recorder's
    loop has no episodes for), and a Discrete space's value range declared to the
    calibration, so that each of its values keeps a bin of its own (``bins`` >= its n,
    checked before).
    """
    from idt_desk.live.recorder import Recorder

    budget = _budget(alarm, rate, episode_steps)
    parsed = parse_budget(budget)
    if parsed.unit == "episodes" and episode_steps:
        # build_monitor's windows per episode, in the same float operations.
        per = parsed.per * (float(episode_steps) / preset.stride)
        budget = f"{parsed.alarms!r}/{per!r}windows"
    rec = Recorder(
        path, [f"obs_{j}" for j in range(state.dim)], [f"act_{j}" for j in range(action.dim)],
        rate=rate, reward=True, preset=_recorder_preset(given, preset, state),
        bins=preset.bins, window=preset.window, stride=preset.stride,
        calibration_windows=int(calibration_windows),
        baseline_windows=int(alarm["baseline_windows"]),
        detector=alarm["detector"] or ALARM_DEFAULTS["detector"], false_alarms=budget,
        twin=twin, **({"episode_steps": episode_steps, "phase_baseline": True}
                      if _phased(alarm, episode_steps) else {}))
    ranges = {f"{prefix}_0": codec.ranges[0] for prefix, codec in (("obs", state),
                                                                    ("act", action))
              if codec.discrete_n is not None}
    if ranges:
        # The loop's source declares them as any source does (asked at calibration and
        # written to the ``calibrated`` event, which a replay reads back).
        rec.source.value_ranges = lambda: dict(ranges)  # type: ignore[method-assign]
    return rec


def flat(x: Any) -> np.ndarray:
    """One observation or action as a flat row of floats (a recording's variables)."""
    return np.asarray(x, dtype=np.float64).reshape(-1)


def frame(columns: dict[str, np.ndarray]) -> pd.DataFrame:
    """The columns as a DataFrame (the wrapper's and the callback's ``windows``)."""
    import pandas as pd

    return pd.DataFrame(columns)


# ---------------------------------------------------------------------------------------------
# The Gymnasium wrapper
# ---------------------------------------------------------------------------------------------
