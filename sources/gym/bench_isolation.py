"""What naming an alarm costs: the bank of fault hypotheses at an alarm, against a window's work.

``idt-desk bench isolation``: the isolation study's loop (:mod:`.isolation_study`: the agent
acting on what :class:`~idt_desk.gym.IDTMonitor` hands it, a fault injected inside it, the
study's monitor settings, the exact twin), one trial per fault kind, drawn as the study draws
them. The step that names the fault's alarm is timed (the bank of
:mod:`idt_desk.detection.isolation` runs in it, with that step's window: an upper bound);
beside it, in the same run, the seconds one window of the monitored loop takes between
alarms (the policy, the env, the monitor and its twin over a stride of steps, before the
onset). The ratio says how many windows of the loop an alarm's naming costs; the seconds are
on one core (one process).
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import numpy as np

__all__ = ["HELP", "add_arguments", "bench_isolation", "run"]

#: ``idt-desk bench isolation``'s one-line help.
HELP = ("the seconds the bank of fault hypotheses takes to name an alarm, per fault kind, "
        "against one window of the monitored loop")


def _one(task: dict[str, Any]) -> dict[str, Any]:
    """One trial to its first named alarm after the onset: the seconds of the step naming it."""
    import gymnasium as gym
    from idt_desk_sources.gym.isolation_study import ARMED, MONITOR, actor

    from idt_desk.plugin import Fault, FaultWrapper, IDTMonitor, MujocoTwin, route_mujoco_warnings

    route_mujoco_warnings()
    fault = Fault(**task["fault"])
    base = gym.make(task["env_id"])
    env = FaultWrapper(base, fault)
    monitor = IDTMonitor(env, twin=MujocoTwin(env), **MONITOR)
    act = actor(task["policy"], base)
    clean, t_clean, named, seconds = 0, 0.0, None, None
    try:
        obs, _ = monitor.reset(seed=task["env_seed"])
        for t in range(task["steps"]):
            a = act(obs)
            t0 = time.perf_counter()
            obs, _, term, trunc, _ = monitor.step(a)
            took = time.perf_counter() - t0
            if ARMED <= t < fault.onset:  # the armed loop between alarms
                clean += 1
                t_clean += took
            if term or trunc:
                obs, _ = monitor.reset()
            after = [x for x in monitor.alarms if x["end"] > fault.onset]
            if after:  # named in this step: the bank ran in it (with that window's work)
                named, seconds = after[0], took
                break
    finally:
        monitor.close()
    return {"kind": fault.kind, "component": fault.component, "size": fault.size,
            "named": None if named is None else (named["attribution"], named.get("component"),
                                                 named.get("size")),
            "seconds": seconds,
            "window_seconds": t_clean / clean * MONITOR["stride"] if clean else None}


def bench_isolation(policy: str = "", seed: int = 9, kinds: tuple[str, ...] = (),
                    print_fn=print) -> list[dict[str, Any]]:
    """Per fault kind: the attribution's seconds and a window's seconds, in one run."""
    from idt_desk_sources.gym.isolation_study import tasks_for

    from idt_desk.plugin import CLASS_OF, assets

    policy = policy or str(assets.path("policies", "halfcheetah-v5-sac-seed3.zip"))
    kinds = kinds or tuple(CLASS_OF)
    tasks: dict[str, dict[str, Any]] = {}
    for t in tasks_for(policy, 0, seed, 200, 0, 0.1, (2, 4)):
        tasks.setdefault(t["fault"]["kind"], t)
    missing = [k for k in kinds if k not in tasks]
    if missing:
        raise ValueError(f"no draw of {', '.join(missing)} in 200 (another --seed)")
    print_fn(f"policy {policy}, draws of seed {seed}, one process: the seconds of the step "
             "that names the alarm, and of one window of the loop between alarms")
    print_fn(f"{'kind':>16} {'component':>11} {'named':>28} {'attribution s':>14} "
             f"{'window s':>9} {'ratio':>7}")
    rows = []
    for kind in kinds:
        r = _one(tasks[kind])
        rows.append(r)
        named = "no alarm named" if r["named"] is None else \
            f"{r['named'][0]} {r['named'][1] or ''}".strip()
        sec, win = r["seconds"], r["window_seconds"]
        ratio = f"{sec / win:7.1f}" if sec is not None and win else "      –"
        print_fn(f"{kind:>16} {r['component'] or '–'!s:>11} {named[:28]:>28} "
                 f"{'–' if sec is None else f'{sec:.3f}':>14} "
                 f"{'–' if win is None else f'{win:.4f}':>9} {ratio}")
    secs = [r["seconds"] for r in rows if r["seconds"] is not None]
    if secs:
        print_fn(f"attribution: median {np.median(secs):.3f} s, max {np.max(secs):.3f} s "
                 f"over {len(secs)} alarms")
    return rows


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the ``idt-desk bench isolation`` options to ``parser`` (and ``func=run``)."""
    parser.add_argument("--policy", default="", help="SB3 zip (default: the shipped SAC 3)")
    parser.add_argument("--seed", type=int, default=9, help="the draws' seed (as the study's)")
    parser.add_argument("--kinds", nargs="+", default=None,
                        help="the fault kinds of idt_desk.gym.faults (default: every kind)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Run ``idt-desk bench isolation`` from parsed arguments."""
    from idt_desk.plugin import CLASS_OF, InputError, check_int

    check_int("--seed", args.seed, 0, 2**31)
    bad = [k for k in args.kinds or () if k not in CLASS_OF]
    if bad:
        raise InputError(f"--kinds {' '.join(bad)}: not a fault kind (one of "
                         f"{', '.join(CLASS_OF)})")
    try:
        bench_isolation(args.policy, args.seed, tuple(args.kinds or ()))
    except ValueError as e:
        raise InputError(str(e)) from None
    return 0
