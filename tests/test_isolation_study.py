"""``idt-desk reproduce isolation``: random faults in a user's loop, judged by the alarm's bank."""

from __future__ import annotations

import json

import numpy as np
import pytest
from idt_desk_sources.gym._source import POLICY_DIR
from idt_desk_sources.gym.isolation_study import (
    AFTER,
    MONITOR,
    draw_fault,
    run_trial,
    summarize,
    tasks_for,
)

from idt_desk.cli import main
from idt_desk.gym.faults import CLASS_OF, KINDS

SETTLED = str(POLICY_DIR / "halfcheetah-v5-sac-seed3.zip")
NAMES = {"sensor": ("rootz", "rooty", "bthigh"), "actuator": ("bthigh", "fshin"),
         "body": ("world", "torso", "bfoot"), "joint": ("rootx",)}


def test_the_draws_cover_every_kind_in_the_components_own_scale():
    rng = np.random.default_rng(3)
    spread = np.array([0.1, 0.2, 1.0])
    faults = [draw_fault(rng, NAMES, spread, 140.0, 7_000, i) for i in range(600)]
    assert {f.kind for f in faults} == set(KINDS)
    for f in faults:
        if f.kind == "sensor_offset":
            j = NAMES["sensor"].index(f.component)
            assert 0.1 * spread[j] <= abs(f.size) <= 1.0 * spread[j] * 1.001
        elif f.kind == "force":
            assert f.component in ("torso", "bfoot") and f.axis in ("x", "z")
            assert 7.0 * 0.999 <= abs(f.size) <= 42.0 * 1.001
        elif f.kind == "mass":
            assert 0.5 <= f.size <= 0.77 or 1.3 <= f.size <= 2.0
        elif f.kind == "gravity":
            assert f.component is None
    # Seeded: the same draws again.
    again = np.random.default_rng(3)
    assert faults == [draw_fault(again, NAMES, spread, 140.0, 7_000, i) for i in range(600)]


def _trial(kind, component, onset, alarms, ends, size=1.0, seconds=0.1):
    rec = {"armed_at": 6_200, "alarm_ends": ends,
           "alarms": [{"end": e, "class": c, "component": comp, "size": sz, "seconds": seconds}
                      for e, c, comp, sz in alarms]}
    fault = None if kind is None else {"kind": kind, "component": component, "size": size,
                                       "onset": onset, "axis": "x", "seed": 0}
    return {"agent": "a", "env_id": "E", "env_seed": onset, "fault": fault,
            "steps_run": 8_000, "exact": rec, "off": rec}


def test_the_summary_counts_what_each_alarm_named_against_the_fault():
    results = [
        # sensor offset named right, component and size right, 1 window late
        _trial("sensor_offset", "rootz", 7_000, [(7_100, "sensor", "rootz", 1.2)],
               [6_500, 7_100], size=1.0),
        # an alarm before the onset only: not a detection
        _trial("actuator_gain", "fshin", 7_000, [(6_500, "actuator", "fshin", 0.5)], [6_500]),
        # mass named force: a class wrong
        _trial("mass", "torso", 7_000, [(7_050, "force", "torso", 3.0)], [7_050]),
        # gravity named right (no component judged), size ×1.2 vs ×1.1: off by 100 %
        _trial("gravity", None, 7_000, [(7_050, "dynamics", None, 1.2)], [7_050], size=1.1),
        # detected but never named
        _trial("force", "bfoot", 7_000, [], [7_300]),
        # two controls, one alarmed twice
        _trial(None, None, 0, [], []), _trial(None, None, 1, [], [7_000, 7_050])]
    s = summarize(results)["a"]["exact"]
    assert (s["faulted"], s["detected"], s["class_right"]) == (5, 4, 2)
    assert s["confusion"]["dynamics"] == {"sensor": 0, "actuator": 0, "force": 1,
                                          "dynamics": 1, "unknown": 0, "none": 0}
    assert s["confusion"]["force"]["none"] == 1
    assert (s["component_right"], s["component_judged"]) == (1, 1)
    assert s["components"] == {"sensor": {"rootz": {"rootz": 1}}}
    assert (s["size_within_30pct"], s["size_judged"]) == (1, 2)
    assert s["latency_median_windows"] == 0.5  # 1, 0, 0, 5
    assert s["controls_alarmed"] == [1] and s["control_alarm_windows"] == 2
    assert s["control_armed_windows"] == 2 * ((8_000 - 6_200) // 50 + 1)


def test_a_trial_is_a_users_loop_the_monitors_see_the_commanded_action():
    tasks = tasks_for(SETTLED, 0, 5, 2, 1, 0.1, (1, 2))
    faulted = tasks[0]
    assert faulted["fault"]["kind"] in CLASS_OF and faulted["env_seed"] == 5_000
    assert tasks[2]["fault"] is None and tasks[2]["env_seed"] == 5_500
    armed = MONITOR["window"] + 122 * MONITOR["stride"]
    assert armed + 50 <= faulted["fault"]["onset"] < armed + 150
    assert faulted["steps"] == faulted["fault"]["onset"] + AFTER * MONITOR["stride"]
    # A large offset on a joint's reading: named, on its component, in both twins.
    task = {**faulted, "fault": {**faulted["fault"], "kind": "sensor_offset",
                                 "component": "bthigh", "size": 0.3}}
    got = run_trial(task)
    for twin in ("exact", "off"):
        rec = got[twin]
        assert rec["armed_at"] is not None and rec["armed_at"] <= armed
        after = [a for a in rec["alarms"] if a["end"] > task["fault"]["onset"]]
        assert after and after[0]["class"] == "sensor", rec
        assert after[0]["component"] == "bthigh" and abs(after[0]["size"] - 0.3) < 0.09
        assert 0 < after[0]["seconds"] < 5
    # It stopped once both had named it.
    assert got["steps_run"] < task["steps"]


def test_the_command_writes_its_tables_and_resumes(tmp_path, capsys):
    args = ["reproduce", "isolation", "--out", str(tmp_path), "--policies", SETTLED,
            "--faults", "1", "--controls", "1", "--seed", "9", "--onset-windows", "1", "1",
            "--workers", "0", "--no-progress"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "| halfcheetah-v5-sac-seed3 | exact | " in out and "true class (rows)" in out
    rows = [json.loads(x) for x in (tmp_path / "trials.jsonl").read_text().splitlines()]
    assert [r["fault"] is None for r in rows] == [False, True]
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["halfcheetah-v5-sac-seed3"]["exact"]["controls"] == 1
    saved = sorted(p.name for p in (tmp_path / "trials").iterdir())
    assert len(saved) == 2
    # Again: nothing rerun, the same table.
    assert main(args) == 0 and capsys.readouterr().out == out


@pytest.mark.parametrize(("flag", "value", "said"), [
    ("--faults", "501", "at most 500"), ("--mismatch", "1.5", "a share in [0, 1)"),
    ("--policies", "nope.zip", "nope.zip: no such policy file")])
def test_the_command_refuses_what_it_cannot_run(tmp_path, capsys, flag, value, said):
    code = main(["reproduce", "isolation", "--out", str(tmp_path), flag, value,
                 *(["--policies", SETTLED] if flag != "--policies" else [])])
    assert code != 0 and said in capsys.readouterr().err
    assert not (tmp_path / "trials").exists()


def test_bench_isolation_times_the_naming_of_an_alarm_beside_a_window(capsys):
    """``idt-desk bench isolation``'s smoke test: the alarm is named (a reading's offset: a
    sensor) and both seconds are measured in the run; no figure is asserted."""
    assert main(["bench", "isolation", "--policy", SETTLED, "--kinds", "sensor_offset"]) == 0
    out = capsys.readouterr().out
    row = next(x for x in out.splitlines() if x.strip().startswith("sensor_offset"))
    *_, sec, win, ratio = row.split()
    assert float(sec) > 0 and float(win) > 0 and float(ratio) > 0
    assert " sensor " in row and "attribution: median" in out
    # A bad setting is one line, not a traceback.
    assert main(["bench", "isolation", "--policy", SETTLED, "--seed", "-1"]) == 2
    assert "--seed" in capsys.readouterr().err
    assert main(["bench", "isolation", "--policy", SETTLED, "--kinds", "sensor_wobble"]) == 2
    assert "not a fault kind" in capsys.readouterr().err
