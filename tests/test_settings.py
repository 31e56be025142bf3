"""One validated settings object for the pipeline: one table of defaults, errors by field."""

from __future__ import annotations

import argparse
import dataclasses

import pytest

from idt_desk.cli import main
from idt_desk.detection import detectors
from idt_desk.detection.detectors import DetectorSpec
from idt_desk.live.config import SessionConfig
from idt_desk.live.session import Session
from idt_desk.settings import DEFAULTS, PIPELINE_KEYS, PipelineSettings, SettingError


@pytest.mark.parametrize("field, value", [
    ("bins", 1), ("window", 10**9), ("stride", 0), ("calibration_windows", 2.5),
    ("baseline_windows", "800"), ("persist", 0), ("k", -1.0), ("drift", float("nan")),
    ("ewma_lambda", 1.5), ("phase_baseline", "yes"), ("detector", "magic"),
    ("correction", "jackknife"), ("preset", "nope"), ("false_alarms", "often"),
    ("false_alarms", 3), ("preset_spec", {"bins": 4}),
])
def test_every_bad_setting_is_named_by_its_field(field, value):
    with pytest.raises(SettingError) as err:
        PipelineSettings.parse({field: value})
    assert err.value.field == field and err.value.value is value
    assert isinstance(err.value, ValueError)  # every caller that caught ValueError still does


def test_the_defaults_are_one_table_every_front_end_reads():
    assert PIPELINE_KEYS == tuple(DEFAULTS)
    parsed = PipelineSettings.parse({})
    assert parsed.to_dict() == DEFAULTS
    # The detector's own defaults are the table's (not a second copy of 0.05 and 0.5).
    assert (DEFAULTS["ewma_lambda"], DEFAULTS["drift"], DEFAULTS["k"]) == \
        (DetectorSpec.lam, DetectorSpec.drift, DetectorSpec.k)
    config = SessionConfig()
    for key in PIPELINE_KEYS:
        assert getattr(config, key) == DEFAULTS[key], key
    # The command line's options default to the table's values too.
    from idt_desk.cli.run import _add_session_options

    parser = argparse.ArgumentParser()
    _add_session_options(parser)
    args = parser.parse_args([])
    for key in PIPELINE_KEYS:
        if hasattr(args, key) and key != "correction":
            assert getattr(args, key) == DEFAULTS[key], key


def test_the_budget_is_read_once_however_many_times_the_pipeline_is_built(monkeypatch):
    calls = []
    real = detectors.parse_budget

    def counting(text):
        calls.append(text)
        return real(text)

    # Every module that reads a budget reads it through the one function.
    import idt_desk.pipeline
    import idt_desk.settings

    for module in (detectors, idt_desk.settings, idt_desk.pipeline):
        monkeypatch.setattr(module, "parse_budget", counting)
    Session(SessionConfig(source="pendulum", false_alarms="2/h"))
    assert calls.count("2/h") == 1, calls
    s = PipelineSettings.parse({"false_alarms": "1/10h"})
    assert str(s.budget) == str(real("1/10h")) and dataclasses.replace(s) == s


@pytest.mark.parametrize("argv, said", [
    (["--ewma-lambda", "2"], "--ewma-lambda 2.0: must be a finite number > 0 and <= 1"),
    (["--false-alarms", "1/10episodes"], "--false-alarms 1/10episodes: pendulum has no "
                                         "episodes"),
    (["--phase-baseline"], "--phase-baseline: pendulum has no episodes of a set length"),
    (["--bins", "1"], "--bins 1: must be an integer from 2"),
])
def test_the_command_line_blames_the_option_that_gave_the_value(argv, said, capsys):
    assert main(["run", "--steps", "10", *argv]) == 2
    assert said in capsys.readouterr().err


def test_a_setting_error_the_source_raises_maps_to_its_flag_without_reading_the_message(
        monkeypatch, capsys):
    """The field, not the text: a message that never names the option still blames it."""
    import idt_desk.pipeline as pipeline

    def refuse(*_a, **_k):
        raise SettingError("stride", 7, "the moon is in the wrong phase")

    monkeypatch.setattr(pipeline, "budget_units", refuse)
    assert main(["run", "--steps", "10", "--stride", "7"]) == 2
    assert "--stride 7: the moon is in the wrong phase" in capsys.readouterr().err
    # Not given on the command line: the source's own settings are blamed instead.
    monkeypatch.setattr(pipeline, "budget_units", lambda *a, **k: (_ for _ in ()).throw(
        SettingError("window", 300, "too long")))
    assert main(["run", "--steps", "10"]) == 2
    assert "pendulum's default settings: window 300: too long" in capsys.readouterr().err


def test_the_windows_settings_panel_starts_at_the_table_s_defaults(qtbot):
    from idt_desk_widgets.pipeline_panel import PipelinePanel

    panel = PipelinePanel()
    qtbot.addWidget(panel)
    assert panel.lambda_spin.value() == DEFAULTS["ewma_lambda"]
    assert panel.k_spin.value() == DEFAULTS["k"]
    assert panel.calib_spin.value() == DEFAULTS["calibration_windows"]
