"""One pipeline from (S, A, S') to flagged windows: session, wrapper, replay and CLI agree."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces
from idt_desk_sources.replay import ReplaySource

from idt_desk import load_recording
from idt_desk.detection.detectors import DetectorSpec, calibrate, detector_statistic
from idt_desk.detection.monitor import Monitor
from idt_desk.gym import IDTMonitor
from idt_desk.live.session import Session, SessionConfig, run_headless
from idt_desk.pipeline import build_monitor

from .cli_call import call as run_cli
from .toy_source import ToySource

METRICS = ("P", "H_f", "H_b", "dH")


def _stream(n: int, seed: int = 0, shift_at: int | None = None) -> dict[str, np.ndarray]:
    """Four AR(1) components (correlated like overlapping windows), shifted after a point."""
    rng = np.random.default_rng(seed)
    out = {}
    for j, m in enumerate(METRICS):
        e = rng.standard_normal(n)
        x = np.empty(n)
        x[0] = e[0]
        for t in range(1, n):
            x[t] = 0.8 * x[t - 1] + 0.6 * e[t]
        if shift_at is not None and j == 2:
            x[shift_at:] += 6.0
        out[m] = 1.0 + 0.1 * x
    return out


def test_monitor_flags_are_the_calibrated_detector_for_any_batching():
    data = _stream(3000, shift_at=2500)
    spec = DetectorSpec("persistence", m=4)
    expected_cal = calibrate(spec, {m: data[m][:300] for m in METRICS}, 5000.0, overlap=4.0)
    flags = {}
    for cuts in ([3000], [7, 293, 1, 999, 1700], [300, 2700]):
        mon = Monitor(300, metrics=METRICS, spec=spec,
                      budget=build_monitor(METRICS, baseline_windows=300,
                                           false_alarms="1/5000windows").budget,
                      overlap=4.0)
        got, lo = [], 0
        for c in cuts:
            got.append(mon.update({m: data[m][lo:lo + c] for m in METRICS})["IDT"])
            lo += c
        flags[len(cuts)] = np.concatenate(got)
        assert mon.calibration.threshold == expected_cal.threshold
    # Independently: each component's persistence statistic against its threshold.
    union = np.zeros(2700, dtype=bool)
    for m in METRICS:
        z = expected_cal.standardise(m, data[m][300:])
        s, _ = detector_statistic(spec, z)
        union |= s > expected_cal.threshold[m]
    for f in flags.values():
        assert not f[:300].any()  # baseline windows are never flagged
        np.testing.assert_array_equal(f[300:], union)
    assert union[2200:].any() and not union[:2200].any()  # the shift, and no false alarm


def test_the_mewma_monitor_alarms_on_its_joint_statistic_for_any_batching():
    from idt_desk.detection.detectors import joint_statistic

    data = _stream(3000, shift_at=2500)
    budget = build_monitor(METRICS, baseline_windows=300, false_alarms="1/5000windows").budget
    spec = DetectorSpec("mewma", lam=0.1)
    flags = []
    for cuts in ([3000], [7, 293, 1, 999, 1700]):
        mon = Monitor(300, metrics=METRICS, spec=spec, budget=budget, overlap=4.0)
        got, lo = [], 0
        for c in cuts:
            got.append(mon.update({m: data[m][lo:lo + c] for m in METRICS})["IDT"])
            lo += c
        flags.append(np.concatenate(got))
    np.testing.assert_array_equal(flags[0], flags[1])
    # Independently: T² of the whitened z against the joint threshold.
    cal = mon.calibration
    z = np.column_stack([cal.standardise(m, data[m][300:]) for m in METRICS])
    t2, _ = joint_statistic(0.1, z @ np.asarray(cal.joint["whitening"]))
    np.testing.assert_array_equal(flags[0][300:], t2 > cal.joint["threshold"])
    assert flags[0][2500:].any() and not flags[0][300:2400].any()


def test_monitor_refuses_a_budget_the_loop_cannot_count():
    with pytest.raises(ValueError, match="has no episodes"):
        build_monitor(METRICS, baseline_windows=50, false_alarms="1/10episodes", rate=100.0,
                      what="toy")
    with pytest.raises(ValueError, match="has no loop time"):
        build_monitor(METRICS, baseline_windows=50, false_alarms="1/h")
    with pytest.raises(ValueError, match="unknown detector"):
        build_monitor(METRICS, baseline_windows=50, detector="shewhart", rate=1.0)
    mon = build_monitor(METRICS, baseline_windows=50, false_alarms="2/30min", rate=100.0,
                        stride=20, window=100)
    assert mon.budget.per == 1800 and mon.budget.alarms == 2 and mon.overlap == 5.0
    assert mon.describe() == "persistence (5 windows in a row), ≤ 2 false alarms / 30 mins"


class _Replay(gym.Env):
    """A Gymnasium env that plays back recorded transitions (S' of step i, then the next)."""

    def __init__(self, s0: np.ndarray, s_next: np.ndarray, reward: np.ndarray, dt: float):
        self.observation_space = spaces.Box(-np.inf, np.inf, (s0.size,), np.float64)
        self.action_space = spaces.Box(-np.inf, np.inf, (1,), np.float64)
        self._s0, self._next, self._r = s0, s_next, reward
        self.dt = dt
        self._i = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self._i = 0
        return self._s0.copy(), {}

    def step(self, action):
        i = self._i
        self._i += 1
        return self._next[i].copy(), float(self._r[i]), False, False, {}


def test_the_wrappers_windows_and_alarms_equal_a_sessions_on_the_same_stream(tmp_path):
    cfg = dict(window=100, stride=20, calibration_windows=20, baseline_windows=300)
    # MEWMA at 1/10h: the wrapper's defaults (the gym source's), given to the session of a
    # generic loop.
    session = Session(SessionConfig(speed=None, detector="mewma", false_alarms="1/10h", **cfg),
                      source=ToySource(),
                      record=tmp_path / "rec")
    session.schedule(9000, "perturb", name="obs_noise", params={"sigma": 3.0})
    run_headless(session, steps=12000)
    rec = load_recording(tmp_path / "rec")
    tr = rec.transitions
    s = tr[["s_0", "s_1"]].to_numpy()
    s2 = tr[["s_next_0", "s_next_1"]].to_numpy()
    assert np.array_equal(s[1:], s2[:-1])  # one continuous stream: the env can replay it
    env = IDTMonitor(_Replay(s[0], s2, tr["reward"].to_numpy(), 1.0 / ToySource.rate),
                     preset=session.preset, calibration_windows=20, baseline_windows=300)
    env.reset()
    for a in tr[["a_0"]].to_numpy():
        env.step(a)
    w_env, w_ses = env.windows, rec.windows
    assert len(w_env) == len(w_ses) > 500
    for c in ("start", "P", "H_f", "H_b", "dH", "out_of_range", "x_P", "x_H_f", "x_H_b",
              "x_dH", "x_IDT"):
        np.testing.assert_array_equal(w_env[c].to_numpy(np.float64),
                                      w_ses[c].to_numpy(np.float64), err_msg=c)
    # (Window means are differences of running sums over differently cut blocks.)
    np.testing.assert_allclose(w_env["reward"], w_ses["reward"], rtol=1e-12, atol=1e-12)
    assert np.nansum(w_ses["x_IDT"]) > 0  # the perturbation is alarmed, in both
    assert env.monitor.describe() == session.monitor.describe()


@pytest.mark.parametrize("detector", ["persistence", "ewma", "mewma"])
def test_replay_reproduces_the_calibrated_alarms(tmp_path, detector):
    # A 200-window baseline (it ends at 11,250) leaves the perturbation at 20,000 inside 30,000
    # transitions; the default 800 would end at 41,250.
    session = Session(SessionConfig(speed=None, detector=detector, ewma_lambda=0.1,
                                    false_alarms="1/30min", baseline_windows=200),
                      record=tmp_path / "live")
    session.schedule(20_000, "perturb", name="sensor_noise",
                     params={"sigma_angle": 0.05, "sigma_rate": 0.3})
    run_headless(session, steps=30_000)
    replay = Session(SessionConfig(speed=None), source=ReplaySource(path=str(tmp_path / "live")),
                     record=tmp_path / "again")
    run_headless(replay)
    live, again = load_recording(tmp_path / "live"), load_recording(tmp_path / "again")
    for col in ("x_IDT", "x_P", "x_H_f", "x_H_b", "x_dH"):
        np.testing.assert_array_equal(live.windows[col].to_numpy(),
                                      again.windows[col].to_numpy())

    def alarms(rec):
        ev = rec.events
        return ev[ev["kind"].isin(["alarm_on", "alarm_off"])][["kind", "i"]].to_numpy()

    assert len(alarms(live)) >= 1 and np.array_equal(alarms(live), alarms(again))
    base = [r.events[r.events["kind"] == "baseline"].iloc[0]["detector"] for r in (live, again)]
    assert base[0] == base[1] and base[0]["budget"] == "≤ 1 false alarm / 30 mins"
    assert replay.config.detector == detector and replay.config.false_alarms == "1/30min"
    assert replay.config.ewma_lambda == 0.1 and base[0]["lam"] == 0.1


def test_cli_detector_and_budget_options(tmp_path):
    code, _out, err = run_cli(["run", "--source", "pendulum", "--seconds", "1",
                              "--false-alarms", "1/fortnight"])
    assert code == 2 and "--false-alarms" in err and "1/h" in err
    code, _out, err = run_cli(["run", "--source", "pendulum", "--seconds", "1",
                              "--false-alarms", "1/10episodes"])
    assert code == 2 and "has no episodes" in err
    code, _out, err = run_cli(["run", "--source", "pendulum", "--seconds", "30",
                              "--detector", "paper", "--baseline-windows", "30",
                              "--record", str(tmp_path / "r"), "--quiet"])
    assert code == 0, err
    ev = load_recording(tmp_path / "r").events
    det = ev[ev["kind"] == "baseline"].iloc[0]["detector"]
    assert det["detector"] == "paper" and det["calibrations"]["IDT"]["threshold"]["P"] == 3.0


def test_the_band_shown_is_the_detectors():
    from idt_desk_widgets.legend import band_label

    data = _stream(400)
    bands = {}
    for kind in ("paper", "persistence", "cusum", "ewma"):
        mon = build_monitor(METRICS, baseline_windows=300, detector=kind,
                            false_alarms="1/5000windows")
        mon.update(data)
        bands[kind] = (mon.baseline.thresholds, band_label(mon.baseline))
    assert bands["paper"] == (None, "baseline ±3σ")  # the paper rule's band is its alarm
    thresholds, label = bands["persistence"]
    assert label == "alarm band (kσ)" and set(thresholds) == set(METRICS)
    assert all(t > 3.0 for t in thresholds.values())  # beyond 3σ: a stricter budget
    assert bands["cusum"] == (None, "baseline ±3σ (reference)")
    assert bands["ewma"] == (None, "baseline ±3σ (reference)")
    assert band_label(None) == "alarm band"
