"""Severity beside the alarm: how far each component moved (σ) when a perturbation is
detected, and what it cost the return once whole episodes after it have finished."""

from __future__ import annotations

import math

import numpy as np
import pytest

from idt_desk.live.alarms import COSTLY_RETURN, Alarms, impact_text, severity_text


class _Log:
    def __init__(self) -> None:
        self.events: list[tuple[str, int, dict]] = []

    def __call__(self, kind: str, at: int, **fields) -> None:
        self.events.append((kind, at, fields))


def _table(k0: int, n: int) -> dict[str, np.ndarray]:
    start = 10 * np.arange(k0, k0 + n)
    return {"start": start, "end": start + 30}


def test_the_detection_says_how_far_each_component_moved():
    log = _Log()
    alarms = Alarms(False, None, log)
    alarms.new_onset("kick", 400)
    # Windows 0-59; windows 38+ hold transition 400 (end 410 > 400). Alarm from window 44.
    t = _table(0, 60)
    idt = (np.arange(60) >= 44).astype(float)
    flags = {m: np.zeros(60) for m in ("P", "H_f", "H_b", "dH", "reward")} | {"IDT": idt}
    rng = np.random.default_rng(0)
    z = {"P": np.where(np.arange(60) >= 38, 2.0, 0.0) + 0.01 * rng.standard_normal(60),
         "dH": np.where(np.arange(60) >= 38, -5.0, 0.0), "H_f": np.zeros(60),
         "H_b": np.full(60, np.nan), "reward": np.full(60, -0.25)}
    alarms.update(t, flags, ("P", "H_f", "H_b", "dH", "reward"), 0, z)
    (_kind, at, fields), = [e for e in log.events if e[0] == "detected"]
    assert fields["latency"] == 44 - 38 and at == int(t["end"][44])
    sev = fields["severity"]
    # The mean over the perturbed windows up to the detection (38..44).
    assert sev["P"] == pytest.approx(z["P"][38:45].mean())
    assert sev["dH"] == -5.0 and sev["H_f"] == 0.0 and sev["reward"] == -0.25
    assert "H_b" not in sev  # never defined
    assert severity_text(sev) == "ΔH −5.0σ, P +2.0σ, H_f +0.0σ; reward −0.2σ"
    # The alarm names every component past its threshold, however many (two of three
    # were named while the third light was red too).
    moved = {"P": -30.2, "H_f": 9.0, "H_b": 10.9, "dH": 1.0}
    assert severity_text(moved, top=2) == "P −30.2σ, H_b +10.9σ"
    k = {"P": 3.0, "H_f": 8.0, "H_b": 3.0, "dH": 3.0}.__getitem__
    assert severity_text(moved, top=2, beyond=k) == "P −30.2σ, H_b +10.9σ, H_f +9.0σ"
    assert severity_text({"P": 2.0, "H_f": 1.0, "dH": 0.5}, top=2, beyond=k) == \
        "P +2.0σ, H_f +1.0σ"  # none past: the two largest, as before


def test_the_return_change_is_costly_or_cheap_against_the_episodes_before():
    log = _Log()
    alarms = Alarms(False, None, log)
    for e in range(5):  # episodes of 1,000 steps returning 1000 ± 10
        alarms.episode_end(1000 * (e + 1), 1000.0 + (10.0 if e % 2 else -10.0), 1000)
    alarms.new_onset("act_noise", 5200)
    alarms.episode_end(6000, 900.0, 1000)  # began before the onset: not a measure
    assert not [e for e in log.events if e[0] == "impact"]
    alarms.episode_end(7000, 985.0, 1000)  # the first whole episode after the onset
    (_kind, at, fields), = [e for e in log.events if e[0] == "impact"]
    before = np.array([990.0, 1010.0, 990.0, 1010.0, 990.0])
    assert at == 7000 and fields["episodes"] == 5 and fields["episodes_after"] == 1
    assert fields["change"] == pytest.approx((985.0 - before.mean()) / before.mean())
    assert fields["sigma"] == pytest.approx((985.0 - before.mean()) / before.std(ddof=1))
    assert fields["costly"] is (fields["change"] <= -COSTLY_RETURN)
    assert fields["costly"]  # −1.3 %
    # The panel follows the mean of every whole episode after the onset, and so does the
    # log: an event at each one, the latest the run's cost (its status, its listing).
    alarms.episode_end(8000, 1002.0, 1000)
    impact = alarms.onset["impact"]
    assert impact["episodes_after"] == 2 and impact["return"] == pytest.approx(993.5)
    assert not impact["costly"]
    events = [f for e, _at, f in log.events if e == "impact"]
    assert [f["episodes_after"] for f in events] == [1, 2]
    assert {k: events[-1][k] for k in impact} == impact
    from idt_desk.recordings.status import RunStatus

    status = RunStatus()
    for f in events:
        status.fold({"kind": "impact", **f})
    assert status.cost == "-0.5 %, cheap"  # the latest, not the first's "−1.3 %, costly"
    assert impact_text(impact).startswith("return −0.5 % (−0.4σ)")
    assert impact_text(impact).endswith("over 2 whole episodes after the onset, against 5 "
                                        "before it: cheap")


def test_a_return_gain_is_not_called_a_cost():
    gain = {"change": 0.003, "sigma": 0.4, "costly": False, "episodes": 5}
    assert impact_text(gain).endswith("before it: no cost, a gain")
    assert impact_text({**gain, "change": -0.003}).endswith("before it: cheap")
    # Just short of the 1 % line: not rounded onto it.
    assert impact_text({**gain, "change": -0.0097}).startswith("return −0.97 % ")


def test_no_cost_is_claimed_without_episodes_before_or_once_the_perturbation_is_off():
    log = _Log()
    alarms = Alarms(False, None, log)
    alarms.new_onset("x", 0)
    alarms.episode_end(1000, 5.0, 1000)
    assert "impact" not in alarms.onset
    alarms.new_onset("y", 1000)
    alarms.onset_off("y", 1500)
    alarms.episode_end(2000, 1.0, 1000)
    assert "impact" not in alarms.onset and impact_text(None) == ""


def test_the_episode_return_monitor_against_a_hand_computation():
    from idt_desk_sources.gym.reproduce.judge import _return_monitors

    from idt_desk.detection.detectors import DetectorSpec, calibrate, detector_statistic

    rng = np.random.default_rng(4)
    pre = 1000 + 5 * rng.standard_normal(20)
    post = 1000 - 30 + 5 * rng.standard_normal(10)  # a 6σ drop
    ends = 1000 * np.arange(1, 31)
    returns = list(zip(ends.tolist(), [*pre, *post], strict=True))
    got = _return_monitors(returns, onset=20_000, stride=50, budget="1/10h", rate=20.0,
                           steps_per_episode=1000)
    # 1/10h at 20 steps/s and 1,000 steps an episode: one false alarm per 720 episodes.
    cal = calibrate(DetectorSpec("ewma", lam=0.2), {"return": pre}, 720.0)
    s, _ = detector_statistic(DetectorSpec("ewma", lam=0.2), cal.standardise("return", post))
    first = int(np.flatnonzero(s > cal.threshold["return"])[0])
    # Judged at the episode's end: episode 21 ends 1,000 steps (20 windows) after the onset.
    assert got["live_return_ewma_reward"] == (ends[20 + first] - 20_000) / 50 - 1
    assert got["live_return_ewma_reward"] >= 19
    quiet = _return_monitors(list(zip(ends.tolist(), [*pre, *(pre[:10] + 0.1)],
                                      strict=True)), 20_000, 50, "1/10h", 20.0, 1000)
    assert math.isnan(quiet["live_return_ewma_reward"])


def test_an_alarm_already_on_is_not_the_next_perturbations_detection():
    """Sensor noise raised the alarm; a kick during it read "Detected 0 windows after the
    onset of Kick". Only an alarm that rises after the onset counts."""
    log = _Log()
    alarms = Alarms(False, None, log)
    metrics = ("P", "H_f", "H_b", "dH")
    t = _table(0, 30)
    on = np.zeros(30)
    on[5:] = 1.0  # the alarm from window 5 on: an earlier change
    alarms.update(t, {m: on for m in (*metrics, "IDT")}, metrics, 0)
    assert alarms.alarm["IDT"]
    alarms.new_onset("kick", 300)  # windows 28+ hold it (end 310 > 300)
    # Still on through window 40, off 41-44, on again from 45: the kick's detection is 45.
    t2 = _table(30, 30)
    idt = np.ones(30)
    idt[41 - 30:45 - 30] = 0.0
    alarms.update(t2, {m: idt for m in (*metrics, "IDT")}, metrics, 30)
    (_kind, _at, fields), = [e for e in log.events if e[0] == "detected"]
    first = alarms.onset["first_window"]
    assert fields["latency"] == 45 - first and first == 30
    # Never cleared within the horizon: not detected, and the verdict says why.
    log2 = _Log()
    alarms2 = Alarms(False, None, log2)
    alarms2.update(t, {m: on for m in (*metrics, "IDT")}, metrics, 0)
    alarms2.new_onset("kick", 300)
    always = np.ones(120)
    alarms2.update(_table(30, 120), {m: always for m in (*metrics, "IDT")}, metrics, 30)
    (kind, _at, fields), = [e for e in log2.events if e[0].endswith("detected")]
    assert kind == "not_detected" and fields["alarm_carried"]


def test_a_replay_says_what_a_change_cost_from_the_recorded_returns(tmp_path):
    """The replay source hands over each episode's end (from the recorded episode and reward
    columns), so a replayed alarm gets its cost as the live one did."""
    from idt_desk_sources.replay import ReplaySource

    import idt_desk
    from idt_desk.live.session import Session, SessionConfig, run_headless

    rng = np.random.default_rng(3)
    steps, n = 100, 6000
    ep = np.arange(n) // steps
    x = rng.normal(size=(n + 1, 2))
    u = rng.normal(size=(n, 1))
    reward = np.where(np.arange(n) >= 4000, 0.9, 1.0) + 0.001 * rng.standard_normal(n)
    path = tmp_path / "loop"
    with idt_desk.Recorder(path, ["x", "y"], ["u"], rate=20.0, reward=True, window=50,
                           stride=25, calibration_windows=2, baseline_windows=20) as rec:
        rec.add(x[:3950], u[:3950], x[1:3951], reward=reward[:3950], episode=ep[:3950])
        rec.perturb("friction", strength=2)
        rec.add(x[3950:n], u[3950:], x[3951:], reward=reward[3950:], episode=ep[3950:])
    replay = Session(SessionConfig(speed=None), source=ReplaySource(path=str(path)))
    run_headless(replay)
    impact, *later = [e for e in replay.events_since(0) if e["kind"] == "impact"]
    assert [e["episodes_after"] for e in later] == list(range(2, len(later) + 2))
    # The first whole episode after the onset at 3,950 is episode 40 (steps 4,000-4,099).
    assert impact["i"] == 4100 and impact["episodes"] == 20
    assert impact["change"] == pytest.approx(-0.1, abs=0.002) and impact["costly"]


def test_the_reward_alarm_is_logged_where_its_marks_are():
    # The plot marks every reward-flagged window: each run of them is an alarm in the log,
    # the light follows the latest; the IDT's own alarms are not touched.
    log = _Log()
    alarms = Alarms(False, None, log)
    reward = np.zeros(20)
    reward[[4, 5, 6, 12]] = 1.0
    reward[:2] = np.nan  # not judged yet
    flags = {m: np.zeros(20) for m in ("P", "H_f", "H_b", "dH")} | {"IDT": np.zeros(20),
                                                                    "reward": reward}
    t = _table(0, 20)
    alarms.update(t, flags, ("P", "H_f", "H_b", "dH", "reward"), 0)
    said = [(k, at, f["metric"]) for k, at, f in log.events]
    assert said == [("alarm_on", int(t["end"][4]), "reward"),
                    ("alarm_off", int(t["end"][7]), "reward"),
                    ("alarm_on", int(t["end"][12]), "reward"),
                    ("alarm_off", int(t["end"][13]), "reward")]
    assert alarms.n_alarms == 0 and not alarms.alarm["reward"]


def test_every_alarm_of_a_loop_without_a_scheduled_perturbation_says_how_far_it_moved(tmp_path):
    """A training run's alarm (no perturbation marked: the usual case of a sweep) carries
    its components' mean z up to it, like a detection; the listing shows the latest."""
    import json

    import idt_desk

    from .cli_call import call
    from .loop_writer import PIPE, stream

    s, a, s2, r = stream(6000)  # its noise twentyfold from 3,000 on, unmarked
    path = tmp_path / "sweep" / "run-1"
    with idt_desk.Recorder(path, ["x", "v"], ["u"], rate=100.0, reward=True, detector="ewma",
                           **PIPE) as rec:
        rec.add(s, a, s2, reward=r)
    events = [json.loads(line) for line in (path / "events.jsonl").read_text().splitlines()]
    alarms = [e for e in events if e["kind"] == "alarm_on" and e["metric"] == "IDT"]
    assert alarms and all(set(e["severity"]) >= {"P", "H_f", "H_b", "dH"} for e in alarms)
    moved = {m: v for m, v in alarms[-1]["severity"].items() if m != "reward"}
    top = max(moved.items(), key=lambda kv: abs(kv[1]))
    assert abs(top[1]) > 1.0  # a twentyfold noise moves some component by more than 1σ
    rc, out, err = call(["runs", str(tmp_path / "sweep"), "--json"])
    assert rc == 0, err
    (run,) = json.loads(out)
    assert run["alarms"] == len(alarms) and run["severity"].endswith(f"{top[1]:+.1f}σ")
