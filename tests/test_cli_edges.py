"""Rough edges of ``idt-desk run``: empty paths, absurd speeds, the budget's own errors, a
follower whose writer died, the recording's size."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from .cli_call import call
from .layouts import disk_rows, transitions_path

ROOT = Path(__file__).resolve().parents[1]


def test_an_empty_record_path_is_refused_not_the_working_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    rc, _out, err = call(["run", "--steps", "100", "--record", "", "--quiet"])
    assert rc == 2 and "--record: an empty path; give a directory" in err
    assert not (tmp_path / "config.json").exists()


def test_a_speed_that_would_never_end_is_refused():
    for speed in ("1e-300", "0.0001", "1e9"):
        rc, _out, err = call(["run", "--steps", "100", "--speed", speed, "--quiet"])
        lines = [x for x in err.splitlines() if x.strip()]
        assert rc == 2 and len(lines) == 1, err
        assert f"--speed {speed}: must be a multiple of real time from 0.001 to 1e+06" \
            in lines[0]


def test_a_budget_in_units_the_source_lacks_blames_the_budget():
    rc, _out, err = call(["run", "--steps", "100", "--false-alarms", "1/100turns", "--quiet"])
    assert rc == 2
    assert err.startswith("idt-desk run: error: --false-alarms 1/100turns: "), err
    assert "--window" not in err


def test_the_final_line_says_how_big_the_recording_is(tmp_path):
    rc, out, _err = call(["run", "--steps", "3000", "--record", str(tmp_path / "r"),
                          "--quiet"])
    assert rc == 0
    line = next(x for x in out.splitlines() if x.startswith("recorded into"))
    size = sum(f.stat().st_size for f in (tmp_path / "r").iterdir())
    assert line == f"recorded into {tmp_path / 'r'} ({size / 1e3:.1f} kB)"


def test_headless_follow_says_when_its_writer_died(tmp_path):
    src = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-m", "tests.loop_writer", str(src), "1000000",
                             "300", "0.05"], cwd=ROOT)
    try:
        while not transitions_path(src).exists() or disk_rows(src) < 2_000:
            time.sleep(0.02)
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
    rc, _out, err = call(["run", "--source", "replay", "--set", f"path={src}", "--set",
                          "follow=true", "--set", "silence=1.5", "--quiet"])
    assert rc == 0
    assert "idt-desk run: note: the writer stopped responding: no new data and no heartbeat " \
        "for 1.5 s" in err
