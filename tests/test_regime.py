"""The estimator's regime readout: the window's numbers, info["idt"], the run status, the panel."""

from __future__ import annotations

import json

import gymnasium as gym
import numpy as np
import pytest

from idt_desk.gym import IDTMonitor
from idt_desk.metrics.engine import sliding_metrics
from idt_desk.metrics.regime import REGIMES, regime, regime_text
from idt_desk.recordings import RecordingWriter
from idt_desk.recordings.runs import RunIndex, row_line
from idt_desk.recordings.status import STATUS_FILE, RunStatus


def _last_regime(s: np.ndarray, a: np.ndarray) -> tuple[str, float, float]:
    s, a = np.asarray(s).ravel().astype(np.int64), np.asarray(a).ravel().astype(np.int64)
    w = sliding_metrics(s[:-1], s[1:], a, 300, 50)
    return regime(w["unique_frac"][-1], w["H_f"][-1]), w["unique_frac"][-1], w["H_f"][-1]


def test_each_regime_from_the_engines_own_windows():
    rng = np.random.default_rng(0)
    # An exact cycle of 6 states under a constant action: H_f = 0, 6 of 300 distinct.
    cycle = np.tile(np.arange(6), 61)[:361]
    name, u, hf = _last_regime(cycle, np.zeros(360))
    assert (name, hf) == ("cycle", 0.0) and u == pytest.approx(6 / 300)
    # I.i.d. symbols from 10,000 states: nearly every triple distinct.
    assert _last_regime(rng.integers(0, 10_000, 361), rng.integers(0, 4, 360))[0] == \
        "saturated"
    # 10 states and 4 actions, 400 possible triples: about 210 of 300 distinct.
    name, u, _ = _last_regime(rng.integers(0, 10, 361), rng.integers(0, 4, 360))
    assert name == "sparse" and 0.6 <= u < 0.9
    # A random walk over 5 states: each (S, A) seen often, several S' after it.
    walk = np.clip(np.cumsum(rng.integers(-1, 2, 361)), -2, 2) + 2
    name, u, hf = _last_regime(walk, np.zeros((360, 1), np.int64))
    assert name == "resolved" and u < 0.1 and hf > 0
    assert regime(float("nan"), 0.0) == "" and regime(None, 0.0) == ""
    text = regime_text("saturated", 0.97, 300)
    assert "291 distinct (S, A, S') of 300" in text and "blind" in text
    assert regime_text("nonsense") == ""


def test_info_idt_says_the_regime_and_what_to_do():
    def run(bins):
        env = IDTMonitor(gym.make("CartPole-v1"), bins=bins, window=100, stride=50,
                         calibration_windows=2, detector=None)
        env.reset(seed=0)
        env.action_space.seed(0)
        for _ in range(600):
            *_, term, trunc, info = env.step(env.action_space.sample())
            if term or trunc:
                env.reset()
        env.close()
        return info["idt"]

    fine = run(40)  # 40 bins of each of 4 variables: every state new
    assert fine["regime"] == "saturated" and "blind" in fine["regime_text"]
    assert fine["regime"] == regime(fine["unique_frac"], fine["H_f"])
    coarse = run(2)
    assert coarse["regime"] in REGIMES and coarse["regime"] != "saturated"
    assert coarse["regime_text"].startswith(f"estimator {coarse['regime']}")


def test_a_runs_status_carries_the_latest_windows_regime(tmp_path):
    rec = RecordingWriter(tmp_path / "run", {"session": {}}, ["x"], ["u"],
                   ["start", "end", "P", "H_f", "unique_frac"])
    rec.add_windows({"start": np.arange(3.0), "end": np.arange(3.0) + 300,
                     "H_f": np.array([0.5, 0.4, 0.6]),
                     "unique_frac": np.array([0.3, 0.5, 0.95])})
    rec.close()
    status = json.loads((tmp_path / "run" / STATUS_FILE).read_text())
    assert status["regime"] == "saturated"
    (row,) = RunIndex(tmp_path).refresh()
    assert row["regime"] == "saturated" and "estimator saturated" in row_line(row)
    assert RunStatus.from_json({**status, "regime": "cycle"}).regime == "cycle"
    with pytest.raises(ValueError, match="regime: not one of"):
        RunStatus.from_json({**status, "regime": "<b>ok</b>"})
    # A resolved run's line says nothing of it.
    assert "estimator" not in row_line({**row, "regime": "resolved"})


def test_the_alarm_panel_names_the_regime(qtbot):
    from types import SimpleNamespace

    from idt_desk_widgets.alarms import AlarmPanel

    panel = AlarmPanel()
    qtbot.addWidget(panel)
    base = {"windows": {"unique_frac": np.array([0.96]), "H_f": np.array([0.0])},
            "preset": {"window": 300}}
    panel.update_saturation(SimpleNamespace(**base))
    assert panel.saturation.format().endswith("— saturated")
    assert "288 distinct" in panel.saturation.toolTip() and "blind" in panel.saturation.toolTip()
    base["windows"] = {"unique_frac": np.array([0.02]), "H_f": np.array([0.0])}
    panel.update_saturation(SimpleNamespace(**base))
    assert panel.saturation.format().endswith("— cycle")
    panel.reset()
    assert panel.saturation.format() == "saturation %p %"
