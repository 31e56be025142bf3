"""The transitions log (format 2, transitions.arrows): exact, small, tail-safe, followable,
readable without IDT Desk, and format 1's recordings still read the same."""

from __future__ import annotations

import shutil

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc
import pytest

from idt_desk.live.config import WINDOW_COLUMNS
from idt_desk.live.session import Session, SessionConfig, run_headless
from idt_desk.recordings import (
    RecordingError,
    RecordingTail,
    RecordingWriter,
    arrows,
    load_recording,
    recording_size,
)
from idt_desk.recordings.trajectory import read_table
from tests.layouts import csv_layout, disk_rows


def _loop(n: int, episode: int, rng: np.random.Generator):
    """S, A, S' of a loop that resets every ``episode`` steps (S' then is not the next S),
    with values a text format must get right: -0.0, subnormals, 17 significant digits."""
    s = rng.normal(size=(n + 1, 3))
    s[5, 0], s[6, 1], s[7, 2] = -0.0, 5e-324, 0.1 + 0.2
    s_next = s[1:].copy()
    ends = np.arange(episode - 1, n, episode)
    s_next[ends] = rng.normal(size=(len(ends), 3))  # the terminal state, never seen again
    a = rng.normal(size=(n, 2)).astype(np.float32).astype(np.float64) + 1e-9
    return s[:-1], a, s_next, np.arange(n) // episode


def _record(path, s, a, s_next, ep, chunk: int = 700, **kw) -> None:
    rec = RecordingWriter(path, {"session": {}}, ["x", "y", "z"], ["u", "v"], WINDOW_COLUMNS, **kw)
    for lo in range(0, len(s), chunk):
        hi = min(lo + chunk, len(s))
        rec.add_transitions(lo, np.arange(lo, hi) * 0.05, s[lo:hi], a[lo:hi], s_next[lo:hi],
                            -np.arange(lo, hi, dtype=np.float64), ep[lo:hi])
        rec.flush()
    rec.add_event({"kind": "session_end", "i": len(s)})
    rec.close()


def test_every_value_reads_back_bit_for_bit_and_s_next_only_at_episode_ends(tmp_path):
    s, a, s_next, ep = _loop(10_000, 1000, np.random.default_rng(0))
    _record(tmp_path / "r", s, a, s_next, ep)
    got = load_recording(tmp_path / "r")
    assert got.complete and got.warnings == [] and got.config["format_version"] == 2
    t = got.transitions
    for cols, want in ((["s_0", "s_1", "s_2"], s), (["a_0", "a_1"], a),
                       (["s_next_0", "s_next_1", "s_next_2"], s_next)):
        assert t[cols].to_numpy().view(np.int64).tolist() == want.view(np.int64).tolist()
    assert t["i"].dtype == np.int64 and (t["i"] == np.arange(10_000)).all()
    assert (t["episode"] == ep).all() and (t["reward"] == -np.arange(10_000)).all()
    # On disk, S' is held only where it is not the next S: the episodes' ends, and the last
    # row of each block (each block reads on its own).
    table = ipc.open_stream(tmp_path / "r" / "transitions.arrows").read_all()
    held = np.flatnonzero(table.column("s_next_0").is_valid().to_numpy(zero_copy_only=False))
    ends = set(range(999, 10_000, 1000))
    assert ends <= set(held) and len(held) <= len(ends) + 10_000 // 700 + 1


def test_the_documented_lines_read_it_without_idt_desk(tmp_path):
    """pyarrow alone and the fill the recordings page gives: the same table as the reader's."""
    s, a, s_next, ep = _loop(3000, 500, np.random.default_rng(1))
    _record(tmp_path / "r", s, a, s_next, ep)
    df = ipc.open_stream(tmp_path / "r" / "transitions.arrows").read_pandas()
    for c in [c for c in df if c.startswith("s_next_")]:
        df[c] = df[c].fillna(df[c.replace("s_next_", "s_")].shift(-1))
    ours = load_recording(tmp_path / "r").transitions
    assert list(df.columns) == list(ours.columns)
    assert df.to_numpy().view(np.int64).tolist() == ours.to_numpy().view(np.int64).tolist()
    # and `idt-desk analyze` reads the file as a trajectory
    assert read_table(tmp_path / "r" / "transitions.arrows").shape == ours.shape


def test_a_torn_last_block_is_dropped_and_said_and_the_blocks_before_stay(tmp_path):
    s, a, s_next, ep = _loop(3000, 1000, np.random.default_rng(2))
    _record(tmp_path / "r", s, a, s_next, ep)
    log = tmp_path / "r" / "transitions.arrows"
    data = log.read_bytes()
    log.write_bytes(data[:-len(arrows.EOS) - 100])  # the last block cut 100 bytes short
    got = load_recording(tmp_path / "r")
    assert not got.complete and len(got.transitions) == 2800  # 4 blocks of 700 whole
    assert any("dropped a partly written last batch" in w for w in got.warnings)
    np.testing.assert_array_equal(got.transitions[["s_0", "s_1", "s_2"]], s[:2800])


@pytest.mark.parametrize("where", ["schema", "middle", "after the end"])
def test_garbage_is_refused_naming_its_byte(tmp_path, where):
    s, a, s_next, ep = _loop(2000, 1000, np.random.default_rng(3))
    _record(tmp_path / "r", s, a, s_next, ep)
    log = tmp_path / "r" / "transitions.arrows"
    data = bytearray(log.read_bytes())
    at = {"schema": 0, "middle": len(data) // 2, "after the end": len(data)}[where]
    frames = arrows.Frames("x")
    frames.feed(bytes(data))
    if where == "middle":  # the start of a block: its framing is what is damaged
        at = next(k for k in range(at, len(data)) if data[k:k + 4] == b"\xff\xff\xff\xff")
    data[at:at + 8] = b"garbage!"
    log.write_bytes(bytes(data))
    if where == "schema":
        with pytest.raises(RecordingError, match=rf"byte {at:,}: garbage bytes"):
            load_recording(tmp_path / "r")
        return
    # After the schema, damage stops the log at its block, named: the blocks before it are
    # kept (said, never read as numbers).
    got = load_recording(tmp_path / "r")
    assert not got.complete
    assert any(f"(byte {at:,}): garbage bytes" in w and "rows before it are kept" in w
               for w in got.warnings), got.warnings
    np.testing.assert_array_equal(got.transitions[["s_0", "s_1", "s_2"]],
                                  s[:len(got.transitions)])


def test_a_block_claiming_more_rows_than_a_writer_writes_is_refused_before_decoding(
        tmp_path, monkeypatch):
    s, a, s_next, ep = _loop(2000, 1000, np.random.default_rng(4))
    _record(tmp_path / "r", s, a, s_next, ep)
    monkeypatch.setattr(arrows, "MAX_ROWS", 500)  # each block holds 700
    decode = arrows.decode_rows

    def never_a_block(frames, messages, columns=None):
        assert messages == b"", "a refused block was decoded"
        return decode(frames, messages, columns)

    monkeypatch.setattr(arrows, "decode_rows", never_a_block)
    # The first block refused before it is decoded, and with no whole block before it the
    # log is refused, naming it.
    with pytest.raises(RecordingError, match=r"block 1 of transitions.arrows .* and 700 rows: "
                                             "not a recording's"):
        load_recording(tmp_path / "r")


def test_a_follower_takes_whole_blocks_only(tmp_path):
    s, a, s_next, ep = _loop(2100, 1000, np.random.default_rng(5))
    _record(tmp_path / "full", s, a, s_next, ep)
    data = (tmp_path / "full" / "transitions.arrows").read_bytes()
    frames = arrows.Frames("x")
    frames.feed(data)
    ends = []  # where each block ends
    pos = len(frames.schema_bytes)
    probe = arrows.Frames("x")
    probe.feed(data[:pos])
    for k in range(pos + 1, len(data) + 1):
        before = probe.rows
        probe.feed(data[k - 1:k])
        if probe.rows != before:
            ends.append(k)
    assert len(ends) == 3
    run = tmp_path / "run"
    run.mkdir()
    for name in ("config.json", "events.jsonl"):
        shutil.copy(tmp_path / "full" / name, run / name)
    log = run / "transitions.arrows"
    log.write_bytes(data[:pos + 10])
    tail = RecordingTail(run)
    rows, _ = tail.poll()
    assert len(rows) == 0
    got = []
    for cut in (ends[0] - 1, ends[0], ends[1] + 5, len(data)):
        log.write_bytes(data[:cut])
        rows, _ = tail.poll()
        got.append(len(rows))
    assert got == [0, 700, 700, 700]
    assert tail.n_read == 2100
    whole = load_recording(tmp_path / "full").transitions.to_numpy(np.float64)
    assert rows.view(np.int64).tolist() == whole[1400:].view(np.int64).tolist()


def test_format_1_and_format_2_of_one_session_hold_the_same_transitions_and_windows(tmp_path):
    """The same seeded session recorded in both layouts: every table the same."""
    cfg = dict(speed=None, calibration_windows=5, baseline_windows=30)
    with csv_layout():
        run_headless(Session(SessionConfig(**cfg), record=tmp_path / "v1"), steps=6000)
    run_headless(Session(SessionConfig(**cfg), record=tmp_path / "v2"), steps=6000)
    v1, v2 = load_recording(tmp_path / "v1"), load_recording(tmp_path / "v2")
    assert (tmp_path / "v1" / "transitions.csv").exists() and v1.config["format_version"] == 1
    assert v1.complete and v2.complete
    assert v1.transitions.to_numpy().view(np.int64).tolist() == \
        v2.transitions.to_numpy().view(np.int64).tolist()
    assert v1.windows.equals(v2.windows)
    # and a replay of each computes the windows the live session did
    for name, rec in (("v1", v1), ("v2", v2)):
        out = tmp_path / f"again-{name}"
        run_headless(Session(SessionConfig(source="replay",
                                           settings={"path": str(tmp_path / name)},
                                           speed=None), record=out))
        again = load_recording(out).windows
        for c in ("start", "P", "H_f", "H_b", "dH"):
            assert again[c].equals(rec.windows[c]), (name, c)


def test_an_rl_recording_takes_under_200_bytes_a_transition(tmp_path):
    """The shipped RL agent at maximum speed, the whole run folder counted."""
    pytest.importorskip("mujoco")
    session = Session(SessionConfig(source="gym", speed=None), record=tmp_path / "rl")
    run_headless(session, steps=4000)
    size = recording_size(tmp_path / "rl")[0]
    got = load_recording(tmp_path / "rl")
    assert got.complete and len(got.transitions) == 4000 == disk_rows(tmp_path / "rl")
    assert size / 4000 <= 200, size / 4000


def test_a_log_is_not_misread_as_a_table_of_other_columns(tmp_path):
    """Columns the schema holds that config.json does not ask for: refused in one line."""
    s, a, s_next, ep = _loop(800, 1000, np.random.default_rng(6))
    _record(tmp_path / "r", s, a, s_next, ep)
    other = pa.schema([pa.field("i", pa.int64()), pa.field("q", pa.float64())])
    log = tmp_path / "r" / "transitions.arrows"
    with pa.OSFile(str(log), "wb") as f, ipc.new_stream(f, other) as w:
        w.write_batch(pa.record_batch([pa.array([0, 1]), pa.array([0.5, 1.5])], schema=other))
    with pytest.raises(RecordingError, match=r"columns \['i', 'q'\] are not the recording's"):
        load_recording(tmp_path / "r")


def test_a_format_1_recording_exported_as_a_recording_is_the_same_in_a_quarter_the_room(
        tmp_path):
    from idt_desk.cli import main

    cfg = dict(speed=None, calibration_windows=5, baseline_windows=30)
    with csv_layout():
        run_headless(Session(SessionConfig(**cfg), record=tmp_path / "v1"), steps=6000)
    assert main(["export", str(tmp_path / "v1"), "--format", "recording", "--out",
                 str(tmp_path / "v2")]) == 0
    v1, v2 = load_recording(tmp_path / "v1"), load_recording(tmp_path / "v2")
    assert v2.complete and v2.config["format_version"] == 2
    assert (tmp_path / "v2" / "transitions.arrows").exists()
    assert v1.transitions.to_numpy().view(np.int64).tolist() == \
        v2.transitions.to_numpy().view(np.int64).tolist()
    assert v1.windows.equals(v2.windows) and len(v1.events) == len(v2.events)
    assert (tmp_path / "v2" / "transitions.arrows").stat().st_size < \
        (tmp_path / "v1" / "transitions.csv").stat().st_size / 3
    # it replays as any recording; a second export into it is refused
    assert main(["run", "--source", "replay", "--set", f"path={tmp_path / 'v2'}",
                 "--quiet"]) == 0
    assert main(["export", str(tmp_path / "v1"), "--format", "recording", "--out",
                 str(tmp_path / "v2")]) == 2
