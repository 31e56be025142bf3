"""One settings table (idt_desk.settings.SETTINGS): the command line, the window's boxes and the
Python constructors accept and refuse the same values, with the same words."""

from __future__ import annotations

import argparse
import math

import gymnasium as gym
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from idt_desk import Recorder
from idt_desk.cli import main
from idt_desk.cli.run import SESSION_OPTIONS, _add_session_options, _check_pipeline
from idt_desk.errors import InputError
from idt_desk.gym import IDTMonitor
from idt_desk.settings import BY_VALUE, PIPELINE_KEYS, SETTINGS, PipelineSettings, SettingError

pytest.importorskip("pytestqt")

#: The settings the window has a box for: (the table's key, the panel's attribute).
BOXES = {"bins": "bins_spin", "window": "window_spin", "stride": "stride_spin",
         "calibration_windows": "calib_spin", "baseline_windows": "baseline_spin",
         "ewma_lambda": "lambda_spin", "k": "k_spin"}


def _value(key: str) -> st.SearchStrategy:
    """Values around and beyond the setting's range; a float's on its box's grid."""
    s = SETTINGS[key]
    if s.kind is int:
        return st.integers(-5, int(s.hi) * 2) | st.sampled_from([s.lo - 1, s.lo, s.hi, s.hi + 1])
    grid = 10 ** s.decimals
    return st.integers(-2 * grid, int(s.hi * grid) + 2 * grid).map(lambda n: n / grid)


def _python(key, value):
    """The core's verdict: None (taken) or the error's reason."""
    try:
        PipelineSettings.parse({key: value})
    except SettingError as exc:
        assert exc.field == key
        return exc.why
    return None


def _command_line(key, value):
    parser = argparse.ArgumentParser()
    _add_session_options(parser)
    args = parser.parse_args([SETTINGS[key].flag, str(value)])
    try:
        _check_pipeline(args)
    except InputError as exc:
        flag, _, why = str(exc).partition(": ")
        assert flag.split()[0] == SETTINGS[key].flag
        return why
    return None


@pytest.fixture(scope="module")
def panel():
    from idt_desk_widgets.pipeline_panel import PipelinePanel
    from PySide6.QtWidgets import QApplication

    _app = QApplication.instance() or QApplication([])
    p = PipelinePanel()
    yield p
    p.deleteLater()


@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_the_command_line_the_window_and_python_take_the_same_values(panel, data):
    key = data.draw(st.sampled_from(sorted(BOXES)))
    value = data.draw(_value(key))
    python, cli = _python(key, value), _command_line(key, value)
    assert python == cli, (key, value)  # the same verdict, in the same words
    box = getattr(panel, BOXES[key])
    on_grid = SETTINGS[key].kind is int or math.isclose(
        round(value, box.decimals()), value, abs_tol=1e-12)
    assert on_grid
    assert (box.minimum() <= value <= box.maximum()) == (python is None), (key, value, python)


@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_the_wrapper_and_the_recorder_refuse_what_the_table_refuses(tmp_path_factory, data):
    key = data.draw(st.sampled_from(["bins", "window", "calibration_windows",
                                     "baseline_windows", "persist", "k"]))
    value = data.draw(_value(key) if key in BOXES or SETTINGS[key].kind is int else st.none())
    want = _python(key, value)
    builds = [lambda: IDTMonitor(gym.make("Pendulum-v1"), **{key: value})]
    if key != "persist" and key != "k":  # the Recorder runs the detector's defaults
        builds.append(lambda: Recorder(tmp_path_factory.mktemp("r") / "rec", ["x", "v"],
                                       **{key: value}))
    for build in builds:
        try:
            made = build()
        except SettingError as exc:
            assert exc.field == key and exc.why == want, (key, value)
        else:
            assert want is None, (key, value, want)
            made.close()


def test_every_pipeline_setting_and_every_option_is_in_the_table():
    assert set(PIPELINE_KEYS) - set(BY_VALUE) <= set(SETTINGS)
    assert set(SESSION_OPTIONS) <= set(SETTINGS)
    for key, s in SETTINGS.items():
        assert s.label and s.help and s.flag == "--" + key.replace("_", "-"), key
        assert s.check(s.default) == s.default  # the default is a value it takes


@pytest.mark.parametrize("argv, said", [
    (["--window", "10", "--stride", "20"], "--stride 20: is longer than the window (10)"),
    (["--false-alarms", "1/1e-300h"], "allows more than one false alarm a window"),
    (["--baseline-windows", "100000"], "--baseline-windows 100000: must be an integer from 2 "
                                       "to 10,000"),
])
def test_values_once_taken_silently_are_refused_in_one_line(argv, said, capsys):
    assert main(["run", "--steps", "10", *argv]) == 2
    assert said in capsys.readouterr().err


def test_auto_s_counts_are_the_table_s():
    from idt_desk.cli.validate import parse_auto

    from .toy_source import ToySource

    with pytest.raises(InputError, match="persist=99999999999999999999: must be an integer "
                                         "from 1 to 1,000"):
        parse_auto("hold:persist=99999999999999999999", ToySource)
    auto = parse_auto("hold", ToySource)
    assert (auto["persist"], auto["release"]) == (SETTINGS["auto_persist"].default,
                                                  SETTINGS["auto_release"].default)


def test_the_wrapper_refuses_a_wrong_type_naming_the_setting():
    with pytest.raises(SettingError, match="bins 1: must be an integer from 2 to 65,536"):
        IDTMonitor(gym.make("Pendulum-v1"), bins=1)
    with pytest.raises(SettingError, match="baseline_windows 1000000000"):
        IDTMonitor(gym.make("Pendulum-v1"), baseline_windows=10**9)
    for bad in ({"rate": True}, {"rate": "100"}, {"episode_steps": True}):
        with pytest.raises(SettingError, match=f"^{next(iter(bad))} "):
            Recorder("unused-never-created", ["x"], **bad)


#: What every loop's front end takes of the settings table (the wrapper's, the callback's,
#: idt_desk.Recorder's and a session's), under the table's names.
FRONT_KEYS = ("preset", "bins", "window", "stride", "calibration_windows", "baseline_windows",
              "correction", "k", "detector", "false_alarms", "persist", "drift",
              "ewma_lambda")


def _bad(setting):
    if setting.choices:
        return "no-such-choice"
    if setting.kind is int:
        return int(setting.hi) + 1
    if setting.kind is float:
        return -1.0 if setting.lo is not None and setting.lo >= 0 else float("inf")
    return 12345  # text where a name belongs


@pytest.mark.parametrize("key", FRONT_KEYS)
def test_a_refused_setting_is_the_same_line_from_every_front_end(key, tmp_path):
    """The wrapper and the callback spelt their settings out by hand, twice each, and took no
    λ or drift: each front end now takes the table's settings and refuses alike."""
    gym = pytest.importorskip("gymnasium")
    pytest.importorskip("stable_baselines3")
    import idt_desk
    from idt_desk.gym import IDTCallback, IDTMonitor
    from idt_desk.live.session import Session, SessionConfig
    from idt_desk.settings import SETTINGS

    bad = {key: _bad(SETTINGS[key])}
    said = {}
    for name, make in (
            ("session", lambda: Session(SessionConfig(source="pendulum", speed=None, **bad))),
            ("Recorder", lambda: idt_desk.Recorder(tmp_path / "r", ["x"], **bad)),
            ("IDTMonitor", lambda: IDTMonitor(gym.make("CartPole-v1"), **bad)),
            ("IDTCallback", lambda: IDTCallback(**bad))):
        with pytest.raises(ValueError) as caught:
            make()
        said[name] = str(caught.value)
    assert len(set(said.values())) == 1, said
    line = said["session"]
    assert "\n" not in line and key.split("_")[0] in line  # it names the setting
    assert not (tmp_path / "r").exists()


def test_every_front_end_takes_ewma_lambda():
    gym = pytest.importorskip("gymnasium")
    pytest.importorskip("stable_baselines3")
    from idt_desk.gym import IDTCallback, IDTMonitor

    env = IDTMonitor(gym.make("CartPole-v1"), detector="ewma", ewma_lambda=0.1)
    assert env.monitor.spec.lam == 0.1 and "λ = 0.1" in env.monitor.describe()
    env.close()
    assert IDTCallback(detector="ewma", ewma_lambda=0.1)._settings["ewma_lambda"] == 0.1
