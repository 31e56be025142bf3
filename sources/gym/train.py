"""Train the policies IDT Desk ships: ``idt-desk train --algo sac|ppo --seed N --steps K``.

Stable-Baselines3 with its default hyperparameters (paper §10.1) on a Gymnasium env
(HalfCheetah-v5 by default), one torch thread, a progress bar, a checkpoint every
``--checkpoint-steps`` steps or ``--checkpoint-minutes`` minutes, whichever comes first
(model, SAC's replay buffer, steps done and wall time so far) and ``--resume``, so a long run
survives an interruption; Ctrl-C or SIGTERM writes one as of that step before the run stops
(exit code 130 or 143). The final policy is written as ``<env>-<algo>-seed<N>.zip`` with a
model card ``<same>.json`` beside it: algorithm, seed, steps, evaluation return (mean ± std
over ``--eval-episodes`` stochastic and deterministic episodes), library versions, wall time
and the command.

``--algo tqc`` trains TQC (Kuznetsov et al., 2020: SAC with distributional critics whose
highest quantiles are dropped), sb3-contrib's, with its defaults; on HalfCheetah it reaches
a higher return than SAC in the same number of steps (the RL Baselines3 Zoo's benchmark).

``--trainer sbx`` trains SAC or TQC with SBX, the JAX implementation of the same algorithms
and the same defaults (``pip install -e ".[train]"``), about 2.4x as fast on one CPU core here
as Stable-Baselines3's torch SAC (``--train-freq 16``: sixteen environment steps, then sixteen
gradient steps in one compiled call; the update-to-data ratio stays 1). The shipped file is an
ordinary Stable-Baselines3 SAC or sb3-contrib TQC zip all the same: the trained actor, critics,
target critics and entropy coefficient are copied into a model of the same architecture
(:func:`export_sbx`), and the card's returns are measured on that exported file.

``--normalize`` trains as the paper authors' released policies were trained: behind
Stable-Baselines3's ``VecNormalize`` (running mean and variance of the observations, and of
the discounted return for the rewards; its defaults). The statistics are checkpointed with
the model and ship beside the zip as ``NAME_vecnormalize.pkl``, which the frozen source
applies (:func:`idt_desk_sources.gym._policy.find_vecnormalize`).

``--envs N`` steps N environments together, with ``train_freq`` x N gradient steps after each
``train_freq`` steps (one update per transition still), for a machine with more cores or an
accelerator; a resume keeps the count. A checkpoint pickled by SBX under another JAX release
is resumed with its weights (:func:`load_checkpoint`).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import signal
import sys
import time
from pathlib import Path
from typing import Any

from idt_desk_sources.gym.cards import (
    NormalizedActor,
    card_returns,
    nudge_growth,
    recard,
    rollouts,
    upside_down,
)
from idt_desk_sources.gym.jax_models import export_sbx, load_checkpoint
from idt_desk_sources.gym.runs import KEPT, progress, settled_running

from idt_desk.plugin import deferred_signals

__all__ = ["ALGOS", "HELP", "TRAINERS", "add_arguments", "policy_name", "train"]

#: ``idt-desk train``'s one-line help.
HELP = "train a Stable-Baselines3 policy to ship (checkpoints, --resume)"

#: The algorithms ``train`` offers (SB3 class names by command-line name).
ALGOS = {"sac": "SAC", "ppo": "PPO", "tqc": "TQC"}

#: The trainers: Stable-Baselines3 itself (torch), or SBX (JAX; SAC only, exported to SB3).
TRAINERS = ("sb3", "sbx")


def policy_name(env_id: str, algo: str, seed: int) -> str:
    """File stem of a shipped policy, e.g. ``halfcheetah-v5-ppo-seed0``."""
    return f"{env_id.lower()}-{algo}-seed{seed}"


def _versions(trainer: str = "sb3") -> dict[str, str]:
    import platform

    out = {"python": platform.python_version()}
    extra = ("sbx", "jax") if trainer == "sbx" else ()
    for mod in ("stable_baselines3", "torch", "gymnasium", "mujoco", "numpy", *extra):
        try:
            out[mod] = __import__(mod).__version__
        except Exception:  # reported, not fatal
            out[mod] = "?"
    return out


class _Checkpoints:
    """SB3 callback: progress bar and a checkpoint every ``every`` wall seconds or steps.

    A checkpoint also plays one deterministic episode (``env_id``, its seed the checkpoint's
    step count; at most once per ``every_steps`` steps, and at the end) and adds its return
    and upside-down share to ``history`` in ``state.json``, carried over a resume: a run's
    learning curve, and a seed that has settled on its back, show there without loading
    the model.
    """

    def __init__(self, folder: Path, every: float, total: int, wall_before: float,
                 every_steps: int = 25_000, env_id: str | None = None,
                 history: list[dict[str, Any]] | None = None, normalize: bool = False,
                 n_envs: int = 1, continued: dict[str, Any] | None = None, seed: int = 0,
                 eval_episodes: int = 10) -> None:
        from stable_baselines3.common.callbacks import BaseCallback
        from tqdm import tqdm

        outer = self

        class _Callback(BaseCallback):
            def _on_training_start(self) -> None:
                outer.last_steps = int(self.model.num_timesteps)
                outer.bar = tqdm(total=total, initial=self.model.num_timesteps, unit="step",
                                 dynamic_ncols=True, desc=folder.name, file=sys.stderr)

            def _on_step(self) -> bool:
                outer.bar.update(self.model.num_timesteps - outer.bar.n)
                if outer.signals:  # Ctrl-C or SIGTERM: a checkpoint first, then stop
                    outer.save(self.model)
                    return False
                if (time.monotonic() - outer.last >= outer.every
                        or self.model.num_timesteps - outer.last_steps >= outer.every_steps):
                    outer.save(self.model)
                return True

            def _on_training_end(self) -> None:
                outer.bar.close()

        self.callback = _Callback()
        self.folder = folder
        self.every = every
        self.every_steps = every_steps
        self.last = time.monotonic()
        self.last_steps = 0
        self.t0 = time.monotonic()
        self.wall_before = wall_before
        self.bar: Any = None
        self.env_id = env_id
        self.history = list(history or [])
        self.normalize = normalize
        self.n_envs = n_envs
        self.total = total
        self.continued = continued
        self.seed, self.eval_episodes = seed, eval_episodes
        #: Signals received while training (:func:`idt_desk.cli.signals.deferred_signals`).
        self.signals: list[int] = []

    def wall(self) -> float:
        return self.wall_before + time.monotonic() - self.t0

    def save(self, model: Any, final: bool = False) -> None:
        """Write model, replay buffer, VecNormalize statistics and state; each atomically.

        The episode for ``history`` is played at most once per ``every_steps`` steps (a
        checkpoint every few minutes adds none in between) and at the ``final`` save.
        """
        self.folder.mkdir(parents=True, exist_ok=True)
        tmp = self.folder / "model.tmp.zip"
        model.save(tmp)
        os.replace(tmp, self.folder / "model.zip")
        if hasattr(model, "replay_buffer") and model.replay_buffer is not None:
            tmp = self.folder / "replay.tmp.pkl"
            model.save_replay_buffer(tmp)
            os.replace(tmp, self.folder / "replay.pkl")
        stats = model.get_vec_normalize_env()
        if stats is not None:
            tmp = self.folder / "vecnormalize.tmp.pkl"
            stats.save(tmp)
            os.replace(tmp, self.folder / "vecnormalize.pkl")
        steps = int(model.num_timesteps)
        last = self.history[-1]["steps"] if self.history else -self.every_steps
        actor = None
        if self.env_id is not None and steps != last and (steps - last >= self.every_steps
                                                          or final):
            actor = model if stats is None else NormalizedActor(model, stats)
            r, flipped = rollouts(actor, self.env_id, 1, seed=steps, deterministic=True)
            growth = nudge_growth(actor, self.env_id, 1, seed=steps)
            self.history.append({"steps": steps, "return_deterministic": round(r[0], 1),
                                 "upside_down_share": round(flipped, 4),
                                 "nudge_log10": round(growth[0], 2) if growth else None})
        state = {"steps": steps, "wall_seconds": self.wall(), "history": self.history,
                 "normalize": self.normalize, "n_envs": self.n_envs, "target_steps": self.total,
                 **({"continued_from": self.continued} if self.continued else {})}
        (self.folder / "state.json.tmp").write_text(json.dumps(state))
        os.replace(self.folder / "state.json.tmp", self.folder / "state.json")
        if self.history and self.history[-1]["steps"] == steps and settled_running(self.history):
            self.keep(state, actor)
        self.last = time.monotonic()
        self.last_steps = int(model.num_timesteps)

    def keep(self, state: dict[str, Any], actor: Any = None) -> Path:
        """Copy the checkpoint just written (weights, VecNormalize, state; no replay buffer).

        The next checkpoint overwrites this one, and a settled closed loop may not outlast
        the next 25 k steps of training: the copy is what can be shipped. ``actor`` (the
        model as it acts, on normalised observations) is evaluated as a card evaluates it
        (:func:`card_returns`, the run's episodes and seed) into ``evaluation.json``, so
        ``--progress`` says whether the copy is worth shipping; ``--resume --checkpoint-dir``
        on it (``--steps 1``) writes its card, ``--continue-from`` starts a phase from it.
        """
        dest = self.folder / KEPT / str(state["steps"])
        dest.mkdir(parents=True, exist_ok=True)
        for name in ("model.zip", "vecnormalize.pkl"):
            if (self.folder / name).exists():
                shutil.copyfile(self.folder / name, dest / name)
        (dest / "state.json").write_text(json.dumps(state))  # last: the copy is whole
        if actor is not None and self.env_id is not None:
            card = card_returns(actor, self.env_id, self.eval_episodes, self.seed)
            (dest / "evaluation.json").write_text(json.dumps({"steps": state["steps"], **card}))
        return dest


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
    trainer: str = "sb3",
    train_freq: int | None = None,
    checkpoint_steps: int = 25_000,
    normalize: bool = False,
    learning_starts: int | None = None,
    n_envs: int | None = None,
    continue_from: Path | None = None,
) -> Path:
    """Train (or resume) one policy and write its zip and model card into ``out``.

    ``n_envs`` environments are stepped together (one batched action each step; SAC and TQC
    then make ``train_freq`` x ``n_envs`` gradient steps, so the update-to-data ratio stays
    1). None: 1 for a new run, the checkpoint's for a resumed one, which keeps its count.

    ``continue_from``: start a new phase from another run's checkpoint folder, as SB3's
    ``learn()`` on a loaded model does (and as the paper authors continued their SAC agents:
    their released zips count the steps of the last phase only). The weights, optimiser
    state, entropy coefficient and VecNormalize statistics carry over; the replay buffer
    starts empty and the step count at 0, so the first ``learning_starts`` steps act at
    random again. ``steps`` counts this phase; the card says where it started.

    ``train_freq`` (SAC, TQC): environment steps between updates, with as many gradient steps
    (times ``n_envs``). None: 1 for a new run, the checkpoint's own for a resumed run or a new
    phase (as SB3's load keeps it); a new phase may set another rhythm, a resumed run may not.
    """
    import gymnasium as gym
    import torch

    from idt_desk.plugin import route_mujoco_warnings

    route_mujoco_warnings()
    torch.set_num_threads(threads)
    if trainer not in TRAINERS:
        raise ValueError(f"trainer {trainer!r}: one of {', '.join(TRAINERS)}")
    if trainer == "sbx":
        if algo not in ("sac", "tqc"):
            raise ValueError("--trainer sbx trains SAC and TQC only (exported to SB3 zips)")
        if threads == 1:  # XLA's CPU backend otherwise spreads one update over every core
            os.environ.setdefault("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false "
                                               "intra_op_parallelism_threads=1")
        try:
            import sbx
        except ImportError:
            raise ImportError('--trainer sbx needs SBX and JAX: pip install -e ".[train]"'
                              ) from None
        cls = getattr(sbx, ALGOS[algo])
    else:
        from idt_desk_sources.gym._policy import algorithm_class

        cls = algorithm_class(ALGOS[algo])
    name = policy_name(env_id, algo, seed)
    ckpt = checkpoint_dir or Path("out") / "train" / name
    state_file = ckpt / "state.json"
    from stable_baselines3.common.vec_env import DummyVecEnv, VecNormalize

    if n_envs is not None and n_envs < 1:
        raise ValueError(f"n_envs {n_envs}: at least 1")
    wall_before = 0.0
    history: list[dict[str, Any]] = []
    continued: dict[str, Any] | None = None
    resuming = resume and state_file.exists()
    state = json.loads(state_file.read_text()) if resuming else {}
    if resuming and n_envs is not None and n_envs != int(state.get("n_envs", 1)):
        raise ValueError(f"{ckpt} was trained with {int(state.get('n_envs', 1))} env(s) "
                         "stepped together: a resumed run keeps the count (its replay buffer "
                         "is laid out for it)")
    n_envs = int(state.get("n_envs", 1)) if resuming else (n_envs or 1)
    source = _continuation(continue_from, ckpt, normalize, n_envs) if (
        continue_from is not None and not resuming) else None
    # One env as SB3 wraps it itself, or the vectorised envs VecNormalize and N envs need.
    env: Any = gym.make(env_id)
    if n_envs > 1 or normalize:
        from stable_baselines3.common.env_util import make_vec_env

        env.close()
        env = make_vec_env(env_id, n_envs=n_envs, seed=seed, vec_env_cls=DummyVecEnv)
    if resuming:
        if bool(state.get("normalize", False)) != normalize:
            raise ValueError(f"{ckpt} was trained {'with' if not normalize else 'without'} "
                             "--normalize: resume it the same way")
        if normalize:
            env = VecNormalize.load(str(ckpt / "vecnormalize.pkl"), env)
        model = load_checkpoint(cls, ckpt / "model.zip", env)
        _check_kept("learning_starts", learning_starts, getattr(model, "learning_starts", None),
                    ckpt)
        _check_kept("train_freq", train_freq, _train_freq(model), ckpt)
        if (ckpt / "replay.pkl").exists():
            model.load_replay_buffer(ckpt / "replay.pkl")
        wall_before = float(state["wall_seconds"])
        history = list(state.get("history", []))
        continued = state.get("continued_from")
        print(f"resuming {name} from {model.num_timesteps:,} steps ({ckpt})", file=sys.stderr)
    elif state_file.exists():
        raise FileExistsError(f"{ckpt} holds a checkpoint: pass --resume, or remove it")
    elif source is not None:
        if normalize:
            env = VecNormalize.load(str(source / "vecnormalize.pkl"), env)
        model = load_checkpoint(cls, source / "model.zip", env)
        continued = {"checkpoint": str(source), "steps": int(model.num_timesteps)}
        if algo != "ppo":  # the source's update rhythm, which this phase may change
            continued.update(train_freq=_train_freq(model),
                             gradient_steps=int(model.gradient_steps),
                             learning_starts=int(model.learning_starts))
        model.num_timesteps = 0  # a new phase; the buffer load_checkpoint made is empty
        # Loading re-seeds every generator (torch, numpy, the envs, the random actions) with
        # the source's seed: without this, phases given different seeds are one run.
        model.seed = seed
        model.set_random_seed(seed)
        if learning_starts is not None:
            model.learning_starts = learning_starts
        if train_freq is not None and algo != "ppo":
            from stable_baselines3.common.type_aliases import TrainFreq, TrainFrequencyUnit

            model.train_freq = TrainFreq(train_freq, TrainFrequencyUnit.STEP)
            model.gradient_steps = train_freq * n_envs
        print(f"continuing {name} from {source} at {continued['steps']:,} steps, with an "
              f"empty replay buffer and {getattr(model, 'learning_starts', 0):,} random steps "
              "first", file=sys.stderr)
    else:
        extra: dict[str, Any] = {}
        freq = train_freq or 1
        if (freq != 1 or n_envs != 1) and algo != "ppo":
            extra = {"train_freq": freq, "gradient_steps": freq * n_envs}
        if learning_starts is not None:
            if algo == "ppo":
                raise ValueError("--learning-starts is for SAC and TQC (PPO has none)")
            extra["learning_starts"] = learning_starts
        if normalize:  # SB3's defaults, as the authors' released statistics files show
            env = VecNormalize(env, norm_obs=True, norm_reward=True)
        model = cls("MlpPolicy", env, seed=seed, device="cpu", verbose=0, **extra)
    saver = _Checkpoints(ckpt, checkpoint_minutes * 60.0, steps, wall_before, checkpoint_steps,
                         env_id=env_id, history=history, normalize=normalize, n_envs=n_envs,
                         continued=continued, seed=seed, eval_episodes=eval_episodes)
    remaining = steps - model.num_timesteps
    if remaining > 0:
        with deferred_signals() as saver.signals:
            model.learn(total_timesteps=remaining, callback=saver.callback,
                        reset_num_timesteps=False)
        if saver.signals:
            env.close()
            print(f"{name}: stopped at {int(model.num_timesteps):,} steps by "
                  f"{signal.Signals(saver.signals[0]).name}; checkpoint written to {ckpt} "
                  "(--resume goes on from it)", file=sys.stderr)
            raise SystemExit(128 + saver.signals[0])
        saver.save(model, final=True)
    wall = saver.wall()
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{name}.zip"
    trained_steps = int(model.num_timesteps)
    freq = _train_freq(model)
    gradient_steps = getattr(model, "gradient_steps", freq)
    starts = getattr(model, "learning_starts", None)
    stats = model.get_vec_normalize_env()
    if trainer == "sbx":
        model = export_sbx(model, env)
    model.save(path)
    hyper = "sb3-contrib defaults" if algo == "tqc" else "stable-baselines3 defaults"
    if n_envs > 1:
        hyper += f", {n_envs} envs stepped together"
    if algo != "ppo":
        hyper += "".join(f", {x}" for x in _rhythm(freq, gradient_steps, starts, n_envs))
    if continued:
        before = ", ".join(_rhythm(continued.get("train_freq"), continued.get("gradient_steps"),
                                   continued.get("learning_starts"), n_envs))
        hyper += (f"; continued from a checkpoint at {continued['steps']:,} steps"
                  + (f" (trained with {before})" if before else "")
                  + " with an empty replay buffer")
    actor = model
    if stats is not None:
        stats.training = False
        stats.save(path.with_name(f"{name}_vecnormalize.pkl"))
        hyper += ", VecNormalize (observations and rewards, its defaults)"
        actor = NormalizedActor(model, stats)
    card: dict[str, Any] = {
        "name": name, "env_id": env_id, "algorithm": ALGOS[algo], "seed": seed,
        "steps": trained_steps + (continued["steps"] if continued else 0),
        **({"continued_from": continued} if continued else {}), "hyperparameters": hyper,
        "policy": "MlpPolicy",
        "trainer": ("SBX (JAX), exported to a Stable-Baselines3-family zip" if trainer == "sbx"
                    else "Stable-Baselines3"),
        "wall_seconds": round(wall, 1), "torch_threads": threads, "n_envs": n_envs,
        "versions": _versions(trainer), "command": command,
    }
    card.update(card_returns(actor, env_id, eval_episodes, seed))
    (out / f"{name}.json").write_text(json.dumps(card, indent=2) + "\n")
    env.close()
    return path


def _train_freq(model: Any) -> int:
    """Environment steps between ``model``'s updates (1 for an on-policy model)."""
    return int(getattr(getattr(model, "train_freq", None), "frequency", 1))


def _rhythm(freq: int | None, grads: int | None, starts: int | None, n_envs: int) -> list[str]:
    """The card's words for an update rhythm off the defaults (None: not known, no word)."""
    words = []
    if freq is not None and (freq != 1 or n_envs > 1):
        words.append(f"train_freq={freq} and gradient_steps={grads}")
    if starts is not None and starts != 100:  # SB3's and SBX's default
        words.append(f"learning_starts={starts}")
    return words


def _check_kept(name: str, given: Any, kept: Any, ckpt: Path) -> None:
    """Refuse a setting a resumed run cannot change (None: keep the checkpoint's)."""
    if given is not None and given != kept:
        raise ValueError(f"{ckpt} was started with {name}={kept}: a resumed run keeps it "
                         "(--continue-from starts a new phase that may change it)")


def _continuation(source: Path, ckpt: Path, normalize: bool, n_envs: int) -> Path:
    """The checkpoint folder a new phase starts from (``train``'s ``continue_from``), checked."""
    state_file = source / "state.json"
    if not state_file.exists():
        raise ValueError(f"--continue-from {source}: no checkpoint there (no state.json)")
    if ckpt.resolve() == source.resolve():
        raise ValueError(f"--continue-from {source}: give the new phase its own "
                         "--checkpoint-dir (the source checkpoint stays as it is)")
    state = json.loads(state_file.read_text())
    if bool(state.get("normalize", False)) != normalize:
        raise ValueError(f"{source} was trained {'with' if not normalize else 'without'} "
                         "--normalize: continue it the same way")
    if int(state.get("n_envs", 1)) != n_envs:
        raise ValueError(f"{source} was trained with {int(state.get('n_envs', 1))} env(s) "
                         f"stepped together; continue it with --envs {state.get('n_envs', 1)}")
    return source


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The ``train`` subcommand's options."""
    p.add_argument("--card", type=Path, metavar="ZIP",
                   help="train nothing: measure this policy zip again and rewrite its model "
                        "card's returns, CV and upside-down share (--eval-episodes each way)")
    p.add_argument("--progress", type=Path, nargs="?", const=Path("out/train"), metavar="DIR",
                   help="train nothing: where each run under DIR (default out/train) stands, "
                        "from its checkpoint: steps, time, last and best episodes, the loop")
    p.add_argument("--algo", choices=sorted(ALGOS))
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--steps", type=int, help="environment steps in all")
    p.add_argument("--out", type=Path, default=Path("assets/policies"),
                   help="folder for the policy zip and its model card")
    p.add_argument("--env-id", default="HalfCheetah-v5")
    p.add_argument("--checkpoint-dir", type=Path,
                   help="checkpoint folder (default out/train/NAME)")
    p.add_argument("--checkpoint-minutes", type=float, default=5.0)
    p.add_argument("--checkpoint-steps", type=int, default=25_000,
                   help="also checkpoint every this many steps (default 25,000)")
    p.add_argument("--trainer", choices=TRAINERS, default="sb3",
                   help="sb3 (torch) or sbx (JAX SAC, exported to an SB3 zip; "
                        'pip install -e ".[train]")')
    p.add_argument("--train-freq", type=int, default=None,
                   help="environment steps between updates, as many gradient steps each "
                        "(default 1, SB3's; a resumed run or a new phase: the checkpoint's)")
    p.add_argument("--learning-starts", type=int,
                   help="SAC/TQC: random-action steps before the first update (default: the "
                        "library's, 100; the paper authors' SAC used 10,000)")
    p.add_argument("--resume", action="store_true", help="continue from the checkpoint")
    p.add_argument("--continue-from", type=Path, metavar="DIR",
                   help="start a new phase from another run's checkpoint folder: its weights, "
                        "optimiser state and VecNormalize statistics, an empty replay buffer "
                        "and --learning-starts random steps first (SB3's learn() on a loaded "
                        "model, as the paper authors continued their SAC agents); needs its "
                        "own --checkpoint-dir, and --resume resumes the phase")
    p.add_argument("--normalize", action="store_true",
                   help="train behind VecNormalize (observations and rewards), as the paper "
                        "authors' released policies; its statistics ship beside the zip")
    p.add_argument("--envs", type=int, metavar="N",
                   help="step N environments together (batched actions; SAC/TQC make N "
                        "gradient steps per step, so updates per transition stay 1). Default "
                        "1, or the checkpoint's count on --resume")
    p.add_argument("--eval-episodes", type=int, default=10)
    p.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    p.set_defaults(func=run)


def _summary(card: dict[str, Any]) -> str:
    """A model card's evaluation in one line: return, CV, upside down, the closed loop."""
    d = card["return_deterministic"]
    loop = card.get("closed_loop")
    settled = ("" if loop is None else
               f"; a {loop['nudge']:g} push stays small in {loop['stable_share']:.0%} of "
               f"episodes (log10 distance {min(loop['log10_distance']):+.1f} to "
               f"{max(loop['log10_distance']):+.1f} after {loop['horizon_steps']} steps)")
    upside = upside_down(card)
    return (f"deterministic return {d['mean']:.1f} ± {d['std']:.1f} (CV {d['cv']:.4f})"
            + ("" if upside is None else f", upside down {upside:.1%} of steps") + settled)


def run(args: argparse.Namespace) -> int:
    """Entry of ``idt-desk train``."""
    from idt_desk.plugin import InputError, check_int, check_out_dir

    check_int("--eval-episodes", args.eval_episodes, 1, 1000)
    command = "idt-desk " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    if args.card is not None:
        if not args.card.is_file():
            raise InputError(f"--card {args.card}: no such policy zip")
        card = recard(args.card, args.eval_episodes, env_id=args.env_id)
        print(f"{args.card.with_suffix('.json')}: {_summary(card)}")
        return 0
    if args.progress is not None:
        if not args.progress.is_dir():
            raise InputError(f"--progress {args.progress}: no such folder")
        lines = progress(args.progress)
        print("\n".join(lines) if lines else f"no training run in {args.progress}")
        return 0
    if args.algo is None or args.steps is None:
        raise InputError("give --algo and --steps to train (or --card ZIP to measure one)")
    check_int("--seed", args.seed, 0, 2**32 - 1)
    check_int("--steps", args.steps, 1)
    check_int("--threads", args.threads, 1, 256)
    check_int("--checkpoint-steps", args.checkpoint_steps, 1)
    if args.train_freq is not None:
        check_int("--train-freq", args.train_freq, 1, 10_000)
    if args.learning_starts is not None:
        check_int("--learning-starts", args.learning_starts, 0)
    if args.envs is not None:
        check_int("--envs", args.envs, 1, 256)
    check_out_dir(args.out, "--out")
    try:
        path = train(args.algo, args.seed, args.steps, args.out, args.env_id,
                     args.checkpoint_dir, args.checkpoint_minutes, args.resume,
                     args.eval_episodes, args.threads, command, args.trainer, args.train_freq,
                     args.checkpoint_steps, args.normalize, args.learning_starts, args.envs,
                     args.continue_from)
    except (FileExistsError, ValueError, ImportError) as exc:
        raise InputError(str(exc)) from None
    card = json.loads(path.with_suffix(".json").read_text())
    r = card["return_stochastic"]
    print(f"wrote {path} ({card['steps']:,} steps, {card['wall_seconds']:.0f} s): stochastic "
          f"return {r['mean']:.1f} ± {r['std']:.1f} over {r['episodes']} episodes; "
          f"{_summary(card)}")
    return 0
