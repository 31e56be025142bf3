"""The loop's twin: its residual channels, the MuJoCo and pendulum twins, and the class of an
alarm's change (``idt_desk.metrics.twin``, ``idt_desk.gym.twin``,
``idt_desk.detection.attribution``)."""

from __future__ import annotations

import numpy as np
import pytest

from idt_desk.detection.attribution import CLASSES, attribute
from idt_desk.detection.isolation import evidence
from idt_desk.live.config import SessionConfig
from idt_desk.live.session import Session, run_headless
from idt_desk.metrics.twin import Hypothesis, TwinEvidence, TwinStage, twin_over

from .toy_source import ToySource


class ToyTwin:
    """The toy loop's equations: x' = x + 0.1 v, v' = v + 0.1 (u + push)."""

    description = "the toy loop's equations"
    kinds = ("position", "velocity")

    def predict(self, s, a):
        return s + 0.1 * np.column_stack([s[:, 1], a[:, 0]])

    def hypotheses(self, s, a):
        return [Hypothesis("push", "force", "a push on v", np.tile([0.0, 0.1], (len(s), 1)))]


class _TwinToy(ToySource):
    """The toy loop with its twin declared."""

    @classmethod
    def twin_for(cls, settings):
        return ToyTwin()


def _rows(n=6000, seed=0):
    rng = np.random.default_rng(seed)
    s = rng.normal(size=(n, 2))
    a = rng.normal(size=(n, 1))
    s2 = ToyTwin().predict(s, a) + rng.normal(0, 1e-3, (n, 2))
    return s, a, s2


def test_the_channels_are_each_windows_residual_spread_and_shift_against_a_numpy_reference():
    s, a, s2 = _rows()
    s2[4000:, 1] += 0.01  # a bias on v from row 4,000
    stage = TwinStage(ToyTwin(), window=300, state_names=("x", "v"))
    stage.fit(s[:1000], a[:1000], s2[:1000])
    ends = np.arange(300, 6001, 100)
    # Rows pushed in uneven blocks: the windows do not depend on the cut.
    got = {}
    for lo, hi in ((0, 1234), (1234, 1240), (1240, 6000)):
        e = ends[(ends > lo) & (ends <= hi)]
        for k, v in stage.push(s[lo:hi], a[lo:hi], s2[lo:hi], e).items():
            got.setdefault(k, []).append(v)
    got = {k: np.concatenate(v) for k, v in got.items()}
    r = s2 - ToyTwin().predict(s, a)
    scale = np.sqrt((r[:1000] ** 2).mean(axis=0))
    z = r / scale
    for kind, j in (("pos", 0), ("vel", 1)):
        w = np.stack([z[e - 300:e, j] for e in ends])
        np.testing.assert_allclose(got[f"R_spread_{kind}"], np.log10(w.var(axis=1) + 1e-8),
                                   atol=1e-9)
        np.testing.assert_allclose(got[f"R_shift_{kind}"],
                                   np.log10(w.mean(axis=1) ** 2 + 1e-8), atol=1e-6)
    # The bias moved the velocities' shift by orders of magnitude, not the positions'.
    after = ends >= 4300
    assert got["R_shift_vel"][after].min() > got["R_shift_vel"][~after & (ends < 4000)].max() + 2
    assert abs(np.median(got["R_spread_pos"][after]) - np.median(got["R_spread_pos"][~after])) < 0.3


def test_a_twin_exact_to_rounding_is_read_against_a_floor_not_against_rounding():
    rng = np.random.default_rng(1)
    s, a = rng.normal(size=(2000, 2)), rng.normal(size=(2000, 1))
    stage = TwinStage(ToyTwin(), 300, ("x", "v"))
    stage.fit(s, a, ToyTwin().predict(s, a))  # no residual at all
    assert np.all(stage.scale >= 1e-6 * s.std(axis=0))


def test_a_twin_that_gives_the_wrong_kinds_or_shapes_is_refused_in_one_line():
    class Bad(ToyTwin):
        kinds = ("position",)

    with pytest.raises(ValueError, match="give each of the 2 state variables a kind"):
        TwinStage(Bad(), 300, ("x", "v"))

    class Short(ToyTwin):
        def predict(self, s, a):
            return s[:, :1]

    stage = TwinStage(Short(), 300, ("x", "v"))
    with pytest.raises(ValueError, match=r"predicted \(10, 1\) for S' of \(10, 2\)"):
        stage.fit(*_rows(10))


def _evidence(z=None, bias=(0.0, 0.0), hyp=(), ratio=1.5):
    z = {"R_spread_pos": 0.0, "R_spread_vel": 0.0, "R_shift_pos": 0.0, "R_shift_vel": 0.0,
         **(z or {})}
    ev = TwinEvidence(z, {"R_spread_pos": ratio}, np.array(bias, dtype=float),
                      np.where(np.abs(bias) >= 5, 50.0, 1.0), names=("x", "v"))
    ev.hypotheses = [(Hypothesis(n, c, w, np.zeros((1, 2)), *sized),
                      np.array(d, dtype=float)) for n, c, w, d, *sized in hyp]
    return ev


def test_the_rule_names_each_class_and_says_why():
    push = ("push", "force", "a push on v", (0.0, 1.0))
    heavier = ("gravity", "dynamics", "gravity", (1.0, -0.2), 0.1, 1.0, "×{:.3g}")
    got = attribute(_evidence(bias=(0.5, 40.0), hyp=[push, heavier]))
    assert got["attribution"] == "force" and "a bias on v (+40.0 sd)" in got["evidence"]
    # The size is fitted along the push's effect (1 a unit: 40 of them, the x bias aside).
    assert "a push on v (+40) explains (cos +1.00)" in got["evidence"]
    assert got["twin"]["size"] == 40.0
    got = attribute(_evidence(bias=(-30.0, 6.0), hyp=[push, heavier]))
    # −30 σ along a template whose 0.1 of gravity gives +1: gravity ×(1 − 3.0) — the size
    # measured, not the template's ×1.1.
    assert got["attribution"] == "dynamics" and "gravity (×-2) explains" in got["evidence"]
    assert "×1.1" not in got["evidence"]
    got = attribute(_evidence({"R_spread_pos": 8.0}, bias=(3.0, -4.0), hyp=[push]))
    assert got["attribution"] == "sensor" and "spreads ×1.5 (+8.0 sd)" in got["evidence"]
    got = attribute(_evidence(bias=(1.0, 2.0), hyp=[push]))
    assert got["attribution"] == "actuator" and got["evidence"].startswith("physics intact")
    got = attribute(_evidence({"R_spread_vel": 6.0}, bias=(9.0, -1.0), hyp=[push]))
    assert got["attribution"] == "actuator" and "velocities' residual moved" in got["evidence"]
    # A mean far from a baseline at rounding but inside the window's own scatter (zero-mean
    # noise): no bias.
    ev = _evidence({"R_spread_pos": 8.0}, bias=(0.0, 1e9), hyp=[push])
    ev.t = np.array([0.0, 1.2])
    assert attribute(ev)["attribution"] == "sensor"
    # A passive loop has no action to change: the same evidence is a push.
    assert attribute(_evidence(bias=(1.0, 2.0)), passive=True)["attribution"] == "force"
    # A bias no hypothesis explains, with no spread: unknown.
    got = attribute(_evidence(bias=(40.0, 1.0), hyp=[push]))
    assert got["attribution"] == "unknown" and "no change the twin can simulate" in got["evidence"]
    # A baseline at rounding: its σ in words, not a 13-digit figure.
    got = attribute(_evidence(bias=(0.0, 3e12), hyp=[push]))
    assert "(+≫1000 sd)" in got["evidence"]
    # No evidence: unknown, with the reason given.
    got = attribute(None, note="Reacher-v5's observation is not its state")
    assert got == {"attribution": "unknown",
                   "evidence": "Reacher-v5's observation is not its state"}
    assert set(CLASSES) == {"sensor", "actuator", "force", "dynamics"}


# In the toy a push on v is an offset of u, term for term: the bank names one of the two and
# the other next, as likely (a MuJoCo body's push and an actuator's offset differ).
@pytest.mark.parametrize(("perturbation", "params", "cls"), [
    ("obs_noise", {"sigma": 0.2}, {"sensor"}), ("push", {"force": 0.5}, {"force", "actuator"})])
def test_a_live_detection_carries_the_twins_class_and_the_same_evidence_offline(
        perturbation, params, cls, tmp_path):
    cfg = SessionConfig(speed=None, preset_spec={"name": "toy", "description": "",
                                                 "bins": 3, "window": 200, "stride": 50},
                        calibration_windows=4, baseline_windows=80, seed=3,
                        detector="persistence", false_alarms="1/1000windows")
    session = Session(cfg, source=_TwinToy(), record=tmp_path / "r")
    onset = 200 + 90 * 50
    session.schedule(onset, "perturb", name=perturbation, params=params)
    snap = run_headless(session, steps=onset + 60 * 50)
    assert snap.error is None
    (det,) = [e for e in session.events_since(0) if e["kind"] == "detected"]
    assert det["attribution"] in cls, det["evidence"]
    if perturbation == "push":
        assert "a push on v" in det["evidence"] and "actuator u: offset" in det["evidence"]
    (on,) = [e for e in session.events_since(0)
             if e["kind"] == "alarm_on" and e["metric"] == "IDT"][:1]
    # The class is named a window length (200 transitions: 4 windows) after the alarm's
    # first window, which may end at the change itself, in an `attributed` event; the
    # detection is told with it, its latency as of the alarm.
    (named,) = [e for e in session.events_since(0)
                if e["kind"] == "attributed" and e["alarm_i"] == on["i"]]
    assert "attribution" not in on and named["i"] == on["i"] + 200 == det["i"]
    assert named["attribution"] in cls and named["evidence"] == det["evidence"]
    assert snap.attribution["alarm_i"] >= on["i"]
    # The recording's windows hold the channels, and the same class comes from its rows
    # through a stage of its own (the symbols' calibration rows, the baseline's windows).
    from idt_desk.plugin import load_recording

    rec = load_recording(tmp_path / "r")
    w, t = rec.windows, rec.transitions
    assert np.isfinite(w["R_spread_pos"]).all() and set(w["x_twin"].dropna()) <= {0.0, 1.0}
    s, s2, a = (t[[f"{k}_{j}" for j in range(n)]].to_numpy() for k, n in
                (("s", 2), ("s_next", 2), ("a", 1)))
    stage, channels = twin_over(ToyTwin(), 200, ("x", "v"), s, a, s2, w["end"].to_numpy(),
                                fit=slice(0, 200 + 3 * 50), baseline=slice(4, 84),
                                action_names=("u",))
    np.testing.assert_allclose(channels["R_spread_vel"], w["R_spread_vel"], atol=1e-9)
    row = int(np.flatnonzero(w["end"].to_numpy() == det["i"])[0])
    assert attribute(evidence(stage, row))["evidence"] == det["evidence"]


def test_a_loop_without_a_twin_keeps_working_and_says_so_at_its_alarm():
    cfg = SessionConfig(speed=None, preset_spec={"name": "toy", "description": "",
                                                 "bins": 3, "window": 200, "stride": 50},
                        calibration_windows=4, baseline_windows=80, seed=3,
                        detector="persistence", false_alarms="1/1000windows")
    session = Session(cfg, source=ToySource())
    session.schedule(4700, "perturb", name="obs_noise", params={"sigma": 0.2})
    snap = run_headless(session, steps=7700)
    assert snap.error is None and np.isnan(snap.windows["R_spread_pos"]).all()
    (det,) = [e for e in session.events_since(0) if e["kind"] == "detected"]
    assert det["attribution"] == "unknown"
    assert det["evidence"] == ToySource.twin_note
    # The twin switched off by the setting: the same.
    off = Session(SessionConfig(**{**cfg.__dict__, "twin": False}), source=_TwinToy())
    assert off.pipeline.twin_stage is None and "R_spread_pos" not in off.monitor.metrics


def test_the_mujoco_twin_predicts_clean_transitions_to_rounding_and_a_mismatched_one_does_not():
    import gymnasium as gym

    from idt_desk.gym.twin import MujocoTwin, mujoco_twin

    for env_id in ("HalfCheetah-v5", "Hopper-v5"):
        env = gym.make(env_id)
        obs, _ = env.reset(seed=2)
        rng = np.random.default_rng(2)
        s, a, s2 = [], [], []
        for _ in range(200):
            u = rng.uniform(-1, 1, env.action_space.shape)
            nxt, _, term, trunc, _ = env.step(u)
            s.append(obs), a.append(u), s2.append(nxt)
            obs = env.reset()[0] if term or trunc else nxt
        s, a, s2 = (np.array(x) for x in (s, a, s2))
        exact = MujocoTwin(env_id)
        first = exact.predict(s, a)
        assert np.abs(first - s2).max() < 1e-8
        # Each row's prediction is (S, A)'s alone: not the rows predicted before it (the
        # solver's warm start), so a replay that warmed its kernels first predicts the same.
        exact.predict(rng.standard_normal((3, len(obs))), rng.uniform(-1, 1, (3, a.shape[1])))
        exact.hypotheses(s[:4], a[:4])
        np.testing.assert_array_equal(exact.predict(s[::-1], a[::-1])[::-1], first)
        assert exact.kinds.count("velocity") == exact.model.nv
        off = MujocoTwin(env_id, mismatch=0.1)
        assert np.abs(off.predict(s, a) - s2).max() > 1e-4
        assert "masses ×1.1 and friction ×0.9" in off.description
    # Its hypotheses point where the change acts: a push along x on the forward velocity,
    # gravity on the vertical one (HalfCheetah: rootz, rooty, 6 joints; vx, vz, ...).
    cheetah = MujocoTwin("HalfCheetah-v5")
    env = gym.make("HalfCheetah-v5")
    obs, _ = env.reset(seed=0)
    rows = np.array([obs] * 5)
    rows[:, 0] = 1.0  # in the air: no contact takes the push
    hyp = {h.name: h.delta.mean(axis=0) for h in cheetah.hypotheses(rows, np.zeros((5, 6)))}
    assert set(hyp) == {"force_x", "gravity"}
    vx, vz = 8, 9
    assert hyp["force_x"][vx] > 10 * abs(hyp["force_x"][vz])  # a push forward: faster
    assert hyp["gravity"][vz] < -10 * abs(hyp["gravity"][vx])  # heavier: falls faster
    for env_id, why in (("Reacher-v5", "not its state"), ("Pendulum-v1", "not a MuJoCo env")):
        twin, note = mujoco_twin(env_id)
        assert twin is None and why in note


def test_the_pendulums_twin_is_its_own_equations():
    from idt_desk_sources.pendulum import PendulumSource

    src = PendulumSource()
    src.reset(0)
    b = src.step(3000)
    twin = src.twin()
    assert np.abs(twin.predict(b.s, None) - b.s_next).max() < 1e-9
    src.set_perturbation("gravity", {"factor": 1.3})
    b = src.step(500)
    assert np.abs(twin.predict(b.s, None) - b.s_next).max() > 1e-6
    assert {h.cls for h in twin.hypotheses(b.s[:5], None)} == {"dynamics"}


def _heavier_from(env, seed: int, steps: int, at: int) -> None:
    """Random small torques for ``steps`` steps; gravity ×1.5 from step ``at`` on."""
    env.reset(seed=seed)
    env.action_space.seed(seed)  # the same torques every run (unseeded, one run in a few
    # had the twin alarm on the clean stretch)
    for t in range(steps):
        _, _, term, trunc, _ = env.step(env.action_space.sample() * 0.2)
        if t == at:
            env.unwrapped.model.opt.gravity[:] *= 1.5
        if term or trunc:
            env.reset()


def test_the_wrapper_steps_the_envs_own_twin_and_says_why_when_there_is_none():
    import gymnasium as gym

    from idt_desk.gym import IDTMonitor

    env = IDTMonitor(gym.make("HalfCheetah-v5"), window=100, stride=50, baseline_windows=40,
                     calibration_windows=2)
    _heavier_from(env, seed=0, steps=3000, at=2500)
    w = env.windows
    assert np.isfinite(w["R_spread_vel"]).all()
    assert w["x_twin"].iloc[-5:].eq(1.0).all()  # the twin sees the heavier gravity
    assert w["x_twin"].iloc[42:48].eq(0.0).all()  # and nothing before it (step 2,500)
    plain = IDTMonitor(gym.make("Pendulum-v1"), window=100, stride=50)
    assert plain._stream.pipeline.twin_stage is None
    assert "Pendulum-v1 is not a MuJoCo env" in plain._stream.twin_note
    off = IDTMonitor(gym.make("HalfCheetah-v5"), twin=False)
    assert off._stream.pipeline.twin_stage is None
    with pytest.raises(TypeError, match=r"twin must be True, False or an idt_desk\.Twin"):
        IDTMonitor(gym.make("HalfCheetah-v5"), twin="yes")


def test_a_wrapped_mujoco_envs_recording_keeps_its_twin_and_replays_it_exactly(tmp_path):
    import gymnasium as gym
    from idt_desk_sources.replay import ReplaySource

    from idt_desk.gym import IDTMonitor
    from idt_desk.plugin import load_recording

    env = IDTMonitor(gym.make("HalfCheetah-v5"), window=100, stride=50, baseline_windows=30,
                     calibration_windows=2, record=tmp_path / "rec")
    _heavier_from(env, seed=1, steps=2600, at=2200)
    live = env.windows
    env.close()
    rec = load_recording(tmp_path / "rec")
    assert rec.config["source"]["details"] == {"env_id": "HalfCheetah-v5",
                                               "twin": {"env_id": "HalfCheetah-v5"}}
    for col in ("R_spread_vel", "x_twin", "x_IDT"):
        np.testing.assert_array_equal(rec.windows[col].to_numpy(), live[col].to_numpy())
    replay = Session(SessionConfig(speed=None), source=ReplaySource(path=str(tmp_path / "rec")),
                     record=tmp_path / "rep")
    snap = run_headless(replay)
    assert replay.pipeline.twin_stage is not None and snap.error is None
    again = load_recording(tmp_path / "rep").windows
    # The flags exactly; the channel to rounding: in one full-suite run (not alone) one
    # window's R_spread_vel, at its floor (log10 of 1e-8 and a residual at rounding), came
    # back 1.8e-15 off, the flags the same. Open: which state of the process moves it.
    np.testing.assert_allclose(again["R_spread_vel"].to_numpy(), live["R_spread_vel"].to_numpy(),
                               rtol=0, atol=1e-12)
    for col in ("x_twin", "x_IDT"):
        np.testing.assert_array_equal(again[col].to_numpy(), live[col].to_numpy())
    assert (live["x_twin"].to_numpy()[-3:] == 1.0).all()  # the heavier gravity, seen


def _plain_wrapper(env):
    import gymnasium as gym

    class Fault(gym.Wrapper):
        def __init__(self, env, gain):
            super().__init__(env)
            self.gain = gain

        def step(self, action):
            return self.env.step(self.gain * action)

    return Fault(env, 1.0)


def _env_rows(env, n: int, seed: int):
    obs, _ = env.reset(seed=seed)
    rng = np.random.default_rng(seed)
    s, a, s2 = [], [], []
    for _ in range(n):
        u = rng.uniform(-1, 1, env.action_space.shape)
        nxt, _, term, trunc, _ = env.step(u)
        s.append(obs), a.append(u), s2.append(nxt)
        obs = env.reset()[0] if term or trunc else nxt
    return tuple(np.array(x) for x in (s, a, s2))


def test_the_twin_is_the_users_own_env_copied_under_any_wrappers_and_any_xml(tmp_path):
    """The twin copies the model of the env instance given: a plain user wrapper (which
    gymnasium.make(env.spec) refused), an unregistered env of a custom XML (a heavier torso),
    and a change to the env's model after the copy leaves the twin as it was."""
    import gymnasium as gym
    from gymnasium.envs.mujoco.half_cheetah_v5 import HalfCheetahEnv

    from idt_desk.gym import IDTMonitor
    from idt_desk.gym.twin import MujocoTwin

    env = _plain_wrapper(gym.make("HalfCheetah-v5"))
    with pytest.raises(Exception):  # noqa: B017 - what the twin used to be built from
        gym.make(env.spec)
    mon = IDTMonitor(env, window=100, stride=50)
    twin = mon._stream.pipeline.twin_stage.twin
    s, a, s2 = _env_rows(env, 100, seed=3)
    assert np.abs(twin.predict(s, a) - s2).max() < 1e-8
    # A custom XML: the torso twice as heavy (its geom's density), no registry entry.
    import re
    from pathlib import Path

    import gymnasium.envs.mujoco as mj

    xml = (Path(mj.__file__).parent / "assets" / "half_cheetah.xml").read_text()
    heavy = re.sub(r'(<geom fromto="-\.5 0 0 \.5 0 0" name="torso" size="0\.046" type="capsule")',
                   r'\1 density="2000"', xml)
    assert heavy != xml
    path = tmp_path / "heavy_cheetah.xml"
    path.write_text(heavy)
    custom = HalfCheetahEnv(xml_file=str(path))
    s, a, s2 = _env_rows(custom, 100, seed=4)
    own = MujocoTwin(custom)
    assert np.abs(own.predict(s, a) - s2).max() < 1e-8
    assert np.abs(MujocoTwin("HalfCheetah-v5").predict(s, a) - s2).max() > 1e-4
    # The env's model changed after the copy (a fault): the twin keeps the model it copied.
    custom.unwrapped.model.body_mass[1] *= 1.5
    assert np.abs(own.predict(s, a) - s2).max() < 1e-8
    own.close()
    custom.step(custom.action_space.sample())  # the user's env still works


def test_a_velocity_read_at_the_observations_clip_is_a_row_the_twin_cannot_predict():
    """Hopper-v5 clips the velocities it observes to ±10: a row read at the clip does not say
    the state, so the twin gives it NaN, and the stage's scale and channels leave it out (the
    clean residual stays at rounding: the twin is exact)."""
    import gymnasium as gym

    from idt_desk.gym.twin import MujocoTwin
    from idt_desk.metrics.twin import TwinStage

    env = gym.make("Hopper-v5")
    twin = MujocoTwin(env)
    assert twin.clip == 10.0 and "velocity clip (±10)" in twin.description
    assert MujocoTwin(gym.make("HalfCheetah-v5")).clip is None
    obs, _ = env.reset(seed=1)
    rng = np.random.default_rng(1)
    s, a, s2 = [], [], []
    for _ in range(400):
        u = rng.uniform(-1, 1, 3)
        nxt, _, term, trunc, _ = env.step(u)
        s.append(obs), a.append(u), s2.append(nxt)
        obs = env.reset()[0] if term or trunc else nxt
    s, a, s2 = (np.array(v) for v in (s, a, s2))
    s[7, 6] = 10.0  # as a fast hop reads it
    pred = twin.predict(s, a)
    assert np.isnan(pred[7]).all() and np.isfinite(np.delete(pred, 7, axis=0)).all()
    stage = TwinStage(twin, 100, twin.state_names)
    stage.fit(s, a, s2)
    assert stage.exact and stage.misfit < 1e-12
    ch = stage.push(s, a, s2, np.array([100, 200, 400]))
    assert all(np.isfinite(v).all() for v in ch.values())
