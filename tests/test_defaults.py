"""Defaults that agree with themselves: a default run's baseline is long enough for its
budget, and a perturbation that falls into the calibration is said at once."""

from __future__ import annotations

import pytest
from idt_desk_sources.pendulum import PendulumSource

from idt_desk.detection.detectors import CONTROL_BASELINE_WINDOWS, DETECTOR_KINDS
from idt_desk.detection.monitor import DEFAULT_BASELINE_WINDOWS
from idt_desk.live.alarms import baseline_span
from idt_desk.live.plugins import discover
from idt_desk.live.session import Session, SessionConfig, run_headless
from idt_desk.metrics.presets import PRESETS

from .cli_call import call

#: The pendulum's default geometry: W 300, stride 75, 20 calibration windows.
W, STRIDE, CAL = 300, 75, 20


def _end(baseline: int) -> int:
    """The transition at which the default pendulum's baseline completes."""
    return W + (CAL + baseline - 1) * STRIDE


def test_every_source_defaults_to_its_own_baseline():
    for name, entry in discover().items():
        cls = entry.load()
        if cls.metric_path == "windows":  # a policy's MEWMA needs a longer one (below)
            want = CONTROL_BASELINE_WINDOWS if cls.default_detector == "mewma" \
                else DEFAULT_BASELINE_WINDOWS
            assert cls.default_baseline == want, name
    session = Session(SessionConfig(speed=None))
    assert session.config.baseline_windows == DEFAULT_BASELINE_WINDOWS
    assert baseline_span(session) == (0, _end(DEFAULT_BASELINE_WINDOWS))


@pytest.mark.parametrize("seed", [11, 12, 13])
def test_a_policys_default_baseline_is_long_enough_for_its_default_alarm(seed):
    """The gym source's default (MEWMA, 1/10h, W 300, stride 50 at 20 Hz) on components whose
    windows are as correlated as their overlap makes them (a settled agent's are: their
    correlation time is the overlap's 6 windows): not too short at the default length, and
    the former 800 windows are."""
    import numpy as np
    from idt_desk_sources.gym import GymSource

    from idt_desk.detection.monitor import IDT_METRICS
    from idt_desk.metrics.twin import TWIN_METRICS
    from idt_desk.pipeline import build_monitor

    metrics = [*IDT_METRICS, *TWIN_METRICS]  # the two groups that share the alarm

    def calibrations(n):
        rng = np.random.default_rng(seed)
        e = rng.normal(size=(n + 5, len(metrics)))
        x = np.lib.stride_tricks.sliding_window_view(e, 6, axis=0).mean(-1)  # 6 overlapping
        mon = build_monitor(metrics, baseline_windows=n, detector=GymSource.default_detector,
                            false_alarms=GymSource.default_budget, rate=20.0, stride=50,
                            window=300)
        mon.update({m: x[:, j] for j, m in enumerate(metrics)})
        return mon.calibrations.values()

    assert not any(c.too_short for c in calibrations(GymSource.default_baseline))
    assert all(c.too_short for c in calibrations(DEFAULT_BASELINE_WINDOWS))


def test_every_source_defaults_to_a_known_detector_and_the_window_shows_it(qtbot, tmp_path):
    """Persistence unless a source (or its first preset) says otherwise; a policy in an
    environment alarms by MEWMA under the paper's preset (its default) and by the union of the
    body parts' EWMAs under the live cheetah preset, at ≤ 1 false alarm per 10 h (the
    comparisons in assets/docs/rl-detection.md and rl-estimator.md), the others at 1/h or per
    turns. The side panel follows the chosen source."""
    pytest.importorskip("pytestqt")
    from idt_desk_widgets.main_window import MainWindow

    defaults = {name: entry.load().default_detector for name, entry in discover().items()}
    assert set(defaults.values()) <= set(DETECTOR_KINDS), defaults
    assert defaults["pendulum"] == defaults["dialogue"] == "persistence"
    assert defaults["gym"] == "mewma"
    budgets = {name: entry.load().default_budget for name, entry in discover().items()}
    assert budgets["gym"] == "1/10h" and budgets["pendulum"] == "1/h"
    assert budgets["dialogue"] == "1/100turns"
    assert Session(SessionConfig(speed=None)).monitor.spec.kind == "persistence"
    w = MainWindow(speed=None, record_dir=tmp_path)
    qtbot.addWidget(w)
    assert w.pipeline_panel.detector_combo.currentData() == "persistence"
    assert w.pipeline_panel.budget_edit.placeholderText() == "1/h"
    assert PRESETS["cheetah-live"].detector == "ewma" and PRESETS["cheetah"].detector is None
    w.select_source("gym", {})
    assert w.pipeline_panel.detector_combo.currentData() == "mewma"
    combo = w.pipeline_panel.preset_combo
    listed = [combo.itemText(j) for j in range(combo.count())]
    assert listed == [*discover()["gym"].load().presets, "(custom)"]  # no pendulum preset
    # The live cheetah preset brings its own detector; back to the paper's, the source's.
    w.pipeline_panel.preset_combo.setCurrentText("cheetah-live")
    assert w.pipeline_panel.detector_combo.currentData() == "ewma"
    assert w.pipeline_panel.settings()["detector"] == "ewma"
    w.pipeline_panel.preset_combo.setCurrentText("cheetah")
    assert w.pipeline_panel.detector_combo.currentData() == "mewma"
    assert w.pipeline_panel.budget_edit.placeholderText() == "1/10h"
    w.select_source("pendulum", {})
    assert w.pipeline_panel.detector_combo.currentData() == "persistence"
    assert "cheetah" not in [combo.itemText(j) for j in range(combo.count())]
    w.close()


def test_a_default_pendulum_run_has_a_baseline_long_enough_for_its_budget():
    session = Session(SessionConfig(speed=None))
    snap = run_headless(session, steps=_end(session.config.baseline_windows) + 100)
    det = snap.detector
    assert det["calibrated"] and det["budget"] == "≤ 1 false alarm / hour"
    assert not det["too_short"], det  # 200 windows, the former default: too short (~992)


def _overlaps(session):
    return [e for e in session.events_since(0) if e["kind"] == "baseline_overlap"]


def test_a_perturbation_during_the_calibration_is_logged_when_it_goes_on():
    session = Session(SessionConfig(speed=None, baseline_windows=30))
    noise = PendulumSource.perturbation("sensor_noise").resolve({})
    session.schedule(2000, "perturb", name="sensor_noise", params=noise)
    session.schedule(3000, "perturb", name="sensor_noise", params=None)
    session.schedule(4500, "perturb", name="sensor_noise", params=noise)  # after: no word
    run_headless(session, steps=5000)
    (ev,) = _overlaps(session)
    assert ev["i"] == 2000 and ev["name"] == "sensor_noise"
    # The symbols are calibrated by then (at 1,725): the baseline's windows, from the 21st.
    assert (ev["first"], ev["end"]) == (CAL * STRIDE, _end(30))
    assert ev["end_t"] == _end(30) / 1000
    assert baseline_span(session) is None  # the baseline is set: nothing can overlap it


def test_a_new_baseline_asked_for_while_a_perturbation_is_on_is_logged():
    session = Session(SessionConfig(speed=None, baseline_windows=30))
    noise = PendulumSource.perturbation("sensor_noise").resolve({})
    session.schedule(4500, "perturb", name="sensor_noise", params=noise)
    session.schedule(5000, "calibrate_baseline", n=10)
    run_headless(session, steps=6000)
    (ev,) = _overlaps(session)
    # The next 10 windows after transition 5000: the first window ending after it on.
    assert ev["i"] == 5000 and ev["end"] - ev["first"] == W + 9 * STRIDE
    assert 5000 < ev["end"] <= 5000 + W + 10 * STRIDE


@pytest.mark.parametrize("when, warned", [("@1-2", True), ("@5-10", False)])
def test_run_warns_before_it_runs_when_a_perturbation_falls_into_the_calibration(
        when, warned):
    rc, _out, err = call(["run", "--steps", "30000", "--baseline-windows", "30", "--quiet",
                          "--perturb", f"sensor_noise{when}"])
    assert rc == 0, err
    said = f"idt-desk run: warning: --perturb sensor_noise{when}: Sensor noise is on while " \
        "the symbols and the baseline are calibrated (until 3.98 s of loop time)"
    assert (said in err) == warned, err


def test_the_window_says_so_when_a_perturbation_goes_on_during_the_calibration(qtbot,
                                                                              tmp_path):
    pytest.importorskip("pytestqt")
    from idt_desk_widgets.main_window import MainWindow

    w = MainWindow(speed=1.0, record_dir=tmp_path)
    qtbot.addWidget(w)
    w.show()
    assert w.start_session()
    qtbot.waitUntil(lambda: w.session.snapshot(1).n_transitions > 0, timeout=30_000)
    w.switches.perturb_buttons["sensor_noise"].click()  # seconds in: the calibration runs to 61.7 s
    qtbot.waitUntil(lambda: any(e["kind"] == "baseline_overlap" for e in w.events.events),
                    timeout=30_000)
    w.refresh()
    assert w.banner.isVisible() and w.banner.text().startswith(
        "Note: Sensor noise is on while the symbols and the baseline are calibrated (until "
        "61.73 s of loop time)")
    row = next(k for k, e in enumerate(w.events.events) if e["kind"] == "baseline_overlap")
    texts = w.events.row_texts(row)
    assert texts[1:3] == ["perturbed baseline", "Sensor noise"]
    assert "until 61.73 s" in texts[3]
    w.stop_session(wait=True)
    w.close()


def test_a_replay_says_what_the_recorded_session_said(tmp_path):
    """Both warnings of the recording, the one said when a perturbation went on and the one
    said when a new baseline was asked for while it was on (a replay that worked them out
    again from its replayed switches missed the second: its source has none on)."""
    from idt_desk_sources.replay import ReplaySource

    rec = tmp_path / "rec"
    # A 10-minute budget: the warnings are the point, not the thresholds, whose fits (live,
    # the new baseline's, the replay's) simulate null paths 20 budgets long.
    session = Session(SessionConfig(speed=None, baseline_windows=30, false_alarms="1/10min"),
                      record=rec)
    noise = PendulumSource.perturbation("sensor_noise").resolve({})
    session.schedule(2000, "perturb", name="sensor_noise", params=noise)
    session.schedule(3000, "perturb", name="sensor_noise", params=None)
    session.schedule(4500, "perturb", name="sensor_noise", params=noise)
    session.schedule(5000, "calibrate_baseline", n=10)
    run_headless(session, steps=6000)
    replay = Session(SessionConfig(speed=None), source=ReplaySource(path=str(rec)))
    run_headless(replay)
    said = [(e["i"], e["name"], e["first"], e["end"]) for e in _overlaps(session)]
    assert [s[:2] for s in said] == [(2000, "sensor_noise"), (5000, "sensor_noise")]
    assert said[0][3] == _end(30)
    assert [(e["i"], e["name"], e["first"], e["end"]) for e in _overlaps(replay)] == said
