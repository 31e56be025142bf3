"""reproduce profile's plan and its summary, from crafted trials (the rollouts are the RL
source's own sessions, tested elsewhere)."""

from __future__ import annotations

import math
from pathlib import Path

from idt_desk_sources.gym import profile_study as study


def _trial(task, alarms=(), offs=(), armed=0, check=True):
    onset = task.get("onset")
    if onset == "armed":
        onset = study.SELF_ONSET
    steps = task.get("steps") or (onset + task["after"] if "after" in task
                                  else 111_250 + task["past_armed"])
    out = {**task, "onset": onset, "steps": steps, "armed_at": armed, "alarms": list(alarms),
           "alarm_offs": list(offs), "profile_check": {"fits": check}, "window": 300,
           "stride": 50}
    if onset is not None:
        after = [i for i in alarms if i >= onset]
        out["latency_steps"] = after[0] - onset if after else None
        out["before_onset"] = [i for i in alarms if i < onset]
    return out


def test_the_plan_keeps_its_seeds_apart_and_the_summary_counts_what_it_says():
    plan = study.plan("sac3", Path("/tmp/x"))
    seeds = {g: {t["seed"] for t in ts} for g, ts in plan.items()}
    assert seeds["controls"] == seeds["self_controls"] == set(range(41_000, 41_020))
    assert seeds["profile"] == seeds["self"] == seeds["late"] == set(range(41_100, 41_120))
    assert not seeds["fit"] & (seeds["controls"] | seeds["profile"] | seeds["broken"])
    got = {g: [] for g in plan if g != "fit"}
    for j, t in enumerate(plan["controls"]):
        got["controls"].append(_trial(t, alarms=[9_000] if j == 0 else []))
    for j, t in enumerate(plan["profile"]):  # detected 50 steps in, but the last not at all
        got["profile"].append(_trial(t, alarms=[] if j == 19 else [2_050]))
    for j, t in enumerate(plan["late"]):  # one slower than the self-baseline
        got["late"].append(_trial(t, alarms=[study.SELF_ONSET + (400 if j == 0 else 50)]))
    for t in plan["self"]:
        got["self"].append(_trial(t, alarms=[study.SELF_ONSET + 100], armed=111_250))
    for t in plan["self_controls"]:
        got["self_controls"].append(_trial(t, alarms=[50_000, 120_000], armed=111_250))
    for t in plan["broken"]:
        got["broken"].append(_trial(t, alarms=[300 + 50 * 3], check=False))
    for t in plan["broken_self"]:
        got["broken_self"].append(_trial(t, alarms=[200_000], armed=111_250))
    s = study.summarize("sac3", got)
    c, p, u = s["controls"], s["perturbed"], s["unperturbed"]
    assert (c["alarmed"], c["false_alarms"]) == (1, 1)
    assert math.isclose(c["loop_hours"], 20 * 20_000 / 20 / 3600)
    assert (p["detected_before"], p["no_later_than_self"], p["late_detected"]) == (19, 19, 20)
    # Before arming a self-baseline cannot alarm: only the one after it counts.
    assert u["self"]["false_alarms"] == 20 and u["profile"]["false_alarms"] == 1
    assert s["broken"]["within_20_windows"] == 5 and s["broken"]["first_alarm_windows"][0] == 4
    assert s["broken"]["self_alarms_after_arming"] == [1, 1]
    assert math.isclose(study._p_at_least(0, 3.0), 1.0)
    assert math.isclose(study._p_at_least(1, 0.5), 1 - math.exp(-0.5))
