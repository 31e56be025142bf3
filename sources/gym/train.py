"""Train the policies IDT Desk ships: ``idt-desk train --algo sac|ppo --seed N --steps K``.

Stable-Baselines3 with its default hyperparameters (paper §10.1) on a Gymnasium env
(HalfCheetah-v5 by default), one torch thread, a progress bar, a checkpoint every few minutes
(model, SAC's replay buffer, steps done and wall time so far) and ``--resume``, so a long run
survives an interruption. The final policy is written as ``<env>-<algo>-seed<N>.zip`` with a
model card ``<same>.json`` beside it: algorithm, seed, steps, evaluation return (mean ± std
over ``--eval-episodes`` stochastic and deterministic episodes), library versions, wall time
and the command.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import time
from pathlib import Path
from typing import Any

__all__ = ["ALGOS", "HELP", "add_arguments", "evaluate", "policy_name", "train"]

#: ``idt-desk train``'s one-line help.
HELP = "train a Stable-Baselines3 policy to ship (checkpoints, --resume)"

#: The algorithms ``train`` offers (SB3 class names by command-line name).
ALGOS = {"sac": "SAC", "ppo": "PPO"}


def policy_name(env_id: str, algo: str, seed: int) -> str:
    """File stem of a shipped policy, e.g. ``halfcheetah-v5-ppo-seed0``."""
    return f"{env_id.lower()}-{algo}-seed{seed}"


def _versions() -> dict[str, str]:
    import platform

    out = {"python": platform.python_version()}
    for mod in ("stable_baselines3", "torch", "gymnasium", "mujoco", "numpy"):
        try:
            out[mod] = __import__(mod).__version__
        except Exception:  # reported, not fatal
            out[mod] = "?"
    return out


def evaluate(model: Any, env_id: str, episodes: int, seed: int, deterministic: bool
             ) -> list[float]:
    """Undiscounted return of ``episodes`` episodes of ``model`` (seeds ``seed``, +1, ...)."""
    import gymnasium as gym

    env = gym.make(env_id)
    returns = []
    try:
        for k in range(episodes):
            obs, _ = env.reset(seed=seed + k)
            total, done = 0.0, False
            while not done:
                action, _ = model.predict(obs, deterministic=deterministic)
                obs, reward, terminated, truncated, _ = env.step(action)
                total += float(reward)
                done = terminated or truncated
            returns.append(total)
    finally:
        env.close()
    return returns


class _Checkpoints:
    """SB3 callback: progress bar and a checkpoint every ``every`` wall seconds."""

    def __init__(self, folder: Path, every: float, total: int, wall_before: float) -> None:
        from stable_baselines3.common.callbacks import BaseCallback
        from tqdm import tqdm

        outer = self

        class _Callback(BaseCallback):
            def _on_training_start(self) -> None:
                outer.bar = tqdm(total=total, initial=self.model.num_timesteps, unit="step",
                                 dynamic_ncols=True, desc=folder.name, file=sys.stderr)

            def _on_step(self) -> bool:
                outer.bar.update(self.model.num_timesteps - outer.bar.n)
                if time.monotonic() - outer.last >= outer.every:
                    outer.save(self.model)
                return True

            def _on_training_end(self) -> None:
                outer.bar.close()

        self.callback = _Callback()
        self.folder = folder
        self.every = every
        self.last = time.monotonic()
        self.t0 = time.monotonic()
        self.wall_before = wall_before
        self.bar: Any = None

    def wall(self) -> float:
        return self.wall_before + time.monotonic() - self.t0

    def save(self, model: Any) -> None:
        """Write model, replay buffer and state; each file replaced atomically."""
        self.folder.mkdir(parents=True, exist_ok=True)
        tmp = self.folder / "model.tmp.zip"
        model.save(tmp)
        os.replace(tmp, self.folder / "model.zip")
        if hasattr(model, "replay_buffer") and model.replay_buffer is not None:
            tmp = self.folder / "replay.tmp.pkl"
            model.save_replay_buffer(tmp)
            os.replace(tmp, self.folder / "replay.pkl")
        state = {"steps": int(model.num_timesteps), "wall_seconds": self.wall()}
        (self.folder / "state.json.tmp").write_text(json.dumps(state))
        os.replace(self.folder / "state.json.tmp", self.folder / "state.json")
        self.last = time.monotonic()


def train(
    algo: str,
    seed: int,
    steps: int,
    out: Path,
    env_id: str = "HalfCheetah-v5",
    checkpoint_dir: Path | None = None,
    checkpoint_minutes: float = 5.0,
    resume: bool = False,
    eval_episodes: int = 10,
    threads: int = 1,
    command: str = "",
) -> Path:
    """Train (or resume) one policy and write its zip and model card into ``out``."""
    import gymnasium as gym
    import numpy as np
    import stable_baselines3 as sb3
    import torch

    from sources.gym._source import _route_mujoco_warnings

    _route_mujoco_warnings()
    torch.set_num_threads(threads)
    cls = getattr(sb3, ALGOS[algo])
    name = policy_name(env_id, algo, seed)
    ckpt = checkpoint_dir or Path("out") / "train" / name
    state_file = ckpt / "state.json"
    env = gym.make(env_id)
    wall_before = 0.0
    if resume and state_file.exists():
        state = json.loads(state_file.read_text())
        model = cls.load(ckpt / "model.zip", env=env, device="cpu")
        if (ckpt / "replay.pkl").exists():
            model.load_replay_buffer(ckpt / "replay.pkl")
        wall_before = float(state["wall_seconds"])
        print(f"resuming {name} from {model.num_timesteps:,} steps ({ckpt})", file=sys.stderr)
    else:
        if state_file.exists():
            raise FileExistsError(f"{ckpt} holds a checkpoint: pass --resume, or remove it")
        model = cls("MlpPolicy", env, seed=seed, device="cpu", verbose=0)
    saver = _Checkpoints(ckpt, checkpoint_minutes * 60.0, steps, wall_before)
    remaining = steps - model.num_timesteps
    if remaining > 0:
        model.learn(total_timesteps=remaining, callback=saver.callback,
                    reset_num_timesteps=False)
        saver.save(model)
    wall = saver.wall()
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{name}.zip"
    model.save(path)
    card: dict[str, Any] = {
        "name": name, "env_id": env_id, "algorithm": ALGOS[algo], "seed": seed,
        "steps": int(model.num_timesteps), "hyperparameters": "stable-baselines3 defaults",
        "policy": "MlpPolicy",
        "wall_seconds": round(wall, 1), "torch_threads": threads,
        "versions": _versions(), "command": command,
    }
    for label, det in (("stochastic", False), ("deterministic", True)):
        r = evaluate(model, env_id, eval_episodes, seed=10_000 + seed, deterministic=det)
        card[f"return_{label}"] = {"mean": float(np.mean(r)), "std": float(np.std(r)),
                                   "episodes": len(r)}
    (out / f"{name}.json").write_text(json.dumps(card, indent=2) + "\n")
    env.close()
    return path


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The ``train`` subcommand's options."""
    p.add_argument("--algo", choices=sorted(ALGOS), required=True)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--steps", type=int, required=True, help="environment steps in all")
    p.add_argument("--out", type=Path, default=Path("assets/policies"),
                   help="folder for the policy zip and its model card")
    p.add_argument("--env-id", default="HalfCheetah-v5")
    p.add_argument("--checkpoint-dir", type=Path,
                   help="checkpoint folder (default out/train/NAME)")
    p.add_argument("--checkpoint-minutes", type=float, default=5.0)
    p.add_argument("--resume", action="store_true", help="continue from the checkpoint")
    p.add_argument("--eval-episodes", type=int, default=10)
    p.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Entry of ``idt-desk train``."""
    from idt_desk._io import InputError
    from idt_desk._validate import check_int, check_out_dir

    check_int("--seed", args.seed, 0, 2**32 - 1)
    check_int("--steps", args.steps, 1)
    check_int("--eval-episodes", args.eval_episodes, 1, 1000)
    check_int("--threads", args.threads, 1, 256)
    check_out_dir(args.out, "--out")
    command = "idt-desk " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    try:
        path = train(args.algo, args.seed, args.steps, args.out, args.env_id,
                     args.checkpoint_dir, args.checkpoint_minutes, args.resume,
                     args.eval_episodes, args.threads, command)
    except FileExistsError as exc:
        raise InputError(str(exc)) from None
    card = json.loads(path.with_suffix(".json").read_text())
    r = card["return_stochastic"]
    print(f"wrote {path} ({card['steps']:,} steps, {card['wall_seconds']:.0f} s): return "
          f"{r['mean']:.1f} ± {r['std']:.1f} over {r['episodes']} stochastic episodes")
    return 0
