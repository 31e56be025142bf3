"""IDT metrics of any Gymnasium environment: a wrapper and a Stable-Baselines3 callback.

For researchers who never open the dashboard:

- :class:`IDTMonitor` wraps one ``gymnasium.Env`` and puts the latest finished window's
  metrics (P, H_f, H_b, dH and every other window key) in ``info["idt"]``;
- ``IDTCallback`` (a ``stable_baselines3`` ``BaseCallback``) follows every training env of
  an SB3 model and logs ``idt/P``, ``idt/H_f``, ``idt/H_b``, ``idt/dH`` and
  ``idt/unique_frac`` to the model's logger.

Both feed the same internal stream (symbolisers + :class:`~idt_desk.MetricEngine`).

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
Exactly as a live session (:mod:`idt_desk.session`): the first ``calibration_windows``
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
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import gymnasium
import numpy as np
from gymnasium import spaces

from idt_desk._engine import WINDOW_KEYS
from idt_desk._monitor import IDT_METRICS, Monitor
from idt_desk._pipeline import FLAG_COLUMNS, WindowStage, build_monitor, judge
from idt_desk._symbolize import Symbolizer
from idt_desk.presets import PRESETS, Preset

if TYPE_CHECKING:
    import pandas as pd

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
    or a window, the block goes through the same :class:`~idt_desk._pipeline.WindowStage`
    and :func:`~idt_desk._pipeline.judge` as a live session's, and the windows it finished
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
    budget = options["false_alarms"] or ("1/h" if rate else
                                         "1/100episodes" if episode_steps else "1/10000windows")
    return build_monitor(
        IDT_METRICS, baseline_windows=options["baseline_windows"],
        detector=options["detector"], false_alarms=budget, k=options["k"],
        persist=options["persist"], rate=rate, stride=preset.stride, window=preset.window,
        episode_steps=episode_steps, what="this env")


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

    Raises
    ------
    ValueError
        An unsupported space, or a preset that does not fit the env (its ``n_state`` /
        ``n_action`` against the observation / action variables).

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
    this from SB3's side.

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
    ) -> None:
        super().__init__(env)
        self.preset = resolve_preset(preset, env.observation_space, env.action_space,
                                     bins, window, stride)
        spec = getattr(env, "spec", None)
        #: The alarm's monitor (None without a detector): its ``describe()`` and calibration.
        self.monitor = _alarm_monitor(
            {"detector": detector, "false_alarms": false_alarms,
             "baseline_windows": baseline_windows, "persist": persist, "k": k},
            self.preset, _loop_rate(env), getattr(spec, "max_episode_steps", None))
        self._stream = _Stream(
            self.preset, _SpaceCodec(env.observation_space, "observation"),
            _SpaceCodec(env.action_space, "action"), calibration_windows, correction, block,
            self.monitor)
        self._obs: Any = None
        self._done = False
        #: Episode index of the current episode (0 after the first ``reset``).
        self.episode = -1

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
        self._obs = np.array(obs)
        self._done = bool(terminated or truncated)
        if self._stream.latest is not None:
            info["idt"] = dict(self._stream.latest)
        return obs, reward, terminated, truncated, info


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

    Notes
    -----
    ``stable_baselines3`` (and torch) are imported when ``IDTCallback`` is first looked up
    in :mod:`idt_desk.gym`, not when the module is imported. Windows are kept per env
    (:meth:`windows`), about 200 bytes each.

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
    ) -> None:
        super().__init__(verbose)  # BaseCallback's (see _callback_class)
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
            self._streams = [
                _Stream(self.preset, _SpaceCodec(venv.observation_space, "observation"),
                        _SpaceCodec(venv.action_space, "action"), self._calibration_windows,
                        self._correction, self._block,
                        _alarm_monitor(self._alarm, self.preset,
                                       None if first is None else _loop_rate(first), steps))
                for _ in range(venv.num_envs)
            ]
            self._episodes = [0] * venv.num_envs
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

    def _log(self, table: Mapping[str, np.ndarray]) -> None:
        for m in self.metrics:
            for v in table[m]:
                if math.isfinite(v):
                    self.logger.record_mean(f"idt/{m}", float(v))
        self._n_windows += len(table["start"])
        self.logger.record("idt/windows", self._n_windows)


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
