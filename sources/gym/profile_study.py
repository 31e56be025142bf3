"""``idt-desk reproduce profile``: a baseline fitted once, judged on seeds never used.

Per agent (the shipped SAC 3, settled, and SAC 2, chaotic; HalfCheetah-v5 under the RL
source's defaults: the ``cheetah`` preset, MEWMA, 1 false alarm per 10 hours of loop time):

1. **Fit.** Three clean runs (:data:`FIT_SEEDS`, :data:`FIT_STEPS` steps each) are recorded
   as the dashboard records them, and one profile is fitted on them (``idt-desk fit``,
   :func:`idt_desk.plugin.fit_profile`).
2. **Held out** (seeds from :data:`HELD_OUT`, never used to choose anything), each trial a
   live session of the RL source stepping its own env, exactly as ``idt-desk run`` runs it:

   - 20 controls with the profile, :data:`CONTROL_STEPS` steps each, unperturbed: every IDT
     alarm is a false alarm;
   - 20 perturbed runs with the profile, one of the source's eight perturbations each (in
     turn) switched on at step :data:`ONSET` and left on, :data:`PROFILE_STEPS` steps;
   - the same 20 seeds and perturbations without a profile (the session fits its own
     baseline, 2,200 windows), the perturbation switched on :data:`ONSET` steps after it is
     armed (:data:`SELF_ONSET`), :data:`SELF_TAIL` steps more: the self-baseline's latency;
   - the same 20 again with the profile, the perturbation on at :data:`SELF_ONSET` too: the
     same step and phase of the episode, so the latencies differ by the baseline alone (an
     onset at step 2,000 falls at an episode's start, the cheetah accelerating from rest);
   - the self-baseline on the controls' seeds, :data:`SELF_CONTROL_STEPS` steps once armed:
     its own false alarms, beside the profile's on every unperturbed stretch;
   - 5 runs broken from their first step (3 % observation noise from step 0) with the
     profile, and 2 without (run :data:`BROKEN_SELF_AFTER` steps past arming).

Latency is counted in steps from the onset to the end of the first window that alarmed
(the alarm's ``i``); a window is 300 steps every 50. Each trial's result is kept
(``DIR/trials/*.pkl``): a second run does only what is left.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

__all__ = ["AGENTS", "HELP", "add_arguments", "run", "trial"]

#: ``idt-desk reproduce profile``'s one-line help.
HELP = ("a baseline profile fitted on three clean runs, judged on 40 held-out seeds per "
        "agent: controls' false alarms, detection before the self-baseline is armed, "
        "latency against the self-baseline's, a loop broken from its first step")

#: The agents: their shipped policies.
AGENTS = {"sac3": "halfcheetah-v5-sac-seed3.zip", "sac2": "halfcheetah-v5-sac-seed2.zip"}
#: The fitting runs' env seeds.
FIT_SEEDS = (40_000, 40_001, 40_002)
#: Steps of each fitting run.
FIT_STEPS = 40_000
#: The held-out seeds: controls from here, perturbed runs from +100, broken ones from +200.
HELD_OUT = 41_000
#: Steps of a control with the profile (1,000 s of loop time at 20 steps a second).
CONTROL_STEPS = 20_000
#: The perturbation's onset with a profile (and after arming, without one).
ONSET = 2_000
#: Steps of a perturbed run with the profile.
PROFILE_STEPS = 5_000
#: Steps the self-baseline runs on after the onset.
SELF_TAIL = 3_000
#: The self-baseline's onset: :data:`ONSET` steps after it is armed (the ``cheetah`` preset's
#: 20 calibration windows and 2,200 baseline windows end at step 111,250).
SELF_ONSET = 113_250
#: Steps a self-baseline control runs past its arming (its false alarms counted there).
SELF_CONTROL_STEPS = 60_000
#: Steps a broken loop without a profile runs past its arming.
BROKEN_SELF_AFTER = 20_000
#: The broken loop's perturbation, on from step 0.
BROKEN = "obs_noise_3"


def _policy(agent: str) -> str:
    from idt_desk.plugin import assets

    return str(assets.path("policies", AGENTS[agent]))


def trial(task: dict[str, Any]) -> dict[str, Any]:
    """One live session of the RL source (module level: run in a worker process).

    ``task``: ``agent``, ``seed``, ``kind`` (``control``, a perturbation's name, or
    ``fit``), ``onset`` (None for a control; ``"armed"``: :data:`ONSET` steps after the
    baseline is armed), ``steps`` (or ``after``: steps past the onset, or ``past_armed``:
    steps past the arming), ``profile`` (a path, or None: the session fits its own),
    ``record`` (a folder, or None).
    """
    import torch
    from idt_desk_sources.gym import GymSource

    from idt_desk.plugin import Profile, Session, SessionConfig, run_headless

    torch.set_num_threads(1)  # one process per core
    policy = _policy(task["agent"])
    src = GymSource(policy=policy)
    profile = None if task.get("profile") is None else Profile.read(task["profile"]).setting()
    session = Session(SessionConfig(source="gym", settings={"policy": policy}, speed=None,
                                    seed=int(task["seed"]), profile=profile),
                      source=src, record=task.get("record"))
    armed = session.pipeline.calibration_transitions + (
        0 if profile is not None else session.monitor.n_baseline * session.preset.stride)
    onset = task.get("onset")
    if onset == "armed":
        onset = armed + ONSET
    steps = (int(task["steps"]) if "steps" in task else int(onset) + int(task["after"])
             if "after" in task else armed + int(task["past_armed"]))
    if onset is not None:
        decl = next(p for p in src.perturbations if p.name == task["kind"])
        session.schedule(int(onset), "perturb", name=task["kind"],
                         params={q.name: q.default for q in decl.params})
    try:
        run_headless(session, steps=steps)
        events = session.events_since(0)
        check = session.profile_check
        window, stride = session.preset.window, session.preset.stride
    finally:
        session.close()
    on = [int(e["i"]) for e in events if e["kind"] == "alarm_on" and e.get("metric") == "IDT"]
    off = [int(e["i"]) for e in events if e["kind"] == "alarm_off" and e.get("metric") == "IDT"]
    base = [int(e["i"]) for e in events if e["kind"] == "baseline"]
    out = {**{k: v for k, v in task.items() if k != "record"}, "onset": onset,
           "steps": steps, "armed_at": base[0] if base else None, "alarms": on,
           "alarm_offs": off, "profile_check": check, "window": window, "stride": stride}
    if onset is not None:
        after = [i for i in on if i >= int(onset)]
        out["latency_steps"] = after[0] - int(onset) if after else None
        out["before_onset"] = [i for i in on if i < int(onset)]
        # An alarm raised before the onset and still on at it (a false alarm held on).
        out["on_at_onset"] = bool(out["before_onset"]) and not any(
            out["before_onset"][-1] < i <= int(onset) for i in off)
    return out


def plan(agent: str, out: Path) -> dict[str, list[dict[str, Any]]]:
    """The trials of one agent: the fitting runs, then the held-out ones (by group)."""
    profile = str(out / f"profile-{agent}.json")
    names = _perturbations()
    perturbed = [(HELD_OUT + 100 + j, names[j % len(names)]) for j in range(20)]
    return {
        "fit": [{"agent": agent, "seed": s, "kind": "fit", "steps": FIT_STEPS,
                 "record": str(out / "runs" / f"{agent}-fit-{s}")} for s in FIT_SEEDS],
        "controls": [{"agent": agent, "seed": HELD_OUT + j, "kind": "control",
                      "steps": CONTROL_STEPS, "profile": profile} for j in range(20)],
        "profile": [{"agent": agent, "seed": s, "kind": k, "onset": ONSET,
                     "steps": PROFILE_STEPS, "profile": profile} for s, k in perturbed],
        "self": [{"agent": agent, "seed": s, "kind": k, "onset": "armed", "after": SELF_TAIL}
                 for s, k in perturbed],
        # The profile at the self-baseline's onset: the same step, the same phase of the
        # episode, so the two latencies differ by the baseline alone.
        "late": [{"agent": agent, "seed": s, "kind": k, "onset": SELF_ONSET, "after": SELF_TAIL,
                  "profile": profile} for s, k in perturbed],
        # The self-baseline's own false alarms on the controls' seeds, once armed.
        "self_controls": [{"agent": agent, "seed": HELD_OUT + j, "kind": "control",
                           "past_armed": SELF_CONTROL_STEPS} for j in range(20)],
        "broken": [{"agent": agent, "seed": HELD_OUT + 200 + j, "kind": BROKEN, "onset": 0,
                    "steps": PROFILE_STEPS, "profile": profile} for j in range(5)],
        "broken_self": [{"agent": agent, "seed": HELD_OUT + 200 + j, "kind": BROKEN,
                         "onset": 0, "past_armed": BROKEN_SELF_AFTER} for j in range(2)],
    }


def _perturbations() -> list[str]:
    from idt_desk_sources.gym import GymSource

    return [p.name for p in GymSource.perturbations]


def _key(task: dict[str, Any]) -> str:
    parts = [task["agent"], task["kind"], str(task["seed"]),
             "profile" if task.get("profile") else "self", str(task.get("onset"))]
    return "-".join(parts)


def _weight(task: dict[str, Any]) -> int:
    if "steps" in task:
        return int(task["steps"])
    return 111_250 + int(task.get("after", task.get("past_armed", 0))) + (
        2_000 if "after" in task else 0)


def summarize(agent: str, got: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """One agent's figures: controls, detection, latency against the self-baseline, broken."""
    from idt_desk_sources.gym import GymSource

    rate = 20.0
    targets = {p.name: p.target for p in GymSource.perturbations}
    controls = got["controls"]
    hours = sum(r["steps"] for r in controls) / rate / 3600
    n_false = sum(len(r["alarms"]) for r in controls)
    budget = hours / 10.0  # 1 false alarm per 10 hours of loop time
    p = _p_at_least(n_false, budget)
    # Every unperturbed stretch judged: with the profile, the controls and the perturbed
    # runs' steps before their onsets; without, the self-baseline's once armed.
    prof_h = hours + sum(r["onset"] for r in (*got["profile"], *got["late"])) / rate / 3600
    prof_n = n_false + sum(len(r["before_onset"]) for r in (*got["profile"], *got["late"]))
    own = got.get("self_controls", [])
    own_h = sum(r["steps"] - r["armed_at"] for r in own) / rate / 3600
    own_n = sum(len([i for i in r["alarms"] if i >= r["armed_at"]]) for r in own)
    prof = got["profile"]
    selfs = {(r["seed"], r["kind"]): r for r in got["self"]}
    lates = {(r["seed"], r["kind"]): r for r in got["late"]}
    rows = []
    for r in prof:
        s = selfs[(r["seed"], r["kind"])]
        late = lates[(r["seed"], r["kind"])]
        rows.append({"seed": r["seed"], "kind": r["kind"], "class": targets[r["kind"]],
                     "late_latency": late["latency_steps"],
                     "late_false_before_onset": len(late["before_onset"]),
                     "profile_latency": r["latency_steps"],
                     "alarm_step": None if r["latency_steps"] is None
                     else r["onset"] + r["latency_steps"],
                     "false_before_onset": len(r["before_onset"]),
                     "self_latency": s["latency_steps"], "self_armed_at": s["armed_at"],
                     "self_false_before_onset": len([i for i in s["before_onset"]
                                                     if i >= (s["armed_at"] or 0)])})
    detected = [x for x in rows if x["profile_latency"] is not None]
    early = [x for x in detected if x["alarm_step"] < PROFILE_STEPS]
    no_later = [x for x in rows if x["late_latency"] is not None and (
        x["self_latency"] is None or x["late_latency"] <= x["self_latency"])]
    early_no_later = [x for x in rows if x["profile_latency"] is not None and (
        x["self_latency"] is None or x["profile_latency"] <= x["self_latency"])]
    stride = prof[0]["stride"] if prof else 50
    broken = got["broken"]
    window, first_end = (broken[0]["window"], broken[0]["window"]) if broken else (300, 300)
    within20 = [b for b in broken if b["alarms"] and
                (b["alarms"][0] - first_end) // stride + 1 <= 20]
    bself = got["broken_self"]
    return {
        "agent": agent, "policy": AGENTS[agent],
        "unperturbed": {"profile": {"loop_hours": prof_h, "false_alarms": prof_n,
                                    "per_10h": 10 * prof_n / prof_h if prof_h else None,
                                    "p_at_least": _p_at_least(prof_n, prof_h / 10)},
                        "self": {"runs": len(own), "loop_hours": own_h, "false_alarms": own_n,
                                 "alarmed": sum(any(i >= r["armed_at"] for i in r["alarms"])
                                                for r in own),
                                 "per_10h": 10 * own_n / own_h if own_h else None,
                                 "p_at_least": _p_at_least(own_n, own_h / 10)}},
        "controls": {"runs": len(controls), "alarmed": sum(bool(r["alarms"]) for r in controls),
                     "false_alarms": n_false, "loop_hours": hours,
                     "budget_expected": budget, "p_at_least": p,
                     "seeds": [r["seed"] for r in controls],
                     "profile_check_fits": sum(bool((r["profile_check"] or {}).get("fits"))
                                               for r in controls)},
        "perturbed": {"runs": len(rows), "detected": len(detected),
                      "before_step": PROFILE_STEPS, "detected_before": len(early),
                      "no_later_than_self": len(no_later),
                      "early_no_later_than_self": len(early_no_later),
                      "late_detected": sum(x["late_latency"] is not None for x in rows),
                      "late_false_before_onset": sum(x["late_false_before_onset"]
                                                     for x in rows),
                      "self_detected": sum(x["self_latency"] is not None for x in rows),
                      "false_before_onset": sum(x["false_before_onset"] for x in rows),
                      "rows": rows},
        "broken": {"runs": len(broken), "within_20_windows": len(within20),
                   "first_alarm_windows": [None if not b["alarms"] else
                                           (b["alarms"][0] - first_end) // stride + 1
                                           for b in broken],
                   "profile_check": [(b["profile_check"] or {}).get("fits") for b in broken],
                   "self_runs": len(bself),
                   "self_alarms_after_arming": [
                       len([i for i in b["alarms"] if i >= (b["armed_at"] or 0)])
                       for b in bself],
                   "window": window},
    }


def _p_at_least(n: int, expected: float) -> float:
    """P(at least ``n`` false alarms) for a Poisson count of mean ``expected`` (the budget's)."""
    return 1.0 - sum(math.exp(-expected) * expected ** k / math.factorial(k) for k in range(n))


def report(summary: dict[str, Any]) -> str:
    """The study's tables in Markdown."""
    lines = ["| agent | controls alarmed (false alarms, loop hours, budget's expectation) | "
             "onset at step 2,000: detected before step 5,000 | onset at the self-baseline's "
             "(113,250): detected, no later than the self-baseline | self-baseline detected "
             "| broken from step 0: alarm in its first 20 windows | without a profile: "
             "alarms after arming |", "|---|---|---|---|---|---|---|"]
    for s in summary["agents"].values():
        c, p, b = s["controls"], s["perturbed"], s["broken"]
        lines.append(
            f"| {s['agent']} | {c['alarmed']}/{c['runs']} ({c['false_alarms']}, "
            f"{c['loop_hours']:.1f} h, {c['budget_expected']:.2f}; P≥ = {c['p_at_least']:.2f}) "
            f"| {p['detected_before']}/{p['runs']} | {p['late_detected']}/{p['runs']}, "
            f"{p['no_later_than_self']}/{p['runs']} | "
            f"{p['self_detected']}/{p['runs']} | {b['within_20_windows']}/{b['runs']} | "
            f"{', '.join(str(x) for x in b['self_alarms_after_arming'])} |")
    lines += ["", "false alarms on every unperturbed stretch judged (the budget: 1 per 10 h):"]
    for s in summary["agents"].values():
        u = s["unperturbed"]
        lines.append(
            f"- {s['agent']}: with the profile {u['profile']['false_alarms']} in "
            f"{u['profile']['loop_hours']:.1f} h ({u['profile']['per_10h']:.2f} per 10 h, "
            f"P≥ = {u['profile']['p_at_least']:.3f}); the self-baseline once armed "
            f"{u['self']['false_alarms']} in {u['self']['loop_hours']:.1f} h of "
            f"{u['self']['runs']} controls ({(u['self']['per_10h'] or 0):.2f} per 10 h, "
            f"P≥ = {u['self']['p_at_least']:.3f})")
    lines += ["", "latency in steps from the onset (profile at 2,000 / profile at 113,250 / "
              "self-baseline at 113,250):"]
    for s in summary["agents"].values():
        lines.append(f"- {s['agent']}: " + "; ".join(
            f"{r['kind']} {r['profile_latency']}/{r['late_latency']}/{r['self_latency']}"
            for r in s["perturbed"]["rows"]))
    return "\n".join(lines)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the command's options to ``parser`` (and ``func=run``)."""
    from idt_desk.plugin import add_executor_arguments

    parser.add_argument("--agents", default="sac3,sac2",
                        help=f"comma-separated, of {', '.join(AGENTS)} (default both)")
    add_executor_arguments(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Run the study from parsed arguments."""
    from idt_desk.plugin import InputError, fit_profile, run_tasks

    agents = [a.strip() for a in args.agents.split(",") if a.strip()]
    bad = [a for a in agents if a not in AGENTS]
    if bad or not agents:
        raise InputError(f"--agents: unknown {', '.join(bad) or 'nothing'}; known: "
                         f"{', '.join(AGENTS)}")
    out = Path(args.out)
    (out / "runs").mkdir(parents=True, exist_ok=True)
    plans = {a: plan(a, out) for a in agents}
    workers = getattr(args, "workers", None)
    common = {"workers": workers, "resume_dir": out / "trials", "key": _key,
              "weight": _weight, "unit": "step", "progress": not getattr(args, "no_progress",
                                                                        False)}
    fits = [t for a in agents for t in plans[a]["fit"]]
    todo_fit = [t for t in fits if not (Path(t["record"]) / "config.json").exists()]
    if todo_fit:
        run_tasks(trial, todo_fit, desc="fitting runs", **common)
    for a in agents:
        path = out / f"profile-{a}.json"
        if not path.exists():
            fit_profile([t["record"] for t in plans[a]["fit"]], path, progress=print)
    groups = ("controls", "profile", "self", "late", "broken", "broken_self", "self_controls")
    tasks = [t for a in agents for g in groups for t in plans[a][g]]
    results = iter(run_tasks(trial, tasks, desc="held-out trials", **common))
    got = {a: {g: [next(results) for _ in plans[a][g]] for g in groups} for a in agents}
    summary = {"fit_seeds": FIT_SEEDS, "fit_steps": FIT_STEPS, "held_out": HELD_OUT,
               "agents": {a: summarize(a, got[a]) for a in agents}}
    (out / "summary.json").write_text(json.dumps(summary, indent=1, default=float))
    print(report(summary))
    return 0
