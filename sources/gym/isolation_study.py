"""Isolation in a user's loop: faults the monitor is told nothing of, drawn at random.

``idt-desk reproduce isolation --out DIR`` runs, per agent, ``--faults`` trials with one fault
each and ``--controls`` clean runs, each on an env seed of its own. A trial is a user's loop:
the agent acts on what :class:`~idt_desk.gym.IDTMonitor` hands it, and the fault is injected
by a :class:`~idt_desk.gym.faults.FaultWrapper` *inside* the monitor, so the monitor sees the
observation the sensors give and the action the policy commanded, never the applied one.
Two monitors watch the same loop, one over the other: one with the exact twin (a copy of the
env's model taken before the onset) and one with a twin 10 % off (masses ×1.1, friction
×0.9, ``--mismatch``), each calibrated on its own baseline.

The faults are seeded random draws (:func:`draw_fault`) of kind × component × size × onset:
every kind of :data:`idt_desk.gym.faults.KINDS` alike, the component uniform over the env's
observation variables, actuators, bodies (mass, and a force along x or z), the size from a
range per kind in the component's own scale (a variable's spread over a clean scout run, the
action's range, the model's weight), the onset uniform over ``--onset-windows`` windows after
the monitor is armed.

Each trial records the first alarm after the onset (its latency in windows), the class, the
component and the size the bank of fault hypotheses named (:mod:`idt_desk.detection.isolation`),
and the seconds its attribution took; a control records every alarm once armed. The table:
detection, latency, controls alarmed (their count and seeds), the confusion of true × named
class for each twin, and the component (true × named, per class) and the size of the
class-right sensor, actuator, force and mass faults.

The env seeds are ``--seed`` × 1,000 + the trial's index (faults) and + 500 + the control's
index (controls). ``--seed 71`` was the tuning run (what it showed chose the bank's costs
and kept an inexact twin apart); the default ``--seed 72`` was never used to choose anything.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["ARMED", "HELP", "actor", "add_arguments", "draw_fault", "run", "run_trial", "study",
           "summarize"]

#: ``idt-desk reproduce isolation``'s one-line help.
HELP = ("isolation in a user's loop: random faults the monitor is not told of, the class, "
        "component and size its alarm names, with an exact twin and one a tenth off")

#: The agents by default: the settled SAC 3, the chaotic SAC 2, and Hopper.
AGENTS = ("policies/halfcheetah-v5-sac-seed3.zip", "policies/halfcheetah-v5-sac-seed2.zip",
          "policies/other-envs/hopper-v5-sac-seed0.zip")
#: The monitors' settings: the RL default's window and stride, a short baseline (so that a
#: trial is minutes, not hours: the same baseline for the exact and the off twin).
MONITOR = {"window": 100, "stride": 50, "calibration_windows": 2, "baseline_windows": 120}
#: The step a monitor of those settings is armed at (its first window, then the calibration's
#: and the baseline's strides).
ARMED = MONITOR["window"] + (MONITOR["calibration_windows"]
                             + MONITOR["baseline_windows"]) * MONITOR["stride"]
#: Windows after the onset a faulted trial runs at most (it stops once its alarm is named).
AFTER = 30
#: The classes, in the tables' order.
CLASSES = ("sensor", "actuator", "force", "dynamics")
#: The kinds whose component the bank names (the others act on the whole model).
COMPONENT_KINDS = ("sensor_noise", "sensor_offset", "sensor_stuck", "sensor_dropout",
                   "actuator_noise", "actuator_gain", "actuator_offset", "actuator_stuck",
                   "force", "mass")
#: The kinds whose size the bank's fit is in the fault's own unit (stuck and dropout are not
#: a size the bank fits: it names the spread they cause).
SIZED_KINDS = ("sensor_noise", "sensor_offset", "actuator_noise", "actuator_gain",
               "actuator_offset", "force", "mass", "friction", "damping", "gravity")


def _uniform(rng: np.random.Generator, lo: float, hi: float, signed: bool = False) -> float:
    x = float(rng.uniform(lo, hi))
    return -x if signed and rng.random() < 0.5 else x


def draw_fault(rng: np.random.Generator, names: dict[str, tuple[str, ...]],
               spread: np.ndarray, weight: float, onset: int, seed: int) -> Any:
    """One fault of a random kind, component and size, from step ``onset``.

    ``names``: :func:`~idt_desk.gym.faults.component_names` of the env; ``spread``: each
    observation variable's spread on a clean run; ``weight``: the model's total weight (N).
    """
    from idt_desk.plugin import CLASS_OF, Fault

    kind = str(rng.choice(tuple(CLASS_OF)))
    comp: Any = None
    axis = "x"
    if kind.startswith("sensor"):
        j = int(rng.integers(len(names["sensor"])))
        comp = names["sensor"][j]
        size = {"sensor_noise": lambda: _uniform(rng, 0.05, 0.3) * spread[j],
                "sensor_offset": lambda: _uniform(rng, 0.1, 1.0, True) * spread[j],
                "sensor_stuck": lambda: 0.0,
                "sensor_dropout": lambda: _uniform(rng, 0.1, 0.5)}[kind]()
    elif kind.startswith("actuator"):
        comp = names["actuator"][int(rng.integers(len(names["actuator"])))]
        size = {"actuator_noise": lambda: _uniform(rng, 0.05, 0.3),
                "actuator_gain": lambda: _uniform(rng, 0.3, 0.8),
                "actuator_offset": lambda: _uniform(rng, 0.1, 0.5, True),
                "actuator_stuck": lambda: 0.0}[kind]()
    elif kind in ("force", "mass"):
        bodies = names["body"][1:]  # not the world
        comp = bodies[int(rng.integers(len(bodies)))]
        if kind == "force":
            axis = str(rng.choice(["x", "z"]))  # the planar models' plane
            size = _uniform(rng, 0.05, 0.3, True) * weight
        else:
            size = _uniform(rng, 1.3, 2.0) if rng.random() < 0.5 else _uniform(rng, 0.5, 0.77)
    elif kind == "friction":
        size = _uniform(rng, 0.3, 0.6)
    elif kind == "damping":
        size = _uniform(rng, 2.0, 4.0)
    else:  # gravity
        size = _uniform(rng, 1.1, 1.25) if rng.random() < 0.5 else _uniform(rng, 0.8, 0.9)
    return Fault(kind, comp, float(f"{size:.4g}"), onset=int(onset), axis=axis, seed=int(seed))


def scout(policy: str, env_id: str, seed: int, steps: int = 3_000) -> dict[str, Any]:
    """A clean run's variables' spreads, the model's weight and its component names."""
    import gymnasium as gym

    from idt_desk.plugin import component_names, route_mujoco_warnings

    route_mujoco_warnings()
    env = gym.make(env_id)
    act = actor(policy, env)
    obs, _ = env.reset(seed=seed)
    rows = []
    for _ in range(steps):
        obs, _, term, trunc, _ = env.step(act(obs))
        rows.append(obs)
        if term or trunc:
            obs, _ = env.reset()
    model = env.unwrapped.model
    weight = float(np.sum(model.body_mass) * np.linalg.norm(model.opt.gravity))
    out = {"spread": np.std(np.array(rows), axis=0), "weight": weight,
           "names": component_names(env)}
    env.close()
    return out


def actor(policy: str, env: Any) -> Callable[[np.ndarray], np.ndarray]:
    """The frozen policy ``policy`` acting deterministically on ``env``'s observations."""
    from idt_desk_sources.gym._policy import FrozenPolicy

    space = env.action_space
    p = FrozenPolicy(policy, env.observation_space.shape, space.low, space.high)
    rng = np.random.default_rng(0)
    return lambda obs: p.act(obs, rng, True)


def run_trial(task: dict[str, Any]) -> dict[str, Any]:
    """One trial: the agent's loop under ``task["fault"]`` (None: a control), two monitors.

    Returns the fault, and per twin (``exact``, ``off``) the alarms after arming (their
    window's end, class, component, size, the attribution's seconds), the step it was armed
    at, and the trial's steps.
    """
    import gymnasium as gym

    from idt_desk.plugin import Fault, FaultWrapper, IDTMonitor, MujocoTwin, route_mujoco_warnings

    route_mujoco_warnings()
    fault = None if task["fault"] is None else Fault(**task["fault"])
    base = gym.make(task["env_id"])
    env = FaultWrapper(base, *([] if fault is None else [fault]))
    twins = {"exact": MujocoTwin(env), "off": MujocoTwin(env, mismatch=task["mismatch"])}
    exact = IDTMonitor(env, twin=twins["exact"], **MONITOR)
    timer = _timer(exact)
    off = IDTMonitor(timer, twin=twins["off"], **MONITOR)
    monitors = {"exact": exact, "off": off}
    seen = {"exact": 0, "off": 0}
    cost: dict[str, list[float]] = {"exact": [], "off": []}
    act = actor(task["policy"], base)
    obs, _ = off.reset(seed=task["env_seed"])
    steps = task["steps"]
    t0 = time.perf_counter()
    for t in range(steps):
        a = act(obs)
        t1 = time.perf_counter()
        obs, _, term, trunc, _ = off.step(a)
        took = time.perf_counter() - t1
        # An alarm's attribution runs in the step that names it: that step's seconds (the
        # exact monitor's within the timer, the off one's the rest), an upper bound.
        for name, m in monitors.items():
            n = len(m.alarms)
            if n > seen[name]:
                seen[name] = n
                cost[name].append(round(timer.took if name == "exact" else took - timer.took,
                                        4))
        if term or trunc:
            obs, _ = off.reset()
        if fault is not None and t > fault.onset and t % MONITOR["stride"] == 0 and all(
                any(a["end"] > fault.onset for a in m.alarms) for m in monitors.values()):
            break  # both named: the rest of the trial tells nothing more
    seconds = time.perf_counter() - t0
    out: dict[str, Any] = {**{k: v for k, v in task.items() if k != "policy"},
                           "agent": Path(task["policy"]).stem, "steps_run": t + 1,
                           "seconds": round(seconds, 2)}
    for name, m in monitors.items():
        w = m.windows
        flags = np.asarray(w["x_IDT"], dtype=np.float64)
        armed = np.isfinite(flags)
        ends = np.asarray(w["end"], dtype=np.int64)
        out[name] = {
            "armed_at": int(ends[armed][0]) if armed.any() else None,
            "alarm_ends": [int(e) for e in ends[flags == 1.0]],
            "alarms": [{"end": int(a["end"]), "class": a["attribution"],
                        "component": a.get("component"), "size": a.get("size"),
                        "seconds": sec}
                       for a, sec in zip(m.alarms, cost[name], strict=False)]}
    off.close()
    return out


def _timer(env: Any) -> Any:
    """``env`` in a pass-through wrapper that times its step (``took``, seconds)."""
    import gymnasium as gym

    class Timer(gym.Wrapper):
        took = 0.0

        def step(self, action: Any) -> Any:
            t0 = time.perf_counter()
            out = self.env.step(action)
            self.took = time.perf_counter() - t0
            return out

    return Timer(env)


def tasks_for(policy: str, index: int, seed: int, faults: int, controls: int,
              mismatch: float, onset_windows: tuple[int, int]) -> list[dict[str, Any]]:
    """The agent's trials: ``faults`` seeded draws and ``controls`` clean runs."""
    import json as _json

    card = Path(policy).with_suffix(".json")
    env_id = (_json.loads(card.read_text()).get("env_id") if card.is_file() else None) \
        or "HalfCheetah-v5"
    sc = scout(policy, env_id, seed=seed * 1_000 + 999)
    S, armed = MONITOR["stride"], ARMED
    rng = np.random.default_rng([seed, index])
    lo, hi = onset_windows
    tasks = []
    for i in range(faults):
        onset = armed + int(rng.integers(lo, hi + 1)) * S + int(rng.integers(S))
        f = draw_fault(rng, sc["names"], sc["spread"], sc["weight"], onset, seed * 1_000 + i)
        fault = {"kind": f.kind, "component": f.component, "size": f.size, "onset": f.onset,
                 "axis": f.axis, "seed": f.seed}
        tasks.append({"policy": policy, "env_id": env_id, "trial": i,
                      "env_seed": seed * 1_000 + i, "fault": fault, "mismatch": mismatch,
                      "steps": onset + AFTER * S})
    longest = armed + (hi + AFTER) * S
    for i in range(controls):
        tasks.append({"policy": policy, "env_id": env_id, "trial": faults + i,
                      "env_seed": seed * 1_000 + 500 + i, "fault": None,
                      "mismatch": mismatch, "steps": longest})
    return tasks


def study(out: Path, policies: Sequence[str], *, seed: int, faults: int, controls: int,
          mismatch: float, onset_windows: tuple[int, int], workers: int | None,
          progress: bool = True) -> dict[str, Any]:
    """Run every agent's trials (resumable: ``out/trials`` keeps each as it ends)."""
    from idt_desk.plugin import run_tasks

    out.mkdir(parents=True, exist_ok=True)
    tasks = [t for i, p in enumerate(policies)
             for t in tasks_for(p, i, seed, faults, controls, mismatch, onset_windows)]
    results = run_tasks(run_trial, tasks, workers=workers, progress=progress,
                        desc="isolation trials", unit="trial", resume_dir=out / "trials",
                        key=lambda t: f"{Path(t['policy']).stem}-{seed}-{t['trial']}-"
                                      f"{t['mismatch']:g}")
    with open(out / "trials.jsonl", "w") as f:
        for r in results:
            f.write(json.dumps(r) + "\n")
    summary = summarize(results)
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    (out / "table.md").write_text("\n".join(report(summary)) + "\n")
    return summary


def _first_after(rec: dict[str, Any], onset: int) -> tuple[int | None, dict[str, Any] | None]:
    """The first alarm window after ``onset``, and the class named for the alarm it starts."""
    ends = [e for e in rec["alarm_ends"] if e > onset]
    named = [a for a in rec["alarms"] if a["end"] > onset]
    return (ends[0] if ends else None), (named[0] if named else None)


def summarize(results: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Detection, latency, controls alarmed and the confusion tables, per agent and twin."""
    from idt_desk.plugin import CLASS_OF

    out: dict[str, Any] = {}
    for agent in dict.fromkeys(r["agent"] for r in results):
        rows = [r for r in results if r["agent"] == agent]
        per: dict[str, Any] = {"env_id": rows[0]["env_id"]}
        for twin in ("exact", "off"):
            faulted = [r for r in rows if r["fault"] is not None]
            clean = [r for r in rows if r["fault"] is None]
            conf = {c: {n: 0 for n in (*CLASSES, "unknown", "none")} for c in CLASSES}
            kinds: dict[str, dict[str, int]] = {}
            components: dict[str, dict[str, dict[str, int]]] = {}
            latency, comp_ok, comp_n, size_ok, size_n, secs = [], 0, 0, 0, 0, []
            detected = 0
            for r in faulted:
                f, rec = r["fault"], r[twin]
                cls = CLASS_OF[f["kind"]]
                k = kinds.setdefault(f["kind"], {"trials": 0, "detected": 0, "class_right": 0})
                k["trials"] += 1
                end, named = _first_after(rec, f["onset"])
                if end is None:
                    continue
                detected += 1
                k["detected"] += 1
                # Windows after the first one to end past the onset (0: that one alarmed).
                latency.append(max(0, math.ceil((end - f["onset"]) / MONITOR["stride"]) - 1))
                got = "none" if named is None else named["class"]
                conf[cls][got if got in conf[cls] else "unknown"] += 1
                if got == cls:
                    k["class_right"] += 1
                    if f["kind"] in COMPONENT_KINDS:
                        comp_n += 1
                        comp_ok += named.get("component") == f["component"]
                        # True component × named, per class (None: the bank named them all).
                        row = components.setdefault(cls, {}).setdefault(f["component"], {})
                        said = str(named.get("component"))
                        row[said] = row.get(said, 0) + 1
                    if f["kind"] in SIZED_KINDS and named.get("size") is not None:
                        size_n += 1
                        size_ok += _size_right(f, named)
                secs += [a["seconds"] for a in rec["alarms"] if a.get("seconds") is not None]
            controls_alarmed = [r["env_seed"] for r in clean if r[twin]["alarm_ends"]]
            armed_windows = sum(len([e for e in r[twin]["alarm_ends"]]) for r in clean)
            right = sum(conf[c][c] for c in CLASSES)
            per[twin] = {
                "faulted": len(faulted), "detected": detected,
                "class_right": right, "class_right_share": right / detected if detected else None,
                "component_right": comp_ok, "component_judged": comp_n,
                "size_within_30pct": size_ok, "size_judged": size_n,
                "latency_median_windows": float(np.median(latency)) if latency else None,
                "controls": len(clean), "control_seeds": [r["env_seed"] for r in clean],
                "controls_alarmed": controls_alarmed, "control_alarm_windows": armed_windows,
                "control_armed_windows": sum(_armed_windows(r[twin], r["steps_run"])
                                             for r in clean),
                "attribution_seconds_median": float(np.median(secs)) if secs else None,
                "attribution_seconds_max": float(np.max(secs)) if secs else None,
                "confusion": conf, "kinds": kinds, "components": components}
        out[agent] = per
    return out


def _armed_windows(rec: dict[str, Any], steps: int) -> int:
    if rec["armed_at"] is None:
        return 0
    return max(0, (steps - rec["armed_at"]) // MONITOR["stride"] + 1)


def _size_right(fault: dict[str, Any], named: dict[str, Any]) -> bool:
    """The named size within 30 % of the fault's (a factor's change from 1, a mean's value)."""
    size, got = float(fault["size"]), float(named["size"])
    if fault["kind"] in ("actuator_gain", "mass", "friction", "damping", "gravity"):
        size, got = size - 1.0, got - 1.0  # the change a factor makes
    if fault["kind"] in ("sensor_noise", "actuator_noise"):
        got = abs(got)
    return abs(got - size) <= 0.3 * abs(size)


def _secs(x: float | None) -> str:
    return "–" if x is None else f"{x:.2f}"


def report(summary: dict[str, Any]) -> list[str]:
    """The summary as Markdown: a headline table, then each agent's confusion tables."""
    lines = ["| Agent | Twin | Detected | Latency (windows, median) | Class right | "
             "Component right | Size within 30 % | Controls alarmed | "
             "Attribution (s, median / max) |",
             "|---|---|---|---|---|---|---|---|---|"]
    for agent, per in summary.items():
        for twin in ("exact", "off"):
            s = per[twin]
            share = "–" if s["class_right_share"] is None else f"{s['class_right_share']:.0%}"
            lines.append(
                f"| {agent} | {twin} | {s['detected']}/{s['faulted']} | "
                f"{s['latency_median_windows']} | {s['class_right']}/{s['detected']} ({share}) | "
                f"{s['component_right']}/{s['component_judged']} | "
                f"{s['size_within_30pct']}/{s['size_judged']} | "
                f"{len(s['controls_alarmed'])}/{s['controls']} "
                f"({s['control_alarm_windows']} of {s['control_armed_windows']} windows) | "
                f"{_secs(s['attribution_seconds_median'])} / "
                f"{_secs(s['attribution_seconds_max'])} |")
    for agent, per in summary.items():
        for twin in ("exact", "off"):
            s = per[twin]
            lines += ["", f"**{agent}, {twin} twin** — true class (rows) × named (columns)", "",
                      "| | " + " | ".join((*CLASSES, "unknown", "none")) + " |",
                      "|---" * 7 + "|"]
            for c in CLASSES:
                lines.append(f"| {c} | " + " | ".join(str(s["confusion"][c][n]) for n in (
                    *CLASSES, "unknown", "none")) + " |")
            lines += ["", "| Kind | Trials | Detected | Class right |", "|---|---|---|---|"]
            for kind, k in sorted(s["kinds"].items()):
                lines.append(f"| {kind} | {k['trials']} | {k['detected']} | {k['class_right']} |")
            lines += ["", "| Class | Component right | Named another (true → named: count) |",
                      "|---|---|---|"]
            for cls, rows in s.get("components", {}).items():
                right = sum(r.get(c, 0) for c, r in rows.items())
                total = sum(sum(r.values()) for r in rows.values())
                wrong = ", ".join(f"{c} → {n}: {k}" for c, r in sorted(rows.items())
                                  for n, k in sorted(r.items()) if n != c)
                lines.append(f"| {cls} | {right}/{total} | {wrong or '–'} |")
    return lines


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the command's options to ``parser`` (and ``func=run``)."""
    from idt_desk.plugin import add_executor_arguments

    add_executor_arguments(parser, workers="trials")
    parser.add_argument("--policies", nargs="+", default=None,
                        help="SB3 zips (default: the shipped SAC 3 and SAC 2 on HalfCheetah "
                             "and the Hopper agent)")
    parser.add_argument("--faults", type=int, default=200, help="faulted trials per agent")
    parser.add_argument("--controls", type=int, default=40, help="clean runs per agent")
    parser.add_argument("--seed", type=int, default=72,
                        help="the draws' seed; env seeds are SEED×1000 + the trial's index")
    parser.add_argument("--mismatch", type=float, default=0.1,
                        help="the off twin's masses ×(1+m) and friction ×(1−m)")
    parser.add_argument("--onset-windows", type=int, nargs=2, default=(4, 20),
                        metavar=("LO", "HI"),
                        help="the onset, windows after the monitor is armed (uniform)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Run the study from parsed arguments."""
    from idt_desk.plugin import InputError, assets, check_int

    check_int("--faults", args.faults, 0, 100_000)
    check_int("--controls", args.controls, 0, 100_000)
    check_int("--seed", args.seed, 0, 2**31)
    lo, hi = args.onset_windows
    check_int("--onset-windows LO", lo, 0, 10_000)
    check_int("--onset-windows HI", hi, lo, 10_000)
    if not 0.0 <= args.mismatch < 1.0:
        raise InputError(f"--mismatch {args.mismatch}: a share in [0, 1)")
    if args.seed * 1_000 + args.faults >= args.seed * 1_000 + 500 or args.controls > 499:
        raise InputError("--faults and --controls: at most 500 and 499 (their env seeds are "
                         "SEED×1000 + index and SEED×1000 + 500 + index)")
    policies = []
    for p in args.policies or [str(assets.path(*a.split("/"))) for a in AGENTS]:
        if not Path(p).is_file():
            raise InputError(f"{p}: no such policy file")
        policies.append(p)
    summary = study(args.out, policies, seed=args.seed, faults=args.faults,
                    controls=args.controls, mismatch=args.mismatch, onset_windows=(lo, hi),
                    workers=args.workers, progress=not args.no_progress)
    for line in report(summary):
        print(line)
    return 0
