"""What naming an alarm costs: the bank of fault hypotheses at an alarm, against a window's work.

``idt-desk bench isolation``: the isolation study's loop (:mod:`.isolation_study`: the agent
acting on what :class:`~idt_desk.gym.IDTMonitor` hands it, a fault injected inside it, the
study's monitor settings, the exact twin), one trial per fault kind, drawn as the study draws
them. At the alarm that names the fault,
:func:`idt_desk.detection.isolation.isolate_window` is timed on the window's rows (best of
``--repeats`` calls on the same rows: the bank is a function of them); beside it, in the same
run, the seconds one window of the monitored loop takes between alarms (the policy, the env,
the monitor and its twin over a stride of steps, before the onset). The ratio says how many
windows of the loop an alarm's naming costs; the seconds are on one core (one process).
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


def _one(task: dict[str, Any], repeats: int) -> dict[str, Any]:
    """One trial to its first named alarm after the onset: the attribution's best seconds."""
    import gymnasium as gym

    from idt_desk.detection import isolation
    from idt_desk.plugin import Fault, FaultWrapper, IDTMonitor, MujocoTwin, route_mujoco_warnings
    from idt_desk_sources.gym.isolation_study import MONITOR, _actor

    route_mujoco_warnings()
    fault = Fault(**task["fault"])
    base = gym.make(task["env_id"])
    env = FaultWrapper(base, fault)
    monitor = IDTMonitor(env, twin=MujocoTwin(env), **MONITOR)
    act = _actor(task["policy"], base)
    timed: list[float] = []
    original = isolation.isolate_window

    def timing(stage: Any, row: int) -> Any:
        best, got = float("inf"), None
        for _ in range(repeats):
            t0 = time.perf_counter()
            got = original(stage, row)
            best = min(best, time.perf_counter() - t0)
        timed.append(best)
        return got

    isolation.isolate_window = timing
    try:
        obs, _ = monitor.reset(seed=task["env_seed"])
        armed = MONITOR["window"] + (MONITOR["calibration_windows"]
                                     + MONITOR["baseline_windows"]) * MONITOR["stride"]
        clean, t_clean = 0, 0.0
        for t in range(task["steps"]):
            t0 = time.perf_counter()
            obs, _, term, trunc, _ = monitor.step(act(obs))
            if armed <= t < fault.onset:  # the armed loop between alarms
                clean += 1
                t_clean += time.perf_counter() - t0
            if term or trunc:
                obs, _ = monitor.reset()
            named = [a for a in monitor.alarms if a["end"] > fault.onset]
            if named:
                break
    finally:
        isolation.isolate_window = original
        monitor.close()
    a = named[0] if named else None
    return {"kind": fault.kind, "component": fault.component, "size": fault.size,
            "named": None if a is None else (a["attribution"], a.get("component"),
                                             a.get("size")),
            "seconds": timed[-1] if a is not None and timed else None,
            "window_seconds": t_clean / clean * MONITOR["stride"] if clean else None}


def bench_isolation(policy: str = "", seed: int = 9, kinds: tuple[str, ...] = (),
                    repeats: int = 3, print_fn=print) -> list[dict[str, Any]]:
    """Per fault kind: the attribution's seconds and a window's seconds, in one run."""
    from idt_desk.plugin import CLASS_OF, assets
    from idt_desk_sources.gym.isolation_study import tasks_for

    policy = policy or str(assets.path("policies", "halfcheetah-v5-sac-seed3.zip"))
    kinds = kinds or tuple(CLASS_OF)
    tasks: dict[str, dict[str, Any]] = {}
    for t in tasks_for(policy, 0, seed, 200, 0, 0.1, (2, 4)):
        tasks.setdefault(t["fault"]["kind"], t)
    missing = [k for k in kinds if k not in tasks]
    if missing:
        raise ValueError(f"no draw of {', '.join(missing)} in 200 (another --seed)")
    print_fn(f"policy {policy}, draws of seed {seed}, best of {repeats} per attribution, "
             "one process")
    print_fn(f"{'kind':>16} {'component':>11} {'named':>28} {'attribution s':>14} "
             f"{'window s':>9} {'ratio':>7}")
    rows = []
    for kind in kinds:
        r = _one(tasks[kind], repeats)
        rows.append(r)
        named = "no alarm named" if r["named"] is None else \
            f"{r['named'][0]} {r['named'][1] or ''}".strip()
        sec, win = r["seconds"], r["window_seconds"]
        ratio = f"{sec / win:7.1f}" if sec is not None and win else "      –"
        print_fn(f"{kind:>16} {str(r['component'] or '–'):>11} {named[:28]:>28} "
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
    parser.add_argument("--repeats", type=int, default=3,
                        help="calls per attribution on the same rows (best kept)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Run ``idt-desk bench isolation`` from parsed arguments."""
    from idt_desk.plugin import CLASS_OF, InputError, check_int

    check_int("--seed", args.seed, 0, 2**31)
    check_int("--repeats", args.repeats, 1, 100)
    bad = [k for k in args.kinds or () if k not in CLASS_OF]
    if bad:
        raise InputError(f"--kinds {' '.join(bad)}: not a fault kind (one of "
                         f"{', '.join(CLASS_OF)})")
    try:
        bench_isolation(args.policy, args.seed, tuple(args.kinds or ()), args.repeats)
    except ValueError as e:
        raise InputError(str(e)) from None
    return 0
