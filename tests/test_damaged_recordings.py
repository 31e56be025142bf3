"""Crafted or damaged recordings: refused with one line naming the file, line and field, by
the reader, a replay and a follower alike; never a traceback, a hang or a huge allocation."""

from __future__ import annotations

import json
import os
import shutil

import pytest

from idt_desk.live.session import Session, SessionConfig, run_headless
from idt_desk.recordings import RecordingError, RecordingTail, load_recording

from .cli_call import call
from .layouts import csv_layout


@pytest.fixture(scope="module")
def good(tmp_path_factory):
    """A recording in format 1 (transitions.csv): these cases edit its text."""
    path = tmp_path_factory.mktemp("good") / "rec"
    with csv_layout():
        session = Session(SessionConfig(speed=None, calibration_windows=4,
                                        baseline_windows=4), record=path)
        session.schedule(1500, "perturb", name="sensor_noise", params={"sigma_angle": 0.1})
        session.schedule(2000, "calibrate_baseline", n=5)
        run_headless(session, steps=3000)
    return path


def _config(**changes):
    def damage(path):
        cfg = json.loads((path / "config.json").read_text())
        for key, value in changes.items():
            head, _, tail = key.partition(".")
            if tail:
                cfg[head][tail] = value
            else:
                cfg[head] = value
        (path / "config.json").write_text(json.dumps(cfg))
    return damage


def _event(kind, key, value, raw=None):
    """Set ``key`` of the first ``kind`` event (``raw``: the JSON text of the value)."""
    def damage(path):
        lines = (path / "events.jsonl").read_text().splitlines()
        for k, line in enumerate(lines):
            ev = json.loads(line)
            if ev["kind"] == kind:
                ev[key] = "@@" if raw else value
                lines[k] = json.dumps(ev).replace('"@@"', raw) if raw else json.dumps(ev)
                break
        else:
            raise AssertionError(f"no {kind} event")
        (path / "events.jsonl").write_text("\n".join(lines) + "\n")
    return damage


CASES = {
    "state_names is a number": (_config(state_names=5), "config.json: state_names 5"),
    "state_names are numbers": (_config(state_names=[1, 2, 3, 4]), "state_names"),
    "action_names is text": (_config(action_names="u"), "action_names 'u'"),
    "source is text": (_config(source="pendulum"), "source 'pendulum'"),
    "rate is text": (_config(**{"source.rate": "fast"}), "source.rate 'fast'"),
    "rate is negative": (_config(**{"source.rate": -1}), "source.rate -1"),
    "has_reward is text": (_config(**{"source.has_reward": "yes"}), "source.has_reward"),
    "settings is a list": (_config(**{"source.settings": [1]}), "source.settings"),
    "session is a list": (_config(session=[]), "session []"),
    "metric_path unknown": (_config(**{"session.metric_path": "sideways"}),
                            "session.metric_path 'sideways'"),
    "start_index is text": (_config(start_index="zero"), "start_index 'zero'"),
    "i is Infinity": (_event("recording_start", "i", None, raw="Infinity"),
                      "events.jsonl: line 1: i inf"),
    "i is text": (_event("perturbation_on", "i", "3"), "i '3'"),
    "pipeline is text": (_event("recording_start", "pipeline", "fast"), "pipeline 'fast'"),
    "pipeline asks for 10**12 windows of history": (
        _event("recording_start", "pipeline", {"history": 10**12}),
        "unknown pipeline setting 'history'"),
    "pipeline window of 10**9": (_event("recording_start", "pipeline", {"window": 10**9}),
                                 "window 1000000000: must be an integer from 2 to 100,000"),
    "value ranges are text": (_event("calibrated", "value_ranges", {"omega1": "wide"}),
                              "value_ranges"),
    "a switch's name is a number": (_event("perturbation_on", "name", 5), "name 5"),
    "a switch's params are a list": (_event("perturbation_on", "params", [1, 2]), "params"),
    "a baseline of 'many' windows": (_event("calibrate_baseline", "n", "many"), "n:"),
    "kind is a number": (_event("perturbation_on", "kind", 7), "kind 7"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_damage_is_refused_in_one_line_by_reader_replay_and_follower(good, tmp_path, case):
    damage, said = CASES[case]
    path = shutil.copytree(good, tmp_path / "rec")
    damage(path)
    with pytest.raises(RecordingError) as exc:
        load_recording(path)
    assert said in str(exc.value) and "\n" not in str(exc.value)
    for extra in ([], ["--set", "follow=true", "--set", "wait=2"]):
        rc, out, err = call(["run", "--source", "replay", "--set", f"path={path}", "--quiet",
                             *extra])
        assert rc == 2, (case, extra, out, err)
        lines = [x for x in err.splitlines() if x.strip()]
        assert len(lines) == 1 and said in lines[0], (case, extra, err)
        assert "Traceback" not in out + err


def test_a_fifo_in_place_of_a_table_is_refused_not_read(good, tmp_path):
    path = shutil.copytree(good, tmp_path / "rec")
    os.remove(path / "transitions.csv")
    os.mkfifo(path / "transitions.csv")  # opening it to read would block for ever
    with pytest.raises(RecordingError, match=r"transitions.csv: not a regular file"):
        load_recording(path)
    with pytest.raises(RecordingError, match="not a regular file"):
        RecordingTail(path).ready()
    rc, _out, err = call(["run", "--source", "replay", "--set", f"path={path}", "--quiet"])
    assert rc == 2 and "not a regular file" in err


def test_a_recorded_pipeline_is_checked_against_the_limits_before_anything_is_allocated():
    import idt_desk

    with pytest.raises(ValueError, match="window 1000000000: must be an integer from 2"):
        idt_desk.Recorder("never-made", ["x"], window=10**9)
    with pytest.raises(ValueError, match="history 1000000000000: must be an integer"):
        Session(SessionConfig(history=10**12))
    assert not os.path.exists("never-made")


def test_a_replay_says_which_options_its_recorded_pipeline_overrides(good):
    preset = load_recording(good).config["preset"]
    rc, _out, err = call(["run", "--source", "replay", "--set", f"path={good}", "--window",
                          "500", "--bins", "6", "--quiet"])
    assert rc == 0, err
    note = [x for x in err.splitlines() if "recorded pipeline" in x]
    assert note == ["idt-desk run: note: a replay runs the recorded pipeline: --bins 6 "
                    f"(recorded: {preset['bins']}), --window 500 (recorded: "
                    f"{preset['window']}) ignored"]


def test_without_recording_start_a_replay_rebuilds_the_pipeline_config_json_states(tmp_path):
    from idt_desk_sources.replay import ReplaySource

    path = tmp_path / "rec"
    run_headless(Session(SessionConfig(speed=None, window=200, stride=40, calibration_windows=5,
                                       baseline_windows=30, bins=6), record=path), steps=6000)
    lines = (path / "events.jsonl").read_text().splitlines()
    (path / "events.jsonl").write_text("\n".join(
        x for x in lines if '"recording_start"' not in x) + "\n")
    source = ReplaySource(path=str(path))
    assert "no recording_start event: the pipeline is rebuilt from config.json" in \
        source.notice
    replay = Session(SessionConfig(speed=None), source=source, record=tmp_path / "again")
    run_headless(replay)
    a, b = load_recording(path).windows, load_recording(tmp_path / "again").windows
    assert len(a) == len(b) > 100
    for c in ("start", "P", "H_f", "x_IDT"):
        assert a[c].equals(b[c]), c


def test_counts_that_are_not_whole_numbers_are_kept_as_read_and_named(good, tmp_path):
    path = shutil.copytree(good, tmp_path / "rec")
    lines = (path / "transitions.csv").read_text().splitlines()
    head = lines[0].split(",")
    ep = head.index("episode")
    for k, value in ((5, "1.5"), (9, "1e30")):
        cells = lines[k].split(",")
        cells[ep] = value
        lines[k] = ",".join(cells)
    for k in range(1, len(lines)):
        if k not in (5, 9):
            cells = lines[k].split(",")
            cells[ep] = "1"
            lines[k] = ",".join(cells)
    (path / "transitions.csv").write_text("\n".join(lines) + "\n")
    rec = load_recording(path)
    # lines[5] is the file's line 6 (the header is line 1): row 4 of the table.
    assert rec.transitions["episode"].iloc[4] == 1.5
    assert rec.transitions["episode"].iloc[8] == 1e30  # not -9.2e18
    assert any("line 6: episode 1.5 is not a whole number" in w for w in rec.warnings)
    assert not rec.complete
