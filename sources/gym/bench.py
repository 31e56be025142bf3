"""What the IDT costs an RL loop at maximum speed, measured against the bare loop in one run.

``idt-desk bench rl``: steps per second of the frozen policy acting in HalfCheetah

- **bare**: the source's own loop (policy forward pass + environment step + the observation
  and action pipeline), no session;
- **IDT without its twin**: the same loop through a session at maximum speed (symbolisation,
  metric engine, monitor, agency panel), the env's twin off (``twin=False``);
- **IDT**: the same with the twin (an unperturbed copy of the env stepped from each S: the
  residual of the physics, and the class of an alarm), as every session runs by default;
- **IDT + recording**: the same, writing a recording.

After a warm-up session (numba's kernels load once per process), the three are measured in
rounds, interleaved, and the best round of each is kept, so machine noise hits all three
alike; the ratios are what the bench reports.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np

__all__ = ["HELP", "add_arguments", "bench_estimator", "bench_rl", "run"]

#: ``idt-desk bench rl``'s one-line help.
HELP = ("RL loop steps/s bare, with the IDT without and with its twin, and with a recording")


def _bare(policy: str, steps: int, deterministic: bool) -> float:
    from idt_desk_sources.gym import GymSource

    src = GymSource(policy=policy, deterministic=deterministic)
    src.reset(seed=0)
    src.step(50)  # warm-up: first forward pass, first MuJoCo step
    t0 = time.perf_counter()
    done = 0
    while done < steps:
        done += len(src.step(min(GymSource.chunk, steps - done)))
    dt = time.perf_counter() - t0
    src.close()
    return steps / dt


def _session(policy: str, steps: int, record: Path | None, deterministic: bool,
             twin: bool = True) -> float:
    from idt_desk_sources.gym import GymSource

    from idt_desk.plugin import Session, SessionConfig, run_headless

    session = Session(SessionConfig(speed=None, twin=twin),
                      source=GymSource(policy=policy, deterministic=deterministic), record=record)
    t0 = time.perf_counter()
    snap = run_headless(session, steps=steps, interval=0.05)
    dt = time.perf_counter() - t0
    if snap.error:
        raise RuntimeError(snap.error)
    return steps / dt


def bench_rl(policy: str = "", steps: int = 6000, rounds: int = 3, print_fn=print,
             actions: str = "deterministic") -> dict[str, float]:
    """Steps/s of the bare loop, with the IDT, and with the IDT and a recording.

    ``actions`` (deterministic or stochastic) is how the policy acts in all three.
    """
    from idt_desk_sources.gym._source import default_policy

    det = actions == "deterministic"
    policy = policy or str(default_policy("HalfCheetah-v5"))
    best = {"bare": 0.0, "IDT without twin": 0.0, "IDT": 0.0, "IDT + recording": 0.0}
    with tempfile.TemporaryDirectory() as tmp:
        # Warm-up: loading the numba kernels from their cache (about 1 s) is start-up, not
        # a cost per step.
        _session(policy, 1500, Path(tmp) / "warm-up", det)
        for r in range(rounds):
            best["bare"] = max(best["bare"], _bare(policy, steps, det))
            best["IDT without twin"] = max(best["IDT without twin"],
                                           _session(policy, steps, None, det, twin=False))
            best["IDT"] = max(best["IDT"], _session(policy, steps, None, det))
            best["IDT + recording"] = max(
                best["IDT + recording"], _session(policy, steps, Path(tmp) / f"rec{r}", det))
    print_fn(f"policy {policy}, {actions} actions, {steps:,} steps x {rounds} rounds (best "
             "round each)")
    for label, v in best.items():
        print_fn(f"{label:>16}: {v:8,.0f} steps/s   ({v / best['bare']:.3f} of bare)")
    cost = 1.0 - best["IDT + recording"] / best["bare"]
    print_fn(f"IDT and recording together cost {100 * cost:.1f} % of the bare loop's speed")
    twin = 1.0 - best["IDT"] / best["IDT without twin"]
    print_fn(f"the twin costs {100 * twin:.1f} % of the loop's speed with the IDT")
    return best


def bench_estimator(policy: str = "", steps: int = 20_000, rounds: int = 3,
                    print_fn=print) -> dict[str, float]:
    """Windows/s of the live cheetah preset's estimator against the paper preset's, one run.

    One rollout of ``steps`` transitions goes through a :class:`~idt_desk.pipeline.Pipeline`
    of each preset (symbols, the engine or, per part, the engines; no monitor) in chunks of
    the source's size, interleaved rounds, the best kept.
    """
    from idt_desk_sources.gym import GymSource
    from idt_desk_sources.gym._source import default_policy

    from idt_desk.plugin import PRESETS, Pipeline

    src = GymSource(policy=policy or str(default_policy("HalfCheetah-v5")))
    src.reset(seed=0)
    b = src.step(steps)
    src.close()
    t = np.arange(steps, dtype=np.float64) / src.rate

    def once(name: str) -> float:
        pipe = Pipeline(PRESETS[name], None, state_names=src.state_names,
                        action_names=src.action_names, calibration_windows=20)
        t0, made = time.perf_counter(), 0
        for i in range(0, steps, GymSource.chunk):
            j = slice(i, i + GymSource.chunk)
            w = pipe.push(b.s[j], b.a[j], b.s_next[j], {"reward": b.reward[j],
                                                         "t": t[j]}).windows
            made += 0 if w is None else len(w["start"])
        return made / (time.perf_counter() - t0)

    best = {"cheetah": 0.0, "cheetah-live": 0.0}
    for name in best:
        once(name)  # warm-up: the kernels load once per process
    for _ in range(rounds):
        for name in best:
            best[name] = max(best[name], once(name))
    print_fn(f"{steps:,} transitions in chunks of {GymSource.chunk}, {rounds} rounds (best)")
    for name, v in best.items():
        print_fn(f"{name:>13}: {v:9,.0f} windows/s ({v / best['cheetah']:.2f} of the paper "
                 "preset's)")
    return best


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the ``idt-desk bench rl`` options to ``parser`` (and ``func=run``)."""
    parser.add_argument("--policy", default="", help="SB3 zip (default: the shipped one)")
    parser.add_argument("--steps", type=int, default=6000, help="steps per measurement")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds (best kept)")
    from idt_desk_sources.gym._source import ACTIONS

    parser.add_argument("--actions", choices=ACTIONS, default=ACTIONS[0],
                        help="how the policy acts (deterministic)")
    parser.add_argument("--estimator", action="store_true",
                        help="instead: windows/s of the live cheetah preset's estimator (one "
                             "IDT per body part) against the paper preset's")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Run ``idt-desk bench rl`` from parsed arguments."""
    from idt_desk.plugin import check_int

    check_int("--steps", args.steps, 500, 10**7)
    check_int("--rounds", args.rounds, 1, 100)
    if args.estimator:
        bench_estimator(args.policy, max(args.steps, 2_000), args.rounds)
        return 0
    bench_rl(args.policy, args.steps, args.rounds, actions=args.actions)
    return 0
