"""Hostile trees and servers over SSH: the cases of ``test_hostile_runs.py`` on a server.

The server is asyncssh's own on 127.0.0.1 (``tests/ssh_server.py``); its SFTP notes the real
path of every file a client opens, so "nothing outside the root is opened" is checked on the
server's side. A relay in front of it (``proxy``) freezes or drops the connection, as a
stopped sshd or a lost network does: nothing may hang, and closing the fleet window returns
within 2 s whatever the server does.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from idt_desk.recordings import RecordingError, RecordingTail
from idt_desk.recordings.remote import SFTPFiles
from idt_desk.recordings.runs import RunIndex, row_line
from idt_desk.recordings.status import STATUS_FILE
from tests.layouts import header_bytes, transitions_path
from tests.run_trees import alarmed_run

pytest.importorskip("asyncssh")
pytestmark = pytest.mark.timeout(90)

SECRET = "TOP-SECRET-TOKEN-42"


@pytest.fixture(scope="module")
def template(tmp_path_factory):
    """One ended run (100 transitions)."""
    path = tmp_path_factory.mktemp("template") / "run"
    alarmed_run(path)
    return path


@pytest.fixture
def tree(tmp_path, template):
    """``root`` with a healthy run ``ok``; ``outside`` with a 0600 secret."""
    root, outside = tmp_path / "root", tmp_path / "outside"
    shutil.copytree(template, root / "ok")
    outside.mkdir()
    (outside / "secret.json").write_text(json.dumps({"transitions": SECRET}))
    (outside / "secret.json").chmod(0o600)
    return root, outside


def _files(sshd, root, port=None, host="127.0.0.1"):
    return SFTPFiles(f"ssh://{host}:{port or sshd.port}{root}", **sshd.options)


def _opened_outside(sshd, since: int, outside) -> list[str]:
    real = os.path.realpath(outside)
    return [p for p in sshd.opened[since:] if p.startswith(real + os.sep)]


def test_files_linked_outside_are_never_opened_on_the_server(sshd, tree, template):
    root, outside = tree
    shutil.copytree(template, root / "status")
    (root / "status" / STATUS_FILE).unlink()
    (root / "status" / STATUS_FILE).symlink_to(outside / "secret.json")
    shutil.copytree(template, root / "events")
    (root / "events" / STATUS_FILE).unlink()
    (root / "events" / "events.jsonl").unlink()
    (root / "events" / "events.jsonl").symlink_to(outside / "secret.json")
    since = len(sshd.opened)
    files = _files(sshd, root)
    try:
        rows = {r["path"]: r for r in RunIndex(files).refresh()}
    finally:
        files.close()
    assert _opened_outside(sshd, since, outside) == []
    assert any(p.endswith("ok/status.json") for p in sshd.opened[since:])  # it does log
    assert "a link leading outside" in rows["status"]["error"]
    assert "a link leading outside" in rows["events"]["error"]
    assert SECRET not in json.dumps(list(rows.values()))


def test_a_followed_file_swapped_for_an_outside_link_is_refused(sshd, ssh_home, tree, template):
    root, outside = tree
    shutil.copytree(template, outside / "other")
    run = root / "ok"
    tail = RecordingTail(f"ssh://127.0.0.1:{ssh_home}{run}")
    try:
        assert len(tail.poll()[0]) == 100
        name = transitions_path(run).name
        (run / name).unlink()
        (run / name).symlink_to(outside / "other" / name)
        since = len(sshd.opened)
        with pytest.raises(RecordingError, match="a link leading outside"):
            tail.poll()
        assert _opened_outside(sshd, since, outside) == []
    finally:
        tail.close()


def test_a_truncated_run_followed_over_ssh_is_said_not_blamed_on_the_data(ssh_home, tree):
    run = tree[0] / "ok"
    tail = RecordingTail(f"ssh://127.0.0.1:{ssh_home}{run}")
    try:
        tail.poll()
        path = transitions_path(run)
        path.write_bytes(header_bytes(path) + b"\xff" * 40)
        with pytest.raises(RecordingError, match="truncated or replaced while followed"):
            tail.poll()
    finally:
        tail.close()


def test_link_loops_on_the_server_end_and_list_each_run_once(sshd, tree):
    root, _outside = tree
    os.symlink(".", root / "again")
    os.symlink(".", root / "and-again")
    (root / "deep").mkdir()
    os.symlink("..", root / "deep" / "self")
    files = _files(sshd, root)
    try:
        index = RunIndex(files)
        assert [r["path"] for r in index.refresh()] == ["ok"]
        assert any("listed once" in note for note in index.notes)
    finally:
        files.close()


def test_names_that_are_not_utf8_on_the_server_are_listed_escaped(sshd, tree, template):
    root, _outside = tree
    raw = os.fsencode(root)
    shutil.copytree(template, os.fsdecode(raw + b"/caf\xe9"))  # at the root
    shutil.copytree(template, os.fsdecode(raw + b"/sub/na\xefve"))  # in a subfolder
    files = _files(sshd, root)
    try:
        rows = RunIndex(files).refresh()
    finally:
        files.close()
    lines = sorted(row_line(r).split()[0] for r in rows)
    assert lines == ["caf\\xe9", "ok", "sub/na\\xefve"]


def test_nested_json_on_the_server_is_one_line(sshd, tree, template):
    root, _outside = tree
    shutil.copytree(template, root / "nested")
    (root / "nested" / STATUS_FILE).write_text("[" * 1100 + "]" * 1100)
    files = _files(sshd, root)
    try:
        rows = {r["path"]: r for r in RunIndex(files).refresh()}
    finally:
        files.close()
    assert rows["nested"]["error"] == "status.json: JSON: JSON nested too deeply to read"
    assert rows["ok"]["error"] is None


def test_a_whole_server_scan_is_refused(sshd):
    from idt_desk.errors import InputError

    for path in ("/", "/proc", "/sys/kernel"):
        with pytest.raises(InputError, match=r"refused|give the folder"):
            _files(sshd, path)


def test_a_run_listed_from_an_ipv6_host_can_be_followed(sshd, ssh_home, tree):
    root, _outside = tree
    url = f"ssh://[::1]:{sshd.port6}{root}"
    index = RunIndex(url)
    try:
        rows = index.refresh()
        where = index.location(rows[0])
    finally:
        index.close()
    assert where == f"ssh://[::1]:{sshd.port6}{root}/ok"
    tail = RecordingTail(where)
    try:
        assert len(tail.poll()[0]) == 100
    finally:
        tail.close()


def test_a_frozen_server_is_said_in_seconds_not_waited_on(proxy, tree):
    root, _outside = tree
    files = SFTPFiles(f"ssh://127.0.0.1:{proxy.port}{root}", **proxy.options)
    try:
        index = RunIndex(files)
        assert [r["path"] for r in index.refresh()] == ["ok"]
        proxy.freeze()
        t0 = time.monotonic()
        with pytest.raises(ConnectionError, match=r"lost|did not answer"):
            index.refresh()
        assert time.monotonic() - t0 < 15  # the keepalive: about 6 s
    finally:
        t0 = time.monotonic()
        files.close()
        assert time.monotonic() - t0 < 2


def test_a_server_dropped_mid_listing_is_one_line_without_noise(proxy, tree, capfd):
    root, _outside = tree
    files = SFTPFiles(f"ssh://127.0.0.1:{proxy.port}{root}", **proxy.options)
    try:
        index = RunIndex(files)
        index.refresh()
        capfd.readouterr()
        proxy.close()  # every connection dropped
        with pytest.raises(ConnectionError) as caught:
            for _ in range(3):
                index.refresh()
                time.sleep(0.2)
        assert "\n" not in str(caught.value)
    finally:
        files.close()
    time.sleep(0.5)
    _out, err = capfd.readouterr()
    assert "socket.send() raised exception" not in err and "Event loop is closed" not in err
    assert "Traceback" not in err


def test_closing_the_fleet_window_returns_within_two_seconds_of_a_frozen_server(
        qtbot, proxy, tree):
    pytest.importorskip("pytestqt")
    from idt_desk_widgets.fleet import FleetView

    root, _outside = tree
    files = SFTPFiles(f"ssh://127.0.0.1:{proxy.port}{root}", **proxy.options)
    view = FleetView(RunIndex(files), f"ssh://127.0.0.1:{proxy.port}{root}")
    qtbot.addWidget(view)
    view.start()
    qtbot.waitUntil(lambda: view.refreshes >= 1, timeout=30_000)
    proxy.freeze()
    view._future = None  # a refresh now, on the frozen connection
    view.refresh()
    time.sleep(0.5)  # it is waiting on the server
    assert not view._future.done()
    t0 = time.monotonic()
    view.shutdown()
    assert time.monotonic() - t0 < 2
    deadline = time.monotonic() + 5
    while any(t.name.startswith("idt-") and t.is_alive() for t in threading.enumerate()) \
            and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not [t.name for t in threading.enumerate() if t.name.startswith("idt-fleet")]


def test_stopping_a_run_followed_from_a_frozen_server_returns_at_once(
        sshd, ssh_home, proxy, tmp_path):
    from idt_desk_sources.replay import ReplaySource

    from idt_desk.live.session import Session, SessionConfig

    home_known = os.path.join(os.environ["HOME"], ".ssh", "known_hosts")
    with open(home_known, "a") as f:
        f.write(f"[127.0.0.1]:{proxy.port} {sshd.public}")
    run = tmp_path / "live"
    # A loop writing slowly on (tests/loop_writer.py): the follower waits for more.
    writer = subprocess.Popen([sys.executable, "-m", "tests.loop_writer", str(run), "100000",
                               "500", "0.5"], cwd=Path(__file__).resolve().parents[1])
    try:
        deadline = time.monotonic() + 30
        while not (run / "events.jsonl").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        source = ReplaySource(path=f"ssh://127.0.0.1:{proxy.port}{run}", follow=True,
                              silence=60.0, wait=30.0)
        session = Session(SessionConfig(speed=None), source=source)
        session.start()
        deadline = time.monotonic() + 30
        while session.n_transitions < 500 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert session.n_transitions >= 500
        proxy.freeze()
        time.sleep(1.0)  # the follower is waiting on the frozen server now
        t0 = time.monotonic()
        session.stop(timeout=10)
        assert time.monotonic() - t0 < 2
        session.close()
    finally:
        writer.kill()
        writer.wait()


def test_a_folder_not_yet_on_the_server_is_waited_for(sshd, ssh_home, tmp_path, template):
    """``idt-desk watch ssh://host/path`` of a sweep that has not made its folder yet opens
    the window and waits, as it does here; the runs are listed once the folder exists."""
    sweep = tmp_path / "sweep"
    url = f"ssh://127.0.0.1:{sshd.port}{sweep}"
    r = subprocess.run([sys.executable, "-m", "idt_desk.cli", "watch", url, "--quit-after",
                        "0.5"], capture_output=True, text=True, timeout=120,
                       env={**os.environ, "QT_QPA_PLATFORM": "offscreen"})
    assert r.returncode == 0, r.stderr
    assert f"{url}: no such folder yet; waiting for it" in r.stderr
    index = RunIndex(SFTPFiles(url, missing_ok=True, **sshd.options), wait=True)
    try:
        assert index.refresh() == [] and "waiting for it" in index.notes[0]
        shutil.copytree(template, sweep / "a")
        assert [row["path"] for row in index.refresh()] == ["a"] and index.notes == []
    finally:
        index.close()
    # A file where the folder should be is still refused, waiting or not.
    (tmp_path / "file").write_text("x")
    with pytest.raises(Exception, match="not a folder on the server"):
        SFTPFiles(f"ssh://127.0.0.1:{sshd.port}{tmp_path}/file", missing_ok=True,
                  **sshd.options)


@pytest.mark.parametrize("how", ["stopped", "killed"])
def test_a_follow_of_a_stopped_or_killed_server_ends_within_15_s_keeping_its_rows(
        sshd, ssh_home, proxy, tmp_path, how):
    """A follow whose server was stopped (SIGSTOP: it accepts and never answers) or killed
    after rows were read said "the connection to the server was lost" and was still running
    150 s later."""
    from idt_desk_sources.replay import ReplaySource

    from idt_desk.live.session import Session, SessionConfig

    home_known = os.path.join(os.environ["HOME"], ".ssh", "known_hosts")
    with open(home_known, "a") as f:
        f.write(f"[127.0.0.1]:{proxy.port} {sshd.public}")
    run = tmp_path / "live"
    writer = subprocess.Popen([sys.executable, "-m", "tests.loop_writer", str(run), "100000",
                               "500", "0.5"], cwd=Path(__file__).resolve().parents[1])
    try:
        deadline = time.monotonic() + 30
        while not (run / "events.jsonl").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        source = ReplaySource(path=f"ssh://127.0.0.1:{proxy.port}{run}", follow=True,
                              silence=600.0, wait=30.0)
        session = Session(SessionConfig(speed=None), source=source)
        session.start()
        deadline = time.monotonic() + 30
        while session.n_transitions < 500 and time.monotonic() < deadline:
            time.sleep(0.05)
        read = session.n_transitions
        assert read >= 500
        proxy.freeze() if how == "stopped" else proxy.drop()
        t0 = time.monotonic()
        while session.running and time.monotonic() - t0 < 30:
            time.sleep(0.1)
        took = time.monotonic() - t0
        assert not session.running and took < 15, took
        assert session.n_transitions >= read  # what was read is kept
        notes = [e.get("text", "") for e in session.events_since(0) if e["kind"] == "note"]
        assert any(t.startswith("following stopped:") and "transitions read are kept" in t
                   for t in notes), notes
        session.close()
    finally:
        writer.kill()
        writer.wait()


def test_a_server_frozen_mid_listing_of_many_runs_is_one_line_and_nothing_else(
        proxy, tree, template, capfd):
    """``idt-desk runs ssh://…`` on a server frozen with SIGSTOP printed its line, then 64
    "Task exception was never retrieved" tracebacks: 577 lines of stderr."""
    import gc

    root, _outside = tree
    for j in range(80):
        shutil.copytree(template, root / f"run-{j:02d}")
    files = SFTPFiles(f"ssh://127.0.0.1:{proxy.port}{root}", **proxy.options)
    try:
        index = RunIndex(files)
        assert len(index.refresh()) == 81
        for j in range(80):  # every status changed: the next refresh reads all of them
            (root / f"run-{j:02d}" / STATUS_FILE).touch()
        capfd.readouterr()
        proxy.freeze()
        with pytest.raises(ConnectionError) as caught:
            index.refresh()
        assert "\n" not in str(caught.value)
    finally:
        files.close()
    gc.collect()  # an unretrieved task's exception is said when the task is collected
    time.sleep(0.5)
    _out, err = capfd.readouterr()
    assert "never retrieved" not in err and "Traceback" not in err, err[:2000]
