"""Shared test configuration."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import numba
import pytest
from hypothesis import HealthCheck, settings

#: Fixtures of an SSH server on 127.0.0.1 (``sshd``, ``ssh_home``).
pytest_plugins = ["tests.ssh_server"]

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
# The window remembers its size and place (QSettings): never the user's, never across tests'
# processes.
os.environ["XDG_CONFIG_HOME"] = tempfile.mkdtemp(prefix="idt-desk-test-config-")
os.environ.setdefault("MPLBACKEND", "Agg")
# One process a core (pytest-xdist, -n 2 on two cores): a library's own pool of threads per
# process (torch's and OpenMP's intra-op threads, XLA's Eigen pool) would make the two workers
# contend for both cores, each test slower than alone. The sources' results do not depend on
# it: the RL source acts row by row (its actions are bit for bit those of one thread).
for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ.setdefault(_var, "1")
os.environ.setdefault("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false "
                                   "intra_op_parallelism_threads=1")
# JAX's persistent compilation cache, one for the run's workers (their parent's id): every
# sbx training compiles the same update steps again (a model's jitted functions are its own);
# from the cache the training tests took 159 s instead of 194 s in one process.
os.environ.setdefault("JAX_COMPILATION_CACHE_DIR", os.path.join(
    tempfile.gettempdir(), f"idt-desk-test-jax-cache-{os.getppid()}"))
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES", "0")

#: True when the suite runs the pure-Python path (NUMBA_DISABLE_JIT=1).
NO_JIT = bool(numba.config.DISABLE_JIT)

settings.register_profile(
    "default", deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile(
    "nojit", max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile("nojit" if NO_JIT else "default")


@pytest.fixture(autouse=True)
def _no_dangling_session_threads():
    """Fail a test that leaves a session worker thread running (napari's _dangling_qthreads)."""
    import threading
    import time

    yield
    deadline = time.monotonic() + 3.0
    while True:
        alive = [t.name for t in threading.enumerate()
                 if t.name.startswith("idt-") and t.is_alive()]
        if not alive or time.monotonic() > deadline:
            break
        time.sleep(0.02)
    assert not alive, f"session worker threads left running: {alive}"


#: The slowest files, slowest first (seconds of one worker, measured on 2 cores: see
#: ``assets/docs/testing.md``). xdist hands whole files to its two workers in collection
#: order (``--dist loadfile --no-loadscope-reorder``); started first, the long files run
#: side by side and the short ones fill in the end, where a long file handed out last
#: would run on alone (xdist's own order, the files with the most tests first, did that).
SLOW_FIRST = ("test_train_phases.py", "test_train.py", "test_gym_source.py", "test_gui.py",
              "test_reproduce_cheetah.py", "test_gui_waits.py", "test_dialogue_builtin.py",
              "test_click_storm.py", "test_follow.py", "test_gui_start.py")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    rank = {name: k for k, name in enumerate(SLOW_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: files whole


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    # "No tests collected" (exit 5) is not a failure of the code: CI must not fail for it.
    if exitstatus == pytest.ExitCode.NO_TESTS_COLLECTED:
        session.exitstatus = pytest.ExitCode.OK


@pytest.fixture(scope="session")
def pendulum_kernels():
    """The default pendulum pipeline's numba kernels, loaded (compiled on a clean clone) once.

    A session loads them at its start (``Pipeline.warm``), after the window says it runs: on a
    clean clone, beside a training in the other worker, compiling them took more than a GUI
    test's 30 s wait for its first windows (CI, 2 cores). The compile is the install's, not the
    behaviour under test; the windows' own waits stay as they were.
    """
    from idt_desk.live.session import Session, SessionConfig

    session = Session(SessionConfig(speed=None))
    try:
        session.pipeline.warm()
    finally:
        session.close()


@pytest.fixture
def window(qtbot, tmp_path, pendulum_kernels):
    """The main window at maximum speed, recording into ``tmp_path``; closed cleanly after."""
    from idt_desk_widgets.main_window import MainWindow

    w = MainWindow(speed=None, record_dir=tmp_path / "recordings")
    qtbot.addWidget(w)
    w.show()
    yield w
    w.close()
    assert not w.timer.isActive()
    assert w.session is None or not w.session.running


@pytest.fixture(scope="session")
def once_per_run(tmp_path_factory):
    """``once_per_run(name, make)``: a folder ``make(folder)`` fills once per test run.

    Shared by the run's xdist workers (their common temporary root; the first to ask makes
    it while the others wait on a lock), so an expensive artefact that several test files
    read (a tiny reproduction's run) is computed once, not once per file. Each caller gets
    a copy of its own to read or write.
    """
    import fcntl
    import shutil

    base = tmp_path_factory.getbasetemp()
    root = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base

    def get(name: str, make) -> Path:
        made = root / f"once-{name}"
        with open(root / f"once-{name}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                if not (made / ".made").exists():
                    shutil.rmtree(made, ignore_errors=True)
                    made.mkdir()
                    make(made)
                    (made / ".made").touch()
                copy = tmp_path_factory.mktemp(name)
                shutil.copytree(made, copy, ignore=shutil.ignore_patterns(".made"),
                                dirs_exist_ok=True)
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)
        return copy

    return get
