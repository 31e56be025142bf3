"""Hostile trees and files under ``idt-desk runs``, the fleet and the follower, on this machine.

Each case is a tree an attacker (or an accident) could leave in a watched folder. Whatever it
holds, the listing must open nothing outside the root (checked here by an audit hook that
sees every ``open`` the process makes, not assumed), finish (every case runs under a
timeout), and give one line or the right listing. The same cases over SSH are in
``test_hostile_ssh.py``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time

import pytest

from idt_desk.cli.main import main
from idt_desk.errors import InputError
from idt_desk.recordings import RecordingError, RecordingTail
from idt_desk.recordings.fs import LocalFiles
from idt_desk.recordings.runs import RunIndex, open_files, row_line
from idt_desk.recordings.status import STATUS_FILE
from tests.layouts import header_bytes, transitions_path
from tests.run_trees import alarmed_run

pytestmark = pytest.mark.timeout(60)

SECRET = "TOP-SECRET-TOKEN-42"

#: Paths opened by this process while :func:`opened_under` watches (an audit hook sees them).
_OPENED: list[str] | None = None


def _audit(event: str, args: tuple) -> None:
    if _OPENED is not None and event == "open" and isinstance(args[0], str | bytes):
        _OPENED.append(os.fsdecode(args[0]))


sys.addaudithook(_audit)


class opened_under:
    """Every path the process opens inside the block: ``.paths`` (real paths)."""

    def __enter__(self) -> opened_under:
        global _OPENED
        _OPENED = []
        self.paths: list[str] = []
        return self

    def __exit__(self, *exc: object) -> None:
        global _OPENED
        self.paths = [os.path.realpath(p) for p in _OPENED or []]
        _OPENED = None

    def inside(self, folder) -> list[str]:
        """Those of the paths opened under ``folder``."""
        real = os.path.realpath(folder)
        return [p for p in self.paths if p == real or p.startswith(real + os.sep)]


@pytest.fixture(scope="module")
def template(tmp_path_factory):
    """One ended run (100 transitions), copied into each case's tree."""
    path = tmp_path_factory.mktemp("template") / "run"
    alarmed_run(path)
    return path


@pytest.fixture
def tree(tmp_path, template):
    """``root`` with one healthy run ``ok``, and ``outside`` holding a 0600 secret."""
    root, outside = tmp_path / "root", tmp_path / "outside"
    shutil.copytree(template, root / "ok")
    outside.mkdir()
    secret = outside / "secret.json"
    secret.write_text(json.dumps({"transitions": SECRET, "error": SECRET}))
    secret.chmod(0o600)
    (outside / "events.jsonl").write_text(f'{{"kind": "session_end", "error": "{SECRET}"}}\n')
    return root, outside, template


def _listing(root, capsys) -> tuple[int, str, str]:
    rc = main(["runs", str(root)])
    out, err = capsys.readouterr()
    return rc, out, err


def _legacy(path, template) -> None:
    """A run written before status files: no status.json (folded from its events)."""
    shutil.copytree(template, path)
    (path / STATUS_FILE).unlink()


# -- security: nothing outside the root is opened --------------------------------------------

@pytest.mark.parametrize("name", ["status.json", "events.jsonl", "config.json"])
def test_a_runs_file_linked_outside_is_never_opened_nor_shown(tree, capsys, name):
    root, outside, template = tree
    run = root / "linked"
    if name == "events.jsonl":
        _legacy(run, template)
    else:
        shutil.copytree(template, run)
    (run / name).unlink()
    (run / name).symlink_to(outside / ("events.jsonl" if name == "events.jsonl"
                                       else "secret.json"))
    with opened_under() as seen:
        rc, out, err = _listing(root, capsys)
    assert rc == 0 and SECRET not in out + err
    assert seen.inside(outside) == []  # checked: not one open of the outside folder
    rows = {line.split()[0]: line for line in out.splitlines()}
    assert "error" not in rows["ok"]
    if name == "config.json":  # then no run is there: the folder is not listed
        assert "linked" not in rows
    else:
        assert f"{name}: " in rows["linked"] and "a link leading outside" in rows["linked"]
        assert "not followed" in rows["linked"]


def test_a_link_to_etc_passwd_as_a_status_is_refused_before_it_is_opened(tree):
    root, _outside, template = tree
    shutil.copytree(template, root / "pw")
    (root / "pw" / STATUS_FILE).unlink()
    (root / "pw" / STATUS_FILE).symlink_to("/etc/passwd")
    with opened_under() as seen:
        rows = {r["path"]: r for r in RunIndex(root).refresh()}
    assert "/etc/passwd" not in seen.paths
    assert "a link leading outside" in rows["pw"]["error"]


def test_a_file_swapped_for_an_outside_link_after_the_first_poll_is_refused(tree):
    root, outside, template = tree
    other = outside / "other"
    shutil.copytree(template, other)
    run = root / "ok"
    tail = RecordingTail(run)
    rows, _events = tail.poll()
    assert len(rows) == 100
    name = transitions_path(run).name
    (run / name).unlink()
    (run / name).symlink_to(other / name)
    with opened_under() as seen, pytest.raises(RecordingError, match="a link leading outside"):
        tail.poll()
    assert seen.inside(outside) == []


def test_a_local_follow_names_an_outside_link_at_once_rather_than_waiting(tree):
    root, outside, _template = tree
    run = root / "ok"
    (run / "events.jsonl").unlink()
    (run / "events.jsonl").symlink_to(outside / "events.jsonl")
    t0 = time.monotonic()
    with pytest.raises(RecordingError, match=r"events\.jsonl: a link leading outside"):
        RecordingTail(run).ready()
    assert time.monotonic() - t0 < 5


# -- terminal injection ----------------------------------------------------------------------

def test_names_and_fields_cannot_forge_rows_or_command_the_terminal(tree, capsys):
    root, _outside, template = tree
    forged = root / "x\nprod/seed-9  ended  999 transitions"
    shutil.copytree(template, forged)
    shutil.copytree(template, root / "\x1b]0;pwned\x07\x1b[2Jtitle")
    status = json.loads((template / STATUS_FILE).read_text())
    status["severity"] = "ΔH\n-3σ  prod/seed-7 ended\x1b[31m"
    shutil.copytree(template, root / "sev")
    (root / "sev" / STATUS_FILE).write_text(json.dumps(status))
    rc, out, err = _listing(root, capsys)
    assert rc == 0 and err == ""
    assert len(out.splitlines()) == 4  # one line a run, no forged row
    assert "\x1b" not in out and "\x07" not in out
    assert r"x\nprod/seed-9" in out and r"\x1b]0;pwned\x07" in out
    assert r"ΔH\n-3σ  prod/seed-7 ended\x1b[31m" in out


def test_a_name_that_is_not_utf8_prints_on_an_ascii_terminal(tree):
    root, _outside, template = tree
    shutil.copytree(template, os.fsdecode(os.path.join(os.fsencode(root), b"caf\xe9-run")))
    for encoding in ("utf-8", "ascii"):
        done = subprocess.run(
            [sys.executable, "-m", "idt_desk.cli", "runs", str(root)], capture_output=True,
            env={**os.environ, "PYTHONIOENCODING": encoding}, timeout=60)
        assert done.returncode == 0, done.stderr
        assert b"caf\\xe9-run" in done.stdout and b"Traceback" not in done.stderr


# -- hangs: loops, whole-machine scans ------------------------------------------------------

def test_link_loops_end_and_list_each_run_once(tree, capsys):
    root, _outside, _template = tree
    os.symlink(".", root / "again")
    os.symlink(".", root / "and-again")
    os.symlink("..", root / "ok" / "up")  # inside a run: never searched
    (root / "deep").mkdir()
    os.symlink("..", root / "deep" / "self")
    index = RunIndex(root)
    rows = index.refresh()
    assert [r["path"] for r in rows] == ["ok"]
    assert any("listed once" in note for note in index.notes)
    _rc, out, err = _listing(root, capsys)
    assert out.count("\n") == 1 and "listed once" in err


@pytest.mark.parametrize("where", ["/", "", "/proc", "/proc/self", "/sys/kernel"])
def test_a_whole_machine_scan_is_refused(where, capsys):
    rc = main(["runs", where])
    _out, err = capsys.readouterr()
    assert rc == 2 and err.count("\n") == 1
    assert "refused" in err or "an empty path" in err


def test_a_tree_deeper_than_the_bound_is_cut_and_said(tmp_path, template):
    from idt_desk.recordings.runs import MAX_DEPTH

    deep = tmp_path.joinpath(*(["d"] * (MAX_DEPTH + 3)))
    shutil.copytree(template, deep / "run")
    shutil.copytree(template, tmp_path / "near")
    index = RunIndex(tmp_path)
    assert [r["path"] for r in index.refresh()] == ["near"]
    assert index.notes == [f"1 folder deeper than {MAX_DEPTH} levels not searched"]


# -- one line, not a traceback: nesting, sizes ----------------------------------------------

def test_nested_json_is_one_line_and_the_healthy_runs_list(tree, capsys, template):
    root, _outside, _template = tree
    nested = "[" * 1100 + "]" * 1100
    shutil.copytree(template, root / "status")
    (root / "status" / STATUS_FILE).write_text(nested)
    _legacy(root / "events", template)
    with open(root / "events" / "events.jsonl", "a") as f:
        f.write(nested + "\n")
    _legacy(root / "config", template)
    (root / "config" / "config.json").write_text(nested)
    rc, out, err = _listing(root, capsys)
    assert rc == 0 and err == ""
    rows = {line.split()[0]: line for line in out.splitlines()}
    assert set(rows) == {"ok", "status", "events", "config"}
    assert "status.json: JSON: JSON nested too deeply to read" in rows["status"]
    assert "events.jsonl: 1 unreadable line skipped" in rows["events"]
    assert "config.json: JSON nested too deeply to read" in rows["config"]


def test_oversized_files_are_refused_by_their_size_not_read(tree, capsys):
    root, _outside, template = tree
    shutil.copytree(template, root / "huge")
    with open(root / "huge" / STATUS_FILE, "wb") as f:
        f.truncate(8 << 30)  # 8 GiB, sparse
    shutil.copytree(template, root / "long-error")
    status = json.loads((template / STATUS_FILE).read_text())
    (root / "long-error" / STATUS_FILE).write_text(json.dumps(
        dict(status, error="E" * 1_000_000)))
    rc, out, _err = _listing(root, capsys)
    rows = {line.split()[0]: line for line in out.splitlines()}
    assert rc == 0 and max(len(line) for line in out.splitlines()) < 400
    assert "8,589,934,592 bytes, more than a status file holds" in rows["huge"]
    assert "more than a status file holds" in rows["long-error"]


def test_an_endless_events_line_is_said_once_and_never_read_again(tree, template):
    root, _outside, _template = tree
    _legacy(root / "endless", template)
    with open(root / "endless" / "events.jsonl", "ab") as f:
        f.write(b'{"kind": "note", "text": "' + b"x" * (3 << 20))  # 3 MiB, no newline
    index = RunIndex(root)
    rows = {r["path"]: r for r in index.refresh()}
    assert "a line longer than 1 MiB" in rows["endless"]["error"]
    with opened_under() as seen:
        rows = {r["path"]: r for r in index.refresh()}
    assert seen.inside(root / "endless") == []  # not re-read at each refresh
    assert "a line longer than 1 MiB" in rows["endless"]["error"]


# -- silent wrong results --------------------------------------------------------------------

@pytest.mark.parametrize(("field", "value", "said"), [
    ("baseline_windows", -5, "baseline_windows: not a count"),
    ("transitions", 1.5e300, "transitions: not a count"),
    ("beat_wall", 1e300, "beat_wall: not a time of the writer's clock"),
    ("beat_wall", -1e300, "beat_wall: not a time of the writer's clock"),
    ("last_alarm", 1e300, "last_alarm: not a loop time in seconds"),
    ("baseline", "gathering\n-5/-5", "baseline: not one of"),
])
def test_status_values_out_of_range_are_refused_by_field(tree, field, value, said):
    root, _outside, template = tree
    status = json.loads((template / STATUS_FILE).read_text())
    status[field] = value
    shutil.copytree(template, root / "lies")
    (root / "lies" / STATUS_FILE).write_text(json.dumps(status))
    rows = {r["path"]: r for r in RunIndex(root).refresh()}
    assert rows["lies"]["state"] == "error" and said in rows["lies"]["error"]
    assert len(row_line(rows["lies"])) < 300


def test_an_unreadable_folder_is_a_row_not_a_gap(tree, monkeypatch):
    root, _outside, template = tree
    shutil.copytree(template, root / "locked" / "run")
    real_scandir = os.scandir

    def scandir(path):  # as chmod 000 does for a user who is not root
        if os.fspath(path).endswith("locked"):
            raise PermissionError(13, "Permission denied", os.fspath(path))
        return real_scandir(path)

    monkeypatch.setattr(os, "scandir", scandir)
    rows = {r["path"]: r for r in RunIndex(root).refresh()}
    assert rows["locked"]["state"] == "error"
    assert "this folder cannot be listed" in rows["locked"]["error"]
    assert "Permission denied" in rows["locked"]["error"]


def test_a_path_too_long_to_open_is_a_row_not_a_gap(tree, template):
    root, _outside, _template = tree
    fd = os.open(root, os.O_RDONLY)
    try:
        for _ in range(20):  # 20 × 256 characters: a path over 5,000 long
            os.mkdir("n" * 255, dir_fd=fd)
            fd, old = os.open("n" * 255, os.O_RDONLY, dir_fd=fd), fd
            os.close(old)
    finally:
        os.close(fd)
    rows = RunIndex(root).refresh()
    assert [r["path"] for r in rows if r["path"] == "ok"] == ["ok"]
    long = [r for r in rows if r["path"] != "ok"]
    assert len(long) == 1 and long[0]["state"] == "error"
    assert "File name too long" in long[0]["error"]


def test_a_run_deleted_during_the_listing_is_no_phantom(tree):
    root, _outside, template = tree
    shutil.copytree(template, root / "doomed")
    _legacy(root / "doomed-legacy", template)

    class Deleting(LocalFiles):
        def stat_many(self, paths):
            if any(p.endswith(STATUS_FILE) for p in paths):  # after the folders were found
                shutil.rmtree(root / "doomed", ignore_errors=True)
                shutil.rmtree(root / "doomed-legacy", ignore_errors=True)
            return super().stat_many(paths)

    rows = RunIndex(Deleting(root)).refresh()
    assert [(r["path"], r["state"]) for r in rows] in (
        [("ok", "ended")], [("doomed", "error"), ("ok", "ended")])
    assert all(r["path"] != "doomed-legacy" for r in rows)


# -- the follower: a file truncated or replaced under it -------------------------------------

@pytest.mark.parametrize("how", ["truncate", "truncate-and-rewrite", "replace"])
def test_a_truncated_or_replaced_recording_is_said_not_misread(tree, how):
    root, _outside, _template = tree
    run = root / "ok"
    tail = RecordingTail(run)
    assert len(tail.poll()[0]) == 100
    path = transitions_path(run)
    data = path.read_bytes()
    header = header_bytes(path)
    rows = data[len(header):]
    if how == "truncate":
        path.write_bytes(header)
    elif how == "truncate-and-rewrite":  # in place, longer than before: only the bytes tell
        with open(path, "r+b") as f:
            f.truncate(len(header))
            f.seek(0, 2)
            f.write(bytes(255 - b for b in rows) * 3)
    else:
        path.unlink()
        path.write_bytes(data + rows)  # a new file, grown
        tail._before[path.name] = b"x"  # its old bytes differ from the new file's
    with pytest.raises(RecordingError, match="truncated or replaced while followed"):
        tail.poll()


def test_a_rewritten_events_file_is_said(tree):
    run = tree[0] / "ok"
    tail = RecordingTail(run)
    tail.poll()
    lines = (run / "events.jsonl").read_bytes()
    (run / "events.jsonl").write_bytes(lines.replace(b'"kind"', b'"kind" ') + b"\n")
    with pytest.raises(RecordingError, match=r"events\.jsonl: the recording was truncated"):
        tail.poll()


# -- URLs and the user's OpenSSH files --------------------------------------------------------

@pytest.mark.parametrize(("url", "said"), [
    ("ssh://[::1:2310/runs", "not an ssh:// URL"),
    ("ssh://r%0Aoot@127.0.0.1/runs", "the user name holds characters"),
    ("ssh://" + "h" * 300 + "/runs", "not a host name"),
    ("ssh://" + "a" * 70 + ".example/runs", "not a host name"),
    ("ssh://127.0.0.1:0/runs", "the port must be a number from 1 to 65535"),
    ("ssh://127.0.0.1:99999/runs", "the port must be a number from 1 to 65535"),
    ("ssh://127.0.0.1", "give the folder of the runs on the server"),
    ("ssh://127.0.0.1/", "give the folder of the runs on the server"),
])
def test_a_bad_url_is_one_line(url, said, capsys):
    with pytest.raises(InputError, match=said):
        open_files(url)
    rc = main(["runs", url])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and "\x0a" not in err[:-1]


def test_an_ssh_config_that_is_a_fifo_is_refused_not_waited_on(tmp_path, monkeypatch):
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    os.mkfifo(home / ".ssh" / "config")
    monkeypatch.setenv("HOME", str(home))
    t0 = time.monotonic()
    with pytest.raises(InputError, match=r"\.ssh/config: not a regular file"):
        open_files("ssh://127.0.0.1:1/runs")
    assert time.monotonic() - t0 < 5
