"""A policy's model card: returns, gait and the closed loop's answer to a tiny push.

``idt-desk train`` writes a card beside every zip it trains, ``idt-desk train --card ZIP``
measures one again (:func:`recard`); the gym source ranks the shipped policies by their cards.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

__all__ = ["NUDGE", "NUDGE_SMALL", "NormalizedActor", "card_returns", "evaluate",
           "nudge_growth", "predictor", "recard", "rollouts", "settled"]


class NormalizedActor:
    """``predict`` of ``model`` on observations normalised by VecNormalize ``stats``."""

    def __init__(self, model: Any, stats: Any) -> None:
        self.model, self.stats = model, stats

    def predict(self, obs: Any, deterministic: bool = False) -> tuple[Any, Any]:
        """The model's action for ``obs`` normalised by the statistics."""
        return self.model.predict(self.stats.normalize_obs(obs), deterministic=deterministic)


def predictor(model: Any) -> Any:
    """``model.predict`` as a function of (obs, deterministic), bit for bit, made cheaper.

    ``obs`` one observation (its action back) or a batch of them (one action a row).

    For a Stable-Baselines3 model on flat Box observations and actions (a
    :class:`NormalizedActor` of one too) it is SB3's ``BasePolicy.predict`` with what costs
    per call and changes nothing done once: the eval mode set once, no space checks; the same
    tensor, the same ``_predict`` under ``no_grad``, the same unscaling or clipping, so the
    same actions (and the same draws of torch's generator when sampling): cheaper a step,
    and an evaluation is thousands of steps. Any other
    model (sbx's, a stand-in) is asked through its own ``predict``.
    """
    import numpy as np

    normalize = None
    inner = model
    if isinstance(model, NormalizedActor):
        normalize, inner = model.stats.normalize_obs, model.model
    policy = getattr(inner, "policy", None)
    forward = _forward(policy)
    if forward is None:
        return lambda obs, deterministic: model.predict(obs, deterministic=deterministic)[0]
    import torch

    policy.set_training_mode(False)
    obs_shape, act_shape = policy.observation_space.shape, policy.action_space.shape
    low, high = policy.action_space.low, policy.action_space.high
    device = policy.device  # (a walk over the parameters: once, not per step)

    def predict(obs: Any, deterministic: bool) -> Any:
        x = np.array(obs if normalize is None else normalize(obs))
        batch = x.ndim == len(obs_shape) + 1 and x.shape[1:] == obs_shape
        if x.shape != obs_shape and not batch:
            return model.predict(obs, deterministic=deterministic)[0]
        with torch.no_grad():
            a = forward(torch.as_tensor(x.reshape((-1, *obs_shape)), device=device),
                        deterministic)
        a = a.cpu().numpy().reshape((-1, *act_shape))
        a = policy.unscale_action(a) if policy.squash_output else np.clip(a, low, high)
        return a if batch else a[0]

    return predict


def _forward(policy: Any) -> Any:
    """What SB3's ``policy._predict`` computes, through the policy's public parts.

    SAC's and TQC's: the actor (``actor(obs, deterministic)``); PPO's and A2C's: the
    distribution's actions. None for anything else: sbx's JAX policies (they subclass SB3's,
    with no torch weights), TD3, discrete actions, image observations.
    """
    try:
        from gymnasium import spaces
        from stable_baselines3.common.policies import ActorCriticPolicy
        from stable_baselines3.sac.policies import SACPolicy
    except ImportError:
        return None
    try:
        from sb3_contrib.tqc.policies import TQCPolicy
    except ImportError:
        TQCPolicy = SACPolicy
    if not (isinstance(getattr(policy, "observation_space", None), spaces.Box)
            and len(policy.observation_space.shape) == 1
            and isinstance(policy.action_space, spaces.Box)
            and any(True for _ in policy.parameters())):
        return None
    if isinstance(policy, SACPolicy | TQCPolicy):
        actor = policy.actor
        if getattr(actor, "use_sde", False):
            return lambda obs, deterministic: actor(obs, deterministic)
        import torch

        def squashed(obs: Any, deterministic: bool) -> Any:
            if not deterministic:
                return actor(obs, False)
            # The squashed Gaussian's mode, tanh of the mean: what the actor computes when
            # deterministic, without building the distribution it does not sample from (a
            # third of the step's time; the same operations on the same tensors).
            features = actor.extract_features(obs, actor.features_extractor)
            return torch.tanh(actor.mu(actor.latent_pi(features)))

        return squashed
    if isinstance(policy, ActorCriticPolicy):
        return lambda obs, deterministic: policy.get_distribution(obs).get_actions(
            deterministic=deterministic)
    return None


def rollouts(model: Any, env_id: str, episodes: int, seed: int, deterministic: bool
             ) -> tuple[list[float], float]:
    """Returns of ``episodes`` episodes of ``model`` (seeds ``seed``, +1, ...) and its gait.

    The second value is the share of steps the body spends upside down: the torso's pitch
    (the planar root's rotation about y, the joint ``rooty`` of HalfCheetah, Hopper and
    Walker2d) with a negative cosine, i.e. more than 90° from upright either way. PPO on
    HalfCheetah often settles into running on its back (a well-known local optimum); such an
    agent's loop is regular in a way the paper's agents' are not. NaN for an env without
    that joint (Reacher's ``qpos[2]`` is its target's x, not a pitch).
    """
    import gymnasium as gym
    import numpy as np

    env = gym.make(env_id)
    act = predictor(model)
    returns, flipped, steps = [], 0, 0
    pitch = _pitch_address(env)
    try:
        for k in range(episodes):
            obs, _ = env.reset(seed=seed + k)
            total, done = 0.0, False
            while not done:
                action = act(obs, deterministic)
                obs, reward, terminated, truncated, _ = env.step(action)
                total += float(reward)
                done = terminated or truncated
                if pitch is not None:
                    flipped += bool(np.cos(env.unwrapped.data.qpos[pitch]) < 0.0)
                steps += 1
            returns.append(total)
    finally:
        env.close()
    return returns, (flipped / steps if pitch is not None and steps else float("nan"))


def _pitch_address(env: Any) -> int | None:
    """Where the torso's pitch sits in ``qpos``: the joint ``rooty`` (None: no such joint)."""
    model = getattr(env.unwrapped, "model", None)
    if model is None or getattr(env.unwrapped, "data", None) is None:
        return None
    import mujoco

    joint = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_JOINT, "rooty")
    return None if joint < 0 else int(model.jnt_qposadr[joint])


def upside_down(record: dict[str, Any]) -> float | None:
    """A card's or a checkpoint's share of steps upside down (None: unmeasured, no pitch)."""
    share = record.get("upside_down_share")
    try:
        share = float(share)
    except (TypeError, ValueError):
        return None
    return None if share != share else share


#: The closed-loop probe: a nudge of this size to every joint velocity...
NUDGE = 1e-6
#: ...after this many steps of an episode, measured this many steps later...
NUDGE_AFTER, NUDGE_HORIZON = 200, 500
#: ...has stayed small if the two copies' states are still within this distance.
NUDGE_SMALL = 1e-3


def settled(log10_distance: float) -> bool:
    """Whether a push grown to this distance (log10, :func:`nudge_growth`) stayed small."""
    return log10_distance < math.log10(NUDGE_SMALL)


def nudge_growth(model: Any, env_id: str, episodes: int, seed: int) -> list[float]:
    """How a deterministic closed loop answers a tiny push, one figure per episode.

    Two copies of an episode (seeds ``seed``, +1, ...) run the deterministic policy; after
    ``NUDGE_AFTER`` steps one copy's joint velocities are each pushed by ``NUDGE``. The figure
    is log10 of the distance between the two copies' states (positions but the free forward
    one, and velocities) ``NUDGE_HORIZON`` steps later. A gait that settles on a stable cycle
    keeps the push at its own size (about -5.5: the push, or a shift along the cycle); a
    chaotic loop amplifies it to the size of the motion itself (0 and above) within about a
    hundred steps. That is what a 1 % noise perturbation does to the loop too: on a chaotic
    one it adds nothing the loop's own divergence does not already make, so the IDT cannot
    tell it apart from the unperturbed runs. Empty for an env that is not MuJoCo.
    """
    import gymnasium as gym
    import numpy as np

    out = []
    act = predictor(model)
    for k in range(episodes):
        envs = [gym.make(env_id) for _ in range(2)]
        try:
            u = [e.unwrapped for e in envs]
            if not hasattr(u[0], "set_state"):
                return []
            obs = [e.reset(seed=seed + k)[0] for e in envs]
            for t in range(NUDGE_AFTER + NUDGE_HORIZON):
                if t == NUDGE_AFTER:
                    u[1].set_state(u[1].data.qpos.copy(), u[1].data.qvel.copy() + NUDGE)
                    obs[1] = u[1]._get_obs()
                both = act(np.stack(obs), True)  # the two copies in one call: half the cost
                for i in range(2):
                    obs[i] = envs[i].step(both[i])[0]
            state = [np.concatenate([x.data.qpos[1:], x.data.qvel]) for x in u]
            out.append(float(np.log10(max(np.linalg.norm(state[0] - state[1]), 1e-300))))
        finally:
            for e in envs:
                e.close()
    return out


def evaluate(model: Any, env_id: str, episodes: int, seed: int, deterministic: bool
             ) -> list[float]:
    """Undiscounted return of ``episodes`` episodes of ``model`` (seeds ``seed``, +1, ...)."""
    return rollouts(model, env_id, episodes, seed, deterministic)[0]


def card_returns(model: Any, env_id: str, episodes: int, seed: int) -> dict[str, Any]:
    """A model card's evaluation of ``model``.

    Return mean, std and CV over ``episodes`` stochastic and as many deterministic episodes,
    the share of deterministic steps spent upside down (see :func:`rollouts`), and
    ``closed_loop``: :func:`nudge_growth` over ``episodes`` episodes, with the share of them
    in which the push stayed below ``NUDGE_SMALL`` (``stable_share``).
    """
    import numpy as np

    card: dict[str, Any] = {}
    for label, det in (("stochastic", False), ("deterministic", True)):
        r, flipped = rollouts(model, env_id, episodes, seed=10_000 + seed, deterministic=det)
        mean, std = float(np.mean(r)), float(np.std(r))
        card[f"return_{label}"] = {"mean": mean, "std": std,
                                   "cv": std / abs(mean) if mean else float("nan"),
                                   "episodes": len(r)}
        if det:
            card["upside_down_share"] = flipped
    growth = nudge_growth(model, env_id, episodes, seed=20_000 + seed)
    if growth:
        card["closed_loop"] = {
            "nudge": NUDGE, "after_steps": NUDGE_AFTER, "horizon_steps": NUDGE_HORIZON,
            "log10_distance": [round(g, 2) for g in growth],
            "stable_share": float(np.mean([settled(g) for g in growth]))}
    return card


def recard(path: Path, episodes: int = 10, command: str = "", env_id: str | None = None
           ) -> dict[str, Any]:
    """Measure a policy zip again and rewrite its model card's evaluation (the rest kept).

    The card beside ``path`` (``NAME.json``; a new one if there is none) gets
    :func:`card_returns` of the zip as the frozen source loads it, the seed its card names
    (else 0), and ``evaluated_by``: the command. The env is the card's ``env_id``, else
    ``env_id`` (HalfCheetah-v5 when neither says).
    """
    import numpy as np
    from idt_desk_sources.gym._policy import FrozenPolicy

    from idt_desk.plugin import route_mujoco_warnings

    route_mujoco_warnings()
    path = Path(path)
    card_path = path.with_suffix(".json")
    card: dict[str, Any] = {}
    if card_path.exists():
        card = json.loads(card_path.read_text())
    env_id = card.get("env_id") or env_id or "HalfCheetah-v5"
    card["env_id"] = env_id
    import gymnasium as gym

    env = gym.make(env_id)
    try:
        policy = FrozenPolicy(path, env.observation_space.shape, env.action_space.low,
                              env.action_space.high)
    finally:
        env.close()

    class _Acting:
        """``predict`` through the frozen source's own path (its VecNormalize included)."""

        rng = np.random.default_rng(int(card.get("seed", 0)))

        def predict(self, obs: Any, deterministic: bool = False) -> tuple[Any, None]:
            obs = np.asarray(obs)
            if obs.ndim > len(policy.model.observation_space.shape):  # a batch, as SB3's
                return policy.act_many(obs, [self.rng] * len(obs), deterministic), None
            return policy.act(obs, self.rng, deterministic), None

    card.update(card_returns(_Acting(), env_id, episodes, int(card.get("seed", 0))))
    card["evaluated_by"] = command or f"idt-desk train --card {path} --eval-episodes {episodes}"
    card_path.write_text(json.dumps(card, indent=2) + "\n")
    return card
