"""A frozen Stable-Baselines3 policy acting in a Gymnasium environment, as a live source.

What is recorded, exactly (one transition per environment step):

- **S** — the observation the policy receives: the environment's observation, then the
  sensor perturbation (``obs_noise_*``), then the modulations of what the agent sees
  (dimensionality reduction: chosen groups frozen at their running mean; input filter: an
  EMA), in that order. A ``VecNormalize`` file beside the policy is applied inside the policy
  call, after S: S is in the environment's units.
- **A** — the action applied to the environment: the policy's action (its mean when
  ``deterministic``, the default and what the authors' released evaluation does; otherwise
  drawn from its own distribution), then Hold, then the actuator perturbation
  (``act_noise_*``, σ in the action's own units), clipped to the action bounds.
- **S'** — the next observation through the same pipeline, i.e. the next step's S; at an
  episode's end, the terminal observation (and the next episode starts afresh: its first S
  comes from ``reset``, the EMA restarts).
- reward per step, and the episode index; an ``episode_end`` event carries the return.

One file: the source is one class whose step runs the env, the policy, the perturbations and
the modulations in a fixed order; apart they would share every field of it.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
from idt_desk_sources.gym._policy import FrozenPolicy, PolicyError
from idt_desk_sources.gym.cards import upside_down

from idt_desk.plugin import (
    ACTION_SMOOTHING,
    CONTROL_BASELINE_WINDOWS,
    CONTROL_BUDGET,
    CONTROL_DETECTOR,
    DIM_REDUCTION,
    HOLD,
    INPUT_FILTER,
    OBS_HOLD,
    PRESETS,
    Batch,
    Param,
    Perturbation,
    Source,
    Suggestion,
    assets,
)

__all__ = ["ACTIONS", "HALFCHEETAH_ACTIONS", "HALFCHEETAH_OBS", "GymSource", "default_policy",
           "shipped_policies"]

#: HalfCheetah's 17 observations: qpos without rootx, then qvel.
HALFCHEETAH_OBS = (
    "rootz", "rooty", "bthigh", "bshin", "bfoot", "fthigh", "fshin", "ffoot",
    "vx", "vz", "vangle", "bthigh_vel", "bshin_vel", "bfoot_vel", "fthigh_vel", "fshin_vel",
    "ffoot_vel",
)
#: HalfCheetah's 6 torques.
HALFCHEETAH_ACTIONS = ("bthigh", "bshin", "bfoot", "fthigh", "fshin", "ffoot")
#: The body-part groups of the cheetah preset, by name (paper §10.3).
CHEETAH_GROUPS = dict(zip(("torso", "back_leg", "front_leg"), PRESETS["cheetah"].state_groups,
                           strict=True))
#: Where the shipped policies live (in the repository, beside the packages).
POLICY_DIR = assets.path("policies")
_MAX_RETURNS = 500
#: How a policy acts, by name: its mean (``deterministic``, the authors' released evaluation and
#: the default) or a sample from its distribution.
ACTIONS = ("deterministic", "stochastic")
#: The units of the noise perturbations, as the authors' released evaluation adds them: on the
#: action in its own units (σ = 0.01 for "1 %" on actions in [-1, 1]), on the observation in
#: VecNormalize-normalised units, i.e. a fraction of each variable's standard deviation.
_ACTION_UNIT = "the action bound ((high − low) / 2: σ 0.01 for 1 % on [−1, 1])"
_OBS_UNIT = ("each variable's standard deviation (raw observations from the start of the "
             "run to the switch-on)")


#: Share of steps upside down from which a shipped policy is not the default.
UPSIDE_DOWN_LIMIT = 0.01


#: A settled closed loop puts a policy first only if its return is at least this share of the
#: best upright policy's.
SETTLED_MIN_SHARE = 0.5


def _settled(card: dict[str, Any]) -> bool:
    """Whether a model card says its closed loop is settled.

    A tiny push stays small (see ``idt-desk train --card``) in at least half its episodes.
    """
    return float((card.get("closed_loop") or {}).get("stable_share", 0.0)) >= 0.5


def _ranked(stem: str) -> list[tuple[tuple[bool, bool, float, str], Path, dict[str, Any]]]:
    """The shipped policies named ``stem-*`` (all: ``""``) with a readable card, best first.

    Upright before upside down, then a settled closed loop before a chaotic one, then the
    deterministic return (see :func:`default_policy`). A settled loop counts only for a
    policy whose return is at least ``SETTLED_MIN_SHARE`` of the best upright one's: an
    agent that barely moves is settled too, and it is not one to show.
    """
    found = []
    for card in sorted(POLICY_DIR.glob(f"{stem}-*.json" if stem else "*.json")):
        zip_path = card.with_suffix(".zip")
        try:
            c = json.loads(card.read_text())
            score = float(c["return_deterministic"]["mean"])
            upright = (upside_down(c) or 0.0) < UPSIDE_DOWN_LIMIT
            stable = _settled(c)
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if zip_path.exists():
            found.append((upright, stable, score, zip_path, c))
    best = max((score for upright, _, score, _, _ in found if upright), default=math.inf)
    ranked = [((upright, stable and score >= SETTLED_MIN_SHARE * best, score, path.name), path, c)
              for upright, stable, score, path, c in found]
    ranked.sort(key=lambda r: r[0], reverse=True)
    return ranked


def default_policy(env_id: str) -> Path:
    """The shipped policy for ``env_id`` whose model card reports the best deterministic return.

    A policy whose card says it spends 1 % of its steps or more upside down
    (``upside_down_share``, see ``idt-desk train --card``) is passed over while another
    qualifies: its gait is a local optimum, not the agent the paper's results are about.
    Among the upright ones, a policy whose closed loop is stable (its card's ``closed_loop``:
    a tiny push stays small in at least half the episodes) and whose return is at least half
    the best one's comes before a chaotic one: on a chaotic loop a small perturbation adds
    nothing the loop's own divergence does not already make, so the IDT has nothing to show.
    A HalfCheetah-v5 policy also serves HalfCheetah-v4 (the same 17 observations and 6
    torques).
    """
    stems = [env_id.lower()]
    if stems[0].startswith("halfcheetah"):
        stems.append("halfcheetah-v5")
    for stem in stems:
        ranked = _ranked(stem)
        if ranked:
            return ranked[0][1]
    raise PolicyError(f"no shipped policy for {env_id} in {POLICY_DIR}: set 'policy' to an SB3 "
                      "zip (train one with `idt-desk train`)")


def shipped_policies() -> tuple[Suggestion, ...]:
    """The shipped policies as the ``policy`` setting offers them, in the order they rank.

    Each is its zip's path with a one-line summary of its model card: algorithm, seed,
    deterministic return, and what sets it apart (upside down, a settled closed loop). The
    first entry is the empty setting: the best of them for the env.
    """
    out = []
    for key, path, c in _ranked(""):
        upright, _, score, _ = key
        stable = _settled(c)
        name = path.stem
        algo, seed = str(c.get("algorithm", "?")), c.get("seed", "?")
        marks = []
        if not upright:
            share = upside_down(c) or 0.0
            marks.append(f"upside down {share:.1%}" if share < 0.1 else
                         f"upside down {share:.0%}")
        if stable:
            marks.append("settled loop")
        label = " · ".join([f"{algo} seed {seed}", f"return {score:,.0f}", *marks])
        det = c["return_deterministic"]
        loop = c.get("closed_loop") or {}
        tip = (f"{name} ({c.get('env_id', '?')}): {algo}, {int(c.get('steps', 0)):,} steps; "
               f"deterministic return {score:,.0f} (CV {float(det.get('cv', math.nan)):.3f}); "
               f"upside down {float(c.get('upside_down_share', math.nan)):.1%} of steps")
        if loop:
            tip += (f"; a {loop.get('nudge', 1e-6):g} push stayed small in "
                    f"{float(loop.get('stable_share', 0.0)):.0%} of episodes "
                    f"({'settled' if stable else 'chaotic'} closed loop)")
        out.append(Suggestion(str(path), label, tip))
    best = f" ({out[0].label.split(' · ')[0]})" if out else ""
    return (Suggestion("", f"default: the best shipped{best}",
                       "the best-ranked shipped policy for the environment: upright first, "
                       "then a settled closed loop, then the deterministic return"), *out)


def _noise(name: str, percent: float, what: str, target: str, label: str) -> Perturbation:
    return Perturbation(
        name, label,
        (Param("percent", percent, "σ", 0.0, 100.0, unit="%",
               help=f"standard deviation as a percentage of {what}"),),
        f"Gaussian noise on {'the applied action' if target == 'actuator' else 'the observation'}"
        f" (paper Table 9), σ = percent % of {what}, as the authors' released evaluation adds "
        "it.",
        target=target,
    )


def _force(name: str, newtons: float) -> Perturbation:
    return Perturbation(
        name, f"Force on torso {newtons:g} N",
        (Param("force", newtons, "Force", -1000.0, 1000.0, unit="N"),
         Param("body", "torso", "Body", help="MuJoCo body the force acts on"),
         Param("direction", "x", "Direction", choices=("x", "y", "z")),
         Param("interval", 0, "Pulse every (0: constant)", 0, 100_000, unit="steps",
               help="0: constant (the paper's Table 9); N: pulsed, on for the first "
                    "'duration' of every N steps of an episode (the authors' released "
                    "wrapper: 100)"),
         Param("duration", 10, "Pulse length", 1, 100_000, unit="steps",
               help="steps the force is on in each pulse (used when 'interval' > 0)")),
        "An external force (MuJoCo xfrc_applied) on a body while on (paper Table 9): "
        "constant by default, or pulsed by episode step as the authors' released code does.",
    )


#: The defaults are parameters chosen by the RL modulation study (``reproduce cheetah
#: --modulation``; its figures are in ``assets/docs/rl-modulation.md`` and
#: ``assets/data/modulation_study.json``, not here, since they change with every retraining):
#: no setting recovered the return a perturbation took, so each default is the setting that
#: cost the unperturbed controls least. The tooltip says what a setting does and where its
#: cost is written down.
_STUDY = ("Its default is the setting that cost unperturbed agents least in the RL "
          "modulation study, which found no setting that recovers the return a perturbation "
          "takes (the cost of each setting: assets/docs/rl-modulation.md)")
RL_MODULATIONS = (
    dataclasses.replace(HOLD, params=(
        HOLD.params[0],
        dataclasses.replace(HOLD.params[1], default=0.998),
        dataclasses.replace(HOLD.params[2], default=0.001)), help=(
        f"{HOLD.help} {_STUDY}: ×0.998 and repeating with probability 0.001.")),
    dataclasses.replace(INPUT_FILTER, params=(
        dataclasses.replace(INPUT_FILTER.params[0], default=0.995),), help=(
        f"{INPUT_FILTER.help} {_STUDY}: α 0.995.")),
    dataclasses.replace(DIM_REDUCTION, params=(Param(
        "drop", "back_leg", "Drop groups",
        help="comma-separated observation groups frozen at their running mean: torso, "
             "back_leg, front_leg (HalfCheetah); another env's groups are its variables, "
             "obs_0, obs_1, …"),), help=(
        f"{DIM_REDUCTION.help} {_STUDY}: back_leg. Freezing any group breaks the gait.")),
    dataclasses.replace(ACTION_SMOOTHING, params=(
        dataclasses.replace(ACTION_SMOOTHING.params[0], default=0.995),), help=(
        f"{ACTION_SMOOTHING.help} {_STUDY}: α 0.995.")),
    dataclasses.replace(OBS_HOLD, params=(
        dataclasses.replace(OBS_HOLD.params[0], default=0.0005),), help=(
        f"{OBS_HOLD.help} {_STUDY}: probability 0.0005.")),
)


class GymSource(Source):
    """A frozen SB3 policy in a Gymnasium environment (HalfCheetah by default)."""

    name = "gym"
    label = "RL agent (Gymnasium + SB3)"
    slow_to_load = True  # torch, MuJoCo and the policy: 4 s idle, 20-80 s on a loaded machine
    own_process = True  # the window's drawing halved its loop in the same interpreter
    description = (
        "A frozen Stable-Baselines3 policy acting in MuJoCo HalfCheetah (or any Gymnasium "
        "env with Box observations): S the observation the policy receives, A the applied "
        "torques, S' the next observation (paper §5.1, §10)."
    )
    has_reward = True
    #: Steps per call at full speed: about 0.1 s of compute, so the session's per-call cost
    #: stays under 1 % (commands still act within 0.1 s; Auto cuts calls at window ends).
    chunk = 200
    #: The paper's preset first (the default: on held-out seeds its alarm kept its budget),
    #: then the live cheetah (one IDT per body part, W 1000, its own detector: the union of
    #: the components' EWMA; faster on chaotic agents, over budget on held-out controls, and
    #: it names the class of change: ``assets/docs/rl-estimator.md``).
    presets = ("cheetah", "cheetah-live", "gym", "auto")
    #: MEWMA: the detector that sees most on the shipped agents under the paper's preset
    #: (``assets/docs/rl-detection.md``); the live cheetah preset names its own.
    default_detector = CONTROL_DETECTOR
    #: 1/10h of loop time: at most 1 of 20 half-hour unperturbed runs alarmed by chance.
    default_budget = CONTROL_BUDGET
    #: 2,200 windows: long enough for the MEWMA's calibration at that budget.
    default_baseline = CONTROL_BASELINE_WINDOWS
    settings = (
        Param("env_id", "HalfCheetah-v5", "Environment",
              help="a Gymnasium id (HalfCheetah-v5, HalfCheetah-v4, ...)"),
        Param("policy", "", "Policy",
              help="an SB3 zip (any algorithm), or one of the shipped policies listed; "
                   "empty: the best shipped policy for the env",
              suggestions=shipped_policies()),
        Param("deterministic", True, "Deterministic",
              help="act with the policy's mean, as the authors' released evaluation does "
                   "(model.predict(..., deterministic=True)); off: sample from the policy's "
                   "distribution (the paper's wording: stochastic policies ensure choice)"),
    )
    perturbations = (
        _noise("act_noise_1", 1.0, _ACTION_UNIT, "actuator", "Action noise 1 %"),
        _noise("act_noise_3", 3.0, _ACTION_UNIT, "actuator", "Action noise 3 %"),
        _noise("act_noise_4", 4.0, _ACTION_UNIT, "actuator", "Action noise 4 %"),
        _force("force_torso_5N", 5.0),
        _force("force_torso_10N", 10.0),
        Perturbation(
            "gravity_110", "Gravity 110 %",
            (Param("factor", 1.10, "g factor", 0.1, 10.0),),
            "Gravity (model.opt.gravity) scaled by a factor; re-applied after every reset.",
        ),
        _noise("obs_noise_1", 1.0, _OBS_UNIT, "sensor", "Observation noise 1 %"),
        _noise("obs_noise_3", 3.0, _OBS_UNIT, "sensor", "Observation noise 3 %"),
    )
    #: The perturbations by what they act on, read from their declarations (never their
    #: names; a subclass's own are sorted the same way): noise on the observation, noise on
    #: the applied action, forces on a body.
    SENSOR_NOISE: tuple[str, ...] = ()
    ACTION_NOISE: tuple[str, ...] = ()
    FORCES: tuple[str, ...] = ()
    modulations = RL_MODULATIONS
    view = "cheetah"

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls._sort_perturbations()

    @classmethod
    def _sort_perturbations(cls) -> None:
        """SENSOR_NOISE, ACTION_NOISE and FORCES from the declared perturbations."""
        perts = cls.perturbations
        cls.SENSOR_NOISE = tuple(p.name for p in perts if p.target == "sensor")
        cls.ACTION_NOISE = tuple(p.name for p in perts if p.target == "actuator")
        cls.FORCES = tuple(p.name for p in perts if any(q.name == "force" for q in p.params))

    def __init__(self, **settings: Any) -> None:
        import gymnasium as gym

        super().__init__(**settings)
        env_id = self.config["env_id"]
        from idt_desk.plugin import route_mujoco_warnings

        route_mujoco_warnings()
        try:
            self.env = gym.make(env_id)
        except Exception as exc:  # unknown id, missing dependency: one line
            raise ValueError(f"env_id {env_id!r}: {type(exc).__name__}: {exc}") from None
        try:
            self._setup(env_id)
        except Exception:
            self.env.close()
            raise

    def _setup(self, env_id: str) -> None:
        from gymnasium import spaces

        env = self.env
        obs_space, act_space = env.observation_space, env.action_space
        if not isinstance(obs_space, spaces.Box) or len(obs_space.shape) != 1:
            raise ValueError(f"env_id {env_id!r}: observations must be a flat Box, "
                             f"got {obs_space}")
        if not isinstance(act_space, spaces.Box) or len(act_space.shape) != 1:
            raise ValueError(f"env_id {env_id!r}: actions must be a flat Box, got {act_space}")
        n_obs, n_act = obs_space.shape[0], act_space.shape[0]
        cheetah = env_id.startswith("HalfCheetah") and (n_obs, n_act) == (17, 6)
        self.state_names = HALFCHEETAH_OBS if cheetah else tuple(f"obs_{j}" for j in range(n_obs))
        self.action_names = (tuple(f"torque_{a}" for a in HALFCHEETAH_ACTIONS) if cheetah
                             else tuple(f"act_{j}" for j in range(n_act)))
        self.presets = ("cheetah", "cheetah-live", "auto") if cheetah else ("auto", "gym")
        self.groups = dict(CHEETAH_GROUPS) if cheetah else {
            name: (j,) for j, name in enumerate(self.state_names)}
        self.rate = 1.0 / float(getattr(env.unwrapped, "dt", 0.05))
        spec = getattr(env, "spec", None)
        #: Steps per episode (the env's time limit), for false-alarm budgets per episode.
        self.episode_steps = getattr(spec, "max_episode_steps", None) or None
        self.view = "cheetah" if cheetah else ""
        self.low = np.asarray(act_space.low, dtype=np.float64)
        self.high = np.asarray(act_space.high, dtype=np.float64)
        path = Path(self.config["policy"]).expanduser() if self.config["policy"] else \
            default_policy(env_id)
        try:
            self.policy = FrozenPolicy(path, obs_space.shape, self.low, self.high)
        except PolicyError as exc:
            raise ValueError(f"policy: {exc}") from None
        self.config["policy"] = str(path)
        unwrapped = env.unwrapped
        self._mj = (unwrapped.model, unwrapped.data) if hasattr(unwrapped, "data") else None
        self._gravity0 = None if self._mj is None else self._mj[0].opt.gravity.copy()
        self._rng = np.random.default_rng()
        self._obs: np.ndarray | None = None  # the next S (policy input)
        self._ema: np.ndarray | None = None
        self._prev_action: np.ndarray | None = None
        #: Action smoothing's EMA and the policy's last observation (observation hold).
        self._smoothed: np.ndarray | None = None
        self._seen_obs: np.ndarray | None = None
        self._episode = 0
        self._episode_step = 0
        self._return = 0.0
        self._returns: list[list[float]] = []
        # Running mean and M2 of the raw observations (Welford): the scale of obs noise and
        # the value a frozen group is held at.
        self._n_seen = 0
        self._mean = np.zeros(n_obs)
        self._m2 = np.zeros(n_obs)
        self._frozen: dict[str, tuple[int, ...]] = {}
        self._frozen_values = np.zeros(n_obs)
        self._pulsed = False  # a pulsed force is on: forces are set before every step

    # -- declarations that depend on the env ------------------------------------------------

    def describe(self) -> dict[str, Any]:
        """The algorithm read from the zip, the normalisation found, the rate and groups.

        ``card``: what the policy's model card says of it, where it has one (deterministic
        return, its CV, the share of steps upside down), so a recording states the agent.
        """
        card = None
        try:
            c = json.loads(self.policy.path.with_suffix(".json").read_text())
            det = c.get("return_deterministic") or {}
            card = {"return_deterministic": det.get("mean"), "return_cv": det.get("cv"),
                    "upside_down_share": c.get("upside_down_share"), "steps": c.get("steps"),
                    "closed_loop_stable_share": (c.get("closed_loop") or {}).get("stable_share")}
        except (OSError, ValueError, AttributeError):
            pass
        return {"algorithm": self.policy.algorithm, "policy": str(self.policy.path),
                "vecnormalize": self.policy.vecnormalize, "rate": self.rate,
                "groups": {k: list(v) for k, v in self.groups.items()}, "card": card}

    @property
    def env_id(self) -> str:
        """The env's registered id (a baseline profile is checked by it)."""
        return str(self.config["env_id"])

    @classmethod
    def twin_for(cls, settings: Mapping[str, Any]) -> Any:
        """An unperturbed copy of the env (``idt_desk.plugin.MujocoTwin``).

        Any MuJoCo env whose observation is its state has one; another env (Pendulum-v1,
        Reacher's angles as cos and sin) has none: a ValueError says why.
        """
        from idt_desk.plugin import mujoco_twin

        twin, why = mujoco_twin(str(settings.get("env_id", "HalfCheetah-v5")))
        if twin is None:
            raise ValueError(why)
        return twin

    # -- loop -------------------------------------------------------------------------------

    def reset(self, seed: int | None = None) -> None:
        """Start the first episode (seeded), and seed the policy's and the noises' draws."""
        self._rng = np.random.default_rng(seed)
        self._episode, self._returns = 0, []
        self._n_seen, self._mean[:], self._m2[:] = 0, 0.0, 0.0
        self._new_episode(seed)

    def _new_episode(self, seed: int | None = None) -> None:
        raw, _ = self.env.reset(seed=seed)
        self._episode_step, self._return = 0, 0.0
        self._apply_physics()
        self._ema = None
        self._prev_action = None
        self._smoothed: np.ndarray | None = None
        self._seen_obs: np.ndarray | None = None
        self._obs = self._observe(raw)

    def step(self, n: int) -> Batch:
        """``n`` environment steps of the frozen policy."""
        return GymSource.step_together([self], n)[0]

    @staticmethod
    def step_together(sources: list[GymSource], n: int, info: bool = True) -> list[Batch]:
        """``n`` steps of every source in lockstep, one policy call per policy per step.

        Sources that share a :class:`FrozenPolicy` object (and ``deterministic``) are served by
        one call of :meth:`FrozenPolicy.act_many`, which gives each row the action it would get
        alone; each source keeps its own environment, generator, perturbations and modulations,
        so what each records is bit for bit what it would record stepped alone, whichever other
        sources step beside it. ``info=False`` leaves out the per-batch display data (body
        positions...).
        """
        groups: dict[tuple[int, bool], list[GymSource]] = {}
        for src in sources:
            src._open_steps(n)
            groups.setdefault((id(src.policy), bool(src.config["deterministic"])), []).append(src)
        done = n
        for k in range(n):
            if any(src.should_stop() for src in sources):
                done = k
                break
            for (_, deterministic), group in groups.items():
                obs = np.stack([src._obs for src in group])
                actions = group[0].policy.act_many(obs, [src._rng for src in group], deterministic)
                for src, action in zip(group, actions, strict=True):
                    src._take_step(k, action)
        return [src._close_steps(done, info) for src in sources]


    def _open_steps(self, n: int) -> None:
        """Buffers for the next ``n`` transitions."""
        if self._obs is None:
            self.reset()
        d_s, d_a = len(self.state_names), len(self.action_names)
        self._buf = (np.empty((n, d_s)), np.empty((n, d_a)), np.empty((n, d_s)), np.empty(n),
                     np.empty(n, dtype=np.int64), [])

    def _take_step(self, k: int, policy_action: np.ndarray) -> None:
        """Row ``k``: apply the policy's action (through Hold and actuator noise), step."""
        s, a, s2, r, ep, events = self._buf
        obs = self._obs
        action = self._actuate(policy_action)
        if self._pulsed:
            self._apply_forces()
        raw, reward, terminated, truncated, _ = self.env.step(action)
        nxt = self._observe(raw)
        s[k], a[k], s2[k], r[k], ep[k] = obs, action, nxt, reward, self._episode
        self._return += float(reward)
        self._episode_step += 1
        if terminated or truncated:
            events.append({"kind": "episode_end", "row": k, "episode": self._episode,
                           "return": self._return, "length": self._episode_step})
            self._returns.append([self._episode, self._return])
            del self._returns[:-_MAX_RETURNS]
            self._episode += 1
            self._new_episode()
        else:
            self._obs = nxt

    def _close_steps(self, n: int, info: bool = True) -> Batch:
        s, a, s2, r, ep, events = self._buf
        del self._buf
        return Batch(s=s[:n], s_next=s2[:n], a=a[:n], reward=r[:n], episode=ep[:n],
                     events=events, info=self._info() if info else {})

    def close(self) -> None:
        """Close the environment (and its twin's copy)."""
        self.env.close()
        if getattr(self, "_twin", None) is not None:
            self._twin.close()

    # -- the loop's interface: perturbations and modulations ---------------------------------

    def _observe(self, raw: np.ndarray) -> np.ndarray:
        """Environment observation -> what the policy receives (S)."""
        raw = np.asarray(raw, dtype=np.float64)
        self._n_seen += 1
        delta = raw - self._mean
        self._mean += delta / self._n_seen
        self._m2 += delta * (raw - self._mean)
        x = raw.copy()
        for name in self.SENSOR_NOISE:
            p = self.active_perturbations.get(name)
            if p is not None:
                x += self._rng.standard_normal(x.shape) * p["scale"] * (p["percent"] / 100.0)
        for idx in self._frozen.values():
            x[list(idx)] = self._frozen_values[list(idx)]
        held = self.active_modulations.get("obs_hold")
        if held is not None and self._seen_obs is not None and \
                self._rng.random() < held["probability"]:
            x = self._seen_obs.copy()  # the policy sees the previous observation again
        self._seen_obs = x.copy()
        f = self.active_modulations.get("input_filter")
        if f is not None:
            self._ema = x if self._ema is None else f["alpha"] * x + (1 - f["alpha"]) * self._ema
            x = self._ema.copy()
        return x

    def _actuate(self, action: np.ndarray) -> np.ndarray:
        """Policy action -> applied action (A)."""
        a = np.asarray(action, dtype=np.float64)
        hold = self.active_modulations.get("hold")
        if hold is not None and self._prev_action is not None:
            mode = hold["mode"]
            if mode == "repeat" or (mode == "probabilistic"
                                    and self._rng.random() < hold["probability"]):
                a = self._prev_action.copy()
            elif mode == "scale":
                a = a * hold["scale"]
        smooth = self.active_modulations.get("action_smoothing")
        if smooth is not None:
            self._smoothed = a if self._smoothed is None else \
                smooth["alpha"] * a + (1.0 - smooth["alpha"]) * self._smoothed
            a = self._smoothed.copy()
        self._prev_action = a.copy()
        for name in self.ACTION_NOISE:
            p = self.active_perturbations.get(name)
            if p is not None:
                # In the action's own units, as the released evaluation adds it: σ = percent
                # % of the bound, (high - low) / 2 (0.01 for 1 % on [-1, 1]).
                a = a + self._rng.standard_normal(a.shape) * (0.5 * (self.high - self.low)) \
                    * (p["percent"] / 100.0)
        return np.clip(a, self.low, self.high)

    def _apply_physics(self) -> None:
        """Force and gravity perturbations into MuJoCo (after every reset too)."""
        if self._mj is None:
            return
        model = self._mj[0]
        g = self.active_perturbations.get("gravity_110")
        model.opt.gravity[:] = self._gravity0 * (g["factor"] if g is not None else 1.0)
        self._pulsed = any(p["interval"] > 0 for name, p in self.active_perturbations.items()
                           if name in self.FORCES)
        self._apply_forces()

    def _apply_forces(self) -> None:
        """The forces on for the coming step into ``xfrc_applied``.

        A constant force (``interval`` 0) is on whenever its perturbation is; a pulsed one for
        the first ``duration`` steps of every ``interval`` steps of an episode, counted from
        the episode's first step as the authors' released force wrapper counts them.
        """
        if self._mj is None:
            return
        data = self._mj[1]
        data.xfrc_applied[:] = 0.0
        for name in self.FORCES:
            p = self.active_perturbations.get(name)
            if p is not None and (p["interval"] <= 0
                                  or self._episode_step % p["interval"] < p["duration"]):
                axis = "xyz".index(p["direction"])
                data.xfrc_applied[p["body_id"], axis] += p["force"]

    def set_perturbation(self, name: str, params: dict[str, Any] | None) -> dict[str, Any]:
        """Switch a perturbation; returns its parameters with what it resolved to."""
        resolved = super().set_perturbation(name, params)
        if params is None:
            self._apply_physics()
            return resolved
        if name in self.SENSOR_NOISE:
            # σ is a percentage of each variable's standard deviation over the run so far,
            # frozen at onset (1 before any data).
            n = self._n_seen
            scale = np.sqrt(self._m2 / (n - 1)) if n > 1 else np.ones_like(self._mean)
            resolved["scale"] = np.where(scale > 0, scale, 1.0)
        elif name in self.FORCES:
            if self._mj is None:
                self.active_perturbations.pop(name)
                raise ValueError(f"{name}: {self.config['env_id']} is not a MuJoCo env")
            import mujoco

            body = mujoco.mj_name2id(self._mj[0], mujoco.mjtObj.mjOBJ_BODY, resolved["body"])
            if body < 0:
                self.active_perturbations.pop(name)
                raise ValueError(f"{name}: no body {resolved['body']!r} in "
                                 f"{self.config['env_id']}")
            resolved["body_id"] = int(body)
        elif name == "gravity_110" and self._mj is None:
            self.active_perturbations.pop(name)
            raise ValueError(f"{name}: {self.config['env_id']} is not a MuJoCo env")
        self.active_perturbations[name] = resolved
        self._apply_physics()
        return {k: (v.tolist() if isinstance(v, np.ndarray) else v) for k, v in resolved.items()}

    def set_modulation(self, name: str, params: dict[str, Any] | None) -> dict[str, Any]:
        """Engage or release a modulation of what the policy sees or the env receives."""
        if name == "dim_reduction" and params is not None:
            drop = [g.strip() for g in str(self.modulation(name).resolve(params)["drop"])
                    .split(",") if g.strip()]
            unknown = [g for g in drop if g not in self.groups]
            if not drop:  # engaged on nothing, it would draw a band and change nothing
                raise ValueError(f"dim_reduction: name the groups to freeze; known: "
                                 f"{', '.join(self.groups)}")
            if unknown:
                raise ValueError(f"dim_reduction: unknown group(s) {unknown}; known: "
                                 f"{', '.join(self.groups)}")
        resolved = super().set_modulation(name, params)
        if name == "dim_reduction":
            self._frozen = {} if params is None else {g: self.groups[g] for g in drop}
            # Frozen at the running mean of the raw observations at the moment of engaging.
            self._frozen_values = self._mean.copy()
        elif name == "input_filter":
            self._ema = None
        elif name == "action_smoothing":
            self._smoothed = None
        return resolved

    # -- display ----------------------------------------------------------------------------

    def _info(self) -> dict[str, Any]:
        info: dict[str, Any] = {
            "env_id": self.config["env_id"], "episode": self._episode,
            "episode_step": self._episode_step, "episode_return": self._return,
            "episode_returns": [list(x) for x in self._returns],
        }
        if self._mj is not None:
            model, data = self._mj
            info.update(qpos=data.qpos.copy(), qvel=data.qvel.copy(),
                        body_xz=data.xpos[:, [0, 2]].copy(),
                        body_parent=[int(p) for p in model.body_parentid],
                        forward_velocity=float(data.qvel[0]))
        return info


GymSource._sort_perturbations()
