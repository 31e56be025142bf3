"""Faults as they happen in a real loop, for any MuJoCo Gymnasium env: a seeded wrapper.

:class:`FaultWrapper` wraps an env and injects :class:`Fault` s, each with a kind, a
component, a size, an onset and an end (in the wrapper's steps, counted across episodes), so
that a monitor can be tested on changes it is told nothing of. Wrap it *inside* the monitor::

    env = IDTMonitor(FaultWrapper(gym.make("HalfCheetah-v5"),
                                  Fault("actuator_gain", "fshin", 0.5, onset=120_000)))

and the monitor sees what a real loop's does: the observation the sensors give and the action
the policy **commanded**, while the env is driven by the faulty one. The kinds
(:data:`KINDS`), by class (:data:`CLASS_OF`):

- **sensor** (on one observation variable, by index or name): ``sensor_noise`` (Gaussian, σ
  in the variable's units), ``sensor_offset`` (added), ``sensor_stuck`` (holds the value it
  read at the onset; size unused), ``sensor_dropout`` (reads 0 with probability ``size``
  each step);
- **actuator** (on one actuator, by index or MuJoCo name): ``actuator_noise`` (Gaussian, σ
  in the action's units), ``actuator_gain`` (the applied action is ``size`` × the commanded),
  ``actuator_offset`` (added), ``actuator_stuck`` (holds the action commanded at the onset);
- **force**: ``force`` — an external force of ``size`` newtons on a body (by name) along
  ``axis`` (x, y or z of the world; MuJoCo ``xfrc_applied``);
- **dynamics**: ``mass`` (a body's mass and inertia × ``size``), ``friction`` (the sliding
  friction of a body's geoms × ``size``; every geom's where the component is None),
  ``damping`` (a joint's damping × ``size``; every joint's where None), ``gravity`` (×
  ``size``).

A physical fault changes the env's own model while it is on and restores it at its end (and
re-applies it after a reset). Each fault's random numbers come from its own seeded stream, so
a trial is the same whatever else ran. ``wrapper.on`` says which faults act at the current
step; ``info["faults"]`` the same, for a log.

The RL source's perturbations (action and observation noise, the push on the torso, gravity
×1.1) are such faults on the product's own schedule; the isolation study
(``idt-desk reproduce isolation``) draws them at random.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np

__all__ = ["CLASS_OF", "KINDS", "Fault", "FaultWrapper", "component_names", "faults_of"]

#: Each kind of fault and the class of change it is.
CLASS_OF = {
    "sensor_noise": "sensor", "sensor_offset": "sensor", "sensor_stuck": "sensor",
    "sensor_dropout": "sensor",
    "actuator_noise": "actuator", "actuator_gain": "actuator", "actuator_offset": "actuator",
    "actuator_stuck": "actuator",
    "force": "force",
    "mass": "dynamics", "friction": "dynamics", "damping": "dynamics", "gravity": "dynamics",
}
KINDS = tuple(CLASS_OF)
_AXES = {"x": 0, "y": 1, "z": 2}
#: Kinds without a component (they act on the whole model), and those where None means all.
_GLOBAL = {"gravity"}
_ALL_IF_NONE = {"friction", "damping"}


@dataclasses.dataclass(frozen=True)
class Fault:
    """One fault: what, on which component, how large, from when to when.

    Attributes
    ----------
    kind
        One of :data:`KINDS`.
    component
        The observation variable (index or name), the actuator (index or MuJoCo name), the
        body (MuJoCo name) or the joint (name) it acts on; None for ``gravity`` (and for
        every geom's friction or every joint's damping).
    size
        Its size, in the kind's unit (see the module's docstring).
    onset
        The wrapper's step (counted from its construction, across episodes) it starts at.
    end
        The step it stops at (None: never).
    axis
        A force's world axis: ``x``, ``y`` or ``z``.
    seed
        Its random stream's seed (noise, dropout).

    """

    kind: str
    component: int | str | None = None
    size: float = 0.0
    onset: int = 0
    end: int | None = None
    axis: str = "x"
    seed: int = 0

    def __post_init__(self) -> None:
        if self.kind not in CLASS_OF:
            raise ValueError(f"fault kind {self.kind!r}: not one of {', '.join(KINDS)}")
        if not isinstance(self.size, int | float) or not np.isfinite(self.size):
            raise ValueError(f"fault {self.kind}: size must be a finite number, got "
                             f"{self.size!r}")
        if self.kind in _GLOBAL and self.component is not None:
            raise ValueError(f"fault {self.kind}: acts on the whole model, no component")
        if self.component is None and self.kind not in _GLOBAL | _ALL_IF_NONE:
            raise ValueError(f"fault {self.kind}: name its component")
        if self.kind == "force" and self.axis not in _AXES:
            raise ValueError(f"fault force: axis must be x, y or z, got {self.axis!r}")
        if self.kind == "sensor_dropout" and not 0.0 <= self.size <= 1.0:
            raise ValueError("fault sensor_dropout: size is a probability in [0, 1]")
        if self.kind in ("mass", "friction", "damping", "gravity") and self.size <= 0:
            raise ValueError(f"fault {self.kind}: size is a factor > 0, got {self.size!r}")
        if self.kind in ("sensor_noise", "actuator_noise") and self.size < 0:
            raise ValueError(f"fault {self.kind}: σ must be ≥ 0, got {self.size!r}")
        for name in ("onset", "seed"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int | np.integer) or v < 0:
                raise ValueError(f"fault {self.kind}: {name} must be an integer ≥ 0, got {v!r}")
        if self.end is not None and (not isinstance(self.end, int | np.integer)
                                     or self.end <= self.onset):
            raise ValueError(f"fault {self.kind}: end must be an integer after the onset")

    @property
    def cls(self) -> str:
        """Its class of change: sensor, actuator, force or dynamics."""
        return CLASS_OF[self.kind]

    def active(self, step: int) -> bool:
        """Whether it acts at the wrapper's step ``step``."""
        return step >= self.onset and (self.end is None or step < self.end)

    def describe(self) -> str:
        """In words: "actuator_gain on fshin: 0.5 from step 120,000"."""
        on = "" if self.component is None else f" on {self.component}"
        axis = f" along {self.axis}" if self.kind == "force" else ""
        end = "" if self.end is None else f" to {self.end:,}"
        return f"{self.kind}{on}{axis}: {self.size:g} from step {self.onset:,}{end}"


def component_names(env: Any) -> dict[str, tuple[str, ...]]:
    """The names a fault's component may take: observation variables, actuators, bodies, joints.

    Observation variables are named from the model's joints where the observation is the
    state (``qpos`` less the first ``skipped_qpos``, then ``qvel`` as ``<joint>_vel``), else
    ``obs_0``, ``obs_1``, …; actuators, bodies and joints by their MuJoCo names, an unnamed
    actuator by the joint it drives (Hopper's, Walker2d's, Ant's: ``thigh_joint``, as
    HalfCheetah names its own), else ``act_<i>``.
    """
    base = getattr(env, "unwrapped", env)
    n_obs = int(np.prod(base.observation_space.shape))
    model = getattr(base, "model", None)
    out: dict[str, tuple[str, ...]] = {"sensor": tuple(f"obs_{j}" for j in range(n_obs)),
                                       "actuator": (), "body": (), "joint": ()}
    if model is None:
        n_act = int(np.prod(base.action_space.shape))
        out["actuator"] = tuple(f"act_{j}" for j in range(n_act))
        return out
    import mujoco

    def names(kind: Any, n: int, prefix: str) -> tuple[str, ...]:
        return tuple(mujoco.mj_id2name(model, kind, i) or f"{prefix}_{i}" for i in range(n))

    out["body"] = names(mujoco.mjtObj.mjOBJ_BODY, model.nbody, "body")
    out["joint"] = joints = names(mujoco.mjtObj.mjOBJ_JOINT, model.njnt, "joint")
    acts = []
    for i in range(model.nu):
        name = mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_ACTUATOR, i)
        if not name and int(model.actuator_trntype[i]) == int(mujoco.mjtTrn.mjTRN_JOINT):
            name = mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_JOINT,
                                     int(model.actuator_trnid[i, 0]))
        acts.append(name or f"act_{i}")
    # Names stay unique (a fault names its actuator): a repeated one is its index's.
    out["actuator"] = tuple(n if acts.count(n) == 1 else f"act_{i}" for i, n in enumerate(acts))
    pos, vel = [], []
    for j in range(model.njnt):
        nq = {0: 7, 1: 4}.get(int(model.jnt_type[j]), 1)  # free, ball, slide/hinge
        nv = {0: 6, 1: 3}.get(int(model.jnt_type[j]), 1)
        pos += [joints[j]] if nq == 1 else [f"{joints[j]}_{k}" for k in range(nq)]
        vel += [f"{joints[j]}_vel"] if nv == 1 else [f"{joints[j]}_vel_{k}" for k in range(nv)]
    structure = dict(getattr(base, "observation_structure", None) or {})
    skip = int(structure.get("skipped_qpos", model.nq + model.nv - n_obs))
    if 0 <= skip <= model.nq and len(pos) == model.nq and n_obs == model.nq - skip + model.nv:
        out["sensor"] = (*pos[skip:], *vel)
    return out


class _Bound:
    """A fault resolved against one env: the index it acts on, its stream, its state."""

    def __init__(self, fault: Fault, env: Any, names: dict[str, tuple[str, ...]]) -> None:
        self.fault = fault
        self.rng = np.random.default_rng(fault.seed)
        self.index = self._resolve(fault, env, names)
        self.held: float | None = None  # a stuck sensor's or actuator's value
        self.applied = False  # a physical fault's change is in the model
        self.saved: Any = None

    @staticmethod
    def _resolve(fault: Fault, env: Any, names: dict[str, tuple[str, ...]]) -> Any:
        c = fault.component
        pool = {"sensor": "sensor", "actuator": "actuator", "force": "body"}.get(fault.cls)
        if fault.kind in ("mass", "friction"):
            pool = "body"
        elif fault.kind == "damping":
            pool = "joint"
        if c is None or pool is None:
            return None
        options = names[pool]
        if isinstance(c, int | np.integer) and not isinstance(c, bool):
            if not 0 <= int(c) < len(options):
                raise ValueError(f"fault {fault.kind}: {pool} {c} out of range "
                                 f"(0..{len(options) - 1})")
            return int(c)
        if isinstance(c, str) and c in options:
            return options.index(c)
        raise ValueError(f"fault {fault.kind}: no {pool} named {c!r} (the env's: "
                         f"{', '.join(options[:24])}{' …' if len(options) > 24 else ''})")


class FaultWrapper(gym.Wrapper):
    """An env with faults injected: the caller sees the commanded action's world.

    Parameters
    ----------
    env
        A Gymnasium env (a MuJoCo one for force and dynamics faults).
    *faults
        The faults, each with its onset and end in this wrapper's steps.

    Raises
    ------
    ValueError
        A fault whose component the env does not have, or a physical fault on an env without
        a MuJoCo model.

    Examples
    --------
    >>> import gymnasium as gym, numpy as np
    >>> from idt_desk.gym.faults import Fault, FaultWrapper
    >>> env = FaultWrapper(gym.make("HalfCheetah-v5"), Fault("sensor_offset", "rootz", 0.3,
    ...                                                      onset=5))
    >>> obs, _ = env.reset(seed=0)
    >>> for _ in range(6): obs, *_ = env.step(np.zeros(6))
    >>> env.on
    ('sensor_offset on rootz: 0.3 from step 5',)
    """

    def __init__(self, env: Any, *faults: Fault) -> None:
        super().__init__(env)
        for f in faults:
            if not isinstance(f, Fault):
                raise TypeError(f"FaultWrapper takes Fault objects, got {type(f).__name__}")
        base = env.unwrapped
        self._model = getattr(base, "model", None)
        self._data = getattr(base, "data", None)
        physical = [f for f in faults if f.cls in ("force", "dynamics")]
        if physical and self._model is None:
            raise ValueError(f"fault {physical[0].kind}: the env has no MuJoCo model")
        names = component_names(env)
        self._faults = [_Bound(f, env, names) for f in faults]
        self.names = names
        #: The wrapper's steps so far, across episodes.
        self.steps = 0
        if self._model is not None:
            self._gravity0 = self._model.opt.gravity.copy()

    @property
    def faults(self) -> tuple[Fault, ...]:
        """The faults, as given."""
        return tuple(b.fault for b in self._faults)

    @property
    def on(self) -> tuple[str, ...]:
        """The faults acting at the current step, in words."""
        return tuple(b.fault.describe() for b in self._faults if b.fault.active(self.steps))

    # -- the physics ---------------------------------------------------------------------

    def _physics(self) -> None:
        """Each physical fault's change in the model while it acts, undone at its end."""
        model, data = self._model, self._data
        if model is None:
            return
        data.xfrc_applied[:] = 0.0
        for b in self._faults:
            f = b.fault
            on = f.active(self.steps)
            if f.kind == "force":
                if on:
                    data.xfrc_applied[b.index, _AXES[f.axis]] += f.size
                continue
            if f.cls != "dynamics" or on == b.applied:
                continue
            if on:
                b.saved = self._change(f, b.index)
            else:
                self._restore(f, b.index, b.saved)
            b.applied = on

    def _change(self, f: Fault, i: int | None) -> Any:
        model = self._model
        if f.kind == "gravity":
            saved = model.opt.gravity.copy()
            model.opt.gravity[:] = saved * f.size
        elif f.kind == "mass":
            saved = (model.body_mass[i].copy(), model.body_inertia[i].copy())
            model.body_mass[i] *= f.size
            model.body_inertia[i] *= f.size
        elif f.kind == "friction":
            geoms = np.arange(model.ngeom) if i is None else \
                np.flatnonzero(model.geom_bodyid == i)
            saved = (geoms, model.geom_friction[geoms, 0].copy())
            model.geom_friction[geoms, 0] *= f.size
        else:  # damping
            dofs = np.arange(model.nv) if i is None else \
                np.flatnonzero(model.dof_jntid == i)
            saved = (dofs, model.dof_damping[dofs].copy())
            model.dof_damping[dofs] *= f.size
        return saved

    def _restore(self, f: Fault, i: int | None, saved: Any) -> None:
        model = self._model
        if f.kind == "gravity":
            model.opt.gravity[:] = saved
        elif f.kind == "mass":
            model.body_mass[i], model.body_inertia[i] = saved
        elif f.kind == "friction":
            model.geom_friction[saved[0], 0] = saved[1]
        else:
            model.dof_damping[saved[0]] = saved[1]

    # -- the signals ---------------------------------------------------------------------

    def _action(self, action: Any) -> np.ndarray:
        a = np.array(action, dtype=np.float64, copy=True).reshape(-1)
        for b in self._faults:
            f = b.fault
            if f.cls != "actuator" or not f.active(self.steps):
                if f.cls == "actuator":
                    b.held = None
                continue
            j = b.index
            if f.kind == "actuator_noise":
                a[j] += b.rng.normal(0.0, f.size)
            elif f.kind == "actuator_gain":
                a[j] *= f.size
            elif f.kind == "actuator_offset":
                a[j] += f.size
            else:  # stuck at what was commanded at the onset
                if b.held is None:
                    b.held = float(a[j])
                a[j] = b.held
        return a.reshape(np.shape(action)).astype(np.asarray(action).dtype, copy=False)

    def _observation(self, obs: Any) -> Any:
        out = None
        for b in self._faults:
            f = b.fault
            if f.cls != "sensor" or not f.active(self.steps):
                if f.cls == "sensor":
                    b.held = None
                continue
            if out is None:
                out = np.array(obs, dtype=np.float64, copy=True).reshape(-1)
            j = b.index
            if f.kind == "sensor_noise":
                out[j] += b.rng.normal(0.0, f.size)
            elif f.kind == "sensor_offset":
                out[j] += f.size
            elif f.kind == "sensor_dropout":
                if b.rng.random() < f.size:
                    out[j] = 0.0
            else:  # stuck at what it read at the onset
                if b.held is None:
                    b.held = float(out[j])
                out[j] = b.held
        if out is None:
            return obs
        return out.reshape(np.shape(obs)).astype(np.asarray(obs).dtype, copy=False)

    def reset(self, **kwargs: Any) -> tuple[Any, dict]:
        """The env's reset, its observation through the sensors' faults."""
        obs, info = self.env.reset(**kwargs)
        self._physics()  # a reset clears xfrc_applied, not the model's changes
        return self._observation(obs), {**info, "faults": self.on}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        """One step of the env driven by the faulty action; the observation as read."""
        self._physics()
        applied = self._action(action)
        obs, reward, term, trunc, info = self.env.step(applied)
        self.steps += 1
        # The observation after the step is read as the sensors read at the next step.
        return self._observation(obs), reward, term, trunc, {**info, "faults": self.on}

    def close(self) -> None:
        """Undo the model's changes, then close the env."""
        for b in self._faults:  # the model as it was, for whoever holds the env next
            if b.applied:
                self._restore(b.fault, b.index, b.saved)
                b.applied = False
        if self._data is not None:
            self._data.xfrc_applied[:] = 0.0
        self.env.close()


def faults_of(env: Any) -> Sequence[Fault]:
    """The faults of the :class:`FaultWrapper` s in ``env``'s stack (outermost first)."""
    out: list[Fault] = []
    e = env
    while e is not None:
        if isinstance(e, FaultWrapper):
            out += list(e.faults)
        e = getattr(e, "env", None)
    return out
