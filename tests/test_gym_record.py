"""``record=`` of IDTMonitor and IDTCallback: the env's stream as an ordinary recording.

The recording is written by ``idt_desk.Recorder`` (the dashboard's own pipeline), the
wrapper's and the callback's windows by their own streams: the two must agree window for
window, and the recording must replay to itself.
"""

from __future__ import annotations

import contextlib
import warnings

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces
from idt_desk_sources.replay import ReplaySource

from idt_desk import Preset
from idt_desk.gym import IDTMonitor
from idt_desk.live.session import Session, SessionConfig, run_headless
from idt_desk.recordings import RecordingError, load_recording

PIPE = dict(window=50, stride=10, calibration_windows=5, baseline_windows=50)
#: The callback's runs are shorter: 512 transitions per env.
CB_PIPE = dict(window=50, stride=10, calibration_windows=5, baseline_windows=20)
#: Window columns a recording keeps that the wrapper computes too.
SAME = ("start", "end", "P", "H_f", "H_b", "dH", "MI", "H_S", "H_A", "H_S_next", "H_SA",
        "H_SAS", "K_SAS", "unique_frac", "out_of_range", "reward")
FLAGS = ("x_P", "x_H_f", "x_H_b", "x_dH", "x_IDT")


def _load(path):
    """The recording, which must be complete and load without a warning."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        rec = load_recording(path)
    assert rec.complete and rec.warnings == [], rec.warnings
    return rec


def _same_windows(recorded, mine):
    """A recording's windows against a wrapper's (or callback's) ``windows``."""
    assert len(recorded) == len(mine) > 0
    for c in SAME:
        np.testing.assert_allclose(recorded[c].to_numpy(np.float64), mine[c].to_numpy(np.float64),
                                   rtol=0, atol=1e-12, err_msg=c)
    for c in FLAGS:
        np.testing.assert_array_equal(recorded[c].to_numpy(np.float64),
                                      mine[c].to_numpy(np.float64), err_msg=c)


def _replayed(path, out):
    session = Session(SessionConfig(speed=None), source=ReplaySource(path=str(path)), record=out)
    run_headless(session)
    return _load(out)


def _run(env, steps, seed, switch=None):
    """Seeded random actions; from step ``switch`` on always action 0 (the alarm's change)."""
    env.action_space.seed(seed)
    env.reset(seed=seed)
    for i in range(steps):
        a = env.action_space.sample()
        if switch is not None and i >= switch:
            a = np.zeros_like(a) if isinstance(a, np.ndarray) else 0
        *_, term, trunc, _ = env.step(a)
        if term or trunc:
            env.reset()


@pytest.mark.parametrize("env_id", ["CartPole-v1", "Pendulum-v1"])
def test_the_recording_has_the_wrappers_windows_and_replays_to_them(tmp_path, env_id):
    path = tmp_path / "run"
    # A generous budget, so that the switch of policy at 1000 is alarmed within the test.
    env = IDTMonitor(gym.make(env_id), record=path, false_alarms="1/100windows", **PIPE)
    assert env.recorder is not None
    _run(env, 1500, seed=0, switch=1000)
    env.recorder.note("switched at 1000")
    mine, n = env.windows, env.n_transitions
    env.close()
    rec = _load(path)
    d_obs = env.observation_space.shape[0]
    d_act = 1 if isinstance(env.action_space, spaces.Discrete) else env.action_space.shape[0]
    assert rec.state_names == [f"obs_{j}" for j in range(d_obs)]
    assert rec.action_names == [f"act_{j}" for j in range(d_act)]
    assert len(rec.transitions) == n == 1500
    assert rec.config["source"]["rate"] == pytest.approx(
        50.0 if env_id == "CartPole-v1" else 20.0)  # render_fps, or 1 / dt
    _same_windows(rec.windows, mine)
    assert np.nansum(mine["x_IDT"]) > 0  # the switch is alarmed: the flags are not all 0
    ev = rec.events
    assert ev[ev["kind"] == "note"].iloc[0]["text"] == "switched at 1000"
    assert ev["kind"].iloc[-1] == "session_end"
    if env_id == "CartPole-v1":
        tr = rec.transitions
        assert tr["episode"].iloc[-1] == env.episode > 10
        _same_windows(_replayed(path, tmp_path / "again").windows, mine)


def test_a_view_of_principal_components_is_recorded_and_replays_to_it(tmp_path):
    # Random torques on HalfCheetah: the default ("auto") bins a few principal components;
    # the recording states the preset, and its calibration rows choose the same view again.
    path = tmp_path / "run"
    env = IDTMonitor(gym.make("HalfCheetah-v5"), record=path, **{**PIPE, "window": 100,
                                                                   "stride": 20})
    _run(env, 1200, seed=1)
    mine, info = env.windows, env._stream.latest
    env.close()
    assert info["view"].startswith("S ") and env.symbolizers[0].components is not None
    rec = _load(path)
    assert rec.config["preset"]["name"] == "auto" and rec.config["preset"]["auto_view"]
    _same_windows(rec.windows, mine)
    # The calibration event says the view, and the event table shows it.
    cal = rec.events[rec.events["kind"] == "calibrated"].iloc[0].to_dict()
    assert cal["view"] == info["view"]
    from idt_desk_widgets.events import describe_event

    assert describe_event(cal)[1].endswith(f"; view {info['view']}")
    _same_windows(_replayed(path, tmp_path / "again").windows, mine)


class _Walk(gym.Env):
    """A random walk pushed by Discrete(3) actions -1, 0, 1; no dt or render_fps."""

    def __init__(self):
        self.observation_space = spaces.Box(-np.inf, np.inf, (2,), np.float64)
        self.action_space = spaces.Discrete(3, start=-1)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.x = self.np_random.normal(size=2)
        return self.x.copy(), {}

    def step(self, action):
        self.x = 0.9 * self.x + 0.2 * action + 0.3 * self.np_random.normal(size=2)
        return self.x.copy(), float(-abs(self.x[0])), False, False, {}


def test_a_discrete_space_keeps_one_symbol_per_value_though_calibration_misses_one(tmp_path):
    # Calibration sees the actions -1 and 0 only: the recording's bins span the space's
    # declared values (-1, 0, 1) all the same, as the wrapper's do, and the replay's too.
    # The paper's rule: no detector to calibrate (seconds), the flags compared all the same.
    env = IDTMonitor(_Walk(), record=tmp_path / "walk", bins=4, detector="paper", **PIPE)
    env.reset(seed=1)
    rng = np.random.default_rng(1)
    for i in range(800):
        env.step(int(rng.integers(-1, 2 if i >= 200 else 1)))
    mine = env.windows
    env.close()
    rec = _load(tmp_path / "walk")
    assert mine["H_A"].iloc[-1] > np.log2(2.5)  # three actions, in bits
    assert rec.config["source"]["rate"] == 1.0  # no dt or render_fps: the step count
    _same_windows(rec.windows, mine)
    cal = rec.events[rec.events["kind"] == "calibrated"].iloc[0]
    assert cal["value_ranges"] == {"act_0": [-1.0, 1.0]}
    _same_windows(_replayed(tmp_path / "walk", tmp_path / "again").windows, mine)


def test_a_budget_per_episode_is_recorded_as_given(tmp_path):
    # The recording is the wrapper's own session's, whose loop knows CartPole's time limit:
    # a budget per episode is recorded as it was given (it was turned into windows for the
    # second session a recorded wrapper ran).
    env = IDTMonitor(gym.make("CartPole-v1"), record=tmp_path / "w",
                     false_alarms="1/2episodes", **PIPE)
    _run(env, 1500, seed=2, switch=1000)
    mine = env.windows
    env.close()
    rec = _load(tmp_path / "w")
    assert rec.config["session"]["false_alarms"] == "1/2episodes"
    assert rec.config["source"]["episode_steps"] == 500
    assert env.monitor.budget.unit == "episodes"
    assert np.nansum(mine["x_IDT"]) > 0
    _same_windows(rec.windows, mine)


def test_an_exception_leaving_the_with_block_closes_the_recording_as_an_error(tmp_path):
    with pytest.raises(RuntimeError, match="boom"), \
            IDTMonitor(gym.make("CartPole-v1"), record=tmp_path / "e", **PIPE) as env:
        _run(env, 100, seed=0)
        raise RuntimeError("boom")
    rec = load_recording(tmp_path / "e")
    end = rec.events[rec.events["kind"] == "session_end"].iloc[0]
    assert end["state"] == "error" and "boom" in end["error"]
    assert len(rec.transitions) == 100


def test_a_preset_object_is_recorded_by_value_and_replays_to_it(tmp_path):
    """A preset of the user's, with groups, is recorded as it is (it was refused: the
    recording's second session took a preset by name only)."""
    from idt_desk_sources.replay import ReplaySource

    from idt_desk.live.session import Session, SessionConfig, run_headless

    plain = Preset("mine", "no groups", bins=4, window=50, stride=10)
    grouped = Preset("pairs", "two groups", bins=3, window=50, stride=10,
                     state_groups=((0, 1), (2, 3)))
    for name, preset in (("p", plain), ("g", grouped)):
        env = IDTMonitor(gym.make("CartPole-v1"), preset, record=tmp_path / name,
                         calibration_windows=5, baseline_windows=20, detector="paper")
        _run(env, 400, seed=3)
        mine = env.windows
        env.close()
        rec = _load(tmp_path / name)
        assert rec.config["preset"]["bins"] == preset.bins
        assert rec.config["preset"]["state_groups"] == (
            None if preset.state_groups is None else [list(g) for g in preset.state_groups])
        _same_windows(rec.windows, mine)
        run_headless(Session(SessionConfig(speed=None), record=tmp_path / f"{name}-again",
                             source=ReplaySource(path=str(tmp_path / name))))
        _same_windows(_load(tmp_path / f"{name}-again").windows, mine)


def test_bad_record_input_is_refused_at_construction(tmp_path):
    IDTMonitor(gym.make("CartPole-v1"), record=tmp_path / "taken", **PIPE).close()
    with pytest.raises(RecordingError, match="already holds a recording"):
        IDTMonitor(gym.make("CartPole-v1"), record=tmp_path / "taken", **PIPE)
    with pytest.raises(RecordingError, match="already holds a recording"):
        IDTMonitor(gym.make("CartPole-v1"), record=str(tmp_path / "taken"), **PIPE)
    with pytest.raises(TypeError, match="record must be a path"):
        IDTMonitor(gym.make("CartPole-v1"), record=1)
    with pytest.raises(ValueError, match="persist"):
        IDTMonitor(gym.make("CartPole-v1"), record=tmp_path / "a", persist=0)
    assert not (tmp_path / "a").exists()  # nothing written for a refused wrapper
    assert IDTMonitor(_Walk(), bins=2).recorder is None


def test_what_the_recorders_second_session_refused_is_recorded_and_replays(tmp_path):
    """persist, k, an entropy correction and a Discrete space of more values than bins were
    refused with record= (its second session ran the defaults and bins alike); the wrapper's
    own session records them now, and the replay gives its windows."""
    from idt_desk_sources.replay import ReplaySource

    from idt_desk.live.session import Session, SessionConfig, run_headless

    for name, make, kw in (("persist", lambda: gym.make("CartPole-v1"), {"persist": 3}),
                           ("k", lambda: gym.make("CartPole-v1"), {"k": 2.5}),
                           ("mm", lambda: gym.make("CartPole-v1"),
                            {"correction": "miller-madow"}),
                           ("walk", _Walk, {"bins": 2})):
        opts = {**PIPE, "detector": "persistence", **kw}
        env = IDTMonitor(make(), record=tmp_path / name, **opts)
        _run(env, 800, seed=4)
        mine = env.windows
        env.close()
        _same_windows(_load(tmp_path / name).windows, mine)
        run_headless(Session(SessionConfig(speed=None), record=tmp_path / f"{name}-again",
                             source=ReplaySource(path=str(tmp_path / name))))
        _same_windows(_load(tmp_path / f"{name}-again").windows, mine)


# -------------------------------------------------------------------------------------------
# IDTCallback
# -------------------------------------------------------------------------------------------


@contextlib.contextmanager
def _ppo(n_envs: int, seed: int):
    """PPO on ``n_envs`` CartPoles, torch on one thread meanwhile (restored after)."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("stable_baselines3")
    from stable_baselines3 import PPO
    from stable_baselines3.common.env_util import make_vec_env

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        venv = make_vec_env("CartPole-v1", n_envs=n_envs, seed=seed)
        # One epoch of one batch per rollout: the tests are about the rollouts, not learning.
        yield PPO("MlpPolicy", venv, n_steps=128, batch_size=128 * n_envs, n_epochs=1,
                  seed=0, device="cpu")
    finally:
        torch.set_num_threads(threads)


def test_callback_writes_one_recording_per_env_equal_to_its_windows(tmp_path):
    pytest.importorskip("stable_baselines3")
    from idt_desk.gym import IDTCallback

    with _ppo(2, seed=0) as model:
        # The paper's rule: four streams' detectors would take seconds each to calibrate;
        # the one-env test below runs the default detector.
        callback = IDTCallback(record=tmp_path / "train", detector="paper", **CB_PIPE)
        model.learn(total_timesteps=1024, callback=callback)
        assert sorted(p.name for p in (tmp_path / "train").iterdir()) == ["env-0", "env-1"]
        recs = [_load(tmp_path / "train" / f"env-{i}") for i in range(2)]
        for i, rec in enumerate(recs):
            _same_windows(rec.windows, callback.windows(i))
            assert len(rec.transitions) == 512 and rec.action_names == ["act_0"]
            assert rec.config["source"]["rate"] == 50.0
        assert not recs[0].transitions["s_0"].equals(recs[1].transitions["s_0"])

        # learn() again: the callback goes on, its recordings stay as they ended.
        with pytest.warns(UserWarning, match="ended with the previous learn"):
            model.learn(total_timesteps=256, callback=callback, reset_num_timesteps=False)
        assert callback.recorders == []
        for i, rec in enumerate(recs):
            again = _load(tmp_path / "train" / f"env-{i}")
            assert len(again.transitions) == 512 and len(again.windows) == len(rec.windows)
            assert len(callback.windows(i)) > len(rec.windows)
            _same_windows(again.windows, callback.windows(i).iloc[:len(rec.windows)])


def test_callback_with_one_env_records_at_the_path_and_refuses_a_taken_one(tmp_path):
    pytest.importorskip("stable_baselines3")
    from idt_desk.gym import IDTCallback

    with _ppo(1, seed=1) as model:
        callback = IDTCallback(record=tmp_path / "one", **CB_PIPE)
        model.learn(total_timesteps=384, callback=callback)
    rec = _load(tmp_path / "one")
    _same_windows(rec.windows, callback.windows(0))
    with pytest.raises(RecordingError, match="already holds a recording"):
        IDTCallback(record=tmp_path / "one")
    with pytest.raises(ValueError, match="k"):
        IDTCallback(record=tmp_path / "new", k=-1.0)


def test_bench_wrapper_reports_the_ratio_and_the_same_windows(capsys):
    from idt_desk.cli.main import main

    assert main(["bench", "wrapper", "--env-id", "Pendulum-v1", "--steps", "1200",
                 "--rounds", "1", "--baseline-windows", "20"]) == 0
    out = capsys.readouterr().out
    ratio = [ln for ln in out.splitlines() if ln.startswith("recording costs")]
    assert len(ratio) == 1 and ratio[0].endswith("the same bit for bit: yes"), out
    assert float(ratio[0].split()[2].rstrip("x")) > 0
    assert "IDTMonitor(record=):" in out and "Pendulum-v1 alone:" in out
