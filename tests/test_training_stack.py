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
