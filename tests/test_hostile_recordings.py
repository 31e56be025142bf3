"""Hostile recordings: nothing a recording names is imported or run, by any reader.

A recording is data a user may get from anyone. Each family of attack here is one that a
hostile pass found working: an env id that makes ``gymnasium.make`` import a module. Every
file these tests plant (modules, links) lies inside the test's own temporary folder.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys
from pathlib import Path

import numpy as np
import pytest

import idt_desk
from idt_desk.cli import main

#: A module that says it was imported by writing a file beside itself.
MARKER = "import pathlib\npathlib.Path(__file__).with_suffix('.ran').write_text('imported')\n"


def _recording(path: Path) -> Path:
    x = np.cumsum(np.random.default_rng(0).normal(size=(801, 2)), axis=0)
    with idt_desk.Recorder(path, ["x", "v"], ["u"], window=20, stride=5,
                           calibration_windows=2, baseline_windows=5) as rec:
        rec.add(x[:-1], np.zeros((800, 1)), x[1:])
    return path


def _edit(path: Path, change) -> None:
    config = json.loads((path / "config.json").read_text())
    change(config)
    (path / "config.json").write_text(json.dumps(config))


def _call(argv: list[str]) -> tuple[int, str]:
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            rc = main(argv)
        except SystemExit as exc:  # a SystemExit from inside a replay must not escape
            rc = exc.code if isinstance(exc.code, int) else 2
    return rc, err.getvalue()


def _twin_id(env_id: str):
    def change(c: dict) -> None:
        c["source"]["details"] = {"twin": {"env_id": env_id}}
    return change


def _gym_settings(env_id: str):
    def change(c: dict) -> None:
        c["source"]["name"] = c["session"]["source"] = "gym"
        c["source"]["settings"] = c["session"]["settings"] = {"env_id": env_id}
    return change


@pytest.mark.parametrize("where", ["twin", "settings"])
@pytest.mark.parametrize("name", ["idt_marker_mod:Env", "unittest.__main__:X",
                                  "idt_desk.cli.__main__:X"])
def test_an_env_id_in_a_recording_is_never_imported(tmp_path, monkeypatch, where, name):
    """``antigravity:X`` in a recording's twin opened the user's browser on replay; a module
    in the working folder named by it ran. The marker sits beside the recording, in the
    working folder and on the path."""
    marker = tmp_path / "idt_marker_mod.py"
    marker.write_text(MARKER)
    rec = _recording(tmp_path / "rec")
    (rec / "idt_marker_mod.py").write_text(MARKER)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    _edit(rec, (_twin_id if where == "twin" else _gym_settings)(name))
    before = set(sys.modules)
    rc, err = _call(["run", "--source", "replay", "--set", f"path={rec}", "--speed", "max"])
    assert "Traceback" not in err
    assert not marker.with_suffix(".ran").exists()
    assert not (rec / "idt_marker_mod.ran").exists()
    new = set(sys.modules) - before
    assert not any(m.startswith(("idt_marker_mod", "unittest.__main__", "idt_desk.cli.__main__"))
                   for m in new), new
    # The replay itself goes on without a twin, saying why (its events name the refusal).
    from idt_desk_sources.replay import ReplaySource

    from idt_desk.live.session import Session, SessionConfig, run_headless

    source = ReplaySource(path=str(rec))
    twin = source.twin()
    assert twin is None and "not an id in Gymnasium's registry" in source.twin_note
    run_headless(Session(SessionConfig(speed=None), source=source))
    assert not marker.with_suffix(".ran").exists()
    assert rc == 0 or err.strip().count("\n") == 0, err


def test_a_registered_id_still_builds_its_twin():
    from idt_desk.gym.twin import TwinUnavailable, mujoco_twin, registered_id

    assert registered_id("HalfCheetah-v5") == "HalfCheetah-v5"
    twin, why = mujoco_twin("HalfCheetah-v5")
    assert twin is not None and why == ""
    for bad in ("antigravity:X", "HalfCheetah-v5:x", "no-such-env-v0", 42, ""):
        with pytest.raises(TwinUnavailable, match="registry"):
            registered_id(bad)


# -- writers never write through a link -----------------------------------------------------

def _victim(tmp_path: Path) -> Path:
    """A file of the test's own that a planted link aims at; it must never change."""
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    return victim


@pytest.mark.parametrize("fmt", ["csv", "parquet", "recording"])
def test_an_export_never_writes_through_a_link_in_its_folder(tmp_path, fmt):
    """A link planted in the output folder (a shared or unpacked one) made export overwrite
    its target with the recording's bytes, with exit 0."""
    rec = _recording(tmp_path / "rec")
    victim = _victim(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    name = {"csv": "windows.csv", "parquet": "windows.parquet",
            "recording": "transitions.arrows"}[fmt]
    (out / name).symlink_to(victim)
    rc, err = _call(["export", str(rec), "--out", str(out), "--format", fmt])
    assert rc != 0 and err.strip().count("\n") == 0 and "empty folder" in err
    assert victim.read_text() == "precious\n"
    # The output folder itself a link: refused too, nothing written in its target.
    target = tmp_path / "elsewhere"
    target.mkdir()
    (tmp_path / "out2").symlink_to(target)
    rc, err = _call(["export", str(rec), "--out", str(tmp_path / "out2"), "--format", fmt])
    assert rc != 0 and not any(target.iterdir())
    # A new folder: written, every file a regular file of its own.
    rc, err = _call(["export", str(rec), "--out", str(tmp_path / "fresh"), "--format", fmt])
    assert rc == 0, err
    assert all(p.is_file() and not p.is_symlink() for p in (tmp_path / "fresh").iterdir())


def test_export_as_a_recording_never_copies_a_status_or_a_file_out_of_the_recording(tmp_path):
    """``export --format recording`` copied the source's status.json byte for byte, through a
    link that led outside the source recording."""
    rec = _recording(tmp_path / "rec")
    secret = tmp_path / "secret.txt"
    secret.write_text("not yours\n")
    (rec / "status.json").unlink()
    (rec / "status.json").symlink_to(secret)
    rc, err = _call(["export", str(rec), "--out", str(tmp_path / "out"), "--format",
                     "recording"])
    assert rc == 0, err
    assert not (tmp_path / "out" / "status.json").exists()
    assert "not yours" not in "".join(p.read_text(errors="replace")
                                      for p in (tmp_path / "out").iterdir())


def test_a_recording_refuses_a_folder_holding_a_planted_link(tmp_path):
    victim = _victim(tmp_path)
    for name in ("transitions.arrows", "events.jsonl", "windows.csv", "config.json"):
        folder = tmp_path / f"rec-{name}"
        folder.mkdir()
        (folder / name).symlink_to(victim)
        with pytest.raises(idt_desk.RecordingError):
            _recording(folder)
        rc, err = _call(["run", "--source", "pendulum", "--seconds", "1", "--record",
                         str(folder / "..") + f"/rec-{name}"])
        assert rc != 0 and "Traceback" not in err
    assert victim.read_text() == "precious\n"


def test_a_live_runs_status_swapped_for_a_link_is_replaced_not_written_through(tmp_path):
    """A running recording's status.json swapped for a link to a system file: that file was
    overwritten with the run's status (here the link aims at the test's own file)."""
    import time

    victim = _victim(tmp_path)
    x = np.cumsum(np.random.default_rng(1).normal(size=(4001, 2)), axis=0)
    rec = idt_desk.Recorder(tmp_path / "live", ["x", "v"], ["u"], window=20, stride=5,
                            calibration_windows=2, baseline_windows=5)
    try:
        rec.add(x[:1000], np.zeros((1000, 1)), x[1:1001])
        rec.flush()
        status = tmp_path / "live" / "status.json"
        status.unlink()
        status.symlink_to(victim)
        # The temporary name a writer once used (its pid's) planted too: never written through.
        (tmp_path / "live" / f".status.json.{os.getpid()}.tmp").symlink_to(victim)
        rec.add(x[1000:4000], np.zeros((3000, 1)), x[1001:4001])
        rec.flush()
        time.sleep(1.5)  # the writer's heartbeat rewrites the status too
    finally:
        rec.close()
    assert victim.read_text() == "precious\n"
    assert status.is_file() and not status.is_symlink()
    assert json.loads(status.read_text())["transitions"] == 4000


# -- a checksum on every block --------------------------------------------------------------

@pytest.fixture(scope="module")
def blocks(tmp_path_factory):
    """A recording whose transitions log holds 6 blocks (one a flush), and its rows."""
    path = tmp_path_factory.mktemp("blocks") / "rec"
    x = np.cumsum(np.random.default_rng(2).normal(size=(3001, 2)), axis=0)
    with idt_desk.Recorder(path, ["x", "v"], ["u"], window=20, stride=5,
                           calibration_windows=2, baseline_windows=5) as rec:
        for k in range(0, 3000, 500):
            rec.add(x[k:k + 500], np.sin(x[k:k + 500, :1]), x[k + 1:k + 501])
            rec.flush()
    return path, idt_desk.load_recording(path).transitions


def test_300_single_bit_flips_anywhere_in_the_log_never_load_silently_different(
        blocks, tmp_path):
    """In 60 seeded one-bit flips in a pendulum recording's log 57 loaded silently
    different; two sweeps of 300 found 153 and 278."""
    import shutil

    path, clean = blocks
    log = (path / "transitions.arrows").read_bytes()
    rng = np.random.default_rng(79)
    outcomes = {"refused": 0, "kept the rows before": 0}
    for _ in range(300):
        d = tmp_path / "flip"
        shutil.rmtree(d, ignore_errors=True)
        shutil.copytree(path, d)
        data = bytearray(log)
        at = int(rng.integers(len(data)))
        data[at] ^= 1 << int(rng.integers(8))
        (d / "transitions.arrows").write_bytes(bytes(data))
        try:
            rec = idt_desk.load_recording(d)
        except idt_desk.RecordingError as exc:
            assert "\n" not in str(exc)
            outcomes["refused"] += 1
            continue
        got = rec.transitions
        # Never different numbers: what loads is the clean log's first rows, bit for bit,
        # and a load that lost rows (or anything) says so.
        assert len(got) <= len(clean), at
        np.testing.assert_array_equal(got.to_numpy(), clean.iloc[:len(got)].to_numpy())
        assert not rec.complete and rec.warnings, at
        outcomes["kept the rows before"] += 1
    assert outcomes["kept the rows before"] > 100  # a flip in a block keeps the ones before


def test_a_failed_block_is_named_and_the_rows_before_it_kept(blocks, tmp_path):
    import shutil

    from idt_desk.recordings.arrows import Frames

    path, clean = blocks
    d = tmp_path / "rec"
    shutil.copytree(path, d)
    data = bytearray((d / "transitions.arrows").read_bytes())
    frames = Frames("probe")
    ends, taken = [], 0
    for k in range(len(data)):  # each block's end, byte by byte as a follower sees them
        got = frames.feed(bytes(data[k:k + 1]))
        if got:
            taken += len(got)
            ends.append(k + 1)
    assert frames.blocks == 6 and frames.unverified == 0
    third = (ends[1] + ends[2]) // 2  # in the third block's body
    data[third] ^= 0x10
    (d / "transitions.arrows").write_bytes(bytes(data))
    rec = idt_desk.load_recording(d)
    assert len(rec.transitions) == 1000 and not rec.complete
    assert any("block 3 of transitions.arrows" in w and "checksum mismatch" in w
               and "the 1,000 rows before it are kept" in w for w in rec.warnings), rec.warnings
    np.testing.assert_array_equal(rec.transitions.to_numpy(), clean.iloc[:1000].to_numpy())


def test_a_log_written_before_checksums_loads_and_says_it_cannot_be_verified(blocks, tmp_path):
    """Old recordings still load, complete, with a note."""
    import pyarrow as pa
    import pyarrow.ipc as ipc

    path, clean = blocks
    d = tmp_path / "old"
    import shutil

    shutil.copytree(path, d)
    table = ipc.open_stream(str(path / "transitions.arrows")).read_all()
    schema = table.schema.with_metadata({k: v for k, v in table.schema.metadata.items()
                                         if not k.startswith(b"idt_desk_crc")})
    sink = pa.OSFile(str(d / "transitions.arrows"), "wb")
    with ipc.new_stream(sink, schema, options=ipc.IpcWriteOptions(
            compression=pa.Codec("zstd", 1))) as w:
        for batch in table.cast(schema).to_batches(max_chunksize=500):
            w.write_batch(batch)
    sink.close()
    rec = idt_desk.load_recording(d)
    assert rec.complete and not rec.warnings
    assert rec.notes == ["transitions.arrows: 6 of its 6 blocks carry no checksum (written "
                         "before checksums): they cannot be verified"]
    np.testing.assert_array_equal(rec.transitions.to_numpy(), clean.to_numpy())


# -- crafted files: one line each, at every entry point, never a hang ----------------------

def _blank_lines(d: Path) -> None:
    (d / "status.json").unlink()
    with (d / "events.jsonl").open("ab") as f:
        f.write(b"\n" * (64 << 20))


def _many_events(d: Path) -> None:
    line = json.dumps({"kind": "note", "i": 10, "t": 0.01, "text": "x"}).encode() + b"\n"
    with (d / "events.jsonl").open("ab") as f:
        f.write(line * 300_000)


def _fifo(name: str):
    def go(d: Path) -> None:
        (d / name).unlink()
        os.mkfifo(d / name)
    return go


def _deep(name: str):
    def go(d: Path) -> None:
        if name == "config.json":
            raw = (d / name).read_text().rstrip().rstrip("}")
            (d / name).write_text(raw + ', "deep": ' + "[" * 100_000 + "]" * 100_000 + "}")
        else:
            with (d / name).open("a") as f:
                f.write('{"kind": "note", "x": ' + "[" * 100_000 + "]" * 100_000 + "}\n")
    return go


def _sparse(name: str):
    def go(d: Path) -> None:
        with (d / name).open("r+b") as f:
            f.truncate(4 << 30)  # 4 GiB, nearly all of it a hole: no disk used
    return go


def _bomb(d: Path) -> None:
    """The first block's first buffer claims 8 GiB decompressed (its checksum rewritten to
    match, as a crafter would)."""
    from idt_desk.recordings import arrows

    data = bytearray((d / "transitions.arrows").read_bytes())
    frames = arrows.Frames("x")
    frames.feed(bytes(data[:1]))
    start = len(frames.schema_bytes) if frames.schema_bytes else 0
    probe = arrows.Frames("x")
    probe.feed(bytes(data))
    start = len(probe.schema_bytes)
    length = int.from_bytes(data[start + 4:start + 8], "little")
    info = arrows._message_info(bytes(data[start + 8:start + 8 + length]))
    offset = next(o for o, size in info[3] if size >= 8)
    body = start + 8 + length
    data[body + offset:body + offset + 8] = (8 << 30).to_bytes(8, "little")
    end = body + info[1]
    message = bytearray(data[start:end])
    at = arrows._crc_at(message)
    message[at:at + 8] = b"%08x" % arrows._crc(message, at)
    data[start:end] = message
    (d / "transitions.arrows").write_bytes(bytes(data))


CRAFTED = {
    "config.json a FIFO": _fifo("config.json"),
    "events.jsonl a FIFO": _fifo("events.jsonl"),
    "windows.csv a FIFO": _fifo("windows.csv"),
    "config.json nested 100,000 deep": _deep("config.json"),
    "an event nested 100,000 deep": _deep("events.jsonl"),
    "config.json a 4 GiB hole": _sparse("config.json"),
    "windows.csv a 4 GiB hole": _sparse("windows.csv"),
    "events.jsonl 64 MiB of blank lines": _blank_lines,
    "300,000 events": _many_events,
    "a block claiming 8 GiB": _bomb,
}


@pytest.fixture(scope="module")
def crafted_base(tmp_path_factory):
    return _recording(tmp_path_factory.mktemp("crafted") / "rec")


@pytest.mark.timeout(120)
@pytest.mark.parametrize("case", list(CRAFTED))
def test_a_crafted_recording_is_one_line_at_every_entry_point(case, crafted_base, tmp_path):
    import shutil

    d = tmp_path / "rec"
    shutil.copytree(crafted_base, d)
    CRAFTED[case](d)
    try:
        rec = idt_desk.load_recording(d)
        assert rec.warnings or rec.complete
    except idt_desk.RecordingError as exc:
        assert "\n" not in str(exc)
    entries = {
        "replay": ["run", "--source", "replay", "--set", f"path={d}", "--speed", "max"],
        "export": ["export", str(d), "--out", str(tmp_path / "out"), "--format", "csv"],
        "runs": ["runs", str(tmp_path)],
    }
    if "FIFO" not in case:  # a follower waits for a FIFO's writer: it refuses it by name
        entries["follow"] = ["run", "--source", "replay", "--set", f"path={d}", "--set",
                             "follow=true", "--set", "silence=1", "--set", "wait=1",
                             "--speed", "max"]
    for entry, argv in entries.items():
        rc, err = _call(argv)
        assert "Traceback" not in err, (entry, err)
        if rc != 0:
            lines = [x for x in err.strip().splitlines() if x.startswith("idt-desk")]
            assert len(lines) == 1, (entry, err)


def test_a_bomb_is_refused_before_it_is_decompressed(crafted_base, tmp_path):
    """The crafted block claims 8 GiB: refused by its claim, in a process capped at 2.5 GB
    of address space (decompressing it would fail there with MemoryError, or worse)."""
    import shutil
    import subprocess

    d = tmp_path / "rec"
    shutil.copytree(crafted_base, d)
    _bomb(d)
    code = ("import resource, sys, idt_desk\n"
            "resource.setrlimit(resource.RLIMIT_AS, (2_500_000_000, 2_500_000_000))\n"
            "try:\n"
            "    idt_desk.load_recording(sys.argv[1])\n"
            "except idt_desk.RecordingError as exc:\n"
            "    print(exc)\n")
    got = subprocess.run([sys.executable, "-c", code, str(d)], capture_output=True, text=True,
                         timeout=120)
    assert got.returncode == 0, got.stderr  # refused by its claim: no MemoryError, no crash
    assert "block 1 of transitions.arrows" in got.stdout
    assert "claiming 8,589,934,592 bytes" in got.stdout


def test_recorded_text_reaches_the_terminal_escaped(tmp_path):
    """A crafted perturbation name cleared the screen, coloured the text and forged a line."""
    x = np.cumsum(np.random.default_rng(0).normal(size=(2001, 2)), axis=0)
    path = tmp_path / "rec"
    with idt_desk.Recorder(path, ["x", "v"], ["u"], window=20, stride=5,
                           calibration_windows=2, baseline_windows=5) as rec:
        rec.add(x[:1000], np.zeros((1000, 1)), x[1:1001])
        rec.perturb("wind\x1b[2J\x1b[31m\nforged: all clear")
        rec.add(x[1000:2000], np.zeros((1000, 1)), x[1001:2001])
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        main(["run", "--source", "replay", "--set", f"path={path}", "--speed", "max"])
    text = out.getvalue()
    assert "\x1b" not in text and "\nforged" not in text
    assert "wind\\x1b[2J\\x1b[31m\\nforged: all clear" in text


def test_a_closed_pipe_ends_a_listing_without_a_traceback(tmp_path):
    import subprocess

    for j in range(30):
        _recording(tmp_path / f"run-{j:02d}")
    got = subprocess.run(f"{sys.executable} -m idt_desk.cli runs {tmp_path} | head -1",
                         shell=True, capture_output=True, text=True, timeout=120)
    assert got.stdout.count("\n") == 1 and "Traceback" not in got.stderr, got.stderr


def test_an_image_observation_space_is_refused_in_one_line():
    """IDTMonitor around a 64×64×3 observation space hung at 5.9 GB."""
    import gymnasium as gym

    from idt_desk.gym import IDTMonitor

    class Camera(gym.Env):
        observation_space = gym.spaces.Box(0, 255, (64, 64, 3), np.uint8)
        action_space = gym.spaces.Discrete(2)

    with pytest.raises(ValueError, match=r"12,288 variables, more than the 1,024") as exc:
        IDTMonitor(Camera())
    assert "\n" not in str(exc.value)


def test_no_read_opens_a_file_outside_the_root_while_a_folder_is_swapped_for_a_link(tmp_path):
    """A run folder swapped over and over for a link to an outside folder: 10 of 20,000
    listings returned the outside status.json (a folder on the way swapped between the
    check and the open). 20,000 reads here, the swap racing them on a thread."""
    import threading

    from idt_desk.recordings.fs import LocalFiles

    root, outside = tmp_path / "root", tmp_path / "outside"
    (root / "run").mkdir(parents=True)
    (outside / "run").mkdir(parents=True)
    (root / "run" / "status.json").write_text('{"mine": 1}')
    (outside / "run" / "status.json").write_text('{"outside": 1}')
    files = LocalFiles(root)
    stop = threading.Event()

    def swap() -> None:
        real, link, aside = root / "run", root / "run-link", root / "run-aside"
        link.symlink_to(outside / "run", target_is_directory=True)
        while not stop.is_set():
            os.rename(real, aside)
            os.rename(link, real)  # the run is now the link to the outside
            os.rename(real, link)
            os.rename(aside, real)

    t = threading.Thread(target=swap, daemon=True)
    t.start()
    seen = {"mine": 0, "refused": 0, "gone": 0}
    try:
        for _ in range(20_000):
            try:
                data = files.read(str(root / "run" / "status.json"))
            except FileNotFoundError:
                seen["gone"] += 1
                continue
            except OSError:  # refused: outside the root
                seen["refused"] += 1
                continue
            assert b"outside" not in data
            seen["mine"] += 1
    finally:
        stop.set()
        t.join(10)
    assert seen["mine"] > 0 and sum(seen.values()) == 20_000


#: Paths opened while a test listens (an audit hook cannot be removed: it listens only while
#: this list is set).
_OPENED: list[str] | None = None


def _listen(event: str, args: tuple) -> None:
    if _OPENED is not None and event == "open" and args and isinstance(args[0], str | Path):
        _OPENED.append(os.fspath(args[0]))


sys.addaudithook(_listen)


def test_watching_a_folder_never_follows_or_opens_a_link_leading_outside_it(tmp_path):
    """``idt-desk watch X``, X holding a link to a run outside X, followed that run: an
    audit hook saw its config, events and log opened."""
    global _OPENED
    from idt_desk.recordings import newest_recording, runs_by_start

    watched, outside = tmp_path / "watched", tmp_path / "outside"
    watched.mkdir()
    _recording(watched / "mine")
    _recording(outside / "theirs")  # started later: the newest, if it were followed
    (watched / "zz-link").symlink_to(outside / "theirs", target_is_directory=True)
    skipped: list[str] = []
    _OPENED = []
    try:
        newest = newest_recording(watched, skipped)
        runs = runs_by_start(watched)
    finally:
        opened, _OPENED = _OPENED, None
    assert newest == watched / "mine" and [d for _t, d in runs] == [watched / "mine"]
    assert skipped == ["zz-link"]
    assert not [p for p in opened if "theirs" in p or "zz-link" in p], opened


def test_the_recorder_refuses_what_would_write_a_recording_that_is_then_refused(tmp_path):
    """``Recorder.perturb(5)`` was accepted and its recording refused whole later;
    ``Recorder(state_names="xy")`` made two variables."""
    with pytest.raises(TypeError, match="the string 'xy'"):
        idt_desk.Recorder(tmp_path / "a", "xy")
    with pytest.raises(TypeError, match="the string 'u'"):
        idt_desk.Recorder(tmp_path / "b", ["x"], "u")
    rec = idt_desk.Recorder(tmp_path / "c", ["x"], window=20, stride=5, calibration_windows=2,
                            baseline_windows=5)
    try:
        for bad in (5, "", None):
            with pytest.raises(TypeError, match="the name must be a non-empty string"):
                rec.perturb(bad)
        rec.add(np.zeros((50, 1)), None, np.zeros((50, 1)))
        rec.perturb("wind")
    finally:
        rec.close()
    assert idt_desk.load_recording(tmp_path / "c").complete


def test_a_path_too_long_to_look_at_is_one_line(tmp_path):
    with pytest.raises(idt_desk.RecordingError, match="cannot be read") as exc:
        idt_desk.load_recording(str(tmp_path / ("a" * 5000)))
    assert "\n" not in str(exc.value) and len(str(exc.value)) < 500


@pytest.mark.parametrize("damage", ["deep JSON", "4 GiB hole"])
def test_a_crafted_trials_file_is_one_line_for_the_pool(tmp_path, damage):
    """``reproduce … --pool`` on deeply nested JSON: a RecursionError traceback; on a 4 GiB
    sparse trials.csv it grew past 24 GB until the kernel killed it."""
    from idt_desk_sources.gym.reproduce.read import REQUIRED

    run = tmp_path / "run"
    run.mkdir()
    header = [*REQUIRED, "returns_pre"]
    row = ["1"] * len(REQUIRED) + ["[" * 50_000 + "]" * 50_000]
    if damage == "4 GiB hole":
        with (run / "trials.csv").open("wb") as f:
            f.truncate(4 << 30)
    else:
        import csv

        with (run / "trials.csv").open("w", newline="") as f:
            csv.writer(f).writerows([header, row])
    rc, err = _call(["reproduce", "cheetah", "--pool", str(run), "--out",
                     str(tmp_path / "out")])
    assert rc != 0 and "Traceback" not in err, err
    assert len([x for x in err.strip().splitlines() if x.startswith("idt-desk")]) == 1, err
