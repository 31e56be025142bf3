"""Reading recordings back: verification against config.json, damage, the package exports."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

import idt_desk
import idt_desk.recordings
from idt_desk.live.session import Session, SessionConfig, run_headless
from idt_desk.recordings import RecordingError, load_recording
from tests.layouts import csv_layout

STEPS = 4000
TABLES = ("transitions.csv", "windows.csv", "events.jsonl")
FILES = ("config.json", *TABLES)
GARBAGE = b"\xff\xfe\x00garbage"


@pytest.fixture(scope="module")
def good(tmp_path_factory):
    """A short, cleanly closed pendulum recording with a perturbation and a reconfigure.

    In format 1 (transitions.csv): these tests are of the text tables' reader, which every
    recording made before format 2 needs; tests/test_transitions_log.py has format 2's.
    """
    path = tmp_path_factory.mktemp("good") / "rec"
    cfg = SessionConfig(speed=None, calibration_windows=4, baseline_windows=4)
    with csv_layout():
        session = Session(cfg, record=path)
        session.schedule(1500, "perturb", name="sensor_noise", params={"sigma_angle": 0.1})
        session.schedule(2500, "reconfigure", bins=8, stride=50)
        session.schedule(3000, "perturb", name="sensor_noise", params=None)
        snap = run_headless(session, steps=STEPS)
    assert snap.state == "stopped" and snap.error is None, snap.error
    return path


@pytest.fixture
def rec_dir(good, tmp_path):
    """A fresh copy of the good recording, to damage."""
    return shutil.copytree(good, tmp_path / "rec")


def _lines(path):
    return path.read_bytes().splitlines(keepends=True)


def _promised(rec_dir, name):
    key = {"transitions.csv": "n_transitions", "windows.csv": "n_windows",
           "events.jsonl": "n_events"}[name]
    return json.loads((rec_dir / "config.json").read_text())[key]


def test_good_recording_loads_complete_without_warnings(good):
    rec = load_recording(good)
    assert rec.complete and rec.warnings == []
    cfg = rec.config
    assert len(rec.transitions) == cfg["n_transitions"] == STEPS
    assert len(rec.windows) == cfg["n_windows"] > 20
    assert len(rec.events) == cfg["n_events"] > 5
    assert rec.events["kind"].iloc[-1] == "session_end"
    assert "reconfigure" in rec.events["kind"].tolist()
    np.testing.assert_array_equal(rec.transitions["i"], np.arange(STEPS))
    assert rec.transitions["i"].dtype == np.int64 and rec.windows["start"].dtype == np.int64


@pytest.mark.parametrize("name", TABLES)
@pytest.mark.parametrize("cut", ["drop_lines", "mid_line"])
def test_truncated_file_is_reported_not_complete(rec_dir, name, cut):
    path = rec_dir / name
    n = _promised(rec_dir, name)
    lines = _lines(path)
    if cut == "drop_lines":
        path.write_bytes(b"".join(lines[:-3]))
        held = n - 3
    else:
        path.write_bytes(b"".join(lines)[:-7])  # a torn last line, as a failed write leaves
        held = n - 1
    rec = load_recording(rec_dir)
    assert not rec.complete
    assert len(rec.warnings) == 1, rec.warnings
    (warning,) = rec.warnings
    what = "events" if name == "events.jsonl" else "rows"
    assert warning.startswith(f"{name}: ")
    assert f"holds {held:,} {what} but config.json promises {n:,}" in warning
    assert ("dropped a partly written last line" in warning) == (cut == "mid_line")
    if name == "events.jsonl":
        assert "no session_end event" in warning  # it was the last line
    # What is there is loaded, and the other files are intact.
    got = {"transitions.csv": rec.transitions, "windows.csv": rec.windows,
           "events.jsonl": rec.events}
    for other, table in got.items():
        assert len(table) == (held if other == name else _promised(rec_dir, other))


def test_thousands_in_the_message(rec_dir):
    path = rec_dir / "transitions.csv"
    path.write_bytes(b"".join(_lines(path)[:-1000]))
    (warning,) = load_recording(rec_dir).warnings
    assert warning == "transitions.csv: holds 3,000 rows but config.json promises 4,000"


def test_gap_in_transition_index_is_reported(rec_dir):
    path = rec_dir / "transitions.csv"
    lines = _lines(path)
    del lines[1000]  # line 1001: the row with i = 999
    path.write_bytes(b"".join(lines))
    rec = load_recording(rec_dir)
    assert not rec.complete
    (warning,) = rec.warnings
    assert "line 1001: i jumps from 998 to 1000" in warning
    assert "holds 3,999 rows" in warning


def test_gap_is_reported_even_when_the_count_matches(rec_dir):
    path = rec_dir / "transitions.csv"
    lines = _lines(path)
    lines[1000] = lines[1000].replace(b"999,", b"99999,", 1)
    path.write_bytes(b"".join(lines))
    rec = load_recording(rec_dir)
    assert not rec.complete
    assert rec.warnings == ["transitions.csv: line 1001: i jumps from 998 to 99999 "
                            "(rows missing)"]


def test_window_start_going_back_is_reported(rec_dir):
    path = rec_dir / "windows.csv"
    lines = _lines(path)
    lines[5], lines[6] = lines[6], lines[5]
    path.write_bytes(b"".join(lines))
    rec = load_recording(rec_dir)
    assert not rec.complete
    (warning,) = rec.warnings
    assert re.fullmatch(r"windows\.csv: line 7: start goes back from \d+ to \d+", warning)


def test_killed_session_still_loads_with_its_warning(rec_dir):
    cfg = json.loads((rec_dir / "config.json").read_text())
    for key in ("complete", "n_transitions", "n_windows", "n_events", "final_state"):
        cfg.pop(key, None)
    (rec_dir / "config.json").write_text(json.dumps(cfg))
    for name in TABLES:  # a kill leaves fewer rows, perhaps a torn line, no session_end
        path = rec_dir / name
        path.write_bytes(b"".join(_lines(path)[:-2])[:-3])
    rec = load_recording(rec_dir)
    assert not rec.complete
    assert len(rec.transitions) == STEPS - 3
    assert "session_end" not in rec.events["kind"].tolist()
    assert any("did not close" in w for w in rec.warnings)
    assert not any("promises" in w or "session_end" in w for w in rec.warnings)
    assert sum("partly written" in w for w in rec.warnings) == 3


@pytest.mark.parametrize("name", FILES)
@pytest.mark.parametrize("where", ["line_start", "mid_line", "end", "replaced"])
def test_garbage_bytes_raise_naming_file_and_line(rec_dir, name, where):
    path = rec_dir / name
    lines = _lines(path)
    k = len(lines) // 2  # 0-based: line k + 1
    if where == "line_start":
        lines.insert(k, GARBAGE)
        line = k + 1
    elif where == "mid_line":
        lines[k] = lines[k][:3] + GARBAGE + lines[k][3:]
        line = k + 1
    elif where == "end":
        lines.append(GARBAGE)  # no newline: it must not pass for a torn last line
        line = len(lines)
    else:
        lines = [np.random.default_rng(0).bytes(5000)]
        line = None
    path.write_bytes(b"".join(lines))
    with pytest.raises(RecordingError) as info:
        load_recording(rec_dir)
    msg = str(info.value)
    assert f"{name}: line " in msg and "garbage bytes" in msg
    if line is not None:
        assert f"{name}: line {line}:" in msg


@pytest.mark.parametrize(
    "name,edit,needle",
    [
        ("transitions.csv", lambda f: [f[0], b"abc", *f[2:]], "non-numeric cell 'abc'"),
        ("windows.csv", lambda f: [*f[:-1], b"1e5x"], "non-numeric cell '1e5x'"),
        ("transitions.csv", lambda f: f[:-1], "fields, the header has"),
        ("windows.csv", lambda f: [*f, b"7"], "fields, the header has"),
    ],
)
def test_bad_cells_raise_naming_file_and_line(rec_dir, name, edit, needle):
    path = rec_dir / name
    lines = _lines(path)
    k = 1234 if name == "transitions.csv" else 10
    fields = lines[k].rstrip(b"\n").split(b",")
    lines[k] = b",".join(edit(fields)) + b"\n"
    path.write_bytes(b"".join(lines))
    with pytest.raises(RecordingError, match=rf"{re.escape(name)}: line {k + 1}: .*{needle}"):
        load_recording(rec_dir)


def test_events_line_that_is_not_an_event_raises(rec_dir):
    path = rec_dir / "events.jsonl"
    lines = _lines(path)
    lines[2] = b'["a list", "not an event"]\n'
    path.write_bytes(b"".join(lines))
    with pytest.raises(RecordingError, match=r"events\.jsonl: line 3: not a JSON event"):
        load_recording(rec_dir)


def test_invalid_config_json_names_its_line(rec_dir):
    path = rec_dir / "config.json"
    lines = _lines(path)
    lines[3] = b"  oops\n"
    path.write_bytes(b"".join(lines))
    with pytest.raises(RecordingError, match=r"config\.json: line 4: not valid JSON"):
        load_recording(rec_dir)


def test_package_root_exports_the_recording_api():
    assert idt_desk.load_recording is idt_desk.recordings.load_recording
    assert idt_desk.RecordingError is idt_desk.recordings.RecordingError
    assert idt_desk.export_recording is idt_desk.recordings.export_recording
    assert {"load_recording", "RecordingError", "export_recording"} <= set(idt_desk.__all__)
    # ... and importing the package still pulls in no Qt.
    code = ("import sys, idt_desk; "
            "print([m for m in sys.modules if m.split('.')[0] in "
            "('PySide6', 'pyqtgraph', 'widgets')])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "[]"


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_export_round_trips_row_counts(good, tmp_path, fmt):
    rec = idt_desk.load_recording(good)
    paths = idt_desk.export_recording(good, tmp_path / "out", fmt)
    assert sorted(p.name for p in paths) == sorted(
        [f"{n}.{fmt}" for n in ("transitions", "windows", "events")] + ["config.json"])
    read = pd.read_csv if fmt == "csv" else pd.read_parquet
    for name in ("transitions", "windows", "events"):
        out = read(tmp_path / "out" / f"{name}.{fmt}")
        want = getattr(rec, name)
        assert len(out) == len(want) > 0 and list(out.columns) == list(want.columns), name
    np.testing.assert_array_equal(read(tmp_path / "out" / f"transitions.{fmt}").to_numpy(),
                                  rec.transitions.to_numpy())
    # An export is not a recording, and a replay of it says what to replay instead (it said
    # "not a recording (missing events.jsonl)").
    with pytest.raises(idt_desk.RecordingError, match="an export of a recording") as err:
        idt_desk.load_recording(tmp_path / "out")
    assert f"replay the recording it was exported from, {good}" in str(err.value)
    assert ("idt-desk analyze" in str(err.value)) == (fmt == "csv")


def test_recording_size_in_words(tmp_path):
    from idt_desk.recordings import recording_size

    (tmp_path / "a").write_bytes(b"x" * 1500)
    (tmp_path / "b").write_bytes(b"x" * 2_000_000)
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "c").write_bytes(b"x" * 10)  # not the recording's own file
    assert recording_size(tmp_path) == (2_001_500, "2.0 MB")
    assert recording_size(tmp_path / "a" / "nothing") == (0, "0 bytes")
    (tmp_path / "b").write_bytes(b"")
    assert recording_size(tmp_path)[1] == "1.5 kB"


@pytest.mark.parametrize("chunk", [64, 1000])
def test_fields_are_checked_past_the_first_chunk(rec_dir, monkeypatch, chunk):
    """A wrong line far into a table is named by its line, whatever the check's chunk.

    64 bytes is shorter than a transitions line (a chunk then ends at the line's end).
    """
    monkeypatch.setattr(idt_desk.recordings.files, "_CHUNK", chunk)
    path = rec_dir / "transitions.csv"
    lines = _lines(path)
    assert len(lines) * chunk > 10 * len(path.read_bytes()) / len(lines)  # many chunks
    load_recording(rec_dir)  # the good table passes, chunk by chunk
    k = 3210
    lines[k] = lines[k].replace(b",", b",,", 1)
    path.write_bytes(b"".join(lines))
    with pytest.raises(RecordingError,
                       match=rf"transitions\.csv: line {k + 1}: \d+ fields, the header has"):
        load_recording(rec_dir)


def test_load_recording_takes_about_the_recordings_size_in_memory(rec_dir):
    """Peak memory (numpy's and Python's, tracemalloc) under 1.5x the files' size.

    Holding the file's bytes, the field check's arrays over the whole file and the parsed
    table at once took 2.5x; the bytes are let go before the parse now (1.0x measured).
    """
    import tracemalloc

    path = rec_dir / "transitions.csv"
    df = pd.read_csv(path)
    big = pd.concat([df] * 40, ignore_index=True)  # about 20 MB: fixed costs do not count
    big["i"] = np.arange(len(big))
    big.to_csv(path, index=False)
    size = sum(f.stat().st_size for f in rec_dir.iterdir())
    tracemalloc.start()
    try:
        rec = load_recording(rec_dir)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert len(rec.transitions) == len(big)
    assert peak < 1.5 * size, f"{peak / size:.2f}x the recording's size"


def test_one_class_per_name_the_writer_is_recording_writer_and_the_old_name_warns():
    """Two public classes were named Recorder: idt_desk.Recorder (a loop's) and the writer."""
    import warnings

    import idt_desk
    import idt_desk.recordings as recordings
    from idt_desk.live.recorder import Recorder as LoopRecorder
    from idt_desk.recordings.writer import RecordingWriter

    assert idt_desk.Recorder is LoopRecorder and recordings.RecordingWriter is RecordingWriter
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert recordings.Recorder is RecordingWriter
    assert [w.category for w in caught] == [DeprecationWarning]
    assert "RecordingWriter" in str(caught[0].message)
    assert "Recorder" not in recordings.__all__
