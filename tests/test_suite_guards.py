"""The suite fails fast: a crash or a hang is a failure with its test's name, never a wait.

The project's own pytest settings (``[tool.pytest.ini_options]`` in pyproject.toml: the
per-test timeout, faulthandler's exit, the bounded worker restarts, two xdist processes by
file) run a small suite in a child pytest, with the time limits scaled down: a test that kills
its worker with SIGILL (as llama.cpp did), one that sleeps (a Python hang) and one that hangs
where no Python signal handler runs (SIGALRM blocked, as in native code).
"""

from __future__ import annotations

import subprocess
import sys
import time
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CRASH = """import os, signal
def test_before():
    pass
def test_dies_of_sigill():
    os.kill(os.getpid(), signal.SIGILL)
"""
SLEEP = """import time
def test_sleeps():
    time.sleep(1000)
"""
NATIVE = """import signal, time
def test_hangs_where_no_handler_runs():
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})
    time.sleep(1000)
"""
FINE = """def test_a():
    pass
def test_b():
    pass
"""


def _run(tmp_path: Path, files: dict[str, str]) -> tuple[int, str, list[str]]:
    """The files run by a child pytest under the project's guards, limits scaled down."""
    ini = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    # The project's guards, as configured: a timeout per test, faulthandler's exit after its
    # own timeout, and no worker replaced (the run stops at a crash).
    assert ini["timeout"] < ini["faulthandler_timeout"] <= 600
    assert ini["faulthandler_exit_on_timeout"] is True
    assert "--max-worker-restart 0" in ini["addopts"]
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    (tmp_path / "pytest.ini").write_text(
        "[pytest]\n"
        f"addopts = {ini['addopts']}\n"
        "timeout = 3\n"  # scaled down from the project's
        "faulthandler_timeout = 6\n"
        "faulthandler_exit_on_timeout = true\n")
    t0 = time.monotonic()
    # Run to its end with nothing left over: a hung worker left behind would hold the pipes
    # open past the timeout.
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider",
                           "-c", str(tmp_path / "pytest.ini"), "--rootdir", str(tmp_path),
                           str(tmp_path)], capture_output=True, text=True, timeout=120,
                          cwd=tmp_path, check=False)
    assert time.monotonic() - t0 < 60
    out = proc.stdout + proc.stderr
    return proc.returncode, out, [ln for ln in out.splitlines() if ln.startswith("FAILED ")]


def test_a_worker_killed_by_sigill_fails_by_name_and_the_run_ends(tmp_path):
    rc, out, failed = _run(tmp_path, {"test_crash.py": CRASH, "test_fine1.py": FINE,
                                      "test_fine2.py": FINE})
    assert rc == 1, out[-3000:]
    assert "INTERNALERROR" not in out
    assert any("test_dies_of_sigill" in line and "worker" in line for line in failed), out
    assert "crashed while running 'test_crash.py::test_dies_of_sigill'" in out


def test_a_python_hang_and_a_native_hang_fail_by_name(tmp_path):
    rc, out, failed = _run(tmp_path, {"test_sleep.py": SLEEP, "test_native.py": NATIVE})
    assert rc == 1, out[-3000:]
    assert "INTERNALERROR" not in out
    assert any("test_sleeps" in line and "Timeout" in line for line in failed), out
    assert any("test_hangs_where_no_handler_runs" in line and "worker" in line
               for line in failed), out
    assert "crashed while running 'test_native.py::test_hangs_where_no_handler_runs'" in out
