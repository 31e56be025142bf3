"""``IDTCallback``: the IDT's windows of every training env of a Stable-Baselines3 model.

Built on SB3's ``BaseCallback`` when first looked up (``idt_desk.gym.IDTCallback``), so
importing :mod:`idt_desk.gym` imports neither torch nor stable_baselines3.
"""

from __future__ import annotations

import math
import os
import warnings
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from idt_desk.metrics.presets import Preset
from idt_desk.metrics.twin import TWIN_METRICS, Twin
from idt_desk.recordings.profile import Profile

if TYPE_CHECKING:
    import pandas as pd

from idt_desk.gym.stream import (
    ALARM_DEFAULTS,
    IDT_COLUMNS,
    LOGGED_METRICS,
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

__all__ = ["callback_class"]


class _IDTCallbackImpl:
    """Log the IDT metrics of an SB3 model's training envs to its logger.

    With a baseline profile (``idt-desk fit RUN… --out PROFILE``), every training env is
    judged against one reference from its first window::

        model.learn(100_000, callback=IDTCallback(baseline="reference.profile.json"))

    so the runs of a sweep are compared with the same known-good loop, not each with its
    own early training (a policy still learning moves away from any reference: its alarms
    say how far and when).

    One stream per training env: S is the previous step's ``new_obs`` (at the start of
    training the model's current observation), A the action the algorithm passed to the
    env (``clipped_actions`` for on-policy algorithms, ``actions`` otherwise) and S' the
    step's ``new_obs``, or ``infos[i]["terminal_observation"]`` where ``dones[i]``: a
    transition never spans two episodes. Calibration as :class:`IDTMonitor`, per env. Under a
    ``VecNormalize`` S and S' are the original observations (``get_original_obs()``; a
    terminal observation unnormalised, exact within its ``clip_obs``): normalised with running
    statistics, they would drift while training.

    Each window also logs ``idt/alarm`` (the share of windows alarmed since the last dump),
    ``idt/alarms`` (alarms so far), ``idt/armed`` (the share of envs whose baseline is set),
    the twin's channels and, where the twin named it, ``idt/changed`` (text; not sent to
    TensorBoard). :attr:`alarm_log` lists every alarm.

    Every finished window's metrics (finite values only) go to ``logger.record_mean`` as
    ``idt/<metric>``, so each dump of the logger writes the mean over the windows finished
    (in all envs) since the previous dump; ``idt/windows`` is the number of windows so far.
    Until the symbols are calibrated nothing is logged.

    Parameters
    ----------
    preset, bins, window, stride, calibration_windows, correction, block
        As :class:`IDTMonitor`; checked against the training env's spaces when training
        starts.
    detector, false_alarms, baseline_windows, persist, k, phase_baseline, twin
        The alarm per training env, as :class:`IDTMonitor`'s (``idt/x_IDT`` can be logged),
        and its twin (each env of a ``DummyVecEnv`` its own copy; a ``SubprocVecEnv``'s envs
        are in other processes: none). Each env's attributed alarms: ``alarms(env)``.
    baseline
        A baseline profile's path (or a :class:`~idt_desk.recordings.profile.Profile`), as
        :class:`IDTMonitor`'s: every env's stream is armed at its first window.
    on_alarm
        Run at each IDT alarm: an SB3 callback (it gets the alarm's record in
        ``locals["alarm"]``, as ``EvalCallback`` runs its children; ``StopTrainingOnAlarm``
        stops training) or a callable given the record (``env``, ``end``, ``timesteps``,
        ``attribution`` where known). False from either stops training.
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
        phase_baseline: bool = False,
        twin: bool | Twin = True,
        ewma_lambda: float = ALARM_DEFAULTS["ewma_lambda"],
        drift: float = ALARM_DEFAULTS["drift"],
        baseline: str | os.PathLike | Profile | None = None,
        on_alarm: Any = None,
    ) -> None:
        super().__init__(verbose)  # BaseCallback's (see _callback_class)
        #: The pipeline's settings, the settings table's (each stream's session reads them).
        self._settings = {"preset": preset, "bins": bins, "window": window, "stride": stride,
                          "calibration_windows": calibration_windows, "correction": correction,
                          "detector": detector, "false_alarms": false_alarms,
                          "baseline_windows": baseline_windows, "persist": persist, "k": k,
                          "phase_baseline": phase_baseline, "ewma_lambda": ewma_lambda,
                          "drift": drift}
        check_settings({**self._settings, "block": block})
        self._record = record_path(record)
        #: The baseline profile every env's stream is judged by (None: each fits its own).
        self.profile = None if baseline is None else Profile.of(baseline)
        bad = [m for m in metrics if m not in IDT_COLUMNS]
        if bad:
            raise ValueError(f"unknown metrics {bad}; window keys: {', '.join(IDT_COLUMNS)}")
        if every is not None and (isinstance(every, bool) or int(every) != every or every < 1):
            raise ValueError(f"every must be None or an integer >= 1, got {every!r}")
        self._options = {"preset": preset, "bins": bins, "window": window, "stride": stride}
        self._block = block
        self._twin = twin
        self._recorders: list[StreamMarks] = []
        self._recording_ended = False
        self.every = every
        self.metrics = tuple(metrics)
        self.preset: Preset | None = None
        self._streams: list[Stream] = []
        self._episodes: list[int] = []
        self._prev: np.ndarray | None = None
        self._last_dump = 0
        self._n_windows = 0
        if on_alarm is not None and not callable(on_alarm) and \
                not hasattr(on_alarm, "on_step"):
            raise TypeError(f"on_alarm must be an SB3 callback or a callable, got "
                            f"{type(on_alarm).__name__}")
        #: Run at each IDT alarm (an SB3 callback, or a callable given the alarm's record);
        #: False from it stops training.
        self.on_alarm = on_alarm
        #: Each IDT alarm so far: ``env``, ``end`` (its window's, in that env's transitions),
        #: ``timesteps`` (the model's), ``severity`` and ``attribution`` when known.
        self.alarm_log: list[dict[str, Any]] = []
        self._on: list[bool] = []
        self._continue = True
        self._vecnorm: Any = None
        self._named: dict[int, int] = {}

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
    def recorders(self) -> list[StreamMarks]:
        """What marks each training env's recording (empty without ``record``).

        Their ``perturb``, ``note``, ... mark what the training does itself
        (:class:`~idt_desk.live.loop.Marks`); after an exception in ``learn`` (SB3 then
        skips the end of training) :meth:`close_recordings` with the error ends each
        recording as an error.
        """
        return list(self._recorders)

    def close_recordings(self, error: str | None = None) -> None:
        """End every env's recording (complete; with ``error``: as an error)."""
        if not self._recording_ended:
            self._recording_ended = True
            _close_all(self._streams, error)

    def alarms(self, env: int = 0) -> list[dict]:
        """Each IDT alarm of training env ``env``: ``end``, ``attribution``, ``evidence``."""
        return [dict(a) for a in self._streams[env].alarms] if self._streams else []

    def windows(self, env: int = 0) -> pd.DataFrame:
        """Every window so far of training env ``env``, columns :data:`IDT_COLUMNS`."""
        table = self._streams[env].flush()  # with block > stride, windows not yet logged
        if table is not None:
            self._log(table, env)
        return frame(self._streams[env].windows())

    # -- SB3 hooks --------------------------------------------------------------------------

    def _on_training_start(self) -> None:
        from stable_baselines3.common.vec_env import unwrap_vec_normalize

        venv = self.training_env
        #: A VecNormalize in the training stack: the IDT reads the original observations
        #: (its running statistics move while training; normalised, S would drift).
        self._vecnorm = unwrap_vec_normalize(venv)
        if not self._streams:
            self.preset = resolve_preset(self._options["preset"], venv.observation_space,
                                         venv.action_space, self._options["bins"],
                                         self._options["window"], self._options["stride"])
            first = venv.envs[0] if hasattr(venv, "envs") else None
            steps = getattr(getattr(first, "spec", None), "max_episode_steps", None)
            rate = None if first is None else loop_rate(first)
            state = SpaceCodec(venv.observation_space, "observation")
            action = SpaceCodec(venv.action_space, "action")
            n = venv.num_envs
            paths = [None] * n if self._record is None else [self._record] if n == 1 else \
                [self._record / f"env-{i}" for i in range(n)]
            for path in paths:
                record_path(path)  # refused before any is created
            streams: list[Stream] = []
            try:
                for j in range(n):  # a twin each: its copy of the env steps apart
                    env = venv.envs[j] if hasattr(venv, "envs") else None
                    model, note = resolve_twin(self._twin if env is not None else False, env)
                    if env is None and self._twin is not False:
                        note = ("the training envs run in other processes: no twin here, no "
                                "class of change")
                    streams.append(Stream(self.preset, state, action, self._settings,
                                          rate=rate, episode_steps=steps, block=self._block,
                                          twin=model, twin_note=note, record=paths[j],
                                          baseline=self.profile,
                                          env_id=getattr(getattr(env, "spec", None), "id",
                                                         None)))
            except BaseException as exc:
                _close_all(streams, f"{type(exc).__name__}: {exc}")
                raise
            if self._record is not None:
                self._recorders = [StreamMarks(st) for st in streams]
            self._streams = streams
            self._episodes = [0] * venv.num_envs
            self._on = [False] * venv.num_envs
            if hasattr(self.on_alarm, "init_callback"):  # an SB3 callback: its model is ours
                self.on_alarm.init_callback(self.model)
                self.on_alarm.parent = self
        elif self._recording_ended and self._recorders:
            warnings.warn(
                f"IDTCallback: its recordings ({self._record}) ended with the previous "
                f"learn(); this one is followed (windows, logs) but not recorded. Give it a "
                f"new IDTCallback(record=...) to record it (calibrated afresh).",
                stacklevel=2)
            self._recorders = []
        last = getattr(self.model, "_last_obs", None)
        if self._vecnorm is not None and isinstance(last, np.ndarray):
            last = self._vecnorm.get_original_obs()
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
        vn = self._vecnorm
        new_obs = np.array(loc["new_obs"] if vn is None else vn.get_original_obs())
        actions = loc.get("clipped_actions", loc["actions"])
        rewards, dones, infos = loc["rewards"], loc["dones"], loc["infos"]
        prev = self._prev
        if prev is not None:
            for i, stream in enumerate(self._streams):
                if dones[i]:
                    s_next = infos[i].get("terminal_observation")
                    if s_next is not None and vn is not None:  # VecNormalize normalised it
                        s_next = vn.unnormalize_obs(s_next)
                    if s_next is None:
                        self._episodes[i] += 1
                        continue  # S' unknown: drop rather than mix episodes
                else:
                    s_next = new_obs[i]
                table = stream.add(prev[i], actions[i], s_next, rewards[i], self._episodes[i])
                if dones[i]:
                    self._episodes[i] += 1
                if table is not None:
                    self._log(table, i)
        self._prev = new_obs
        if self.every is not None and self.num_timesteps - self._last_dump >= self.every:
            self._last_dump = self.num_timesteps
            if any(key.startswith("idt/") for key in self.logger.name_to_value):
                self.logger.dump(self.num_timesteps)
        return self._continue

    def _on_training_end(self) -> None:
        """Close the recordings (complete); a later ``learn`` is no longer recorded."""
        if self._recorders:
            self.close_recordings()

    def _log(self, table: Mapping[str, np.ndarray], env: int) -> None:
        """Windows of env ``env``: their metrics, the alarm, and each alarm acted on."""
        logged = [*self.metrics, *(c for c in TWIN_METRICS if c in table and
                                   np.isfinite(table[c]).any())]
        for m in logged:
            for v in table[m]:
                if math.isfinite(v):
                    self.logger.record_mean(f"idt/{m}", float(v))
        self._n_windows += len(table["start"])
        self.logger.record("idt/windows", self._n_windows)
        flags = np.asarray(table["x_IDT"], dtype=np.float64)
        for j in np.flatnonzero(np.isfinite(flags)):
            on = bool(flags[j] == 1.0)
            self.logger.record_mean("idt/alarm", float(on))  # the share of windows alarmed
            if on and not self._on[env]:
                self._alarm(env, table, int(j))
            self._on[env] = on
        self.logger.record("idt/alarms", len(self.alarm_log))
        named = self._streams[env].alarms  # the twin names an alarm a window length after it
        for a in named[self._named.get(env, 0):]:
            if a.get("attribution"):
                self.logger.record("idt/changed", str(a["attribution"]),
                                   exclude=("tensorboard", "json", "csv"))
            for rec in self.alarm_log:
                if rec["env"] == env and rec["end"] == a.get("end"):
                    rec.update({k: a.get(k) for k in ("attribution", "component", "size")})
        self._named[env] = len(named)
        self.logger.record("idt/armed", float(np.mean(
            [s.monitor is not None and s.monitor.baseline is not None for s in self._streams])))

    def _alarm(self, env: int, table: Mapping[str, np.ndarray], j: int) -> None:
        """An IDT alarm rose in env ``env``'s window ``j``: logged, and ``on_alarm`` run."""
        record = {"env": env, "end": int(table["end"][j]), "timesteps": int(self.num_timesteps)}
        self.alarm_log.append(record)  # named (the class of change) once the twin has
        act = self.on_alarm
        if act is None:
            return
        if hasattr(act, "on_step"):  # an SB3 callback, as EvalCallback runs its children
            act.update_locals({"alarm": record})
            go = act.on_step()
        else:
            go = act(record)
        if go is False:
            self._continue = False


def _close_all(streams: Sequence[Stream], error: str | None = None) -> None:
    """End every stream's recording, even when one of them fails (the first failure raised).

    The streams go on (a later ``learn`` is followed): only their recordings end.
    """
    failed: BaseException | None = None
    for stream in streams:
        try:
            stream.end_recording(error)
        except BaseException as exc:  # the others still close
            failed = failed or exc
    if failed is not None:
        raise failed


_CALLBACK_CLASS: type | None = None
_STOP_CLASS: type | None = None


def stop_on_alarm_class() -> type:
    """``StopTrainingOnAlarm``: an SB3 callback that ends training at the first IDT alarm.

    Give it as ``IDTCallback(on_alarm=StopTrainingOnAlarm(verbose=1))``; the alarm's record
    is in its ``locals["alarm"]``, and :attr:`alarm` once it stopped.
    """
    global _STOP_CLASS
    if _STOP_CLASS is None:
        from stable_baselines3.common.callbacks import BaseCallback

        def _on_step(self: Any) -> bool:
            self.alarm = dict(self.locals.get("alarm") or {})
            if self.verbose >= 1:
                print(f"Stopping training: IDT alarm in env {self.alarm.get('env')} at "
                      f"{self.alarm.get('timesteps'):,} timesteps"
                      + (f" ({self.alarm['attribution']})" if self.alarm.get("attribution")
                         else ""))
            return False

        _STOP_CLASS = type("StopTrainingOnAlarm", (BaseCallback,), {
            "__module__": "idt_desk.gym", "__qualname__": "StopTrainingOnAlarm",
            "__doc__": stop_on_alarm_class.__doc__, "alarm": None, "_on_step": _on_step})
    return _STOP_CLASS


def callback_class() -> type:
    """``IDTCallback``: the implementation above on SB3's ``BaseCallback`` (imported now)."""
    global _CALLBACK_CLASS
    if _CALLBACK_CLASS is None:
        from stable_baselines3.common.callbacks import BaseCallback

        _CALLBACK_CLASS = type("IDTCallback", (_IDTCallbackImpl, BaseCallback), {
            "__module__": "idt_desk.gym", "__qualname__": "IDTCallback",
            "__doc__": _IDTCallbackImpl.__doc__})
    return _CALLBACK_CLASS
