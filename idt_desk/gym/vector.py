"""``IDTVectorMonitor``: the IDT of every env of a Gymnasium vector env, in its ``infos``.

As ``gymnasium.wrappers.vector.RecordEpisodeStatistics`` gives ``infos["episode"]`` with the
mask ``infos["_episode"]``, this wrapper gives ``infos["idt"]`` (each window key an array over
the envs, NaN where an env has no window yet) and ``infos["_idt"]`` (which envs have one).
Each env is one stream (:class:`~idt_desk.gym.stream.Stream`, the one :class:`IDTMonitor`
runs): a window holds consecutive transitions of one env, so env i's windows are those an
``IDTMonitor`` around env i alone would give (tested).
"""

from __future__ import annotations

import os
from typing import Any

import gymnasium
import numpy as np
from gymnasium.vector import AutoresetMode, VectorWrapper

from idt_desk.gym.stream import (
    ALARM_DEFAULTS,
    IDT_COLUMNS,
    SpaceCodec,
    Stream,
    check_settings,
    frame,
    loop_rate,
    resolve_preset,
    resolve_twin,
)

__all__ = ["IDTVectorMonitor"]


class IDTVectorMonitor(VectorWrapper):
    """Compute the IDT metrics of each env of a vector env while it runs.

    Parameters
    ----------
    env
        A Gymnasium ``VectorEnv`` whose autoreset mode is next-step (the default) or
        same-step (the final observation in ``infos["final_obs"]``).
    preset, bins, window, stride, calibration_windows, correction, detector, false_alarms,
    baseline_windows, persist, k, phase_baseline, ewma_lambda, drift, baseline
        As :class:`~idt_desk.gym.IDTMonitor`'s, for every env.
    twin
        As :class:`~idt_desk.gym.IDTMonitor`'s: each env of a ``SyncVectorEnv`` gets a copy
        of its own; an ``AsyncVectorEnv``'s envs are in other processes: no twin.

    Raises
    ------
    ValueError
        An autoreset mode the wrapper cannot follow (disabled), or what ``IDTMonitor``
        refuses.
    """

    def __init__(
        self,
        env: gymnasium.vector.VectorEnv,
        preset: Any = None,
        bins: int | None = None,
        window: int | None = None,
        stride: int | None = None,
        calibration_windows: int = 20,
        correction: str | None = None,
        detector: str | None = ALARM_DEFAULTS["detector"],
        false_alarms: str | None = None,
        baseline_windows: int = ALARM_DEFAULTS["baseline_windows"],
        persist: int = ALARM_DEFAULTS["persist"],
        k: float = ALARM_DEFAULTS["k"],
        phase_baseline: bool = False,
        twin: Any = True,
        ewma_lambda: float = ALARM_DEFAULTS["ewma_lambda"],
        drift: float = ALARM_DEFAULTS["drift"],
        baseline: str | os.PathLike | Any = None,
    ) -> None:
        super().__init__(env)
        mode = env.metadata.get("autoreset_mode", AutoresetMode.NEXT_STEP)
        if mode not in (AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP):
            raise ValueError(f"IDTVectorMonitor follows next-step or same-step autoreset, not "
                             f"{getattr(mode, 'value', mode)}: a transition must be known")
        self._same_step = mode == AutoresetMode.SAME_STEP
        settings = {"preset": preset, "bins": bins, "window": window, "stride": stride,
                    "calibration_windows": calibration_windows, "correction": correction,
                    "detector": detector, "false_alarms": false_alarms,
                    "baseline_windows": baseline_windows, "persist": persist, "k": k,
                    "phase_baseline": phase_baseline, "ewma_lambda": ewma_lambda,
                    "drift": drift}
        check_settings(settings)
        obs_space, act_space = env.single_observation_space, env.single_action_space
        self.preset = resolve_preset(preset, obs_space, act_space, bins, window, stride)
        envs = getattr(env, "envs", None)
        first = envs[0] if envs else None
        spec = getattr(first, "spec", None) or getattr(env, "spec", None)
        rate = None if first is None else loop_rate(first)
        steps = getattr(spec, "max_episode_steps", None)
        state, action = SpaceCodec(obs_space, "observation"), SpaceCodec(act_space, "action")
        self._streams: list[Stream] = []
        for i in range(env.num_envs):
            sub = envs[i] if envs else None
            model, note = resolve_twin(twin if sub is not None else False, sub)
            if sub is None and twin is not False:
                note = "the envs run in other processes: no twin here, no class of change"
            self._streams.append(Stream(self.preset, state, action, settings, rate=rate,
                                        episode_steps=steps, twin=model, twin_note=note,
                                        baseline=baseline,
                                        env_id=getattr(spec, "id", None)))
        self._obs: np.ndarray | None = None
        self._done = np.zeros(env.num_envs, dtype=bool)
        #: Each env's episode index.
        self.episodes = np.zeros(env.num_envs, dtype=np.int64)

    def windows(self, env: int = 0) -> Any:
        """Every window so far of env ``env``, as :attr:`IDTMonitor.windows`."""
        return frame(self._streams[env].windows())

    def alarms(self, env: int = 0) -> list[dict[str, Any]]:
        """Each IDT alarm of env ``env`` (as :attr:`IDTMonitor.alarms`)."""
        return [dict(a) for a in self._streams[env].alarms]

    def reset(self, *, seed: Any = None, options: Any = None) -> tuple[Any, dict[str, Any]]:
        """Reset every env; their observations are the S of the next transitions."""
        obs, infos = self.env.reset(seed=seed, options=options)
        if self._obs is not None:
            self.episodes += 1
        self._obs = np.array(obs)
        self._done[:] = False
        return obs, self._with_idt(infos)

    def step(self, actions: Any) -> tuple[Any, Any, Any, Any, dict[str, Any]]:
        """Step every env; record each env's (S, A, S') and put the windows in ``infos``."""
        if self._obs is None:
            raise gymnasium.error.ResetNeeded("call reset() before step() on IDTVectorMonitor")
        obs, rewards, terms, truncs, infos = self.env.step(actions)
        obs_arr = np.array(obs)
        done = np.logical_or(terms, truncs)
        final = infos.get("final_obs") if self._same_step else None
        for i, stream in enumerate(self._streams):
            if not self._same_step and self._done[i]:
                self.episodes[i] += 1  # this step reset env i: its obs starts an episode
                continue
            s_next = final[i] if final is not None and done[i] else obs_arr[i]
            stream.add(self._obs[i], actions[i], s_next, rewards[i], int(self.episodes[i]))
            if self._same_step and done[i]:
                self.episodes[i] += 1
        self._obs = obs_arr
        self._done = done.copy()
        return obs, rewards, terms, truncs, self._with_idt(infos)

    def _with_idt(self, infos: dict[str, Any]) -> dict[str, Any]:
        latest = [s.latest for s in self._streams]
        mask = np.array([x is not None for x in latest])
        if mask.any():
            infos = dict(infos)
            infos["idt"] = {c: np.array([np.nan if x is None else float(x[c]) for x in latest])
                            for c in IDT_COLUMNS}
            infos["_idt"] = mask
        return infos

    def close(self, **kwargs: Any) -> None:
        """Close every env's stream and the vector env."""
        try:
            for s in self._streams:
                s.close()
        finally:
            super().close(**kwargs)
