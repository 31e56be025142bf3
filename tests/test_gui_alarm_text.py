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
