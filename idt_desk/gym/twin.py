"""The twin of a MuJoCo Gymnasium env: an unperturbed copy of it, stepped from each recorded S.

:class:`MujocoTwin` is :class:`~idt_desk.metrics.twin.Twin` for any env built on Gymnasium's
``MujocoEnv`` whose observation is its state: the joint positions (less the first
``skipped_qpos``, which the dynamics ignore: HalfCheetah's, Hopper's and Walker2d's x) and
the joint velocities, as ``observation_structure`` declares and a check at build time
confirms (an older env without it, HalfCheetah-v4, is read off its sizes and checked the
same way). Each row's S is set into the copy's ``qpos``/``qvel``, A into ``ctrl``, the copy is
stepped ``frame_skip`` times (Gymnasium's ``do_simulation``) and its own observation
function gives the predicted S'. On clean HalfCheetah transitions this predicts S' to 1e-11.
The copy is of the env instance given, under whatever wrappers (its MuJoCo model copied when
the twin is built: a custom XML, an unregistered env), or of a registered id made afresh.

Its hypotheses (:class:`~idt_desk.metrics.twin.Hypothesis`) are what a change of each class
would do to the same rows, simulated by the same copy: a horizontal external force on the
root body (``xfrc_applied``, 1 N along each world axis the root can move along) for a
**force**, and gravity ×1.1 for a change of the **dynamics** (a heavier load: a vertical
force on the root is a payload, so it is not offered as a force). :func:`mujoco_twin` builds
one for an env, or says in one line why it cannot.

``mismatch`` builds a twin that is off, as any real model is: every body's mass and inertia
×(1 + mismatch), every geom's sliding friction ×(1 − mismatch). Its residual on clean data is
then a baseline of its own, not rounding (the twin's channels are read against their
baseline windows, so the attribution still works; how well is measured in
``assets/docs/rl-twin.md``).
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np

from idt_desk.metrics.twin import Hypothesis

__all__ = ["MujocoTwin", "TwinUnavailable", "mujoco_twin", "registered_id", "route_mujoco_warnings"]

_log = logging.getLogger("idt_desk.gym")


def route_mujoco_warnings() -> None:
    """MuJoCo warnings to Python logging instead of stderr and a MUJOCO_LOG.TXT in the cwd.

    Gymnasium's HalfCheetah XML uses a compiler attribute MuJoCo 4 deprecates; that one is
    logged at debug level, every other MuJoCo warning (instabilities...) as a warning.
    """
    import mujoco

    def warn(message: str) -> None:
        level = logging.DEBUG if "settotalmass" in message else logging.WARNING
        _log.log(level, "MuJoCo: %s", message)

    mujoco.set_mju_user_warning(warn)

#: Gravity's factor under the dynamics hypothesis.
GRAVITY_FACTOR = 1.1
#: The bank's simulated change of a factor (mass, friction, damping, gravity): ×1.1, read
#: linearly (its fitted size is a multiple of it).
_STEP = 0.1


class TwinUnavailable(ValueError):
    """The env has no twin this way; the message says why, in one line."""


def registered_id(env_id: Any) -> str:
    """``env_id`` if Gymnasium's registry holds it as an id, else a one-line refusal.

    An id read from a file (a recording's settings, its twin's) is looked up as an id only:
    ``gymnasium.make("module:Env")`` imports ``module`` first, so a recording naming
    ``antigravity:X`` opened a browser on replay. Nothing is imported to look it up (the
    registry holds the ids of the installed packages).

    Raises
    ------
    TwinUnavailable
        Not a string, a ``module:`` id, or an id the registry does not hold.
    """
    from gymnasium.envs.registration import registry

    if not isinstance(env_id, str) or ":" in env_id or env_id not in registry:
        from idt_desk.words import shown

        raise TwinUnavailable(f"env id {shown(env_id, 80)!r} is not an id in Gymnasium's "
                              "registry (an id from a file is only looked up there, never "
                              "imported)")
    return env_id


def _make(env: Any) -> Any:
    """An unwrapped copy of ``env`` with a model of its own.

    A registered id is made afresh; an env instance is copied as it is now, under any stack
    of wrappers. The instance's MuJoCo model is copied (``copy.deepcopy`` of its ``MjModel``, a new
    ``MjData``): a custom XML, an unregistered env and an env wrapped by the user's own
    wrappers (which ``gymnasium.make(env.spec)`` cannot rebuild) all get their twin, and a
    fault that later changes the env's model leaves the copy as it was when it was taken.
    """
    import gymnasium as gym

    route_mujoco_warnings()
    if isinstance(env, str):
        return gym.make(registered_id(env)).unwrapped
    base = getattr(env, "unwrapped", env)
    if not hasattr(base, "model") or not hasattr(base, "data"):
        return base  # not a MuJoCo env: refused by name, nothing copied
    import copy

    import mujoco

    twin = copy.copy(base)  # the env's observation function and layout, on a model of its own
    twin.spec = getattr(base, "spec", None)  # its id, what a recording states of the twin
    twin.model = copy.deepcopy(base.model)
    twin.data = mujoco.MjData(twin.model)
    # Nothing of the env's own is touched through the copy: no renderer, no random stream.
    for name in ("mujoco_renderer", "_np_random"):
        if name in vars(twin):
            setattr(twin, name, None)
    twin.close = lambda: None  # closing the twin must not close the user's renderer
    return twin


class MujocoTwin:
    """An unperturbed copy of a MuJoCo Gymnasium env, stepped from each recorded state.

    Parameters
    ----------
    env
        The env instance (any MuJoCo Gymnasium env, registered or not, under any wrappers:
        its model is copied as it is now) or a registered id (made afresh).
    mismatch
        0 for an exact copy; 0.1 for masses and inertias ×1.1 and friction ×0.9.

    Raises
    ------
    TwinUnavailable
        Not a MuJoCo env, or its observation is not its state (Reacher's angles as cos and
        sin, Ant's contact forces, ...).

    Examples
    --------
    >>> import gymnasium as gym, numpy as np
    >>> from idt_desk.gym.twin import MujocoTwin
    >>> env = gym.make("HalfCheetah-v5"); s, _ = env.reset(seed=0)
    >>> a = env.action_space.sample(); s2, *_ = env.step(a)
    >>> twin = MujocoTwin("HalfCheetah-v5")
    >>> bool(np.abs(twin.predict(s[None], a[None])[0] - s2).max() < 1e-9)
    True
    """

    def __init__(self, env: Any, mismatch: float = 0.0) -> None:
        self._env = copy = _make(env)
        if not hasattr(copy, "model") or not hasattr(copy, "do_simulation"):
            raise TwinUnavailable(f"{self._name()} is not a MuJoCo env")
        model, data = copy.model, copy.data
        self.model, self.data = model, data
        self.frame_skip = int(copy.frame_skip)
        structure = dict(getattr(copy, "observation_structure", None) or {})
        n_obs = int(np.prod(copy.observation_space.shape))
        # v5 envs declare the layout; an older one (HalfCheetah-v4) is read off the sizes,
        # and either way checked against the env's own observation below.
        self.skip = int(structure.get("skipped_qpos", model.nq + model.nv - n_obs))
        if set(structure) - {"skipped_qpos", "qpos", "qvel"} or not 0 <= self.skip <= model.nq \
                or n_obs != model.nq - self.skip + model.nv:
            raise TwinUnavailable(f"{self._name()}'s observation is not its state (joint "
                                  "positions and velocities): no twin")
        self._check_layout()
        self.clip = self._velocity_clip()
        import mujoco

        self._mj_step = mujoco.mj_step  # per row of every window: looked up once
        self.mismatch = float(mismatch)
        if self.mismatch:
            model.body_mass[:] *= 1.0 + self.mismatch
            model.body_inertia[:] *= 1.0 + self.mismatch
            model.geom_friction[:, 0] *= 1.0 - self.mismatch
        self.gravity = model.opt.gravity.copy()
        self.npos = model.nq - self.skip
        #: Per observation variable: position or velocity.
        self.kinds = ("position",) * self.npos + ("velocity",) * model.nv
        self.root = int(model.jnt_bodyid[0]) if model.njnt else 0
        root_name = mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_BODY, self.root) or "root"
        self.root_name = root_name
        off = f", masses ×{1 + self.mismatch:g} and friction ×{1 - self.mismatch:g}" \
            if self.mismatch else ""
        #: The observation's variables and the actuators by their names in the model (what
        #: an alarm's component is called: "fshin", not "act_4").
        from idt_desk.gym.faults import component_names

        names = component_names(copy)
        self.state_names, self.action_names = names["sensor"], names["actuator"]
        #: The env's id: what a recording states of this twin, so that a replay rebuilds it.
        self.env_id = self._name()
        clip = "" if self.clip is None else \
            f"; rows read at its velocity clip (±{self.clip:g}) hold no state and are skipped"
        self.description = f"an unperturbed copy of {self.env_id} (MuJoCo){off}{clip}"

    def _name(self) -> str:
        spec = getattr(self._env, "spec", None)
        return getattr(spec, "id", None) or type(self._env).__name__

    def _check_layout(self) -> None:
        """The observation is (qpos[skip:], qvel): checked at a state set by hand."""
        env, model = self._env, self.model
        import mujoco

        mujoco.mj_resetData(model, self.data)
        rng = np.random.default_rng(0)
        qpos = env.init_qpos + rng.uniform(-0.1, 0.1, model.nq)
        qvel = rng.uniform(-1.0, 1.0, model.nv)
        env.set_state(qpos, qvel)
        want = np.concatenate([qpos[self.skip:], qvel])
        if not np.allclose(self._env._get_obs(), want, atol=1e-12):
            raise TwinUnavailable(f"{self._name()}'s observation is not (qpos, qvel) as its "
                                  "observation_structure says: no twin")

    def _velocity_clip(self) -> float | None:
        """The bound the observation clips velocities to (Hopper-v5, Walker2d-v5: ±10), or None.

        A row whose S reads a velocity at that bound does not say the state: the twin set to
        it predicts another S' (Hopper's clean residual then reaches 4 % of a variable's
        spread, not rounding), so :meth:`predict` gives such rows NaN.
        """
        data = self.data
        saved = data.qvel.copy()
        try:
            data.qvel[:] = 1e6
            got = np.abs(np.asarray(self._env._get_obs(), dtype=np.float64)[-self.model.nv:])
        finally:
            data.qvel[:] = saved
        return float(got.max()) if self.model.nv and got.max() < 1e6 else None

    def close(self) -> None:
        """Close the copy."""
        self._env.close()

    def _set_state(self, s: np.ndarray) -> None:
        """The copy's state set to the observation ``s`` (its positions, then velocities)."""
        data = self.data
        data.qpos[:self.skip] = 0.0  # the dynamics ignore them (x of a planar walker)
        data.qpos[self.skip:] = s[:self.npos]
        data.qvel[:] = s[self.npos:]

    def _step(self, s: np.ndarray, a: np.ndarray, out: np.ndarray, k: int) -> None:
        data = self.data
        self._set_state(s)
        data.ctrl[:] = a
        # No warm start from the row before: each prediction is a function of (S, A) alone,
        # so a replay's are the session's whatever ran on the copy first (a kernel warm-up,
        # the hypotheses). Newton converges as close from zero (HalfCheetah: 1.7e-12 worst).
        data.qacc_warmstart[:] = 0.0
        self._mj_step(self.model, data, nstep=self.frame_skip)
        out[k] = self._env._get_obs()

    def predict(self, s: np.ndarray, a: np.ndarray | None) -> np.ndarray:
        """S' of each row: S set as the state, A as the control, ``frame_skip`` steps."""
        s = np.asarray(s, dtype=np.float64)
        a = np.zeros((len(s), self.model.nu)) if a is None else np.asarray(a, dtype=np.float64)
        out = np.empty_like(s)
        for k in range(len(s)):
            self._step(s[k], a[k], out, k)
        if self.clip is not None:  # a velocity read at the clip: the state is not known
            out[np.any(np.abs(s[:, self.npos:]) >= self.clip, axis=1)] = np.nan
        return out

    def hypotheses(self, s: np.ndarray, a: np.ndarray | None) -> list[Hypothesis]:
        """A horizontal force on the root along each axis it moves along; gravity ×1.1."""
        base = self.predict(s, a)
        out = []
        data, model = self.data, self.model
        for axis, name in enumerate("xy"):
            data.xfrc_applied[:] = 0.0
            data.xfrc_applied[self.root, axis] = 1.0
            try:
                delta = self.predict(s, a) - base
            finally:
                data.xfrc_applied[:] = 0.0
            if np.abs(delta).max() > 1e-9:  # the root cannot move along this axis
                out.append(Hypothesis(f"force_{name}", "force",
                                      f"an external force on {self.root_name} along {name}",
                                      delta, unit="{:+.3g} N"))
        model.opt.gravity[:] = self.gravity * GRAVITY_FACTOR
        try:
            delta = self.predict(s, a) - base
        finally:
            model.opt.gravity[:] = self.gravity
        if np.abs(delta).max() > 1e-9:  # a loop in a horizontal plane (a swimmer)
            out.append(Hypothesis("gravity", "dynamics", "gravity (a heavier load)", delta,
                                  size=GRAVITY_FACTOR - 1.0, base=1.0, unit="×{:.3g}"))
        return out

    def _moves(self, s0: np.ndarray) -> np.ndarray:
        """(nbody, 3): whether each body's centre of mass can move along each world axis.

        At state ``s0``, its translational Jacobian's row is not zero: a force along an axis
        it cannot move along does nothing, and is not simulated.
        """
        import mujoco

        model, data = self.model, self.data
        self._set_state(s0)
        mujoco.mj_kinematics(model, data)
        mujoco.mj_comPos(model, data)
        jacp = np.zeros((3, model.nv))
        out = np.zeros((model.nbody, 3), dtype=bool)
        for b in range(1, model.nbody):
            mujoco.mj_jacBodyCom(model, data, jacp, None, b)
            out[b] = np.abs(jacp).max(axis=1) > 1e-12
        return out

    def bank(self, s: np.ndarray, a: np.ndarray | None,
             base: np.ndarray | None = None) -> list[Hypothesis]:
        """Every physical change the copy can simulate, each on these rows' S'.

        A force of 1 N on each body along each world axis it moves along; each body's mass
        and inertia ×1.1; every geom's sliding friction ×1.1; every joint's damping ×1.1
        (where the joints are damped); gravity ×1.1. Each simulated by the copy on the rows,
        its effect the change of S' (the isolation's bank, :mod:`idt_desk.detection.isolation`,
        adds the sensors and the actuators). ``base``: the rows' prediction where the caller
        has it (a prediction is a function of (S, A) alone: the same, bit for bit).
        """
        import mujoco

        base = self.predict(s, a) if base is None else base
        model, data = self.model, self.data
        out: list[Hypothesis] = []

        def effect() -> np.ndarray:
            return self.predict(s, a) - base

        def keep(h: Hypothesis) -> None:
            if np.abs(h.delta).max() > 1e-9:  # a change the rows do not feel is no hypothesis
                out.append(h)

        def force(b: int, axis: int) -> Any:
            def sim(k: float) -> np.ndarray:
                data.xfrc_applied[:] = 0.0
                data.xfrc_applied[b, axis] = k
                try:
                    return effect()
                finally:
                    data.xfrc_applied[:] = 0.0
            return sim

        def factor(array: np.ndarray, index: Any) -> Any:
            def sim(k: float) -> np.ndarray:
                saved = array[index].copy()
                array[index] = saved * max(1.0 + k * _STEP, 1e-3)
                try:
                    return effect()
                finally:
                    array[index] = saved
            return sim

        def gravity(k: float) -> np.ndarray:
            model.opt.gravity[:] = self.gravity * (1.0 + k * _STEP)
            try:
                return effect()
            finally:
                model.opt.gravity[:] = self.gravity

        moves = self._moves(s[0])
        for b in range(1, model.nbody):
            name = mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_BODY, b) or f"body_{b}"
            for axis, ax in enumerate("xyz"):
                if not moves[b, axis]:  # a planar walker's bodies never move along y
                    continue
                data.xfrc_applied[:] = 0.0
                data.xfrc_applied[b, axis] = 1.0
                try:
                    delta = effect()
                finally:
                    data.xfrc_applied[:] = 0.0
                keep(Hypothesis(f"force:{name}:{ax}", "force", f"force on {name} along {ax}",
                                delta, unit="{:+.3g} N", component=name,
                                simulate=force(b, axis)))
            mass, inertia = model.body_mass[b].copy(), model.body_inertia[b].copy()
            model.body_mass[b] = mass * (1.0 + _STEP)
            model.body_inertia[b] = inertia * (1.0 + _STEP)
            try:
                delta = effect()
            finally:
                model.body_mass[b], model.body_inertia[b] = mass, inertia
            mass_of = factor(model.body_mass, b)
            inertia_of = factor(model.body_inertia, b)

            def both(k: float, mass_of: Any = mass_of, inertia_of: Any = inertia_of,
                     b: int = b) -> np.ndarray:
                saved = model.body_inertia[b].copy()
                model.body_inertia[b] = saved * max(1.0 + k * _STEP, 1e-3)
                try:
                    return mass_of(k)
                finally:
                    model.body_inertia[b] = saved
            keep(Hypothesis(f"mass:{name}", "dynamics", f"mass of {name}", delta, size=_STEP,
                            base=1.0, unit="×{:.3g}", component=name, simulate=both))
        for what, array, col in (("friction", model.geom_friction, 0),
                                 ("damping", model.dof_damping, None)):
            saved = array.copy()
            if col is None:
                array[:] = saved * (1.0 + _STEP)
            else:
                array[:, col] = saved[:, col] * (1.0 + _STEP)
            try:
                delta = effect()
            finally:
                array[:] = saved
            index = (slice(None), col) if col is not None else slice(None)
            keep(Hypothesis(what, "dynamics", what, delta, size=_STEP, base=1.0,
                            unit="×{:.3g}", simulate=factor(array, index)))
        model.opt.gravity[:] = self.gravity * (1.0 + _STEP)
        try:
            delta = effect()
        finally:
            model.opt.gravity[:] = self.gravity
        keep(Hypothesis("gravity", "dynamics", "gravity", delta, size=_STEP, base=1.0,
                        unit="×{:.3g}", simulate=gravity))
        return out


def mujoco_twin(env: Any, mismatch: float = 0.0) -> tuple[MujocoTwin | None, str]:
    """The twin of ``env`` (a Gymnasium env or id), or None and why not in one line."""
    try:
        return MujocoTwin(env, mismatch), ""
    except TwinUnavailable as exc:
        return None, str(exc)
    except Exception as exc:  # a broken env: the loop runs without a twin, and says so
        return None, f"no twin: {type(exc).__name__}: {exc}"

