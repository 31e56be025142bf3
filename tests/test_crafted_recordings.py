"""Crafted and damaged recordings through every reader: load_recording, replay, follow and
analyze. Each ends in one line and a non-zero exit, or is accepted for the reason said beside
it; a recording that load_recording calls complete is one every reader takes; nothing ever
raises out of a reader."""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from idt_desk.cli import main
from idt_desk.live.session import Session, SessionConfig, run_headless
from idt_desk.recordings import RecordingError, load_recording
from tests.layouts import csv_layout

DEEP = "[" * 200_000 + "]" * 200_000
BIG = "9" * 5000


def _lines(p: Path) -> list[str]:
    return p.read_text().splitlines(keepends=True)


def _config(change: Callable[[dict], object]) -> Callable[[Path], None]:
    def go(d: Path) -> None:
        c = json.loads((d / "config.json").read_text())
        change(c)
        (d / "config.json").write_text(json.dumps(c))
    return go


def _text(name: str, text: str) -> Callable[[Path], None]:
    return lambda d: (d / name).write_text(text)


def _table(name: str, change: Callable[[list[str]], list[str]]) -> Callable[[Path], None]:
    def go(d: Path) -> None:
        (d / name).write_text("".join(change(_lines(d / name))))
    return go


def _cell(j: int, value: str, row: int = 5) -> Callable[[Path], None]:
    def change(lines: list[str]) -> list[str]:
        parts = lines[row].rstrip("\n").split(",")
        parts[j] = value
        return [*lines[:row], ",".join(parts) + "\n", *lines[row + 1:]]
    return _table("transitions.csv", change)


def _event(line: str) -> Callable[[Path], None]:
    return _table("events.jsonl", lambda lines: [*lines[:2], line + "\n", *lines[2:]])


def _append_config(text: str) -> Callable[[Path], None]:
    def go(d: Path) -> None:
        raw = (d / "config.json").read_text().rstrip().rstrip("}")
        (d / "config.json").write_text(raw + ", " + text + "}")
    return go


def _swap(name: str, old: str, new: str) -> Callable[[Path], None]:
    return _table(name, lambda lines: [lines[0].replace(old, new, 1), *lines[1:]])


def _drop_column(j: int) -> Callable[[Path], None]:
    def change(lines: list[str]) -> list[str]:
        return [",".join(v for k, v in enumerate(x.rstrip("\n").split(",")) if k != j) + "\n"
                for x in lines]
    return _table("transitions.csv", change)


def _link_out(d: Path) -> None:
    outside = d.parent / f"{d.name}-outside.csv"
    shutil.copy(d / "transitions.csv", outside)
    (d / "transitions.csv").unlink()
    (d / "transitions.csv").symlink_to(outside)


def _dir_config(d: Path) -> None:
    (d / "config.json").unlink()
    (d / "config.json").mkdir()


def _fifo(d: Path) -> None:
    (d / "transitions.csv").unlink()
    os.mkfifo(d / "transitions.csv")


#: What load_recording makes of each: "refused" (RecordingError, one line), "incomplete"
#: (loads, complete False, a warning says why) or "complete" (accepted: the reason beside it).
CASES: dict[str, tuple[Callable[[Path], None], str]] = {
    # config.json
    "config not JSON": (_text("config.json", "{nope"), "refused"),
    "config nested 200,000 deep": (_text("config.json", DEEP), "refused"),
    "config with a field nested 200,000 deep": (_append_config(f'"deep": {DEEP}'), "refused"),
    "config with a 5,000-digit integer": (_append_config(f'"big": {BIG}'), "refused"),
    "config a list": (_text("config.json", "[1, 2]"), "refused"),
    "config empty": (_text("config.json", ""), "refused"),
    "config with NUL bytes": (lambda d: (d / "config.json").write_bytes(b"\x00{}"), "refused"),
    "config of another format": (_config(lambda c: c.update(format_version=99)), "refused"),
    "state_names text": (_config(lambda c: c.update(state_names="abc")), "refused"),
    "more state_names than columns": (
        _config(lambda c: c.update(state_names=[*c["state_names"], "x", "y"])), "refused"),
    "fewer state_names than columns": (
        _config(lambda c: c.update(state_names=c["state_names"][:2])), "refused"),
    # Names are labels: the same one twice only makes two plot titles alike.
    "a state name twice": (
        _config(lambda c: c.update(state_names=[c["state_names"][0]] * 4)), "complete"),
    "action_names without action columns": (
        _config(lambda c: c.update(action_names=["u"])), "refused"),
    "source a list": (_config(lambda c: c.update(source=[1])), "refused"),
    "negative rate": (_config(lambda c: c["source"].update(rate=-1)), "refused"),
    "rate as text": (_config(lambda c: c["source"].update(rate="fast")), "refused"),
    "source name a list": (_config(lambda c: c["source"].update(name=[1])), "refused"),
    "session a list": (_config(lambda c: c.update(session=[])), "refused"),
    "unknown metric path": (_config(lambda c: c["session"].update(metric_path="x")),
                            "refused"),
    "preset a list": (_config(lambda c: c.update(preset=[1])), "refused"),
    "preset with an unknown field": (_config(lambda c: c["preset"].update(colour="red")),
                                     "refused"),
    "preset groups beyond the state": (
        _config(lambda c: c["preset"].update(state_groups=[[0, 99]])), "refused"),
    "preset window 10**9": (_config(lambda c: c["preset"].update(window=10**9)), "refused"),
    "preset with 0 bins": (_config(lambda c: c["preset"].update(bins=0)), "refused"),
    "preset angle beyond the state": (_config(lambda c: c["preset"].update(angles=[50])),
                                      "refused"),
    "negative start_index": (_config(lambda c: c.update(start_index=-1)), "refused"),
    "complete as text": (_config(lambda c: c.update(complete="yes")), "refused"),
    "promises other counts": (_config(lambda c: c.update(n_transitions=5)), "incomplete"),
    "session window 10**9": (_config(lambda c: c["session"].update(window=10**9)), "refused"),
    "unknown detector": (_config(lambda c: c["session"].update(detector="magic")), "refused"),
    "budget of 1e308 alarms an hour": (
        _config(lambda c: c["session"].update(false_alarms="1e308/h")), "refused"),
    # transitions.csv
    "no header": (_table("transitions.csv", lambda lines: lines[1:]), "refused"),
    "a column twice": (_swap("transitions.csv", "s_1", "s_0"), "refused"),
    "a word in a cell": (_cell(2, "abc"), "refused"),
    "NaN in S": (_cell(2, "nan"), "refused"),
    "inf in S": (_cell(3, "inf"), "refused"),
    "a torn last line": (_table("transitions.csv", lambda lines: [*lines[:-1], lines[-1][:7]]),
                         "incomplete"),
    "rows missing": (_table("transitions.csv", lambda lines: lines[:100] + lines[120:]),
                     "incomplete"),
    "a column missing": (_drop_column(3), "refused"),
    # Columns a reader does not use are ignored (a tool may add its own).
    "an extra column": (_table("transitions.csv", lambda lines: [
        lines[0].rstrip("\n") + ",zz\n", *[x.rstrip("\n") + ",1\n" for x in lines[1:]]]),
        "complete"),
    "transitions empty": (_text("transitions.csv", ""), "refused"),
    "header only": (_table("transitions.csv", lambda lines: lines[:1]), "incomplete"),
    "an index that is not whole": (_cell(0, "2.5", row=3), "incomplete"),
    # The loop's time is the loop's: a clock may step back (a reset); windows use indices.
    "time going back": (_cell(1, "-5", row=50), "complete"),
    # Finite, however large: the symbols clamp it into an edge bin, and say so.
    "1e308 in S": (_cell(2, "1e308"), "complete"),
    "a line of 2 MB": (_table("transitions.csv", lambda lines: [
        *lines[:5], "1" * 2_000_000 + "\n", *lines[6:]]), "refused"),
    # windows.csv
    "windows without start": (_swap("windows.csv", "start", "begin"), "refused"),
    "windows out of order": (_table("windows.csv", lambda lines: [
        lines[0], *lines[10:20], *lines[1:10], *lines[20:]]), "incomplete"),
    "a word in windows": (_table("windows.csv", lambda lines: [
        *lines[:3], lines[3].replace(",", ",zz", 1), *lines[4:]]), "refused"),
    # A window column twice: the table keeps both (pandas names the second P.1).
    "a window column twice": (_swap("windows.csv", "H_f", "P"), "complete"),
    "windows empty": (_text("windows.csv", ""), "refused"),
    # events.jsonl
    "an event not JSON": (_event("{oops"), "refused"),
    "an event nested 200,000 deep": (_event(DEEP), "refused"),
    "an event with a 5,000-digit integer": (_event(f'{{"kind": "note", "i": {BIG}}}'),
                                            "refused"),
    "an event without kind": (_event('{"i": 3}'), "refused"),
    "a kind that is a number": (_event('{"kind": 5, "i": 3}'), "refused"),
    "a negative index": (_event('{"kind": "note", "i": -4}'), "refused"),
    "a fractional index": (_event('{"kind": "note", "i": 4.5}'), "refused"),
    "a time as text": (_event('{"kind": "note", "i": 4, "t": "x"}'), "refused"),
    "parameters a list": (_event('{"kind": "perturbation_on", "i": 4, "name": "sensor_noise",'
                                 ' "params": [1]}'), "refused"),
    "an event that is a list": (_event("[1, 2]"), "refused"),
    "a pipeline with a window of 10**9": (
        _event('{"kind": "reconfigure", "i": 4, "pipeline": {"window": 1000000000}}'),
        "refused"),
    # Recorded by a session whose loop knew it (a loop's own perturbation names are free);
    # its count no longer matches config.json's n_events.
    "an unknown perturbation": (
        _event('{"kind": "perturbation_on", "i": 4, "name": "quake", "params": {}}'),
        "incomplete"),
    "a torn last event": (_table("events.jsonl", lambda lines: [*lines[:-1], lines[-1][:10]]),
                          "incomplete"),
    "events empty": (_text("events.jsonl", ""), "incomplete"),
    # the files
    "config.json a directory": (_dir_config, "refused"),
    "transitions a link out of the folder": (_link_out, "refused"),
    "transitions a FIFO": (_fifo, "refused"),
    "windows.csv missing": (lambda d: (d / "windows.csv").unlink(), "refused"),
}

#: What a reader does not read: its damage is not its concern. analyze reads config.json and
#: transitions.csv only (the paper's offline protocol); a follower computes the windows
#: itself; a FIFO would make a follower wait for a writer.
NOT_READ = {
    "analyze": ("windows", "event", "events", "kind", "index", "time as text", "parameters",
                "pipeline", "perturbation", "windows.csv"),
    "follow": ("windows", "windows.csv"),
}


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    """A recording in format 1 (transitions.csv), whose text these cases damage."""
    path = tmp_path_factory.mktemp("base") / "rec"
    with csv_layout():
        run_headless(Session(SessionConfig(speed=None, baseline_windows=30,
                                           calibration_windows=5), record=path), steps=4000)
    return path


def _call(argv: list[str]) -> tuple[int, str]:
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            rc = main(argv)
        except SystemExit as exc:
            rc = exc.code if isinstance(exc.code, int) else 2
    return rc, err.getvalue()


def _not_read(reader: str, case: str) -> bool:
    return any(word in case for word in NOT_READ.get(reader, ()))


def test_the_suite_is_large_enough():
    assert len(CASES) >= 60


@pytest.mark.parametrize("case", list(CASES))
def test_every_reader_refuses_in_one_line_or_accepts(case, base, tmp_path):
    damage, expected = CASES[case]
    d = tmp_path / "rec"
    shutil.copytree(base, d)
    damage(d)
    try:
        rec = load_recording(d)
        got = "complete" if rec.complete else "incomplete"
        if got == "incomplete":
            assert rec.warnings and all("\n" not in w for w in rec.warnings)
    except RecordingError as exc:
        got = "refused"
        assert "\n" not in str(exc)
    assert got == expected
    readers = {
        "replay": ["run", "--source", "replay", "--set", f"path={d}", "--speed", "max"],
        "analyze": ["analyze", str(d), "--out", str(tmp_path / "out")],
    }
    if "FIFO" not in case:
        readers["follow"] = ["run", "--source", "replay", "--set", f"path={d}", "--set",
                             "follow=true", "--set", "silence=1", "--set", "wait=1",
                             "--speed", "max"]
    for reader, argv in readers.items():
        rc, err = _call(argv)
        assert "Traceback" not in err, (reader, err)
        if rc != 0:
            errors = [x for x in err.strip().splitlines() if "error" in x]
            assert len(errors) == 1 and errors[0] == err.strip().splitlines()[-1], (reader, err)
        # A complete recording every reader takes; an incomplete one replays what it holds
        # (analyze may find too little to analyze; a follower may wait for more).
        if expected == "complete" or (expected == "incomplete" and reader == "replay"):
            assert rc == 0, (reader, err)
        elif expected == "refused" and not _not_read(reader, case):
            assert rc != 0, (reader, err)
