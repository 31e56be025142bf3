"""Following a recording while another process writes it.

The writer is a separate Python process (``tests/loop_writer.py``, ``idt_desk.Recorder``);
the follower is a replay session with ``follow=True``. Whether it starts before the writer,
while it writes or after it finished, the follower must compute exactly the writer's own
windows; a writer killed mid-run leaves a follower that shows what arrived and says so.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from idt_desk_sources.replay import ReplaySource

from idt_desk.live.session import Session, SessionConfig, run_headless
from idt_desk.recordings import RecordingError, RecordingTail, load_recording
from tests.cli_call import call
from tests.layouts import disk_rows, transitions_path

ROOT = Path(__file__).resolve().parents[1]
METRICS = ("start", "end", "P", "H_f", "H_b", "dH", "out_of_range", "x_P", "x_H_f", "x_H_b",
           "x_dH", "x_IDT")


def _writer(path: Path, n: int, chunk: int, delay: float,
            hold: Path | None = None) -> subprocess.Popen:
    """The writer in its own process; with ``hold``, it waits before its last chunk for as
    long as that file exists."""
    extra = [] if hold is None else [str(hold)]
    return subprocess.Popen([sys.executable, "-m", "tests.loop_writer", str(path), str(n),
                             str(chunk), str(delay), *extra], cwd=ROOT)


def _wait_for_rows(src: Path, rows: int) -> None:
    """Until the writer has written ``rows`` transitions."""
    while not transitions_path(src).exists() or disk_rows(src) < rows:
        time.sleep(0.02)


def _follow(path: Path, out: Path, silence: float = 10.0, wait: float = 60.0):
    # The writer is silent while its detector calibrates (once; 3.4 s measured on a busy
    # two-core machine): a shorter silence ends the follower there.
    source = ReplaySource(path=str(path), follow=True, silence=silence, wait=wait)
    session = Session(SessionConfig(speed=None), source=source, record=out)
    run_headless(session)
    return load_recording(out), session


def _same(follower, writer, rows: int | None = None):
    w = writer.windows if rows is None else writer.windows.iloc[:rows]
    f = follower.windows.iloc[:len(w)]
    assert len(w) > 50
    for c in METRICS:
        np.testing.assert_array_equal(f[c].to_numpy(np.float64), w[c].to_numpy(np.float64),
                                      err_msg=c)
    # Window means are differences of running sums over differently cut blocks.
    np.testing.assert_allclose(f["reward"], w["reward"], rtol=1e-12, atol=1e-12)


def _events(rec, kind):
    ev = rec.events
    return ev[ev["kind"] == kind]


@pytest.mark.parametrize("when", ["before", "during", "after"])
def test_the_follower_computes_the_writers_windows(tmp_path, when):
    src, out = tmp_path / "run", tmp_path / "follower"
    n = 8000
    if when == "after":
        _writer(src, n, 2000, 0.0).wait(60)
    elif when == "during":
        proc = _writer(src, n, 400, 0.1)
        _wait_for_rows(src, 250)
    else:  # the follower waits for a writer that starts a second later
        timer = threading.Timer(1.0, lambda: setattr(timer, "proc",
                                                     _writer(src, n, 400, 0.1)))
        timer.start()
    follower, session = _follow(src, out)
    if when == "during":
        proc.wait(60)
    elif when == "before":
        timer.join()
        timer.proc.wait(60)
    writer = load_recording(src)
    assert writer.complete, writer.warnings
    assert len(follower.transitions) == len(writer.transitions) == n
    assert len(follower.windows) == len(writer.windows)
    _same(follower, writer)
    # The writer's own perturbation mark reaches the follower at its transition.
    on = _events(follower, "perturbation_on")
    assert list(on["name"]) == ["noise"] and int(on["i"].iloc[0]) == n // 2
    assert np.nansum(follower.windows["x_IDT"]) > 0
    assert session.snapshot(1).state == "stopped" and session.error is None
    assert not _events(follower, "note").shape[0]  # no silence note: the writer ended it


def test_a_killed_writer_leaves_what_arrived_and_a_note(tmp_path):
    src, out = tmp_path / "run", tmp_path / "follower"
    proc = _writer(src, 10**6, 300, 0.05)
    _wait_for_rows(src, 2_500)
    threading.Timer(0.5, lambda: os.kill(proc.pid, signal.SIGKILL)).start()
    t0 = time.monotonic()
    follower, _session = _follow(src, out, silence=1.5)
    proc.wait(10)
    assert time.monotonic() - t0 < 30
    writer = load_recording(src)
    assert not writer.complete
    # Every whole line the writer got out was followed, nothing more.
    np.testing.assert_array_equal(follower.transitions["s_0"].to_numpy(),
                                  writer.transitions["s_0"].to_numpy())
    _same(follower, writer, rows=len(writer.windows))
    note = _events(follower, "note")
    assert len(note) == 1 and "stopped responding" in note["text"].iloc[0]
    assert "1.5 s" in note["text"].iloc[0]


def test_a_recording_deleted_while_followed_ends_with_one_line(tmp_path):
    import shutil

    src, out = tmp_path / "run", tmp_path / "follower"
    proc = _writer(src, 10**6, 300, 0.05)
    _wait_for_rows(src, 1_200)
    proc.kill()
    proc.wait(10)
    source = ReplaySource(path=str(src), follow=True, silence=30.0)
    session = Session(SessionConfig(speed=None), source=source, record=out)
    threading.Timer(1.0, lambda: shutil.rmtree(src)).start()
    run_headless(session)
    rec = load_recording(out)
    note = _events(rec, "note")
    assert len(note) == 1 and "is gone" in note["text"].iloc[0]
    assert session.error is None


def test_a_waiting_follower_gives_up_with_a_clear_error(tmp_path):
    with pytest.raises(ValueError, match=r"no recording started .* within 0\.3 s"):
        ReplaySource(path=str(tmp_path / "nothing"), follow=True, wait=0.3)


def test_the_tail_takes_whole_lines_only(tmp_path):
    """Format 1's text (tests/test_transitions_log.py: format 2's whole messages)."""
    (tmp_path / "config.json").write_text('{"format_version": 1}')
    (tmp_path / "events.jsonl").write_text("")
    tr = tmp_path / "transitions.csv"
    tr.write_text("i,t,s_0\n0,0.5,1.25\n1,1.0,2.")
    tail = RecordingTail(tmp_path)
    rows, events = tail.poll()
    assert tail.columns == ["i", "t", "s_0"] and events == []
    np.testing.assert_array_equal(rows, [[0, 0.5, 1.25]])  # the torn line waits
    with open(tr, "a") as f:
        f.write("5\n2,1.5,3.0\n")
    with open(tmp_path / "events.jsonl", "a") as f:
        f.write('{"kind": "note", "i": 1, "text": "x"}\n{"kind": "session_e')
    rows, events = tail.poll()
    np.testing.assert_array_equal(rows, [[1, 1.0, 2.5], [2, 1.5, 3.0]])
    assert events == [{"kind": "note", "i": 1, "text": "x"}] and not tail.ended
    with open(tmp_path / "events.jsonl", "a") as f:
        f.write('nd"}\n')
    assert tail.poll()[1] == [{"kind": "session_end"}] and tail.ended
    # The closing event comes before the last rows and the promised count: not finished.
    assert not tail.finished
    with open(tr, "a") as f:
        f.write("3,2.0,4.0\n")
    assert not tail.finished  # config.json does not promise a count yet
    (tmp_path / "config.json").write_text(
        '{"format_version": 1, "complete": true, "n_transitions": 4}')
    assert not tail.finished  # 3 rows read of the 4 promised
    rows, _ = tail.poll()
    np.testing.assert_array_equal(rows, [[3, 2.0, 4.0]])
    assert tail.finished and tail.n_read == 4
    # pandas reads the same bytes the same way (an independent parse).
    ref = pd.read_csv(tr).to_numpy(np.float64)
    np.testing.assert_array_equal(ref, [[0, 0.5, 1.25], [1, 1.0, 2.5], [2, 1.5, 3.0],
                                        [3, 2.0, 4.0]])


def test_the_window_follows_a_growing_recording(qtbot, tmp_path):
    pytest.importorskip("pytestqt")
    from idt_desk_widgets.main_window import MainWindow

    src, hold = tmp_path / "run", tmp_path / "hold"
    hold.touch()  # the writer waits before its last chunk until the window has seen it write
    proc = _writer(src, 6000, 300, 0.1, hold)
    try:
        while not (src / "events.jsonl").exists() or \
                b"recording_start" not in (src / "events.jsonl").read_bytes():
            time.sleep(0.02)
        w = MainWindow(source="replay", settings={"path": str(src), "follow": True,
                                                  "silence": 30.0}, speed=None,
                       record_dir=tmp_path / "recordings")
        qtbot.addWidget(w)
        w.show()
        assert w.start_session(), w.banner.text()
        # It shows windows while the writer is still writing, and says the writer writes
        # (the writer holds its last chunk until then: a loaded machine cannot end it early) ...
        status = w.status_line.status
        qtbot.waitUntil(lambda: w.session.snapshot(1).n_windows > 20, timeout=30_000)
        qtbot.waitUntil(lambda: f"following {src.name} (the writer: writing)"
                        in status.text(), timeout=10_000)
        qtbot.waitUntil(lambda: w.plots.curves["P"].getData()[0] is not None and
                        len(w.plots.curves["P"].getData()[0]) > 20, timeout=30_000)
        hold.unlink()
        # ... and ends when the writer ends the recording, with every window it wrote.
        qtbot.waitUntil(lambda: not w.session.running, timeout=60_000)
    finally:
        hold.unlink(missing_ok=True)
        proc.wait(60)
    writer = load_recording(src)
    assert w.session.snapshot(1).n_windows == len(writer.windows)
    qtbot.waitUntil(w.source_panel.start_button.isEnabled, timeout=5_000)  # the window saw it end
    assert "(the writer: ended the run)" in w.status_line.status.text()


def test_bench_follow_reports_and_the_follower_gets_every_row(qtbot):
    """``idt-desk bench follow``, briefly and slowly: its figures, and no row lost."""
    from idt_desk_widgets.app import bench_follow

    lines: list[str] = []
    res = bench_follow(seconds=3.0, rate=20_000.0, warmup=0.5, print_fn=lines.append)
    assert {"writer_rate", "follower_rate", "ratio", "fps", "lag", "lag_s", "writer_rows",
            "follower_rows", "final_writer_rows", "final_follower_rows",
            "caught_up_s"} <= set(res)
    assert res["writer_rate"] > 0 and res["follower_rate"] > 0 and res["fps"] > 0
    assert res["final_writer_rows"] >= res["writer_rows"] > 0
    assert res["final_follower_rows"] == res["final_writer_rows"]
    text = "\n".join(lines)
    assert "follower / writer:" in text and "frames/s (target >= 25)" in text
    assert "ROWS MISSING" not in text


def test_a_loop_recorded_without_a_rate_is_replayed_in_large_steps(tmp_path):
    """A rate-less loop (rate 1) is stepped like a fast source: 50 rows a step kept a
    follower at 43 k transitions/s behind a 100 k/s writer (``idt-desk bench follow``)."""
    import idt_desk
    from idt_desk.live.session import MAX_SPEED_CHUNKS

    rng = np.random.default_rng(0)
    with idt_desk.Recorder(tmp_path / "run", ["x"], window=20, stride=10) as rec:
        x = rng.normal(size=(501, 1))
        rec.add(x[:-1], None, x[1:])
    src = ReplaySource(path=str(tmp_path / "run"))
    assert src.rate == 1.0 and src.chunk == ReplaySource.chunk * MAX_SPEED_CHUNKS
    assert len(src.step(src.chunk)) == 500


def test_a_servers_run_is_followed_over_ssh_with_the_users_own_setup(tmp_path, ssh_home):
    """ssh://127.0.0.1/… while the writer writes: the same windows as the writer's own.

    The connection is cut once mid-run, and connected again at the next poll. No options
    are passed: the key and known_hosts come from the user's ~/.ssh, as they would
    for `idt-desk watch ssh://host/run`.
    """
    src, out = tmp_path / "run", tmp_path / "follower"
    n = 6000
    proc = _writer(src, n, 400, 0.1)
    _wait_for_rows(src, 250)
    source = ReplaySource(path=f"ssh://127.0.0.1:{ssh_home}{src}", silence=10.0, wait=60.0)
    assert source.follow  # a server's run is read as it is followed, to its end
    session = Session(SessionConfig(speed=None), source=source, record=out)

    def cut_once():  # the network goes away once mid-run: the next poll connects again
        while session.snapshot(1).n_transitions < 1000:
            time.sleep(0.01)
        cut.append(source._tail.files._conn)
        cut[0].abort()

    cut = []
    cutter = threading.Thread(target=cut_once, daemon=True)
    cutter.start()
    run_headless(session)
    cutter.join(5)
    assert cut and source._tail.files._conn is not cut[0]  # cut, and connected again
    proc.wait(60)
    follower, writer = load_recording(out), load_recording(src)
    assert writer.complete and len(follower.transitions) == len(writer.transitions) == n
    _same(follower, writer)
    # Connected again at the next poll; where a poll saw the cut first (a loaded machine), the
    # follow says so and that it is back, and nothing else: no stop, no silent writer.
    texts = [str(t) for t in _events(follower, "note").get("text", [])]
    assert session.error is None and all(
        "the follow waits" in t or t.startswith("the connection to the server is back")
        for t in texts), texts
    assert len(texts) in (0, 2), texts
    # Followed again once it has ended: read to its end and stopped, as a replay.
    source = ReplaySource(path=f"ssh://127.0.0.1:{ssh_home}{src}")
    session = Session(SessionConfig(speed=None), source=source, record=tmp_path / "again")
    run_headless(session)
    assert len(load_recording(tmp_path / "again").transitions) == n


def test_a_follow_outlives_a_server_outage_longer_than_the_silence(tmp_path, ssh_home, proxy,
                                                                    sshd, capfd):
    """The server goes away for three times the follower's silence while the writer writes:
    the follow says the connection was lost (not that the writer stopped), waits, connects
    again and reads the run to its end, every transition."""
    known = tmp_path / "home" / ".ssh" / "known_hosts"
    known.write_text(f"{sshd.known_line}\n[127.0.0.1]:{proxy.port} {sshd.public}\n")
    src, out = tmp_path / "run", tmp_path / "follower"
    n = 6000
    proc = _writer(src, n, 200, 0.1)
    _wait_for_rows(src, 250)
    source = ReplaySource(path=f"ssh://127.0.0.1:{proxy.port}{src}", silence=1.0, wait=60.0)
    session = Session(SessionConfig(speed=None), source=source, record=out)
    said = []

    def outage():
        while session.snapshot(1).n_transitions < 1000:
            time.sleep(0.01)
        proxy.drop()
        t0 = time.monotonic()
        while time.monotonic() - t0 < 3.0:
            said.append(session.snapshot(1).info.get("writer"))
            time.sleep(0.1)
        proxy.restore()

    thread = threading.Thread(target=outage, daemon=True)
    thread.start()
    run_headless(session)
    thread.join(10)
    proc.wait(60)
    follower, writer = load_recording(out), load_recording(src)
    assert len(follower.transitions) == len(writer.transitions) == n
    notes = list(_events(follower, "note")["text"])
    assert any("connection to the server was lost" in t for t in notes), notes
    assert any("connection to the server is back" in t for t in notes), notes
    assert not any("stopped responding" in t for t in notes), notes
    assert any(w and w.startswith("not known: the connection to the server is lost")
               for w in said), set(said)
    assert "socket.send() raised exception" not in capfd.readouterr().err


def test_a_server_that_cannot_be_reached_or_trusted_is_one_line(tmp_path, ssh_home):
    from idt_desk.errors import InputError

    (tmp_path / "home" / ".ssh" / "known_hosts").write_text("")
    with pytest.raises(InputError, match="host key is not trusted") as err:
        ReplaySource(path=f"ssh://127.0.0.1:{ssh_home}{tmp_path}")
    assert "\n" not in str(err.value)
    rc, _out, err = call(["run", "--source", "replay", "--set",
                          f"path=ssh://127.0.0.1:{ssh_home}{tmp_path}"])
    assert rc == 2 and err.count("\n") == 1 and "host key is not trusted" in err, err


def test_a_servers_run_whose_file_links_outside_it_is_refused(tmp_path, ssh_home):
    src = tmp_path / "run"
    _writer(src, 2000, 2000, 0.0).wait(60)
    secret = tmp_path / "secret.txt"
    secret.write_text("not yours\n")
    (src / "events.jsonl").unlink()
    (src / "events.jsonl").symlink_to(secret)
    tail = RecordingTail(f"ssh://127.0.0.1:{ssh_home}{src}")
    try:
        with pytest.raises(RecordingError, match=r"events.jsonl: a link leading outside .*run: "
                           r"not followed: a recording's files must be its own"):
            tail.ready()
    finally:
        tail.close()
    with pytest.raises(OSError, match="connection to the server is closed"):
        tail.files.stat(str(src / "config.json"))  # after close: said, never waited on
