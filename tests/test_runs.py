"""``idt-desk runs``: every run under a folder, locally and over SFTP, alarmed first, cheaply."""

from __future__ import annotations

import json
import os
import shutil
import time

import numpy as np
import pytest

from idt_desk.cli.main import main
from idt_desk.errors import InputError
from idt_desk.recordings import RecordingWriter
from idt_desk.recordings.fs import LocalFiles
from idt_desk.recordings.runs import COLUMNS, RunIndex
from idt_desk.recordings.status import STATUS_FILE, RunStatus


def _recorder(path, **kw) -> RecordingWriter:
    return RecordingWriter(path, {"session": {}}, ["x"], ["u"], ["start", "end", "P"], **kw)


def _events(rec: RecordingWriter, alarms: int = 0) -> None:
    rec.add_event({"kind": "session_start", "i": 0, "t": 0.0, "wall": time.time(),
                   "pipeline": {"calibration_windows": 2, "baseline_windows": 5}})
    z = np.zeros((100, 1))
    rec.add_transitions(0, None, z, z, z, None, None)
    rec.add_windows({"start": np.arange(2.0), "end": np.arange(2.0) + 10})
    rec.add_event({"kind": "calibrated", "i": 30, "t": 3.0, "wall": time.time()})
    rec.add_windows({"start": np.array([2.0]), "end": np.array([12.0])})
    for j in range(alarms):
        rec.add_event({"kind": "alarm_on", "metric": "IDT", "i": 50 + j, "t": 5.0 + j,
                       "wall": time.time()})
    if alarms:
        rec.add_event({"kind": "detected", "i": 51, "t": 5.1, "wall": time.time(),
                       "severity": {"P": 0.4, "dH": -3.04, "reward": -9.0}})


@pytest.fixture(scope="module")
def ended(tmp_path_factory):
    """197 ended runs in nested folders, 5 of them alarmed (1 to 5 alarms)."""
    root = tmp_path_factory.mktemp("fleet")
    template = root.parent / "template"
    rec = _recorder(template)
    _events(rec)
    rec.close()
    for j in range(192):
        shutil.copytree(template, root / f"sweep{j % 4}" / f"seed{j:03d}")
    for j in range(5):
        rec = _recorder(root / "alarmed" / f"run{j}")
        _events(rec, alarms=j + 1)
        rec.close()
    return root


@pytest.fixture
def fleet(ended):
    """The 197 ended runs and 3 more still being written: 200."""
    open_ = []
    for j in range(3):
        rec = _recorder(ended / "live" / f"run{j}", flush_seconds=0.1)
        _events(rec)
        rec.flush()
        open_.append(rec)
    yield ended, open_
    for rec in open_:
        rec.close()
    shutil.rmtree(ended / "live")


def test_two_hundred_runs_alarmed_first_then_the_writing_ones(fleet):
    root, _open = fleet
    index = RunIndex(root)
    rows = index.refresh()
    assert len(rows) == 200 and all(set(r) == set(COLUMNS) for r in rows)
    assert sorted(r["path"] for r in rows[:5]) == [f"alarmed/run{j}" for j in range(5)]
    top = next(r for r in rows if r["path"] == "alarmed/run4")
    assert top["alarms"] == 5 and top["last_alarm"] == 9.0 and top["severity"] == "ΔH -3.0σ"
    states = {r["path"]: r["state"] for r in rows}
    assert {p for p, s in states.items() if s in ("writing", "idle")} == \
        {f"live/run{j}" for j in range(3)}
    assert sum(s == "ended" for s in states.values()) == 197
    live = next(r for r in rows if r["path"] == "live/run0")
    assert live["transitions"] == 100 and live["windows"] == 3
    assert live["baseline"] == "gathering 1/5"  # 3 windows, calibrated after the 2nd
    assert index.opened == 200  # a first look reads every status file once


def test_a_refresh_opens_only_what_changed_and_finds_a_new_run(fleet):
    root, open_ = fleet
    index = RunIndex(root)
    index.refresh()
    time.sleep(1.2)  # the open writers beat (their status files are replaced)
    rows = index.refresh()
    assert index.opened <= len(open_) and len(rows) == 200
    rec = _recorder(root / "sweep0" / "new")
    try:
        _events(rec, alarms=1)
        rec.flush()
        rows = index.refresh()
        assert len(rows) == 201 and "sweep0/new" in [r["path"] for r in rows[:6]]
        assert index.opened <= len(open_) + 1
    finally:
        rec.close()
        shutil.rmtree(root / "sweep0" / "new")


def test_a_run_without_a_status_file_is_read_from_its_events_line_by_line(tmp_path):
    rec = _recorder(tmp_path / "old")
    _events(rec, alarms=2)
    rec.close()
    (tmp_path / "old" / STATUS_FILE).unlink()  # as written before status files existed
    events = tmp_path / "old" / "events.jsonl"
    index = RunIndex(tmp_path)
    (row,) = index.refresh()
    assert (row["state"], row["alarms"], row["transitions"], row["error"]) == \
        ("ended", 2, 100, None)
    with events.open("ab") as f:  # a broken line, then a half-written one
        f.write(b'{"kind": "alarm_on", "metric": "IDT", "t": 7\n{"kind": "alarm_on", "me')
    (row,) = index.refresh()
    assert row["alarms"] == 2 and row["error"] == "events.jsonl: 1 unreadable line skipped"
    with events.open("ab") as f:  # the half line completed: read from where it was
        f.write(b'tric": "IDT", "i": 90, "t": 9.5}\n')
    (row,) = index.refresh()
    assert row["alarms"] == 3 and row["last_alarm"] == 9.5 and row["error"] is None
    assert index.opened == 1


def test_the_baseline_progress_is_the_monitors_own(tmp_path):
    # The windows the symbols are calibrated on are not baseline windows: a writer counts
    # them after its "calibrated" event, and the listing must not count them twice.
    import idt_desk

    x, u = np.random.default_rng(0).normal(size=(501, 1)), np.zeros((500, 1))
    with idt_desk.Recorder(tmp_path / "a", ["x"], ["u"], window=20, stride=10,
                           calibration_windows=5, baseline_windows=100) as rec:
        rec.add(x[:-1], u, x[1:])
        rec.flush()
        have, need = rec.snapshot().baseline_progress
        rows = RunIndex(tmp_path).refresh()
        assert rows[0]["windows"] == 49 and (have, need) == (44, 100)
        assert rows[0]["baseline"] == f"gathering {have}/{need}"


def test_one_bad_run_is_one_line_and_the_others_list(tmp_path):
    for name in ("good", "bad"):
        rec = _recorder(tmp_path / name)
        _events(rec)
        rec.close()
    (tmp_path / "bad" / STATUS_FILE).write_text('{"transitions": "many"}')
    rows = {r["path"]: r for r in RunIndex(tmp_path).refresh()}
    assert rows["good"]["state"] == "ended" and rows["good"]["error"] is None
    assert rows["bad"]["state"] == "error"
    assert rows["bad"]["error"] == "status.json: transitions: not a count ('many')"
    with pytest.raises(ValueError, match="not a JSON object"):
        RunStatus.from_json([1])


def test_a_link_leading_outside_the_folder_is_not_followed(tmp_path):
    inside, outside = tmp_path / "in", tmp_path / "out"
    for where in (inside / "a", outside / "secret"):
        rec = _recorder(where)
        _events(rec)
        rec.close()
    os.symlink(outside, inside / "escape")
    os.symlink(inside / "a", inside / "alias")  # inside: followed, the same folder: once
    index = RunIndex(inside)
    paths = sorted(r["path"] for r in index.refresh())
    assert paths == ["a"]
    assert index.notes == ["1 link leading outside the folder not followed",
                           "1 link to a folder already listed (a loop, or two ways to one "
                           "folder) listed once"]
    kinds = {e.name: e.kind for e in LocalFiles(inside).listdir(str(inside))}
    assert kinds["escape"] == "outside" and kinds["alias"] == "dir"
    assert index.refresh() and index.notes[0].startswith("1 link leading outside")  # again


def test_a_dead_writer_stops_responding(tmp_path):
    rec = _recorder(tmp_path / "r")
    _events(rec)
    rec.flush()
    (row,) = RunIndex(tmp_path, silence=10).refresh(now=time.time() + 60)
    assert row["state"] == "stopped responding"
    rec.close()


def test_the_command_lists_filters_and_says_when_there_is_nothing(fleet, capsys, tmp_path):
    root, _open = fleet
    assert main(["runs", str(root), "--json", "--filter", "alarmed/*"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert len(rows) == 5 and {"path", "state", "transitions", "windows", "alarms",
                                "last_alarm"} <= set(rows[0])
    assert main(["runs", str(root), "--active-within", "1h", "--filter", "live/*"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 3 and all("live/run" in ln for ln in lines)
    assert main(["runs", str(tmp_path)]) == 0
    assert "no run here" in capsys.readouterr().out
    assert main(["runs", str(tmp_path / "nowhere")]) == 2
    assert capsys.readouterr().err.strip().endswith("no such folder")


# --- over SSH: asyncssh's own server on 127.0.0.1, with its SFTP subsystem -------------------

import asyncssh  # noqa: E402 - the remote extra, in [test]


def test_the_same_runs_over_ssh(fleet, sshd):
    from idt_desk.recordings.remote import SFTPFiles

    root, _open = fleet
    port, options = sshd.port, sshd.options
    files = SFTPFiles(f"ssh://tester@127.0.0.1:{port}{root}", **options)
    try:
        index = RunIndex(files)
        now = time.time()  # one clock for both looks: a slow one must not turn writing idle
        remote = index.refresh(now)
        local = RunIndex(root).refresh(now)
        # The same rows (the open runs' heartbeats move between the two looks: by path).
        def strip(rows):
            return sorted(({k: r[k] for k in COLUMNS if k != "active"} for r in rows),
                          key=lambda r: r["path"])

        assert strip(remote) == strip(local)
        assert {r["path"] for r in remote[:5]} == {f"alarmed/run{j}" for j in range(5)}
        time.sleep(1.2)
        index.refresh()
        assert index.opened <= 3 + 3  # the writing runs' status files (whole-second mtimes)
    finally:
        files.close()


def test_an_unknown_host_key_is_refused_in_one_line(sshd, tmp_path):
    from idt_desk.recordings.remote import SFTPFiles

    port, options = sshd.port, sshd.options
    stranger = asyncssh.import_known_hosts(
        f"[127.0.0.1]:{port} "
        f"{asyncssh.generate_private_key('ssh-ed25519').export_public_key().decode()}")
    for known in (asyncssh.import_known_hosts(""), stranger):
        with pytest.raises(InputError) as err:
            SFTPFiles(f"ssh://127.0.0.1:{port}{tmp_path}", **{**options, "known_hosts": known})
        text = str(err.value)
        assert "\n" not in text and "refused: the server's host key is not trusted" in text
    with pytest.raises(InputError, match="refused: the server accepted none of your keys"):
        SFTPFiles(f"ssh://127.0.0.1:{port}{tmp_path}",
                  **{**options, "client_keys": [asyncssh.generate_private_key("ssh-ed25519")]})
    with pytest.raises(InputError, match="not a folder on the server"):
        SFTPFiles(f"ssh://127.0.0.1:{port}{tmp_path}/none", **options)
    with pytest.raises(InputError, match="cannot connect"):
        SFTPFiles("ssh://127.0.0.1:1/x", **options)


def test_a_path_under_the_home_on_the_server(sshd, tmp_path, monkeypatch):
    # ssh://host/~/x is x under the user's home there (where the SFTP server starts: for
    # asyncssh's server, its working directory; for OpenSSH's, the user's home).
    from idt_desk.recordings.remote import SFTPFiles

    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs").mkdir()
    files = SFTPFiles(f"ssh://127.0.0.1:{sshd.port}/~/runs", **sshd.options)
    try:
        assert files.root == str(tmp_path / "runs")
        assert files.location(files.root + "/a b") == \
            f"ssh://127.0.0.1:{sshd.port}{tmp_path}/runs/a%20b"
    finally:
        files.close()


def test_a_lost_connection_is_one_line_and_the_next_look_connects_again(fleet, sshd):
    from idt_desk.recordings.remote import SFTPFiles

    root, _open = fleet
    files = SFTPFiles(f"ssh://127.0.0.1:{sshd.port}{root}", **sshd.options)
    try:
        index = RunIndex(files)
        assert len(index.refresh()) == 200
        files._conn.abort()  # the network goes away under the listing
        time.sleep(0.2)
        with pytest.raises(ConnectionError) as err:
            index.refresh()
        assert "connection to the server was lost" in str(err.value)
        assert "\n" not in str(err.value)
        assert len(index.refresh()) == 200  # the next look connects again
    finally:
        files.close()


def test_a_run_says_what_changed_at_its_latest_alarm(tmp_path, capsys):
    """The fleet's table had no "what changed" column: the listing carries the latest
    alarm's class of change, from its status and from its events alike."""
    from idt_desk.recordings.runs import row_line

    rec = _recorder(tmp_path / "run")
    _events(rec, alarms=1)
    rec.add_event({"kind": "attributed", "i": 60, "t": 6.0, "wall": time.time(),
                   "alarm_i": 50, "attribution": "sensor", "evidence": "spreads"})
    rec.add_event({"kind": "alarm_on", "metric": "IDT", "i": 80, "t": 8.0, "wall": time.time()})
    rec.add_event({"kind": "attributed", "i": 90, "t": 9.0, "wall": time.time(),
                   "alarm_i": 80, "attribution": "actuator\x1b[2J", "evidence": "intact"})
    rec.close()
    (row,) = RunIndex(tmp_path).refresh()
    assert row["changed"] == "actuator\x1b[2J"  # the latest alarm's, not the first's
    assert "changed: actuator\\x1b[2J" in row_line(row)  # escaped on a terminal
    (tmp_path / "run" / STATUS_FILE).unlink()  # folded from the events instead
    (row,) = RunIndex(tmp_path).refresh()
    assert row["changed"] == "actuator\x1b[2J"
