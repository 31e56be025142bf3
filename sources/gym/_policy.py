"""Frozen Stable-Baselines3 policies: load any algorithm's zip, act with the source's own RNG.

The algorithm is read from the zip (its hyperparameters name it), a ``VecNormalize``
statistics file beside it is found and applied, and a stochastic action is drawn from the
policy's own distribution with a generator the source owns, so two sources with the same seed
act identically whatever else uses torch's global generator (another session, a test).
"""

from __future__ import annotations

import functools
import json
import pickle
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["FrozenPolicy", "PolicyError", "algorithm_class", "algorithm_of", "find_vecnormalize"]


class PolicyError(ValueError):
    """A policy file that cannot be used; the message says why in one line."""


def algorithm_of(path: Path) -> str:
    """The algorithm class name that saved ``path``.

    Stable-Baselines3's SAC, PPO, A2C, TD3, DDPG, DQN, or sb3-contrib's TQC.
    """
    try:
        with zipfile.ZipFile(path) as z:
            data = json.loads(z.read("data"))
    except (zipfile.BadZipFile, KeyError, ValueError, OSError) as exc:
        raise PolicyError(f"{path}: not a Stable-Baselines3 zip ({exc})") from None
    module = str(data.get("policy_class", {}).get("__module__", ""))
    if "sb3_contrib.tqc." in module:
        return "TQC"
    for name in ("sac", "td3", "dqn"):
        if f"stable_baselines3.{name}." in module:
            if name == "td3" and data.get("policy_delay") == 1 \
                    and not data.get("target_policy_noise"):
                return "DDPG"
            return name.upper()
    if "stable_baselines3.common.policies" in module:
        return "PPO" if "clip_range" in data else "A2C"
    raise PolicyError(f"{path}: saved by an algorithm IDT Desk does not know ({module or '?'})")


def algorithm_class(name: str) -> Any:
    """The class of algorithm ``name`` (as :func:`algorithm_of` names it): SB3's, or TQC's."""
    if name == "TQC":
        import sb3_contrib

        return sb3_contrib.TQC
    import stable_baselines3 as sb3

    return getattr(sb3, name)


def find_vecnormalize(path: Path) -> Path | None:
    """A VecNormalize statistics file beside the zip, or None.

    ``NAME_vecnormalize.pkl``, ``vec_normalize_NAME.pkl`` (as the paper authors' released
    policies name theirs), or ``vecnormalize.pkl`` as the SB3 zoo ships them.
    """
    for cand in (path.with_name(f"{path.stem}_vecnormalize.pkl"),
                 path.with_name(f"vec_normalize_{path.stem}.pkl"),
                 path.with_name("vecnormalize.pkl")):
        if cand.exists():
            return cand
    return None


@functools.lru_cache(maxsize=8)
def _load_model(path: str, algorithm: str, mtime_ns: int, size: int) -> Any:
    """The model of ``path`` for acting, loaded once per file version (its time and size).

    Every Start of a session, every trial of a study and every rollout made a source, and
    each loaded its zip again (about a second for SAC: the networks and optimisers built,
    then the weights read). Acting never changes a model (no gradient, eval mode), so sources
    of the same file share one; a file rewritten in place is loaded afresh.
    """
    cls = algorithm_class(algorithm)
    from stable_baselines3.common.off_policy_algorithm import OffPolicyAlgorithm

    # A frozen policy never trains: SAC/TQC/TD3/DDPG would otherwise build the saved replay
    # buffer (1M transitions: ~280 MB of zeroed arrays) at every load. Allocated and freed
    # at each Start/Stop, those arrays fragmented the heap by ~8 MB a cycle.
    small = {"buffer_size": 1} if issubclass(cls, OffPolicyAlgorithm) else {}
    model = cls.load(path, device="cpu", **small)
    model.policy.eval()
    return model


class FrozenPolicy:
    """An SB3 policy loaded for acting only (no training state), on the CPU.

    Parameters
    ----------
    path
        The SB3 zip.
    observation_shape, action_low, action_high
        The environment's spaces, checked against the policy's.
    """

    def __init__(self, path: str | Path, observation_shape: tuple[int, ...],
                 action_low: np.ndarray, action_high: np.ndarray) -> None:
        import torch

        self.path = Path(path)
        if not self.path.is_file():
            raise PolicyError(f"{self.path}: no such policy file")
        self.algorithm = algorithm_of(self.path)
        stat = self.path.stat()
        try:
            model = _load_model(str(self.path.resolve()), self.algorithm, stat.st_mtime_ns,
                                stat.st_size)
        except Exception as exc:  # a damaged or foreign zip: one line, not a traceback
            raise PolicyError(f"{self.path}: cannot load as {self.algorithm}: "
                              f"{type(exc).__name__}: {exc}") from None
        shape = tuple(model.observation_space.shape or ())
        if shape != tuple(observation_shape):
            raise PolicyError(f"{self.path}: the policy expects observations of shape {shape}; "
                              f"the environment gives {tuple(observation_shape)}")
        a_shape = tuple(model.action_space.shape or ())
        if a_shape != tuple(np.shape(action_low)):
            raise PolicyError(f"{self.path}: the policy acts with shape {a_shape}; "
                              f"the environment takes {tuple(np.shape(action_low))}")
        self.model = model
        self.policy = model.policy
        self._torch = torch
        self.low = np.asarray(action_low, dtype=np.float64)
        self.high = np.asarray(action_high, dtype=np.float64)
        self.normalizer: Any = None
        vn = find_vecnormalize(self.path)
        if vn is not None:
            try:
                with open(vn, "rb") as f:
                    self.normalizer = pickle.load(f)
            except Exception as exc:
                raise PolicyError(f"{vn}: not VecNormalize statistics ({exc})") from None
            self.normalizer.training = False
        self.vecnormalize = None if vn is None else str(vn)
        from gymnasium import spaces
        from stable_baselines3.common.distributions import DiagGaussianDistribution

        #: A flat Box observation: the networks take it as a float tensor, no preprocessing.
        self._flat = isinstance(model.observation_space, spaces.Box) and len(shape) == 1
        #: PPO / A2C with a diagonal Gaussian (no gSDE): sampled here with the source's RNG.
        self._gaussian = (self._flat and self.algorithm in ("PPO", "A2C")
                          and not self.policy.use_sde
                          and isinstance(self.policy.action_dist, DiagGaussianDistribution))

    def act(self, obs: np.ndarray, rng: np.random.Generator, deterministic: bool
            ) -> np.ndarray:
        """The action for one observation, drawn with ``rng`` unless ``deterministic``."""
        return self.act_many(np.asarray(obs)[None], [rng], deterministic)[0]

    def act_many(self, obs: np.ndarray, rngs: list[np.random.Generator], deterministic: bool
                 ) -> np.ndarray:
        """Actions for a batch of observations (one forward pass); row i draws with rngs[i].

        Each row's noise comes from its own generator. Each distinct observation goes
        through the network on its own (a batched matrix product gives a row's last bits by
        its place in the batch and the batch's size: up to 1e-5 apart on the shipped SAC,
        enough to send a chaotic gait elsewhere), so a row's action is bit for bit the one it
        gets stepped alone, whatever else is in the batch; identical rows are computed once.
        Costs about 40 µs a row more than one batched pass (a 2×256 SAC actor, one thread).
        """
        x = np.asarray(obs, dtype=np.float64)
        if self.normalizer is not None:
            x = self.normalizer.normalize_obs(x)
        inverse = None
        if len(x) > 1:
            first: dict[bytes, int] = {}
            inverse = np.array([first.setdefault(row.tobytes(), len(first)) for row in x])
            if len(first) < len(x):
                x = x[np.unique(inverse, return_index=True)[1]]
            else:
                inverse = None
        kind, u, log_std = self._forward_rows(x)
        if kind == "predict":  # anything else (discrete actions, gSDE): SB3's own sampling
            a, _ = self.model.predict(x, deterministic=deterministic)
            u, kind = np.asarray(a, dtype=np.float64).reshape(len(x), -1), "clip"
        if inverse is not None:
            u = u[inverse]
            if log_std is not None and log_std.ndim == 2:  # SAC: σ per row
                log_std = log_std[inverse]
        if log_std is not None and not deterministic:
            u = u + np.exp(log_std) * np.stack([g.standard_normal(u.shape[1:]) for g in rngs])
        if kind == "squash":
            return self._unscale(np.tanh(u))
        if kind == "unscale":
            return self._unscale(u)
        return np.clip(u, self.low, self.high)

    def _forward_rows(self, x: np.ndarray) -> tuple[str, np.ndarray, np.ndarray | None]:
        """:meth:`_forward` of each row on its own (see :meth:`act_many`), stacked."""
        if len(x) <= 1:
            return self._forward(x)
        parts = [self._forward(x[i:i + 1]) for i in range(len(x))]
        kind = parts[0][0]
        if kind == "predict":
            return kind, np.empty((len(x), 0)), None
        log_std = None if parts[0][2] is None else (
            np.concatenate([p[2] for p in parts]) if parts[0][2].ndim == 2 else parts[0][2])
        return kind, np.concatenate([p[1] for p in parts]), log_std

    def _forward(self, x: np.ndarray) -> tuple[str, np.ndarray, np.ndarray | None]:
        """The policy's output for normalised observations ``x``.

        How to map it to actions (``squash``: tanh then the bounds; ``unscale``: the bounds;
        ``clip``), the mean, and the log σ of its Gaussian (None: deterministic by design).
        """
        torch = self._torch
        if not self._flat:
            return "predict", np.empty((len(x), 0)), None
        with torch.no_grad():
            t = torch.from_numpy(np.asarray(x, dtype=np.float32))
            if self.algorithm in ("SAC", "TQC"):  # the same squashed-Gaussian actor
                mean, log_std, _ = self.policy.actor.get_action_dist_params(t)
                return ("squash", mean.numpy().astype(np.float64),
                        log_std.numpy().astype(np.float64))
            if self.algorithm in ("TD3", "DDPG"):
                return "unscale", self.policy.actor(t).numpy().astype(np.float64), None
            if self._gaussian:
                # The diagonal Gaussian's mean and σ without building a torch Distribution
                # (its argument checks cost more than the network): get_distribution's path.
                pol = self.policy
                mean = pol.action_net(pol.mlp_extractor.forward_actor(
                    pol.pi_features_extractor(t)))
                return ("clip", mean.numpy().astype(np.float64),
                        pol.log_std.detach().numpy().astype(np.float64))
        return "predict", np.empty((len(x), 0)), None

    def _unscale(self, a: np.ndarray) -> np.ndarray:
        """[-1, 1] (tanh-squashed output) to the action bounds."""
        return self.low + 0.5 * (a + 1.0) * (self.high - self.low)
