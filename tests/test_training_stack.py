"""What a researcher's training stack expects of the package: a version, type hints, an exit
status to gate on, and a wrapper Gymnasium can rebuild from its spec."""

from __future__ import annotations

import json

import gymnasium as gym
import numpy as np

import idt_desk
from idt_desk.cli.run import ALARM_EXIT
from idt_desk.gym import IDTMonitor

from .cli_call import call


def test_the_version_is_said_and_is_the_installed_one():
    from importlib.metadata import version

    rc, out, _ = call(["--version"])
    assert rc == 0 and out.strip() == f"idt-desk {version('idt-desk')}"


def test_run_fails_on_an_alarm_when_asked_and_only_then(tmp_path):
    base = ["run", "--source", "pendulum", "--steps", "40000", "--baseline-windows", "60",
            "--quiet"]
    kick = ["--perturb", "sensor_noise:sigma_angle=0.3@25-40"]
    rc, out, err = call([*base, *kick, "--fail-on-alarm"])
    assert rc == ALARM_EXIT, (out, err)
    rc, out, _ = call([*base, *kick])
    assert rc == 0 and "alarm" in out  # without the option an alarm is only said
    rc, _, err = call([*base, "--fail-on-alarm"])
    assert rc == 0, err  # a clean run passes


def _loop(path, dead_from=None):
    """A toy loop x' = 0.9·x + u + ε; its actuator dead from ``dead_from`` on."""
    rng = np.random.default_rng(0)
    n = 5000
    x = np.zeros((n + 1, 2))
    u = rng.normal(size=(n, 1))
    for t in range(n):
        gain = 0.0 if dead_from is not None and t >= dead_from else 1.0
        x[t + 1] = 0.9 * x[t] + gain * np.array([u[t, 0], -0.5 * u[t, 0]]) + \
            0.3 * rng.normal(size=2)
    with idt_desk.Recorder(path, ["x", "v"], ["u"], window=100, stride=50,
                           calibration_windows=2, baseline_windows=30) as rec:
        rec.add(x[:-1], u, x[1:])


def test_runs_fails_on_an_alarm_when_asked(tmp_path):
    _loop(tmp_path / "runs" / "clean")
    rc, out, err = call(["runs", str(tmp_path / "runs"), "--fail-on-alarm", "--json"])
    assert rc == 0 and json.loads(out)[0]["alarms"] == 0, err
    _loop(tmp_path / "runs" / "dead", dead_from=3000)
    rc, out, _ = call(["runs", str(tmp_path / "runs"), "--fail-on-alarm", "--json"])
    assert rc == 3 and {r["path"]: r["alarms"] > 0 for r in json.loads(out)} == \
        {"clean": False, "dead": True}


def test_the_wrapper_is_rebuilt_from_its_spec():
    env = IDTMonitor(gym.make("CartPole-v1"), window=100, stride=50, calibration_windows=2,
                     baseline_windows=30)
    kwargs = env.spec.additional_wrappers[-1].kwargs
    assert kwargs["window"] == 100 and kwargs["baseline_windows"] == 30
    again = gym.make(env.spec)
    assert isinstance(again, IDTMonitor) and again.preset.window == 100
    for e in (env, again):
        e.reset(seed=0)
        e.action_space.seed(0)
        for _ in range(400):
            *_, term, trunc, _ = e.step(e.action_space.sample())
            if term or trunc:
                e.reset()
    assert again.windows.equals(env.windows)  # the same settings, the same windows
    env.close()
    again.close()


class _DeadActuator(gym.Wrapper):
    """From step ``at`` on, the env gets action 0 whatever the policy commands."""

    def __init__(self, env, at):
        super().__init__(env)
        self.at, self.n = at, 0

    def step(self, action):
        self.n += 1
        return self.env.step(0 if self.n > self.at else action)


def _train(tmp_path, dead_at, steps=6144):
    from stable_baselines3 import PPO

    from idt_desk.gym import IDTCallback, StopTrainingOnAlarm

    env = _DeadActuator(gym.make("CartPole-v1"), dead_at)
    # A frozen policy (learning rate 0): the loop changes only where the env does.
    model = PPO("MlpPolicy", env, n_steps=512, batch_size=128, n_epochs=1, learning_rate=0.0,
                seed=0, device="cpu", tensorboard_log=str(tmp_path / "tb"))
    stop = StopTrainingOnAlarm()
    cb = IDTCallback(window=100, stride=50, calibration_windows=2, baseline_windows=30,
                     on_alarm=stop)
    model.learn(steps, callback=cb, tb_log_name="run")
    return model, cb, stop


def _scalars(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    (run,) = (tmp_path / "tb").iterdir()
    acc = EventAccumulator(str(run))
    acc.Reload()
    return {tag: [e.value for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def test_the_callbacks_alarm_stops_a_perturbed_training_and_reaches_tensorboard(tmp_path):
    model, cb, stop = _train(tmp_path, dead_at=3000)
    assert model.num_timesteps < 6144 and stop.alarm is not None
    assert stop.alarm["env"] == 0 and stop.alarm["end"] > 3000  # after the actuator died
    assert len(cb.alarm_log) == 1 and cb.alarm_log[0] == stop.alarm
    got = _scalars(tmp_path)
    for tag in ("idt/P", "idt/H_f", "idt/alarm", "idt/alarms", "idt/armed", "idt/windows"):
        assert tag in got, (tag, sorted(got))
    assert 0.0 < got["idt/P"][-1] < 1.0 and got["idt/armed"][-1] == 1.0


def test_a_clean_training_runs_to_its_end_with_no_alarm_logged(tmp_path):
    model, cb, stop = _train(tmp_path, dead_at=10**9)
    assert model.num_timesteps >= 6144 and stop.alarm is None and cb.alarm_log == []
    got = _scalars(tmp_path)
    assert got["idt/alarms"][-1] == 0 and max(got["idt/alarm"]) == 0.0


def test_under_vecnormalize_the_callback_reads_the_original_observations(tmp_path):
    from stable_baselines3 import PPO
    from stable_baselines3.common.vec_env import DummyVecEnv, VecNormalize

    from idt_desk.gym import IDTCallback

    pipe = dict(window=100, stride=50, calibration_windows=2, baseline_windows=20)
    inner = []

    def make():
        env = IDTMonitor(gym.make("Pendulum-v1"), twin=False, **pipe)  # sees the raw obs
        inner.append(env)
        return env

    venv = VecNormalize(DummyVecEnv([make]), norm_obs=True, norm_reward=False)
    model = PPO("MlpPolicy", venv, n_steps=256, batch_size=64, n_epochs=1, seed=0,
                device="cpu")
    cb = IDTCallback(twin=False, **pipe)
    model.learn(2048, callback=cb)
    got, want = cb.windows(), inner[0].windows
    assert len(got) >= 30 and len(got) == len(want)
    for c in ("P", "H_f", "H_b", "dH"):  # the normalised S would have drifted with its stats
        np.testing.assert_allclose(got[c], want[c], rtol=1e-9, atol=1e-12, err_msg=c)


def test_the_vector_wrapper_gives_each_env_the_windows_of_its_own_monitor():
    from idt_desk.gym import IDTVectorMonitor

    pipe = dict(window=100, stride=50, calibration_windows=2, baseline_windows=20)
    venv = IDTVectorMonitor(gym.make_vec("CartPole-v1", 2, vectorization_mode="sync"), **pipe)
    singles = [IDTMonitor(gym.make("CartPole-v1"), **pipe) for _ in range(2)]
    _, infos = venv.reset(seed=[3, 4])
    for env, seed in zip(singles, (3, 4), strict=True):
        env.reset(seed=seed)
    assert "idt" not in infos
    rng = np.random.default_rng(0)
    ended = [False, False]
    for _ in range(1500):
        actions = rng.integers(0, 2, size=2)
        _, _, term, trunc, infos = venv.step(actions)
        for i, env in enumerate(singles):  # next-step autoreset: the step after an end resets
            if ended[i]:
                env.reset()
            else:
                env.step(int(actions[i]))
        ended = list(np.logical_or(term, trunc))
    assert infos["_idt"].all()
    for i, env in enumerate(singles):
        want, got = env.windows, venv.windows(i)
        assert len(got) == len(want) > 20
        for c in ("P", "H_f", "H_b", "dH", "x_IDT", "episode"):
            np.testing.assert_array_equal(got[c].to_numpy(), want[c].to_numpy(), err_msg=c)
        assert infos["idt"]["P"][i] == env.latest["P"]
    venv.close()
