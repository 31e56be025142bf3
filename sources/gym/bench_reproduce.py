"""How fast ``reproduce cheetah`` steps trials, against a plain SB3 loop, in one run.

``idt-desk bench reproduce`` measures trial steps per second of

- **plain**: one environment and ``model.predict`` in a loop (what an evaluation script
  does), no IDT at all;
- **lockstep**: :func:`idt_desk_sources.gym.reproduce.run_group` on one policy's trials (the control
  and the eight perturbations by default): one batched forward pass per step for all of
  them, each trial through its own session (symbols, metric engine, monitor) and then the
  paper's per-trial analysis.

Both run in this process with one torch thread, interleaved in rounds after a warm-up; the
best round of each is kept, so machine noise hits both alike. The ratio is the result.
"""

from __future__ import annotations

import argparse
import time

__all__ = ["HELP", "add_arguments", "bench_reproduce", "run"]

#: ``idt-desk bench reproduce``'s one-line help.
HELP = "reproduce cheetah's lockstep trials vs a plain one-env model.predict loop (steps/s)"


def _plain(policy: str, steps: int, deterministic: bool, seed: int = 0) -> float:
    import gymnasium as gym
    from idt_desk_sources.gym._policy import algorithm_class, algorithm_of

    model = algorithm_class(algorithm_of(policy)).load(policy, device="cpu")
    env = gym.make("HalfCheetah-v5")
    obs, _ = env.reset(seed=seed)
    t0 = time.perf_counter()
    for _ in range(steps):
        action, _ = model.predict(obs, deterministic=deterministic)
        obs, _, terminated, truncated, _ = env.step(action)
        if terminated or truncated:
            obs, _ = env.reset()
    dt = time.perf_counter() - t0
    env.close()
    return steps / dt


def _lockstep(policy: str, trials: int, episodes: int, deterministic: bool) -> float:
    from idt_desk_sources.gym.reproduce import (
        CONTROL,
        Trial,
        TrialGroup,
        perturbation_names,
        run_group,
    )

    names = (CONTROL, *perturbation_names())
    group = TrialGroup(policy, tuple(Trial(names[j % len(names)]) for j in range(trials)),
                       "HalfCheetah-v5", episodes, 2, 0, 3.0, deterministic=deterministic)
    t0 = time.perf_counter()
    rows = run_group(group)
    dt = time.perf_counter() - t0
    errors = [r["error"] for r in rows if r["error"]]
    if errors:
        raise RuntimeError(errors[0])
    return sum(r["steps"] for r in rows) / dt


def bench_reproduce(policy: str = "", trials: int = 9, episodes: int = 2, rounds: int = 2,
                    print_fn=print, actions: str = "deterministic") -> dict[str, float]:
    """Best-of-``rounds`` trial steps/s of the plain loop and of the lockstep trials.

    ``actions`` (deterministic or stochastic) is how both act.
    """
    import torch
    from idt_desk_sources.gym._source import default_policy

    torch.set_num_threads(1)
    policy = policy or str(default_policy("HalfCheetah-v5"))
    steps = episodes * 1000
    det = actions == "deterministic"
    print_fn(f"policy {policy}; {actions} actions; lockstep: {trials} trials × {episodes} "
             f"episodes per round; plain: {steps} steps per round; one torch thread")
    _plain(policy, 200, det)  # warm-up: first forward pass, numba kernels, MuJoCo
    _lockstep(policy, 2, 2, det)
    best = {"plain": 0.0, "lockstep": 0.0}
    for r in range(rounds):
        plain = _plain(policy, steps, det)
        lock = _lockstep(policy, trials, episodes, det)
        best["plain"], best["lockstep"] = max(best["plain"], plain), max(best["lockstep"], lock)
        print_fn(f"round {r + 1}: plain {plain:,.0f} steps/s, lockstep {lock:,.0f} "
                 f"trial steps/s ({lock / plain:.2f}x)")
    ratio = best["lockstep"] / best["plain"]
    print_fn(f"best: plain model.predict loop {best['plain']:,.0f} steps/s; lockstep trials "
             f"(IDT and analysis included) {best['lockstep']:,.0f} trial steps/s: "
             f"{ratio:.2f}x")
    return {**best, "ratio": ratio}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``idt-desk bench reproduce`` options (and ``func=run``)."""
    parser.description = __doc__.splitlines()[0]
    parser.add_argument("--policy", default="", help="SB3 zip (default: the shipped default)")
    parser.add_argument("--trials", type=int, default=9,
                        help="trials stepped together (default 9: control + 8)")
    parser.add_argument("--episodes", type=int, default=2, help="episodes per trial (2)")
    parser.add_argument("--rounds", type=int, default=2)
    from idt_desk_sources.gym._source import ACTIONS

    parser.add_argument("--actions", choices=ACTIONS, default=ACTIONS[0],
                        help="how the policy acts (deterministic)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Run ``idt-desk bench reproduce``."""
    from idt_desk.plugin import check_int

    check_int("--trials", args.trials, 1, 512)
    check_int("--episodes", args.episodes, 2, 100)
    check_int("--rounds", args.rounds, 1, 100)
    bench_reproduce(args.policy, args.trials, args.episodes, args.rounds,
                    actions=args.actions)
    return 0
