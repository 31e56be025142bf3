"""``IDTMonitor``: the IDT's windows of one Gymnasium env in ``info["idt"]``.

See :mod:`idt_desk.gym` for the transition, spaces and calibration.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

import gymnasium
import numpy as np

from idt_desk.metrics.presets import Preset
from idt_desk.metrics.symbolize import Symbolizer
from idt_desk.metrics.twin import Twin
from idt_desk.recordings.profile import Profile

if TYPE_CHECKING:
    import pandas as pd


from idt_desk.gym.stream import (
    ALARM_DEFAULTS,
    SpaceCodec,
    Stream,
    StreamMarks,
    check_settings,
    frame,
    loop_rate,
    record_path,
    resolve_preset,
    resolve_twin,
)

__all__ = ["IDTMonitor"]


class IDTMonitor(gymnasium.Wrapper, gymnasium.utils.RecordConstructorArgs):
    """Compute the IDT metrics of an env's (S, A, S') stream while it runs.

    With a baseline profile fitted once on a known-good run (``idt-desk fit RUN… --out
    PROFILE``, or :meth:`save_baseline`), the wrapper is armed at its first complete window::

        env = IDTMonitor(gym.make("HalfCheetah-v5"), baseline="cheetah.profile.json")

    Without one it fits its own: the symbols on its first ``calibration_windows`` windows,
    then the alarm's baseline on the next ``baseline_windows`` (2,200 windows, 110,000 steps
    of HalfCheetah), with no alarm until then, and a loop broken from its first step
    becomes its own baseline.

    After calibration every ``step`` (and ``reset``) info carries ``info["idt"]``: the
    latest finished window as a dict of Python floats and ints with the keys
    :data:`IDT_COLUMNS` (``P``, ``H_f``, ``H_b``, ``dH``, ``unique_frac``, ..., ``start``,
    ``end``, ``episode``, ``reward``, ``out_of_range``) and the estimator's regime of that
    window: ``regime`` (``resolved``, ``sparse``, ``saturated`` or ``cycle``, see
    :mod:`idt_desk.metrics.regime`) and ``regime_text`` (what it means and what to do; a
    saturated window is blind), and, with the default preset, ``view`` (the view chosen on
    the calibration windows, in words). It stays at that window until the
    next one finishes; on the step that finishes a window, ``info["idt"]["end"]`` equals
    :attr:`n_transitions`. Before calibration (the first
    ``window + (calibration_windows - 1) * stride`` transitions) the key is absent.

    >>> import gymnasium as gym
    >>> from idt_desk.gym import IDTMonitor
    >>> env = IDTMonitor(gym.make("CartPole-v1"), window=100, stride=50,
    ...                  calibration_windows=2)
    >>> obs, _ = env.reset(seed=0)
    >>> _ = env.action_space.seed(0)
    >>> for _ in range(400):
    ...     obs, reward, terminated, truncated, info = env.step(env.action_space.sample())
    ...     if terminated or truncated:
    ...         obs, _ = env.reset()
    >>> len(env.windows), "P" in info["idt"]  # windows of 100 steps, every 50
    (7, True)
    >>> env.close()

    Parameters
    ----------
    env
        Any env with Box or Discrete observation and action spaces.
    preset
        A preset name (e.g. ``"cheetah"`` for HalfCheetah), a :class:`~idt_desk.Preset`, or
        None for :data:`GENERIC_PRESET` (``"auto"``): W = 300, stride 50, and the view
        that resolves the calibration windows (:mod:`idt_desk.metrics.views`): every
        variable its own group at 3 bins (S the composite of all of them, A likewise),
        else at 2, else the top principal components of S and of A at fewer bins; with
        many variables and bins a window fills with unique (S, A, S') and the plug-in
        estimates saturate, and a settled agent repeats an exact cycle. ``info["idt"]``
        says the view chosen (``view``) and each window's ``regime``.
    bins, window, stride
        Overrides of the preset's values. ``bins`` fixes the view at every variable with
        that many bins (the ``"gym"`` preset); it does not apply to a Discrete space,
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
        ``mewma`` by default (``idt_desk.detection.detectors.CONTROL_DETECTOR``, the gym
        source's default), ``persistence``, ``ewma``, ``cusum``, ``paper``, or None for no
        alarm; the budget in the env's loop time (its ``dt``, else
        ``metadata["render_fps"]``), episodes (its time limit) or windows; default 1/10h
        (``CONTROL_BUDGET``, the gym source's), else 1/100episodes, else 1/10000windows.
        The flags are the ``x_*`` keys of ``info["idt"]``.
    phase_baseline
        Judge each window against the baseline at the same phase of the episode
        (``idt_desk.detection.phase``; the env needs a time limit). Off by default.
    twin
        The loop's nominal model (``idt_desk.metrics.twin``): True (the default) for the
        env's own where it has one — a copy of this MuJoCo env, under whatever wrappers,
        taken now, whose observation is its state (:class:`~idt_desk.gym.twin.MujocoTwin`)
        — False for none, or your own :class:`~idt_desk.metrics.twin.Twin`. Each window
        then gets the residual of the physics (``R_*`` keys, ``x_twin``), and every IDT
        alarm the class of change, the component and the size a bank of fault hypotheses
        fitted to it (:mod:`idt_desk.detection.isolation`), in :attr:`alarms` and, while it
        is on, ``info["idt"]["attribution"]``, ``["component"]``, ``["size"]`` and
        ``["evidence"]``; without a twin the class is ``unknown`` and the evidence says why.
        A twin that is not exact (its clean residual above rounding on the calibration rows:
        your own model, or ``MujocoTwin(env, mismatch=0.1)``) names the class but its alarm
        is kept apart from the IDT's (``monitor.apart``; the ``calibrated`` event says so).
        The twin is stepped from the observation as the wrapper sees it: wrap observation
        normalisers outside this wrapper, or pass ``twin=False``.
    baseline
        A baseline profile's path (or an :class:`~idt_desk.recordings.profile.Profile`): the
        symbols, twin and detectors fitted on a known-good run of this loop
        (:mod:`idt_desk.recordings.profile`), so the first complete window is judged. The
        detector settings left at their defaults become the profile's; one set otherwise,
        other variables, another env id or preset, another rate, a damaged file or one of
        another version are refused in one line. :attr:`profile_check` then says whether
        the first windows sit within the profile's spread.
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
        (:class:`~idt_desk.recordings.RecordingError`),
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
        phase_baseline: bool = False,
        twin: bool | Twin = True,
        ewma_lambda: float = ALARM_DEFAULTS["ewma_lambda"],
        drift: float = ALARM_DEFAULTS["drift"],
        baseline: str | os.PathLike | Profile | None = None,
    ) -> None:
        # Its arguments kept in the env's spec (gymnasium.make can rebuild a stack with it).
        gymnasium.utils.RecordConstructorArgs.__init__(
            self, preset=preset, bins=bins, window=window, stride=stride,
            calibration_windows=calibration_windows, correction=correction, block=block,
            detector=detector, false_alarms=false_alarms, baseline_windows=baseline_windows,
            persist=persist, k=k, record=None if record is None else str(record),
            phase_baseline=phase_baseline, twin=twin if isinstance(twin, bool) else True,
            ewma_lambda=ewma_lambda, drift=drift,
            baseline=None if baseline is None or not isinstance(baseline, str | os.PathLike)
            else str(baseline))
        gymnasium.Wrapper.__init__(self, env)
        settings = {"preset": preset, "bins": bins, "window": window, "stride": stride,
                    "calibration_windows": calibration_windows, "correction": correction,
                    "detector": detector, "false_alarms": false_alarms,
                    "baseline_windows": baseline_windows, "persist": persist, "k": k,
                    "phase_baseline": phase_baseline, "ewma_lambda": ewma_lambda,
                    "drift": drift}
        check_settings({**settings, "block": block})
        path = record_path(record)
        self.preset = resolve_preset(preset, env.observation_space, env.action_space,
                                     bins, window, stride)
        spec = getattr(env, "spec", None)
        rate, steps = loop_rate(env), getattr(spec, "max_episode_steps", None)
        model, note = resolve_twin(twin, env)
        state = SpaceCodec(env.observation_space, "observation")
        action = SpaceCodec(env.action_space, "action")
        # One computation: the stream's session writes the recording too (record=).
        self._stream = Stream(self.preset, state, action, settings, rate=rate,
                               episode_steps=steps, block=block, twin=model, twin_note=note,
                               record=path, baseline=baseline,
                               env_id=getattr(spec, "id", None))
        #: The alarm's monitor: its ``describe()`` and calibration (the session's; with
        #: ``detector=None`` it judges for the recording only).
        self.monitor = self._stream.monitor if self._stream.alarmed else None
        self._marks = StreamMarks(self._stream) if path is not None else None
        self._obs: Any = None
        self._done = False
        #: Episode index of the current episode (0 after the first ``reset``).
        self.episode = -1

    @property
    def recorder(self) -> StreamMarks | None:
        """What marks the recording ``record`` writes (None without ``record``).

        Its ``perturb``, ``impulse``, ``modulate`` and ``note`` mark what the loop does
        itself, at the next transition (:class:`~idt_desk.live.loop.Marks`); the
        wrapper's :meth:`close` completes the recording.
        """
        return self._marks

    @property
    def profile(self) -> Profile | None:
        """The baseline profile in force (``baseline=``), or None."""
        return self._stream.session.profile

    @property
    def profile_check(self) -> dict[str, Any] | None:
        """With a profile: the verdict on the first windows, None before.

        Its ``fits``, ``said`` and ``mean_z``: :class:`~idt_desk.recordings.profile.FitCheck`.
        """
        return self._stream.session.profile_check

    def save_baseline(self, path: str | os.PathLike) -> Profile:
        """Save the symbols, twin and baseline fitted so far as a profile at ``path``.

        Every later ``IDTMonitor(env, baseline=path)`` (and ``IDTCallback``, ``Recorder``,
        ``idt-desk run --baseline``) is armed at its first window. Refused in one line
        before the baseline is complete (its progress said).
        """
        return self._stream.save_baseline(path)

    def refit_baseline(self) -> None:
        """Gather a new baseline from the next ``baseline_windows`` windows.

        For a loop the profile does not fit (:attr:`profile_check`).
        """
        self._stream.refit_baseline()

    @property
    def n_transitions(self) -> int:
        """Transitions recorded so far (all episodes)."""
        return self._stream.n_transitions

    @property
    def alarms(self) -> list[dict[str, Any]]:
        """Each IDT alarm so far, a dict each.

        Its window's ``end``, ``attribution``, ``component``, ``size``, ``evidence`` and
        ``isolation`` (the bank's best and runner-up fits, None without one).
        """
        return [dict(a) for a in self._stream.alarms]

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
        return frame(self._stream.windows())

    @property
    def symbolizers(self) -> tuple[Symbolizer, Symbolizer]:
        """The state and action symbolisers (``to_dict()`` records their calibration)."""
        return self._stream.pipeline.sym_s, self._stream.pipeline.sym_a

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

    def close(self) -> None:
        """Close the recording (if ``record`` was given: complete) and the env."""
        try:
            self._stream.close()
        finally:
            super().close()

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> bool:
        """Leave a ``with`` block: close the env; an exception closes the recording as an error.

        The recording's ``session_end`` then has state ``error`` and the exception.
        """
        if exc is not None:
            self._stream.close(f"{type(exc).__name__}: {exc}")
        self.close()
        return False


# ---------------------------------------------------------------------------------------------
# The Stable-Baselines3 callback
# ---------------------------------------------------------------------------------------------
