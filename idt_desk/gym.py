"""IDT metrics of any Gymnasium environment: a wrapper and a Stable-Baselines3 callback.

For researchers who never open the dashboard:

- :class:`IDTMonitor` wraps one ``gymnasium.Env`` and puts the latest finished window's
  metrics (P, H_f, H_b, dH and every other window key) in ``info["idt"]``;
- ``IDTCallback`` (a ``stable_baselines3`` ``BaseCallback``) follows every training env of
  an SB3 model and logs ``idt/P``, ``idt/H_f``, ``idt/H_b``, ``idt/dH`` and
  ``idt/unique_frac`` to the model's logger.

Both feed the same internal stream (symbolisers + :class:`~idt_desk.MetricEngine`). With
``record=`` either also writes its stream as an ordinary IDT Desk recording (through
:class:`~idt_desk.Recorder`, the dashboard's own pipeline), which ``idt-desk watch`` follows
while the env runs and replay reads afterwards, with the same windows and flags.

The transition
--------------
S is the observation the agent acted on (the one ``reset`` or the previous ``step``
returned), A is the action passed to ``step`` and S' the observation ``step`` returns. At an
episode's last step S' is the terminal observation; the next ``reset`` starts a new S, so a
transition never spans two episodes. (Under SB3's vector envs, which reset by themselves,
S' of a finished episode is ``infos[i]["terminal_observation"]``.) Transitions are numbered
0, 1, ... across episodes; a window covers ``window`` consecutive transitions, which may
come from several episodes.

Spaces. A ``Box`` is flattened to its variables. A ``Discrete(n, start)`` is one variable
whose n values are each their own symbol, whatever ``bins`` says (it gets exactly n
equal-width bins over [start, start + n - 1], one per value). Other spaces (Dict, Tuple,
MultiDiscrete, ...) are refused: flatten them first (``gymnasium.wrappers.FlattenObservation``).

Calibration
-----------
Exactly as a live session (:mod:`idt_desk.live.session`): the first ``calibration_windows``
windows' transitions, W + (calibration_windows - 1) * stride of them, are buffered; the
state symboliser is fitted on their S rows and the action symboliser on their A rows
(z-score and bin edges frozen; a Discrete space's bins are its n values), then all of them
are symbolised and pushed to the engine, which gives the first ``calibration_windows``
windows at once; until then ``info["idt"]`` is absent. From then on transitions are copied
into a buffer and symbolised + pushed in one block each time a window ends (every ``stride``
transitions), so ``info["idt"]`` changes on the step that finishes a window. Symbolising
costs mostly per call, not per row: a block of 50 costs about what one transition would.
``block=`` makes blocks longer (less overhead per step, ``info["idt"]`` lagging by up to
that many steps; the windows are the same). Later values outside the calibrated range go
to the edge bins and are counted per window in ``out_of_range``.

Angles: a preset with ``angle_mode="wrap"`` wraps its ``angles`` to (-pi, pi] with bins over
the whole circle; ``"unwrap"`` and ``"none"`` use the values as the env gives them (a stream
cannot be unwrapped consistently from a calibration on its first seconds).

Importing this module imports gymnasium but neither torch nor stable_baselines3: those are
imported when ``IDTCallback`` is first looked up. ``import idt_desk`` does not import this
module.
"""

from __future__ import annotations

import math
import os
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import gymnasium
import numpy as np
from gymnasium import spaces

from idt_desk.detection.detectors import parse_budget
from idt_desk.detection.monitor import IDT_METRICS, Monitor
from idt_desk.metrics.engine import WINDOW_KEYS
from idt_desk.metrics.presets import PRESETS, Preset
from idt_desk.metrics.symbolize import Symbolizer
from idt_desk.pipeline import FLAG_COLUMNS, WindowStage, build_monitor, judge

if TYPE_CHECKING:
    import pandas as pd

    from idt_desk.live.loop import Recorder

__all__ = [
    "GENERIC_PRESET",
    "IDT_COLUMNS",
    "LOGGED_METRICS",
    "IDTCallback",  # noqa: F822  (built on first use: module __getattr__)
    "IDTMonitor",
    "resolve_preset",
]

#: Keys of a window, in order (``info["idt"]``, the rows of ``windows``): ``start`` and
#: ``end`` (first transition and one past the last: the number of transitions seen when the
#: window finished), ``episode`` (episode of the window's last transition), the engine's
#: :data:`~idt_desk.WINDOW_KEYS`, ``reward`` (mean reward over the window),
#: ``out_of_range`` (fraction of its transitions with a value clamped into an edge bin) and
#: the alarm's flags ``x_P`` … ``x_IDT`` (1.0 alarm, 0.0 none, NaN no verdict: calibration
#: and baseline windows, or no detector), exactly as a live session flags them.
IDT_COLUMNS = ("start", "end", "episode", *WINDOW_KEYS[1:], "reward", "out_of_range",
               "x_P", "x_H_f", "x_H_b", "x_dH", "x_IDT")
_INT_COLUMNS = frozenset({"start", "end", "episode", "K_S", "K_A", "K_S_next", "K_SAS"})

#: What the SB3 callback logs (as ``idt/<key>``) by default.
LOGGED_METRICS = ("P", "H_f", "H_b", "dH", "unique_frac")

#: The preset used when none is given: each variable its own group, 3 bins, W = 300,
#: stride 50 (the paper's HalfCheetah numbers, as the live Gymnasium source's "gym" preset).
GENERIC_PRESET = Preset(
    "gym",
    "Any Gymnasium env: each observation and action variable its own group, 3 bins, "
    "W = 300, stride 50.",
    bins=3, window=300, stride=50,
)


# ---------------------------------------------------------------------------------------------
# Spaces and presets
# ---------------------------------------------------------------------------------------------


class _SpaceCodec:
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
        else:
            hint = ("flatten it first (gymnasium.wrappers.FlattenObservation)"
                    if role == "observation" else "wrap the env to act through one")
            raise ValueError(f"IDT metrics need a Box or Discrete {role} space, got {space}; "
                             f"{hint}")

    def bins(self, preset_bins: int) -> int:
        """Bins per variable: a Discrete space's n values are each their own bin."""
        return self.discrete_n if self.discrete_n is not None else preset_bins

    def buffer(self, capacity: int) -> np.ndarray:
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
    obs = _SpaceCodec(observation_space, "observation")
    act = _SpaceCodec(action_space, "action")
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


class _Stream:
    """One (S, A, S') stream: a buffer before the window stage and its monitor.

    :meth:`add` copies a transition into a buffer; when the buffer completes the calibration
    or a window, the block goes through the same :class:`~idt_desk.pipeline.WindowStage`
    and :func:`~idt_desk.pipeline.judge` as a live session's, and the windows it finished
    are returned.
    """

    def __init__(
        self,
        preset: Preset,
        state: _SpaceCodec,
        action: _SpaceCodec,
        calibration_windows: int = 20,
        correction: str | None = None,
        block: int | None = None,
        monitor: Monitor | None = None,
    ) -> None:
        cw = calibration_windows
        if isinstance(cw, bool) or int(cw) != cw or cw < 1:
            raise ValueError(f"calibration_windows must be an integer >= 1, "
                             f"got {calibration_windows!r}")
        self.preset = preset
        self._state, self._action = state, action
        circular = preset.angles if preset.angle_mode == "wrap" else ()
        self.sym_s = Symbolizer(state.dim, state.bins(preset.bins), preset.state_groups,
                                circular=circular,
                                names=[f"obs_{j}" for j in range(state.dim)])
        self.sym_a = Symbolizer(action.dim, action.bins(preset.bins), preset.action_groups,
                                names=[f"act_{j}" for j in range(action.dim)])
        self.stage = WindowStage(preset, self.sym_s, self.sym_a,
                                 calibration_windows=int(calibration_windows),
                                 correction=correction, mean_columns=("reward",),
                                 end_columns=("episode",))
        self.engine = self.stage.engine
        self.monitor = monitor
        self.calibration_windows = int(calibration_windows)
        #: Transitions the symbols are calibrated on.
        self.calibration_transitions = self.stage.calibration_transitions
        if block is not None and (isinstance(block, bool) or int(block) != block or block < 1):
            raise ValueError(f"block must be None or an integer >= 1, got {block!r}")
        #: At least this many transitions per symbolise + push (blocks end at window ends).
        self.block = preset.stride if block is None else int(block)
        cap = max(self.calibration_transitions, self.block + preset.stride)
        self._s, self._n = state.buffer(cap), state.buffer(cap)
        self._a = action.buffer(cap)
        self._r = np.empty(cap)
        self._ep = np.empty(cap)
        self._k = 0  # rows buffered
        self._due = self.calibration_transitions  # rows that complete the next block
        self._n_windows = 0
        self._windows = _Columns()
        self.latest: dict[str, float | int] | None = None

    @property
    def calibrated(self) -> bool:
        """Whether the symbols are frozen (the first windows have been computed)."""
        return self.sym_s.calibrated

    @property
    def n_transitions(self) -> int:
        """Transitions added so far."""
        return self.engine.n_seen + self._k

    def add(self, s: Any, a: Any, s_next: Any, reward: float, episode: int
            ) -> dict[str, np.ndarray] | None:
        """Add one transition; return the windows it finished (columns), or None."""
        k = self._k
        self._s[k] = s
        self._a[k] = a
        self._n[k] = s_next
        self._r[k] = reward
        self._ep[k] = episode
        self._k = k = k + 1
        if k < self._due:
            return None
        return self._flush()

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
        if not self.calibrated:
            self.stage.fit(s, a, self._state.ranges, self._action.ranges)
        w = self.stage.push(s, a, n, {"reward": self._r[:k], "episode": self._ep[:k]})
        W, stride = self.preset.window, self.preset.stride
        # The next block ends at the first window end at least `block` transitions away.
        due = self.engine.next_window_start + W - self.engine.n_seen
        self._due = due + max(0, -(-(self.block - due) // stride)) * stride
        if w is None:
            return None
        m = len(w["start"])
        table = dict(w)
        table["episode"] = table["episode"].astype(np.int64)
        first, self._n_windows = self._n_windows, self._n_windows + m
        if self.monitor is not None:
            flags, _ = judge(self.monitor, table, first, self.calibration_windows)
            for metric, f in flags.items():
                table[FLAG_COLUMNS[metric]] = f
        table = {c: table[c] if c in table else np.full(m, np.nan) for c in IDT_COLUMNS}
        self._windows.extend(table, m)
        self.latest = {c: v[-1].item() for c, v in table.items()}
        return table

    def windows(self) -> dict[str, np.ndarray]:
        """Every window finished so far (buffered transitions flushed), as columns (copies)."""
        self.flush()
        return self._windows.arrays()


#: The alarm's options of the wrapper and the callback, with a session's defaults.
ALARM_DEFAULTS: dict[str, Any] = {"detector": "persistence", "false_alarms": None,
                                  "baseline_windows": 200, "persist": 5, "k": 3.0}


def _loop_rate(env: Any) -> float | None:
    """Steps per second of the env's own time: 1 / ``dt``, else its ``render_fps``."""
    dt = getattr(getattr(env, "unwrapped", env), "dt", None)
    if isinstance(dt, int | float) and dt > 0:
        return 1.0 / float(dt)
    fps = (getattr(env, "metadata", None) or {}).get("render_fps")
    return float(fps) if isinstance(fps, int | float) and fps > 0 else None


def _alarm_monitor(options: Mapping[str, Any], preset: Preset, rate: float | None,
                   episode_steps: int | None) -> Monitor | None:
    """A session's monitor for a wrapped stream (``detector`` None: windows only)."""
    if options["detector"] is None:
        return None
    return build_monitor(
        IDT_METRICS, baseline_windows=options["baseline_windows"],
        detector=options["detector"], false_alarms=_budget(options, rate, episode_steps),
        k=options["k"], persist=options["persist"], rate=rate, stride=preset.stride,
        window=preset.window, episode_steps=episode_steps, what="this env")


def _budget(options: Mapping[str, Any], rate: float | None, episode_steps: int | None) -> str:
    """The false-alarm budget in force: the one given, else per hour, episodes or windows."""
    return options["false_alarms"] or ("1/h" if rate else
                                       "1/100episodes" if episode_steps else "1/10000windows")


# ---------------------------------------------------------------------------------------------
# Recordings: record= of the wrapper and the callback
# ---------------------------------------------------------------------------------------------


def _record_path(record: Any) -> Path | None:
    """``record`` as a Path (None: no recording); a path already holding one is refused."""
    if record is None:
        return None
    if not isinstance(record, str | os.PathLike):
        raise TypeError(f"record must be a path (str or os.PathLike) or None, "
                        f"got {type(record).__name__}")
    path = Path(record)
    if (path / "config.json").exists():
        from idt_desk.recordings._recording import RecordingError

        raise RecordingError(f"record={str(record)!r}: {path} already holds a recording; "
                             f"choose a new path")
    return path


def _check_options(correction: str | None, alarm: Mapping[str, Any]) -> None:
    """Refuse options :class:`~idt_desk.Recorder` does not take (it runs their defaults)."""
    fixed = [f"{key}={alarm[key]!r}" for key in ("persist", "k")
             if alarm[key] != ALARM_DEFAULTS[key]]
    if correction is not None:
        fixed.append(f"correction={correction!r}")
    if fixed:
        raise ValueError(f"record= writes through idt_desk.Recorder, which runs persist=5, "
                         f"k=3.0 and no entropy correction; {', '.join(fixed)} cannot be "
                         f"recorded: leave it at its default or drop record=")


def _check_recordable(preset: Preset, state: _SpaceCodec, action: _SpaceCodec,
                      correction: str | None, alarm: Mapping[str, Any]) -> None:
    """Refuse what :class:`~idt_desk.Recorder`'s pipeline cannot reproduce exactly."""
    _check_options(correction, alarm)
    for role, codec in (("observation", state), ("action", action)):
        n = codec.discrete_n
        if n is not None and n > preset.bins:
            raise ValueError(
                f"record=: the {role} space {codec.space} has {n} values but bins={preset.bins}; "
                f"a recording bins every variable alike, so it needs bins >= {n} to keep "
                f"each value its own symbol (pass bins={n} or more, or drop record=)")


def _recorder_preset(given: str | Preset | None, preset: Preset, state: _SpaceCodec) -> str:
    """The preset name :class:`~idt_desk.Recorder` takes for the resolved ``preset``.

    The recording states its preset by name (with ``bins``, ``window`` and ``stride`` given
    apart): a name, None (the generic preset, registered as ``"gym"``), or a
    :class:`~idt_desk.Preset` whose symbols are those of a registered preset of its name
    or, without groups and wrapped angles, of ``"gym"``.
    """
    if isinstance(given, str):
        return given
    if given is None:
        return "gym"

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


def _open_recording(
    path: Path,
    given: str | Preset | None,
    preset: Preset,
    state: _SpaceCodec,
    action: _SpaceCodec,
    calibration_windows: int,
    alarm: Mapping[str, Any],
    rate: float | None,
    episode_steps: int | None,
) -> Recorder:
    """An :class:`~idt_desk.Recorder` at ``path`` running the stream's own pipeline.

    Its windows equal the stream's: the same preset, calibration, baseline, detector and
    budget (a budget per episode is handed over in windows, which the recorder's loop has no
    episodes for), and a Discrete space's value range declared to the calibration, so that
    each of its values keeps a bin of its own (``bins`` >= its n, checked before).
    """
    from idt_desk.live.loop import Recorder

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
        detector=alarm["detector"] or ALARM_DEFAULTS["detector"], false_alarms=budget)
    ranges = {f"{prefix}_0": codec.ranges[0] for prefix, codec in (("obs", state),
                                                                    ("act", action))
              if codec.discrete_n is not None}
    if ranges:
        # The loop's source declares them as any source does (asked at calibration and
        # written to the ``calibrated`` event, which a replay reads back).
        rec.source.value_ranges = lambda: dict(ranges)  # type: ignore[method-assign]
    return rec


def _flat(x: Any) -> np.ndarray:
    """One observation or action as a flat row of floats (a recording's variables)."""
    return np.asarray(x, dtype=np.float64).reshape(-1)


def _frame(columns: dict[str, np.ndarray]) -> pd.DataFrame:
    import pandas as pd

    return pd.DataFrame(columns)


# ---------------------------------------------------------------------------------------------
# The Gymnasium wrapper
# ---------------------------------------------------------------------------------------------


class IDTMonitor(gymnasium.Wrapper):
    """Compute the IDT metrics of an env's (S, A, S') stream while it runs.

    After calibration every ``step`` (and ``reset``) info carries ``info["idt"]``: the
    latest finished window as a dict of Python floats and ints with the keys
    :data:`IDT_COLUMNS` (``P``, ``H_f``, ``H_b``, ``dH``, ``unique_frac``, ..., ``start``,
    ``end``, ``episode``, ``reward``, ``out_of_range``). It stays at that window until the
    next one finishes; on the step that finishes a window, ``info["idt"]["end"]`` equals
    :attr:`n_transitions`. Before calibration (the first
    ``window + (calibration_windows - 1) * stride`` transitions) the key is absent.

    Parameters
    ----------
    env
        Any env with Box or Discrete observation and action spaces.
    preset
        A preset name (e.g. ``"cheetah"`` for HalfCheetah), a :class:`~idt_desk.Preset`, or
        None for :data:`GENERIC_PRESET`: every observation variable its own group (S is the
        composite of all of them), every action variable likewise, 3 bins, W = 300, stride
        50. With many variables and bins the composite alphabet is huge (bins ** n; beyond
        2 ** 63 symbols are 64-bit hashes, which is fine for the engine), but windows then
        fill with unique (S, A, S') and the plug-in estimates saturate: watch
        ``unique_frac`` and use fewer bins or a grouped preset.
    bins, window, stride
        Overrides of the preset's values. ``bins`` does not apply to a Discrete space,
        whose values are always each their own symbol.
    calibration_windows
        Symbols are calibrated on the first this-many windows' transitions.
    correction
        None (plug-in entropies) or ``"miller-madow"``.
    block
        Transitions are symbolised and pushed in blocks of at least this many, each ending
        at a window end. None: ``stride``, so ``info["idt"]`` changes on the very step that
        finishes a window. Larger blocks cost less per step (the symbolisers' cost is mostly
        per call), and ``info["idt"]`` then lags by up to ``block`` steps; the windows are
        the same.
    detector, false_alarms, baseline_windows, persist, k
        The alarm, as a live session's (``idt-desk run --detector … --false-alarms …``):
        ``persistence`` by default, ``cusum``, ``paper``, or None for no alarm; the budget
        in the env's loop time (its ``dt``, else ``metadata["render_fps"]``), episodes (its
        time limit) or windows; default 1/h, else 1/100episodes, else 1/10000windows. The
        flags are the ``x_*`` keys of ``info["idt"]``.
    record
        A directory to write the stream to as an ordinary IDT Desk recording (None: none),
        which ``idt-desk watch`` follows while the env runs and replay reads afterwards. An
        :class:`~idt_desk.Recorder` (:attr:`recorder`) gets every transition the wrapper
        records, with its reward and episode: state variables ``obs_0`` … and action
        variables ``act_0`` … (the spaces flattened), the env's rate (1 / ``dt``, else
        ``render_fps``; without one the time is the step count) and this wrapper's
        pipeline, so the recording's windows and flags equal :attr:`windows` window for
        window. :meth:`close` (or leaving a ``with`` block) completes it; an exception
        leaving the ``with`` block closes it as an error. With ``detector=None`` the
        recording still alarms, by the default detector.

    Raises
    ------
    ValueError
        An unsupported space, or a preset that does not fit the env (its ``n_state`` /
        ``n_action`` against the observation / action variables). With ``record``: a
        path that already holds a recording
        (:class:`~idt_desk.recordings._recording.RecordingError`),
        ``persist``, ``k`` or ``correction`` other than their defaults, a Discrete space of
        more values than ``bins`` (a recording bins all variables alike) or a
        :class:`~idt_desk.Preset` the recording cannot name (groups or wrapped angles, and
        not a registered preset).

    Notes
    -----
    Every window is kept (:attr:`windows`): 23 numbers, 184 bytes per window, i.e.
    4 MB per million steps at stride 50. The buffered transitions are at most the
    calibration's (W + (calibration_windows - 1) * stride rows).

    Calling ``step`` again after an episode ended without ``reset`` (an env that resets by
    itself, e.g. Gymnasium's next-step autoreset) records no transition: the obs returned
    starts the next episode.

    A vector env is monitored by wrapping each of its envs, e.g.
    ``gymnasium.make_vec(id, n, wrappers=[IDTMonitor])`` or SB3's
    ``make_vec_env(id, n, wrapper_class=IDTMonitor)``; for training, ``IDTCallback`` does
    this from SB3's side (and its ``record`` writes one recording per env; the wrappers of
    a vector env would need a path each).

    A recording is complete once :meth:`close` has run: an env never closed leaves it
    without its ``session_end`` (a follower then says the writer stopped responding).
    A budget per episode is written to the recording as the same number of windows (the
    recording's loop knows no time limit).

    """

    def __init__(
        self,
        env: gymnasium.Env,
        preset: str | Preset | None = None,
        bins: int | None = None,
        window: int | None = None,
        stride: int | None = None,
        calibration_windows: int = 20,
        correction: str | None = None,
        block: int | None = None,
        detector: str | None = ALARM_DEFAULTS["detector"],
        false_alarms: str | None = None,
        baseline_windows: int = ALARM_DEFAULTS["baseline_windows"],
        persist: int = ALARM_DEFAULTS["persist"],
        k: float = ALARM_DEFAULTS["k"],
        record: str | os.PathLike | None = None,
    ) -> None:
        super().__init__(env)
        self._recorder: Recorder | None = None
        path = _record_path(record)
        self.preset = resolve_preset(preset, env.observation_space, env.action_space,
                                     bins, window, stride)
        spec = getattr(env, "spec", None)
        alarm = {"detector": detector, "false_alarms": false_alarms,
                 "baseline_windows": baseline_windows, "persist": persist, "k": k}
        rate, steps = _loop_rate(env), getattr(spec, "max_episode_steps", None)
        #: The alarm's monitor (None without a detector): its ``describe()`` and calibration.
        self.monitor = _alarm_monitor(alarm, self.preset, rate, steps)
        state = _SpaceCodec(env.observation_space, "observation")
        action = _SpaceCodec(env.action_space, "action")
        self._stream = _Stream(self.preset, state, action, calibration_windows, correction,
                               block, self.monitor)
        if path is not None:
            _check_recordable(self.preset, state, action, correction, alarm)
            self._recorder = _open_recording(path, preset, self.preset, state, action,
                                             calibration_windows, alarm, rate, steps)
        self._obs: Any = None
        self._done = False
        #: Episode index of the current episode (0 after the first ``reset``).
        self.episode = -1

    @property
    def recorder(self) -> Recorder | None:
        """The :class:`~idt_desk.Recorder` writing ``record`` (None without ``record``).

        Its ``perturb``, ``impulse``, ``modulate`` and ``note`` mark what the loop does
        itself, at the next transition; ``close`` does not need calling (``close`` of the
        wrapper does it).
        """
        return self._recorder

    @property
    def n_transitions(self) -> int:
        """Transitions recorded so far (all episodes)."""
        return self._stream.n_transitions

    @property
    def calibrated(self) -> bool:
        """Whether the symbols are calibrated and windows are being computed."""
        return self._stream.calibrated

    @property
    def latest(self) -> dict[str, float | int] | None:
        """The latest finished window (as ``info["idt"]``), or None before calibration."""
        return None if self._stream.latest is None else dict(self._stream.latest)

    @property
    def windows(self) -> pd.DataFrame:
        """Every window finished so far, one row each, columns :data:`IDT_COLUMNS` (a copy).

        With ``block`` > ``stride`` the transitions still buffered are symbolised first, so
        the last rows may be newer than ``info["idt"]``.
        """
        return _frame(self._stream.windows())

    @property
    def symbolizers(self) -> tuple[Symbolizer, Symbolizer]:
        """The state and action symbolisers (``to_dict()`` records their calibration)."""
        return self._stream.sym_s, self._stream.sym_a

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None
              ) -> tuple[Any, dict[str, Any]]:
        """Reset the env; its observation is the S of the next transition."""
        obs, info = self.env.reset(seed=seed, options=options)
        self._obs = np.array(obs)
        self._done = False
        self.episode += 1
        if self._stream.latest is not None:
            info["idt"] = dict(self._stream.latest)
        return obs, info

    def step(self, action: Any) -> tuple[Any, Any, bool, bool, dict[str, Any]]:
        """Step the env and record (S, A, S'); ``info["idt"]`` as described above."""
        if self._obs is None:
            raise gymnasium.error.ResetNeeded("call reset() before step() on IDTMonitor")
        obs, reward, terminated, truncated, info = self.env.step(action)
        if self._done:
            self.episode += 1  # the env reset itself: this obs starts a new episode
        else:
            self._stream.add(self._obs, action, obs, reward, self.episode)
            if self._recorder is not None:
                self._recorder.add(_flat(self._obs), _flat(action), _flat(obs),
                                   reward=float(reward), episode=self.episode)
        self._obs = np.array(obs)
        self._done = bool(terminated or truncated)
        if self._stream.latest is not None:
            info["idt"] = dict(self._stream.latest)
        return obs, reward, terminated, truncated, info

    def close(self) -> None:
        """Close the recording (if ``record`` was given: complete) and the env."""
        try:
            if self._recorder is not None:
                self._recorder.close()
        finally:
            super().close()

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> bool:
        """Leave a ``with`` block: close the env; an exception closes the recording as an error.

        The recording's ``session_end`` then has state ``error`` and the exception.
        """
        if exc is not None and self._recorder is not None:
            self._recorder.close(f"{type(exc).__name__}: {exc}")
        self.close()
        return False


# ---------------------------------------------------------------------------------------------
# The Stable-Baselines3 callback
# ---------------------------------------------------------------------------------------------


class _IDTCallbackImpl:
    """Log the IDT metrics of an SB3 model's training envs to its logger.

    One stream per training env: S is the previous step's ``new_obs`` (at the start of
    training the model's current observation), A the action the algorithm passed to the
    env (``clipped_actions`` for on-policy algorithms, ``actions`` otherwise) and S' the
    step's ``new_obs``, or ``infos[i]["terminal_observation"]`` where ``dones[i]``: a
    transition never spans two episodes. Calibration as :class:`IDTMonitor`, per env.

    Every finished window's metrics (finite values only) go to ``logger.record_mean`` as
    ``idt/<metric>``, so each dump of the logger writes the mean over the windows finished
    (in all envs) since the previous dump; ``idt/windows`` is the number of windows so far.
    Until the symbols are calibrated nothing is logged.

    Parameters
    ----------
    preset, bins, window, stride, calibration_windows, correction, block
        As :class:`IDTMonitor`; checked against the training env's spaces when training
        starts.
    detector, false_alarms, baseline_windows, persist, k
        The alarm per training env, as :class:`IDTMonitor`'s (``idt/x_IDT`` can be logged).
    every
        None: the metrics are written at SB3's own dumps (on-policy: every ``log_interval``
        rollouts; off-policy: every ``log_interval`` episodes). An integer: the callback
        also dumps the logger every this-many timesteps (all envs' steps), for an IDT curve
        at its own resolution.
    metrics
        Window keys to log (default :data:`LOGGED_METRICS`).
    verbose
        SB3 verbosity.
    record
        A directory to write the training envs' streams to as IDT Desk recordings (None:
        none), one per env, since a window covers consecutive transitions of one env: with
        one env the recording is ``record`` itself, with n envs ``record/env-0`` …
        ``record/env-{n-1}`` (``idt-desk watch record`` follows the newest). Each is
        written by an :class:`~idt_desk.Recorder` (:attr:`recorders`), as
        :class:`IDTMonitor`'s ``record`` does (variables ``obs_0`` …, ``act_0`` …, reward
        and episode, the first env's rate), so env i's recording has the windows and
        flags of :meth:`windows` (i). They are opened when training starts and closed
        (complete) when it ends.

    Raises
    ------
    ValueError
        Unknown metrics, a bad ``every`` or ``correction``; with ``record``, a path that
        already holds a recording or options a recording cannot reproduce (as
        :class:`IDTMonitor`'s; those that depend on the env's spaces are refused when
        training starts).

    Notes
    -----
    ``stable_baselines3`` (and torch) are imported when ``IDTCallback`` is first looked up
    in :mod:`idt_desk.gym`, not when the module is imported. Windows are kept per env
    (:meth:`windows`), about 200 bytes each.

    ``learn`` again with the same callback continues its windows and logs, but not its
    recordings: they ended with the first ``learn`` (a recording, once closed, stays
    complete), and a warning says so; a new callback with a new ``record`` records the
    next ``learn`` (its symbols calibrated afresh). ``learn`` stopped by an exception
    skips the end of training: close the recordings with ``recorders`` (``close(error=...)``)
    or they are left without their ``session_end`` (incomplete).

    """

    def __init__(
        self,
        preset: str | Preset | None = None,
        *,
        bins: int | None = None,
        window: int | None = None,
        stride: int | None = None,
        calibration_windows: int = 20,
        correction: str | None = None,
        block: int | None = None,
        every: int | None = None,
        metrics: Sequence[str] = LOGGED_METRICS,
        verbose: int = 0,
        detector: str | None = ALARM_DEFAULTS["detector"],
        false_alarms: str | None = None,
        baseline_windows: int = ALARM_DEFAULTS["baseline_windows"],
        persist: int = ALARM_DEFAULTS["persist"],
        k: float = ALARM_DEFAULTS["k"],
        record: str | os.PathLike | None = None,
    ) -> None:
        super().__init__(verbose)  # BaseCallback's (see _callback_class)
        self._record = _record_path(record)
        bad = [m for m in metrics if m not in IDT_COLUMNS]
        if bad:
            raise ValueError(f"unknown metrics {bad}; window keys: {', '.join(IDT_COLUMNS)}")
        if every is not None and (isinstance(every, bool) or int(every) != every or every < 1):
            raise ValueError(f"every must be None or an integer >= 1, got {every!r}")
        if correction not in (None, "miller-madow"):
            raise ValueError(f"correction must be None or 'miller-madow', got {correction!r}")
        self._options = {"preset": preset, "bins": bins, "window": window, "stride": stride}
        self._calibration_windows = calibration_windows
        self._correction = correction
        self._block = block
        self._alarm = {"detector": detector, "false_alarms": false_alarms,
                       "baseline_windows": baseline_windows, "persist": persist, "k": k}
        if self._record is not None:
            # What does not depend on the env, refused now rather than when training starts.
            _check_options(correction, self._alarm)
        self._recorders: list[Recorder] = []
        self._recording_ended = False
        self.every = every
        self.metrics = tuple(metrics)
        self.preset: Preset | None = None
        self._streams: list[_Stream] = []
        self._episodes: list[int] = []
        self._prev: np.ndarray | None = None
        self._last_dump = 0
        self._n_windows = 0

    # -- results ----------------------------------------------------------------------------

    @property
    def n_envs(self) -> int:
        """Training envs followed (0 before training starts)."""
        return len(self._streams)

    @property
    def latest(self) -> list[dict[str, float | int] | None]:
        """The latest finished window of each env (None before its calibration)."""
        return [None if s.latest is None else dict(s.latest) for s in self._streams]

    @property
    def recorders(self) -> list[Recorder]:
        """The :class:`~idt_desk.Recorder` of each training env (empty without ``record``).

        Their ``perturb``, ``note``, ... mark what the training does itself; after an
        exception in ``learn`` (SB3 then skips the end of training) ``close(error=...)``
        ends each recording as an error.
        """
        return list(self._recorders)

    def windows(self, env: int = 0) -> pd.DataFrame:
        """Every window so far of training env ``env``, columns :data:`IDT_COLUMNS`."""
        table = self._streams[env].flush()  # with block > stride, windows not yet logged
        if table is not None:
            self._log(table)
        return _frame(self._streams[env].windows())

    # -- SB3 hooks --------------------------------------------------------------------------

    def _on_training_start(self) -> None:
        venv = self.training_env
        if not self._streams:
            self.preset = resolve_preset(self._options["preset"], venv.observation_space,
                                         venv.action_space, self._options["bins"],
                                         self._options["window"], self._options["stride"])
            first = venv.envs[0] if hasattr(venv, "envs") else None
            steps = getattr(getattr(first, "spec", None), "max_episode_steps", None)
            rate = None if first is None else _loop_rate(first)
            state = _SpaceCodec(venv.observation_space, "observation")
            action = _SpaceCodec(venv.action_space, "action")
            streams = [
                _Stream(self.preset, state, action, self._calibration_windows,
                        self._correction, self._block,
                        _alarm_monitor(self._alarm, self.preset, rate, steps))
                for _ in range(venv.num_envs)
            ]
            if self._record is not None:
                self._recorders = self._open_recordings(venv.num_envs, state, action, rate,
                                                        steps)
            self._streams = streams
            self._episodes = [0] * venv.num_envs
        elif self._recording_ended and self._recorders:
            warnings.warn(
                f"IDTCallback: its recordings ({self._record}) ended with the previous "
                f"learn(); this one is followed (windows, logs) but not recorded. Give it a "
                f"new IDTCallback(record=...) to record it (calibrated afresh).",
                stacklevel=2)
            self._recorders = []
        last = getattr(self.model, "_last_obs", None)
        if isinstance(last, np.ndarray) and len(last) == len(self._streams):
            last = np.array(last)
            if self._prev is not None and self._prev.shape == last.shape:
                # learn() again: envs that were reset start a new episode.
                for i in range(len(self._streams)):
                    if not np.array_equal(self._prev[i], last[i]):
                        self._episodes[i] += 1
            self._prev = last
        elif self._prev is not None:
            self._prev = None  # unknown S: the next step only sets it
            self._episodes = [e + 1 for e in self._episodes]

    def _on_step(self) -> bool:
        loc = self.locals
        new_obs = np.array(loc["new_obs"])
        actions = loc.get("clipped_actions", loc["actions"])
        rewards, dones, infos = loc["rewards"], loc["dones"], loc["infos"]
        prev = self._prev
        if prev is not None:
            for i, stream in enumerate(self._streams):
                if dones[i]:
                    s_next = infos[i].get("terminal_observation")
                    if s_next is None:
                        self._episodes[i] += 1
                        continue  # S' unknown: drop rather than mix episodes
                else:
                    s_next = new_obs[i]
                table = stream.add(prev[i], actions[i], s_next, rewards[i], self._episodes[i])
                if self._recorders:
                    self._recorders[i].add(_flat(prev[i]), _flat(actions[i]), _flat(s_next),
                                           reward=float(rewards[i]),
                                           episode=self._episodes[i])
                if dones[i]:
                    self._episodes[i] += 1
                if table is not None:
                    self._log(table)
        self._prev = new_obs
        if self.every is not None and self.num_timesteps - self._last_dump >= self.every:
            self._last_dump = self.num_timesteps
            if any(key.startswith("idt/") for key in self.logger.name_to_value):
                self.logger.dump(self.num_timesteps)
        return True

    def _on_training_end(self) -> None:
        """Close the recordings (complete); a later ``learn`` is no longer recorded."""
        if self._recorders and not self._recording_ended:
            self._recording_ended = True
            _close_all(self._recorders)

    def _open_recordings(self, n: int, state: _SpaceCodec, action: _SpaceCodec,
                         rate: float | None, steps: int | None) -> list[Recorder]:
        assert self._record is not None and self.preset is not None
        _check_recordable(self.preset, state, action, self._correction, self._alarm)
        paths = [self._record] if n == 1 else [self._record / f"env-{i}" for i in range(n)]
        for path in paths:
            _record_path(path)  # refused before any is created
        opened: list[Recorder] = []
        try:
            for path in paths:
                opened.append(_open_recording(path, self._options["preset"], self.preset,
                                              state, action, self._calibration_windows,
                                              self._alarm, rate, steps))
        except BaseException as exc:
            _close_all(opened, f"{type(exc).__name__}: {exc}")
            raise
        return opened

    def _log(self, table: Mapping[str, np.ndarray]) -> None:
        for m in self.metrics:
            for v in table[m]:
                if math.isfinite(v):
                    self.logger.record_mean(f"idt/{m}", float(v))
        self._n_windows += len(table["start"])
        self.logger.record("idt/windows", self._n_windows)


def _close_all(recorders: Sequence[Recorder], error: str | None = None) -> None:
    """Close every recorder, even when one of them fails (the first failure is raised)."""
    failed: BaseException | None = None
    for rec in recorders:
        try:
            rec.close(error)
        except BaseException as exc:  # the others still close
            failed = failed or exc
    if failed is not None:
        raise failed


_CALLBACK_CLASS: type | None = None


def _callback_class() -> type:
    """``IDTCallback``: the implementation above on SB3's ``BaseCallback`` (imported now)."""
    global _CALLBACK_CLASS
    if _CALLBACK_CLASS is None:
        from stable_baselines3.common.callbacks import BaseCallback

        _CALLBACK_CLASS = type("IDTCallback", (_IDTCallbackImpl, BaseCallback), {
            "__module__": __name__, "__qualname__": "IDTCallback",
            "__doc__": _IDTCallbackImpl.__doc__})
    return _CALLBACK_CLASS


def __getattr__(name: str) -> Any:
    # PEP 562: ``IDTCallback`` is built (and stable_baselines3 imported) on first use.
    if name == "IDTCallback":
        return _callback_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
