"""The alarm panel shows a recording's names as text, never as markup."""

from __future__ import annotations

import numpy as np

import idt_desk


def test_a_perturbation_name_is_shown_as_text_not_html(qtbot, tmp_path):
    from idt_desk_widgets.alarms import AlarmPanel

    x = np.cumsum(np.random.default_rng(0).normal(size=(801, 1)), axis=0)
    with idt_desk.Recorder(tmp_path / "r", ["x"], window=20, stride=5, calibration_windows=2,
                           baseline_windows=5, detector="paper") as rec:
        rec.add(x[:400], None, x[1:401])
        rec.perturb("<b>wind</b><img src=x>")
        rec.add(x[400:-1], None, x[401:])
        rec.flush()
        snap = rec.snapshot()
    panel = AlarmPanel()
    qtbot.addWidget(panel)
    panel.update_snapshot(snap)
    text = panel.latency.text()
    assert "&lt;b&gt;wind&lt;/b&gt;&lt;img src=x&gt;" in text and "<b>wind" not in text


def test_the_verdict_says_stopping_until_the_last_windows_are_scored(qtbot, tmp_path):
    """A stopped loop whose worker still scores its last windows is not "stopped" yet."""
    import dataclasses

    from idt_desk_widgets.alarms import AlarmPanel

    x = np.cumsum(np.random.default_rng(1).normal(size=(801, 1)), axis=0)
    with idt_desk.Recorder(tmp_path / "r", ["x"], window=20, stride=5, calibration_windows=2,
                           baseline_windows=5, detector="paper") as rec:
        rec.add(x[:-1], None, x[1:])
        rec.flush()
        snap = dataclasses.replace(rec.snapshot(), state="stopped")
    panel = AlarmPanel()
    qtbot.addWidget(panel)
    panel.update_snapshot(snap, stopping=True)
    assert "stopping: scoring the last windows" in panel.idt.text()
    assert "session stopped" not in panel.idt.text()
    panel.update_snapshot(snap)
    assert "session stopped" in panel.idt.text() and "stopping" not in panel.idt.text()


def test_the_event_log_says_what_a_range_recheck_found():
    from idt_desk_widgets.events import describe_event

    shift = {m: {"calibrated": 0.1, "widened": 0.1} for m in ("P", "H_f", "H_b", "dH")}
    shift["P"] = {"calibrated": -3.6, "widened": -3.8}
    ev = {"kind": "symbols_recheck", "recheck": {"verdict": "shift", "shifted": ["P"],
                                                 "shift": shift, "k": 3.0}}
    assert describe_event(ev) == ("range re-checked",
                                  "the shift holds with wider bins: P -3.8 sd")
    ev = {"kind": "symbols_out_of_range", "fraction": 0.2,
          "recheck": {"verdict": "artefact", "shifted": [], "shift": shift, "k": 3.0}}
    assert describe_event(ev)[1] == ("20 % of values clamped; no shift with wider bins: an "
                                     "edge-bin artefact")
    ev.pop("recheck")  # raised before there was a baseline: nothing re-checked
    assert describe_event(ev)[1] == "20 % of values clamped"


def test_a_preset_with_a_caveat_says_it_beside_its_alarm(qtbot, tmp_path):
    """The live cheetah's alarm went over its budget on held-out controls: the panel says so
    under that preset, and says nothing of the kind under the others."""
    import dataclasses

    from idt_desk_widgets.alarms import AlarmPanel

    from idt_desk.metrics.presets import PRESETS

    x = np.cumsum(np.random.default_rng(2).normal(size=(801, 1)), axis=0)
    with idt_desk.Recorder(tmp_path / "r", ["x"], window=20, stride=5, calibration_windows=2,
                           baseline_windows=5, detector="paper") as rec:
        rec.add(x[:-1], None, x[1:])
        rec.flush()
        snap = rec.snapshot()
    panel = AlarmPanel()
    qtbot.addWidget(panel)
    panel.update_snapshot(snap)
    assert "Caveat" not in panel.calibration.text()
    live = dataclasses.asdict(PRESETS["cheetah-live"])
    panel.update_snapshot(dataclasses.replace(snap, preset=live))
    assert "<b>Caveat</b> (cheetah-live): its alarm went off more often than its budget" \
        in panel.calibration.text()
    assert not any(p.caveat for name, p in PRESETS.items() if name != "cheetah-live")


def _pendulum(schedule: list[tuple[int, str, dict | None]], limit: int = 60000):
    from idt_desk.live.session import Session, SessionConfig

    s = Session(SessionConfig(source="pendulum", speed=None, seed=7, baseline_windows=200))
    for at, name, params in schedule:
        s.schedule(at, "perturb", name=name, params=params)
    s.limit = limit
    s.start()
    assert s.wait(300)
    s.stop()
    return s


def test_a_change_during_an_alarm_is_judged_named_and_said_so(qtbot):
    """Sensor noise switched on while gravity's alarm was on read "not detected … (the alarm
    stayed on from an earlier change)", with no class and no word that it would be judged."""
    from idt_desk_widgets.alarms import AlarmPanel

    s = _pendulum([(30000, "gravity", {"factor": 1.3}), (34000, "sensor_noise", {})])
    events = s.events_since(0)
    alarm_on = [e for e in events if e["kind"] == "alarm_on" and e.get("metric") == "IDT"]
    assert alarm_on[0]["i"] < 34000 and not [e for e in events if e["kind"] == "alarm_off"]
    # Named at the first window that holds only what followed it (W 300: from 34,000 on).
    named, = [e for e in events if e["kind"] == "attributed" and e.get("during_alarm")]
    assert named["onset_i"] == 34000 and named["name"] == "sensor_noise"
    assert named["attribution"] == "sensor" and 34300 <= named["i"] <= 34300 + 75
    assert named["alarm_i"] == alarm_on[0]["i"]
    verdict, = [e for e in events if e["kind"] == "not_detected"]
    assert verdict["during_alarm"] and verdict["attribution"] == "sensor"
    panel = AlarmPanel()
    qtbot.addWidget(panel)
    panel.update_snapshot(s.snapshot())
    text = panel.latency.text()
    assert "a second change during an alarm" in text and "What changed after it: sensor" in text
    from idt_desk.cli.run import _verdict_lines

    line, = [ln for ln in _verdict_lines(events) if ln.startswith("sensor_noise")]
    assert "a second change during an alarm" in line and "what changed after it: sensor" in line


def test_while_a_change_during_an_alarm_waits_the_panel_says_for_what(qtbot):
    import dataclasses

    from idt_desk_widgets.alarms import AlarmPanel

    s = _pendulum([(30000, "gravity", {"factor": 1.3})], limit=34000)
    snap = s.snapshot()
    # The state of the session just after a second change while the alarm is on.
    onset = {"name": "sensor_noise", "i": 34000, "first_window": snap.n_windows - 1,
             "latency": None, "horizon": 100, "expired": False, "impulse": False,
             "unit": "window", "carried": True, "carried_from": snap.latest_alarm["i"]}
    panel = AlarmPanel()
    qtbot.addWidget(panel)
    panel.update_snapshot(dataclasses.replace(snap, onset=onset))
    text = panel.latency.text()
    assert "during an alarm already on" in text
    assert "named once a window holds only data after it (1 of 4 windows)" in text
    assert "not detected" not in text


def test_the_panel_describes_the_latest_alarm_not_an_earlier_ones_class(qtbot):
    """An alarm after a perturbation's detection (the input filter's) said "what changed:
    sensor" in its event while the panel kept the earlier gravity explanation."""
    import dataclasses

    from idt_desk_widgets.alarms import AlarmPanel

    s = _pendulum([(30000, "gravity", {"factor": 1.3}), (36000, "gravity", None)])
    snap = s.snapshot()
    onset = snap.onset
    assert onset["latency"] is not None and onset["alarm_i"] == snap.latest_alarm["i"]
    panel = AlarmPanel()
    qtbot.addWidget(panel)
    panel.update_snapshot(snap)
    text = panel.latency.text()
    assert "What changed: dynamics" in text and "The latest alarm" not in text
    # A later alarm, its class not named yet: the panel says so, not gravity's class.
    later = dataclasses.replace(snap, latest_alarm={"i": 50000, "t": 50.0},
                                severity={"H_f": 4.2, "P": -3.0})
    panel.update_snapshot(later)
    text = panel.latency.text()
    assert "The latest alarm (at 50.0 s, after this one's) moved H_f +4.2σ, P −3.0σ — what " \
           "changed: named once a window holds only changed data" in text
    # Once it is named: its own class.
    named = dataclasses.replace(later, attribution={
        "attribution": "sensor", "evidence": "the residual spreads", "alarm_i": 50000})
    panel.update_snapshot(named)
    text = panel.latency.text()
    assert text.count("what changed: sensor — the residual spreads") == 1
    assert "What changed: dynamics" in text  # the onset's own detection keeps its class


def test_a_loop_that_stopped_moving_is_still_not_ok(qtbot):
    """After friction the pendulum lay at rest: the light went green and H_f said "ok" while
    H_f sat near 0 and P was undefined in most windows. A loop at rest is said to be still."""
    from idt_desk_widgets.alarms import AlarmPanel

    from idt_desk.metrics.regime import STILL

    panel = AlarmPanel()
    qtbot.addWidget(panel)
    moving = _pendulum([], limit=70000)
    panel.update_snapshot(moving.snapshot())
    assert moving.snapshot().windows["motion"][-1] > 2 * STILL  # the chaotic swing: bins
    assert panel.idt.state == "ok" and panel.lights["H_f"].state == "ok"
    # Each light says what its metric is before its state (the tile shows only a symbol).
    assert panel.lights["P"].toolTip().startswith("P, bi-predictability: how tightly")
    assert panel.lights["H_f"].toolTip().startswith("H_f, forward uncertainty: H_f = H(S' | S")
    s = _pendulum([(70000, "friction", {}), (100000, "friction", None)], limit=160000)
    snap = s.snapshot(limit=100_000)
    w = snap.windows
    after = w["t"] > 120.0
    assert (w["motion"][after] < STILL).all() and not snap.alarm["IDT"]
    panel.update_snapshot(snap)
    assert panel.idt.state == "still" and "the loop is still" in panel.idt.text()
    assert panel.lights["H_f"].state == "still" and panel.lights["H_b"].state == "still"
    assert "not the same as ok" in panel.lights["H_f"].toolTip()
    assert "still" in panel.saturation.format()
