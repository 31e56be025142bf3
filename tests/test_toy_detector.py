"""A detector added in one file (``tests/toy_detector.py``) and registered is a choice of the
command line, of the window and of a session, which calibrates it to its budget."""

from __future__ import annotations

import numpy as np
import pytest

from idt_desk.cli import main
from idt_desk.detection.detectors import DetectorSpec, calibrate, detector_statistic
from idt_desk.detection.registry import DETECTORS, register_detector
from idt_desk.live.session import Session, SessionConfig, run_headless

from .toy_detector import Pairs


@pytest.fixture
def pairs():
    register_detector(Pairs)
    yield Pairs
    del DETECTORS["pairs"]


def test_the_command_line_offers_it_with_its_words(pairs, capsys):
    with pytest.raises(SystemExit):
        main(["run", "--help"])
    said = " ".join(capsys.readouterr().out.split())
    assert "{paper,persistence,cusum,ewma,mewma,pairs}" in said
    assert "two windows in a row beyond a calibrated kσ: a test's detector" in said
    with pytest.raises(SystemExit) as refused:  # a name not registered: refused
        main(["run", "--steps", "1", "--detector", "pairz"])
    assert refused.value.code == 2


def test_the_window_offers_it(pairs, qtbot):
    from idt_desk_widgets.pipeline_panel import PipelinePanel

    panel = PipelinePanel()
    qtbot.addWidget(panel)
    combo = panel.detector_combo
    offered = {combo.itemData(i): combo.itemText(i) for i in range(combo.count())}
    assert offered["pairs"] == "pairs (2 in a row)"
    assert "pairs (two windows in a row" in combo.toolTip()


def test_a_session_calibrates_and_runs_it(pairs):
    session = Session(SessionConfig(speed=None, detector="pairs", false_alarms="1/h",
                                    calibration_windows=10, baseline_windows=200))
    snap = run_headless(session, steps=30_000)
    assert session.error is None
    monitor = session.pipeline.monitor
    assert monitor.spec.kind == "pairs" and monitor.describe().startswith("pairs (2 windows")
    cal = monitor.calibration
    assert cal is not None and cal.arl_windows > 0
    assert all(np.isfinite(h) and h > 0 for h in cal.threshold.values()), cal.threshold
    assert snap.baseline.kind == "pairs" and snap.baseline.thresholds  # its band
    assert np.isfinite(snap.windows["x_IDT"][-100:]).all()  # windows judged
    # Its thresholds are persistence's with m = 2 on the same baseline (the fit it reuses).
    rng = np.random.default_rng(5)
    x = np.convolve(rng.standard_normal(900), np.ones(4) / 2, "valid")
    base = {"a": x[:450], "b": x[450:]}
    got = calibrate(DetectorSpec("pairs"), base, 5000.0, overlap=4.0)
    ref = calibrate(DetectorSpec("persistence", m=2), base, 5000.0, overlap=4.0)
    assert got.threshold == ref.threshold and got.needed_windows == ref.needed_windows
    # Its statistic is what its words say: the smaller |z| of the last two windows.
    z = np.array([0.5, -3.0, 4.0, 1.0, -2.0])
    s, _ = detector_statistic(DetectorSpec("pairs", m=7), z)
    np.testing.assert_array_equal(s, [0.0, 0.5, 3.0, 1.0, 1.0])
    # Unregistered, it is refused by name.
    del DETECTORS["pairs"]
    with pytest.raises(ValueError, match="unknown detector 'pairs'"):
        DetectorSpec("pairs")
    register_detector(Pairs)


def test_a_second_detector_of_a_taken_name_is_refused(pairs):
    class Other(Pairs):
        pass

    with pytest.raises(ValueError, match="registered already"):
        register_detector(Other)
