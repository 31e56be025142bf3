"""``idt-desk bench wrapper``: what ``IDTMonitor(record=)`` costs over ``IDTMonitor``, one run.

The same seeded random-action steps of an env (HalfCheetah-v5 by default) through the
wrapper with and without ``record=``, in interleaved rounds (best of each); printed: the
steps per second of both and their ratio, and whether the two gave the same windows and
flags, bit for bit (a recorded wrapper computes each window once: its recording is its own
session's). The env's own steps without any wrapper are the baseline both are measured
against in the same rounds.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["bench_wrapper"]


def _steps(make: Callable[[], Any], n: int, seed: int) -> tuple[float, Any]:
    """Time ``n`` seeded random-action steps of ``make()``, reset at episodes' ends.

    Returns the wall seconds and the env after them (closed).
    """
    env = make()
    env.action_space.seed(seed)
    env.reset(seed=seed)
    rng = np.random.default_rng(seed)
    low, high = env.action_space.low, env.action_space.high
    actions = rng.uniform(low, high, size=(n, *env.action_space.shape))
    t0 = time.perf_counter()
    for a in actions:
        *_, term, trunc, _info = env.step(a)
        if term or trunc:
            env.reset()
    wall = time.perf_counter() - t0
    env.close()
    return wall, env


def bench_wrapper(env_id: str = "HalfCheetah-v5", n: int = 16_000, rounds: int = 3,
                  seed: int = 0, print_fn: Callable[[str], None] = print,
                  **options: Any) -> dict[str, float]:
    """The wrapper's steps/s with and without ``record=`` (best of ``rounds``), their ratio.

    ``options``: the wrapper's (a small ``baseline_windows`` lets a short run arm).
    Raises RuntimeError if the recorded wrapper's windows differ from the plain one's.
    """
    import gymnasium as gym

    from idt_desk.gym import IDTMonitor

    print_fn(f"wrapper benchmark: {n:,} random-action steps of {env_id}, best of {rounds} "
             "interleaved rounds: the env alone, IDTMonitor, IDTMonitor(record=)")
    best = {"env": np.inf, "plain": np.inf, "recorded": np.inf}
    windows: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="idt-bench-wrapper-") as tmp:
        for r in range(rounds):
            makers = {
                "env": lambda: gym.make(env_id),
                "plain": lambda: IDTMonitor(gym.make(env_id), **options),
                "recorded": lambda r=r: IDTMonitor(gym.make(env_id),
                                                   record=Path(tmp) / f"run{r}", **options),
            }
            for mode, make in makers.items():
                wall, env = _steps(make, n, seed)
                best[mode] = min(best[mode], wall)
                if mode != "env":
                    windows[mode] = env.windows
    plain, rec = windows["plain"], windows["recorded"]
    same = list(plain.columns) == list(rec.columns) and len(plain) == len(rec) and all(
        np.array_equal(plain[c].to_numpy(), rec[c].to_numpy(), equal_nan=True)
        for c in plain.columns)
    out = {mode: n / wall for mode, wall in best.items()}
    out["ratio"] = best["recorded"] / best["plain"]
    out["windows"] = float(len(plain))
    print_fn(f"  {env_id} alone:       {out['env']:>10,.0f} steps/s")
    print_fn(f"  IDTMonitor:           {out['plain']:>10,.0f} steps/s")
    print_fn(f"  IDTMonitor(record=):  {out['recorded']:>10,.0f} steps/s")
    print_fn(f"recording costs {out['ratio']:.3f}x the wrapper's time without it; "
             f"{len(plain):,} windows, the same bit for bit: {'yes' if same else 'NO'}")
    if not same:
        raise RuntimeError("the recorded wrapper's windows differ from the plain one's")
    return out
