"""The reproductions' shared executor: results in task order, progress weights, resuming."""

from __future__ import annotations

import concurrent.futures
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from idt_desk.experiments.executor import run_tasks


def _square(x: int) -> int:
    return x * x


def test_results_come_back_in_task_order_whatever_order_they_finish():
    with concurrent.futures.ThreadPoolExecutor(4) as ex:
        assert run_tasks(_square, [5, 1, 4, 2, 3], executor=ex, progress=False) == \
            [25, 1, 16, 4, 9]
    assert run_tasks(_square, [], progress=False) == []


def _sleeper(path: str) -> None:
    """A long task: says its worker's pid, then sleeps."""
    Path(path).write_text(str(os.getpid()))
    time.sleep(120)


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return False
    return "\nState:\tZ" not in state  # a zombie has ended


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_sigterm_stops_the_workers_with_the_run(tmp_path):
    # kill / pkill sends SIGTERM to the command alone: its workers must stop too, not run
    # their tasks on (a dialogue would go on appending turns to its file).
    code = ("import sys; from idt_desk.experiments.executor import run_tasks; "
            "from tests.test_experiment import _sleeper; "
            "run_tasks(_sleeper, [sys.argv[1] + '/a', sys.argv[1] + '/b'], workers=2, "
            "progress=False)")
    proc = subprocess.Popen([sys.executable, "-c", code, str(tmp_path)],
                            cwd=Path(__file__).parent.parent, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 90
    files = [tmp_path / "a", tmp_path / "b"]
    while not all(f.exists() and f.read_text() for f in files):
        assert time.monotonic() < deadline and proc.poll() is None, proc.stderr.read()
        time.sleep(0.1)
    pids = [int(f.read_text()) for f in files]
    try:
        proc.send_signal(signal.SIGTERM)
        # The workers share the stderr pipe: it closes only once they have ended too.
        _out, err = proc.communicate(timeout=30)
        assert proc.returncode != 0 and b"stopped by SIGTERM" in err
        end = time.monotonic() + 15
        while any(_alive(p) for p in pids) and time.monotonic() < end:
            time.sleep(0.1)
        assert not any(_alive(p) for p in pids)
    finally:
        for p in pids:
            if _alive(p):
                os.kill(p, signal.SIGKILL)
        proc.kill()


def test_a_rerun_does_only_the_tasks_left(tmp_path):
    calls: list[int] = []

    def counted(x: int) -> int:
        calls.append(x)
        if x == 3:
            raise RuntimeError("interrupted")
        return x * x

    with concurrent.futures.ThreadPoolExecutor(1) as ex, pytest.raises(RuntimeError):
        run_tasks(counted, [1, 2, 3], executor=ex, progress=False, resume_dir=tmp_path)
    assert len(list(tmp_path.glob("*.pkl"))) == 2  # the two that finished were kept
    calls.clear()

    def fixed(x: int) -> int:
        calls.append(x)
        return x * x

    with concurrent.futures.ThreadPoolExecutor(1) as ex:
        got = run_tasks(fixed, [1, 2, 3], executor=ex, progress=False, resume_dir=tmp_path)
    assert got == [1, 4, 9] and calls == [3]
    with concurrent.futures.ThreadPoolExecutor(1) as ex:  # a different task is not a cached one
        got = run_tasks(fixed, [1, 7], executor=ex, progress=False, resume_dir=tmp_path)
    assert got == [1, 49] and calls == [3, 7]


def _pid_and_square(x: int) -> tuple[int, int]:
    if x < 0:
        raise ValueError(f"task {x} fails")
    return os.getpid(), x * x


def test_workers_0_runs_each_task_in_this_process_and_keeps_what_finished(tmp_path):
    from idt_desk.experiments.executor import executor_description

    got = run_tasks(_pid_and_square, [3, 1, 2], workers=0, progress=False)
    assert got == [(os.getpid(), 9), (os.getpid(), 1), (os.getpid(), 4)]
    # A failing task fails the run as a worker's would; the ones before it are kept.
    with pytest.raises(ValueError, match="task -1 fails"):
        run_tasks(_pid_and_square, [2, -1, 5], workers=0, progress=False, resume_dir=tmp_path)
    assert len(list(tmp_path.glob("*.pkl"))) == 1
    assert run_tasks(_pid_and_square, [2, 5], workers=0, progress=False,
                     resume_dir=tmp_path) == [(os.getpid(), 4), (os.getpid(), 25)]
    assert executor_description(0, None) == "this process"
    assert executor_description(2, None) == "2 worker process(es)"


def test_correlation_against_scipy_and_fisher_by_hand():
    import math

    import numpy as np
    from scipy import stats

    from idt_desk.stats import correlation

    rng = np.random.default_rng(3)
    for n in (5, 12, 60):
        x = rng.normal(size=n)
        y = 0.6 * x + rng.normal(size=n)
        got = correlation(x, y)
        want = stats.pearsonr(x, y)
        assert got["n"] == n
        assert got["r"] == pytest.approx(want.statistic, rel=1e-12)
        assert got["p"] == pytest.approx(want.pvalue, rel=1e-9)
        ci = want.confidence_interval(0.95)
        assert got["ci"] == pytest.approx((ci.low, ci.high), rel=1e-9)
    # By hand: r = 0.7745966692414834 for these five pairs; Fisher's interval.
    got = correlation([1, 2, 3, 4, 5], [2, 4, 5, 4, 5])
    r = 0.7745966692414834
    half = 1.959963984540054 / math.sqrt(2)
    assert got["r"] == pytest.approx(r, rel=1e-12)
    assert got["ci"] == pytest.approx((math.tanh(math.atanh(r) - half),
                                       math.tanh(math.atanh(r) + half)), rel=1e-9)
    # Pairs with a NaN are left out; too few pairs or a constant series give no r.
    assert correlation([1, 2, np.nan, 4, 5], [2, 4, 9, 4, 5])["n"] == 4
    assert correlation([1, 2], [3, 4])["r"] is None
    assert correlation([1, 1, 1, 1], [1, 2, 3, 4])["r"] is None
    perfect = correlation([1, 2, 3, 4], [2, 4, 6, 8])
    assert perfect["r"] == 1.0 and perfect["p"] == 0.0 and perfect["ci"] == (1.0, 1.0)
