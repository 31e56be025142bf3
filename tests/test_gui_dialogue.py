"""The dialogue in the window: transcript, injections, a failure that pauses (offscreen)."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("pytestqt")

from idt_desk_widgets.main_window import MainWindow
from PySide6.QtWidgets import QLabel

from idt_desk.metrics import embeddings

from .fake_ollama import FakeOllama

#: Generous: the first turn of a session loads the tokenizer (and MiniLM with the
#: embeddings extra), which takes seconds more on a loaded 2-core machine.
WAIT = 60_000


def _replayed(qtbot, path, tmp_path) -> MainWindow:
    """A window that has replayed the recording at ``path`` to its end."""
    w = MainWindow(source="replay", settings={"path": str(path)}, speed=None,
                   record_dir=tmp_path)
    qtbot.addWidget(w)
    w.show()
    assert w.start_session(), w.banner.text()
    qtbot.waitUntil(lambda: not w.session.running, timeout=WAIT)
    w.refresh()
    return w


@pytest.fixture
def server():
    with FakeOllama() as srv:
        yield srv


def test_dialogue_transcript_injection_and_a_failure_that_pauses(qtbot, tmp_path, server):
    w = MainWindow(source="dialogue", speed=None, record_dir=tmp_path,
                   settings={"host": server.host, "student_model": "student:1b",
                             "teacher_model": "teacher:1b"})
    qtbot.addWidget(w)
    w.show()
    # Token metrics per turn: no symbol settings, the turn as the x axis.
    assert not w.pipeline_panel.bins_spin.isVisible() and w.pipeline_panel.tokens_label.isVisible()
    assert w.plots.plots["dH"].getAxis("bottom").labelText == "turn"
    assert "from its token counts" in w.plots.hint.text()  # no symbols to calibrate
    assert w.start_session(), w.banner.text()
    qtbot.waitUntil(lambda: w.session.snapshot(1).n_transitions >= 3, timeout=WAIT)
    qtbot.waitUntil(lambda: "Student · 3" in w.view.text.toPlainText(), timeout=WAIT)
    text = w.view.text.toPlainText()
    assert "Teacher · 1" in text and "P = 0." in text
    assert "student: student:1b (ollama)" in w.view.backends.text()
    assert "turns" in w.status_line.status.text()
    cos = w.plots.plots["cos_sim"]
    if embeddings.available():
        # The structural baselines get a plot of their own, three curves, the lowest one.
        qtbot.waitUntil(cos.isVisible, timeout=WAIT)
        x, y = w.plots.curves["cos_sim"].getData()
        assert len(x) >= 3 and np.all((y > -1) & (y < 1))
        assert len(w.plots.extra["drift"].getData()[0]) == len(x)
        assert cos.getAxis("bottom").isVisible() and not w.plots.plots["dH"].getAxis(
            "bottom").isVisible()
    else:
        # Without the embeddings extra the dialogue runs on token counts alone: no cosine
        # plot, and ΔH carries the time axis.
        assert not cos.isVisible() and w.plots.plots["dH"].getAxis("bottom").isVisible()
    # The agency conditions of the latest turn, from its token counts.
    qtbot.waitUntil(lambda: "of 3</b> conditions hold on turn" in w.agency.footer.text(),
                    timeout=WAIT)
    # An injection by button: the next teacher prompt, highlighted with its type.
    w.switches.perturb_buttons["contradiction"].click()
    qtbot.waitUntil(lambda: ": contradiction" in w.view.text.toPlainText(), timeout=WAIT)
    assert "injected at turn " in w.view.text.toPlainText()
    assert "That doesn't sound right" in w.view.text.toPlainText()
    # A dropped stream pauses the session with the reason; Resume carries on.
    server.failures.append("drop")
    # (The banner first said that the injection fell into the 30 baseline turns.)
    qtbot.waitUntil(lambda: w.banner.isVisible() and "dropped" in w.banner.text(),
                    timeout=WAIT)
    assert "dropped" in w.banner.text() and "Resume" in w.banner.text()
    pause = w.source_panel.pause_button
    assert pause.isChecked() and pause.text() == "Resume"
    # The partial reply stays on show, marked as interrupted.
    qtbot.waitUntil(lambda: "was interrupted; kept: " in w.view.partial.text(), timeout=WAIT)
    n = w.session.snapshot(1).n_transitions
    w.source_panel.pause_button.click()
    qtbot.waitUntil(lambda: w.session.snapshot(1).n_transitions >= n + 2, timeout=WAIT)
    qtbot.waitUntil(lambda: not w.banner.isVisible(), timeout=WAIT)
    assert w.source_panel.pause_button.text() == "Pause"
    w.close()


def test_a_dialogue_without_the_embeddings_extra_runs_on_token_counts(qtbot, tmp_path, server,
                                                                       monkeypatch):
    # The extra absent (as after a plain install): the window runs, no cosine plot.
    monkeypatch.setattr(embeddings, "available", lambda: False)
    w = MainWindow(source="dialogue", speed=None, record_dir=tmp_path,
                   settings={"host": server.host, "student_model": "student:1b",
                             "teacher_model": "teacher:1b"})
    qtbot.addWidget(w)
    w.show()
    assert w.start_session(), w.banner.text()
    assert w.session.config.baselines is False
    qtbot.waitUntil(lambda: w.session.snapshot(1).n_windows >= 2, timeout=WAIT)
    w.refresh()
    assert len(w.plots.curves["dH"].getData()[0]) >= 2
    assert not w.plots.plots["cos_sim"].isVisible()
    assert w.plots.plots["dH"].getAxis("bottom").isVisible()
    assert not np.isfinite(w.session.snapshot().windows["cos_sim"]).any()
    w.close()


def test_a_dialogue_replays_in_the_window_with_its_transcript(qtbot, tmp_path, server):
    from idt_desk_sources.dialogue import DialogueSource

    from idt_desk.live.session import Session, SessionConfig, run_headless

    src = DialogueSource(host=server.host, student_model="student:1b",
                         teacher_model="teacher:1b")
    # Token counts only (baselines=False): what is tested is the transcript's replay, and
    # loading MiniLM twice made this test slow enough to time out under load.
    run_headless(Session(SessionConfig(source="dialogue", speed=None, baselines=False),
                         source=src, record=tmp_path / "rec"), steps=6)
    w = MainWindow(source="replay", settings={"path": str(tmp_path / "rec")}, speed=None,
                   record_dir=tmp_path)
    qtbot.addWidget(w)
    w.show()
    assert w.start_session(), w.banner.text()
    qtbot.waitUntil(lambda: not w.session.running, timeout=WAIT)
    qtbot.waitUntil(lambda: "Student · 6" in w.view.text.toPlainText(), timeout=WAIT)
    assert w.plots.plots["dH"].getAxis("bottom").labelText == "turn"
    assert not w.pipeline_panel.bins_spin.isVisible() and w.pipeline_panel.tokens_label.isVisible()
    assert "student: student:1b (ollama)" in w.view.backends.text()
    bar = w.view.text.verticalScrollBar()
    assert bar.maximum() > 0 and bar.value() == bar.maximum()  # follows the dialogue
    w.close()


def test_injection_markers_sit_on_the_turn_they_inject(qtbot, tmp_path):
    # The shipped 100-turn dialogue: contradictions are the S' of turns 31, 46, 61, 76, 91
    # (the transcript's numbering); the markers stand on those turns, live and replayed.
    from pathlib import Path

    path = Path(__file__).parent.parent / "assets/recordings/dialogue-smollm2-contradictions"
    w = _replayed(qtbot, path, tmp_path)
    marks = sorted(items[0].value() for items in w.plots._pulses)
    assert marks == [31.0, 46.0, 61.0, 76.0, 91.0]
    legend = [label.text for _sample, label in w.plots.legend.items]
    assert "injection" in legend and "impulse (kick)" not in legend
    injected = [t["turn"] for t in w.session.snapshot().info["transcript"] if t.get("injected")]
    assert injected == [31, 46, 61, 76, 91]
    # The event log numbers turns as the plots and the transcript do: injections on their
    # turn, an alarm on the turn it judged.
    log = w.events
    rows = [log.row_texts(k) for k, e in enumerate(log.events)]
    assert [r[0] for r, e in zip(rows, log.events, strict=True)
            if e["kind"] == "perturbation_pulse"] == [f"turn {n}" for n in injected]
    assert all(r[1] == "injection" for r, e in zip(rows, log.events, strict=True)
               if e["kind"] == "perturbation_pulse")
    snap = w.session.snapshot(1000)
    alarmed = set(snap.windows["t"][snap.windows["x_IDT"] == 1.0].astype(int))
    assert any(e["kind"] == "alarm_on" for e in log.events)
    for r, e in zip(rows, log.events, strict=True):
        if e["kind"] == "alarm_on":
            assert int(r[0].split()[1]) in alarmed
    # The length confound over the 30 baseline turns is on show above the transcript, and
    # the length-adjusted P has a plot of its own.
    label = w.findChild(QLabel, "transcript_confound")
    assert label is not None and label.isVisible()
    assert "turns 1–30" in label.text() and "P +0.88" in label.text()
    assert w.plots.plots["P_adj"].isVisible() and np.isfinite(snap.windows["P_adj"]).sum() >= 90
    # Every scheduled injection gets its verdict (the replay said "No perturbation yet" for
    # all 100 turns): in the event log's latency column and on the alarm panel.
    verdicts = [e for e in log.events if e["kind"] in ("detected", "not_detected")]
    assert [e["onset_i"] + 1 for e in verdicts] == injected
    pulses = [k for k, e in enumerate(log.events) if e["kind"] == "perturbation_pulse"]
    assert all(log._latency.get(k) for k in pulses)
    assert "No perturbation yet" not in w.alarms.latency.text()
    assert "Contradiction" in w.alarms.latency.text() or "contradiction" in \
        w.alarms.latency.text()
    w.close()


def test_a_too_short_dialogue_baseline_says_plainly_what_its_alarm_can_do(qtbot, server):
    """The default dialogue: 30 baseline turns at ≤ 1 false alarm / 100 turns. The panel
    names the raised thresholds and says when P's band covers every value P can take."""
    from idt_desk_sources.dialogue import DialogueSource
    from idt_desk_widgets.alarms import P_RANGE, AlarmPanel

    from idt_desk.live.session import Session, SessionConfig, run_headless

    src = DialogueSource(host=server.host, student_model="student:1b",
                         teacher_model="teacher:1b")
    session = Session(SessionConfig(source="dialogue", speed=None, baselines=False),
                      source=src)
    assert session.config.baseline_windows == 30
    snap = run_headless(session, steps=32)
    snap = session.snapshot(100)
    det, b = snap.detector, snap.baseline
    assert det["too_short"] and det["budget"] == "≤ 1 false alarm / 100 turns"
    panel = AlarmPanel()
    qtbot.addWidget(panel)
    panel.update_snapshot(snap)
    text = panel.calibration.text()
    assert "Baseline: 30 turns — <b>too short</b> for this budget" in text
    listed = ", ".join(f"{name} {det['thresholds'][m]:.1f}σ" for m, name in
                       (("P", "P"), ("H_f", "H<sub>f</sub>"), ("H_b", "H<sub>b</sub>"),
                        ("dH", "ΔH")))
    assert f"its thresholds are raised to {listed}, so it fires only on a change" in text
    lo = b.mean["P"] - det["thresholds"]["P"] * b.std["P"]
    hi = b.mean["P"] + det["thresholds"]["P"] * b.std["P"]
    covers = lo <= P_RANGE[0] and hi >= P_RANGE[1]
    assert ("<b>P cannot alarm</b>" in text) == covers


def test_at_n_means_turn_n_in_the_recording_the_log_the_plots_and_the_transcript(
        qtbot, tmp_path, server):
    """``--perturb contradiction@5``: turn 5's S' is the injection, and every view says 5."""
    from .cli_call import call

    path = tmp_path / "rec"
    rc, _out, err = call(["run", "--source", "dialogue", "--set", f"host={server.host}",
                          "--set", "student_model=student:1b", "--set",
                          "teacher_model=teacher:1b", "--steps", "7", "--quiet",
                          "--perturb", "contradiction@5", "--record", str(path)])
    assert rc == 0, err
    from idt_desk.recordings import load_recording

    rec = load_recording(path)
    assert [t["turn"] for t in rec.turns if t.get("injected")] == [5]
    assert rec.turns[4]["next_prompt"].startswith("That doesn't sound right")
    pulse = rec.events[rec.events["kind"] == "perturbation_pulse"].iloc[0]
    assert pulse["i"] == 4  # applied when 4 turns were done: it acts on turn 5
    w = _replayed(qtbot, path, tmp_path)
    assert [items[0].value() for items in w.plots._pulses] == [5.0]
    log = w.events
    row = next(k for k, e in enumerate(log.events) if e["kind"] == "perturbation_pulse")
    assert log.row_texts(row)[:2] == ["turn 5", "injection"]
    text = w.view.text.toPlainText()
    assert "injected at turn 5: contradiction" in text
    assert "Teacher · 6 injected at turn 5" in text  # the prompt turn 6 answers
    w.close()


def test_a_turn_schedule_counts_from_1(server):
    from .cli_call import call

    rc, _out, err = call(["run", "--source", "dialogue", "--set", f"host={server.host}",
                          "--steps", "3", "--perturb", "contradiction@0"])
    assert rc == 2 and "turns are whole numbers from 1 (the first turn)" in err, err
    rc, _out, err = call(["run", "--source", "dialogue", "--set", f"host={server.host}",
                          "--steps", "3", "--perturb", "contradiction@4"])
    assert rc == 2 and "turn 4 is after the run's last turn, 3; allowed: 1 to 3" in err, err
