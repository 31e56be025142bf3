"""A session in a process of its own: the loop does not share an interpreter with the window.

A session's worker thread and a window's drawing take turns at one interpreter lock. At
maximum speed the RL source's loop ran at 0.40–0.6× its headless rate in the window (1,269
to 2,080 against 3,140 transitions/s, the GUI thread 42–67 % busy; a shorter or longer
switch interval did not help): the loop paid for the drawing. :class:`SessionProcess` runs
the same :class:`~idt_desk.live.session.Session` in a child process and offers the window
its public API, each call one message on a pipe; a snapshot carries only the windows the
window has not had (it keeps the rest in its own ring, as long as the session's). A source
whose steps cost a core declares ``own_process`` (the RL source); :func:`build_session` then
builds its session so.

The child (a fresh interpreter: a process with Qt's threads must not fork, and the caller's
own script is not run again in it as ``multiprocessing``'s spawn would) builds the source by its
registered name and serves calls until the pipe closes — the window let the session go, or
the window's process died — then stops the session as Stop does: the recording flushed and
closed. SIGINT, SIGTERM and SIGHUP are the parent's to act on (a terminal's Ctrl-C reaches
the whole process group; the parent asks for a clean stop). A child that dies (a crash in
native code) leaves its last snapshot, in state ``error`` with the exit named; what it
recorded is on disk up to its last flush.
"""

from __future__ import annotations

import atexit
import dataclasses
import gc
import pickle
import signal
import socket
import subprocess
import sys
import threading
import time
import weakref
from collections.abc import Callable
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from idt_desk.live.config import WINDOW_COLUMNS, SessionConfig, WindowRing
from idt_desk.live.session import Session
from idt_desk.live.snapshot import Snapshot

__all__ = ["SessionProcess", "SourceFacts", "build_session"]

#: What a source resolves when it is built (its instance values); the window reads the rest
#: of a source in a session's process (its declarations) from its class.
FACTS = ("name", "label", "config", "notice", "rate", "metric_path", "has_reward", "view",
         "passive", "replays", "recorded_source", "state_names", "action_names",
         "episode_steps",
         "default_budget", "default_baseline", "default_detector")

#: The calls a session's process answers: the session's public API.
CALLS = frozenset({
    "state", "error", "running", "stopping", "start", "request_stop", "stop", "wait",
    "pause", "resume", "set_speed", "perturb", "modulate", "set_auto", "calibrate_baseline",
    "save_baseline",
    "reconfigure", "schedule", "note", "start_recording", "stop_recording", "snapshot",
    "recording_path", "on_disk", "events_since", "export_session", "pipeline_settings",
    "config", "preset", "close"})


def build_session(cls: Any, settings: dict[str, Any], config: dict[str, Any],
                  record: Path | None, process: bool | None = None,
                  given_up: Callable[[], bool] = lambda: False) -> Any:
    """The source ``cls(**settings)`` and a session around it (not started).

    ``config`` holds the :class:`~idt_desk.live.session.SessionConfig` fields besides the
    source and its settings. ``process``: in a process of its own (a
    :class:`SessionProcess`); None: as the source declares (``own_process``). ``given_up``:
    a build that waits for another build's process stops waiting once it says True.
    """
    if process is None:
        process = bool(cls.own_process)
    if process:
        return SessionProcess(cls, settings, config, record, given_up)
    source = cls(**settings)
    try:
        return Session(SessionConfig(source=cls.name, settings=settings, **config),
                       source=source, record=record)
    except BaseException:
        source.close()
        raise


class SourceFacts:
    """A source that lives in a session's process, as the window sees it.

    The values it resolved when built (:data:`FACTS`) are copied; everything else (its
    declarations: perturbations, modulations, settings, presets) is its class's. Closing it
    closes nothing: the session's process owns the source.
    """

    def __init__(self, cls: Any, values: dict[str, Any]) -> None:
        self._cls = cls
        self.__dict__.update(values)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(self.__dict__["_cls"], name)

    def close(self) -> None:
        """Nothing to close here (see :meth:`SessionProcess.close`)."""


class SessionGone(RuntimeError):
    """The session's process has ended; the message says how."""


class BuildGivenUp(SessionGone):
    """The build was given up (its process finishes it and waits, warm, for the next)."""


_LIVE: weakref.WeakSet[SessionProcess] = weakref.WeakSet()


@atexit.register
def _close_all() -> None:
    for session in list(_LIVE):
        session.close()
    _drop_standbys()


class SessionProcess:
    """A :class:`~idt_desk.live.session.Session` in a child process, driven by its API.

    Built (the source loaded, which can take a minute) before the constructor returns; its
    exceptions are raised here as the session raised them. Calls after the process ended
    raise :class:`SessionGone`, except the ones a window makes on a finished session
    (``snapshot``: the last one, ``running``/``stopping``: False, ``stop``/``wait``).
    """

    #: Seconds :meth:`close` waits for the child to stop its session and end.
    CLOSE_TIMEOUT = 30.0

    def __init__(self, cls: Any, settings: dict[str, Any], config: dict[str, Any],
                 record: Path | None, given_up: Callable[[], bool] = lambda: False) -> None:
        self._name = cls.name
        self._proc, self._conn = _take(cls.name, given_up)
        self._lock = threading.Lock()
        self._gone: str | None = None
        self._last: Snapshot | None = None
        self._built = False
        try:
            self._conn.send((cls.name, settings, config, record))
            while not self._conn.poll(0.1):
                if given_up() and self._proc.poll() is None:
                    # The build goes on in its process; its child comes back warm, later.
                    threading.Thread(target=_give_back, args=(cls.name, self._proc, self._conn),
                                     name=f"process-return-{cls.name}", daemon=True).start()
                    self._gone = "the build was given up"
                    raise BuildGivenUp(self._gone)
            facts, history = self._call("_built")
        except BuildGivenUp:
            raise
        except BaseException:
            _built_one(cls.name, ok=False)
            self.close()
            raise
        self._built = True
        _built_one(cls.name, ok=True)
        self.source = SourceFacts(cls, facts)
        self._ring = WindowRing(history, WINDOW_COLUMNS)
        _LIVE.add(self)

    # -- the pipe ---------------------------------------------------------------------------

    def _call(self, call: str, /, *args: Any, **kwargs: Any) -> Any:
        """``call(*args, **kwargs)`` on the session, answered by its process."""
        with self._lock:
            if self._gone is not None:
                raise SessionGone(self._gone)
            try:
                if call != "_built":  # the first answer is the build's
                    self._conn.send((call, args, kwargs))
                status, value = self._conn.recv()
            except (EOFError, OSError) as exc:
                self._gone = self._ended(exc)
                raise SessionGone(self._gone) from None
        if status == "raise":
            raise value
        return value

    def _ended(self, exc: BaseException) -> str:
        """How the child ended (it is gone: its pipe closed under a call)."""
        try:
            code = self._proc.wait(5.0)
        except subprocess.TimeoutExpired:
            code = None
        if code is not None and code < 0:
            try:
                how = f"killed by {signal.Signals(-code).name}"
            except ValueError:
                how = f"killed by signal {-code}"
        elif code is not None:
            how = f"exit code {code}"
        else:
            how = f"{type(exc).__name__}"
        return f"the session's process ended ({how})"

    # -- state ------------------------------------------------------------------------------

    @property
    def state(self) -> str:
        """idle, running, paused, stopped or error."""
        return self._get("state", "error")

    @property
    def error(self) -> str | None:
        """The message that stopped the session, if one did."""
        return self._get("error", self._gone)

    @property
    def running(self) -> bool:
        """True while the worker runs (False once the process has ended)."""
        return self._get("running", False)

    @property
    def stopping(self) -> bool:
        """The loop is over but the worker still runs."""
        return self._get("stopping", False)

    @property
    def recording_path(self) -> Path | None:
        """The latest recording the session wrote (open or closed), or None."""
        return self._get("recording_path", None if self._last is None
                         else Path(self._last.recording) if self._last.recording else None)

    @property
    def on_disk(self) -> bool:
        """Everything it showed is on disk."""
        return self._get("on_disk", False)

    @property
    def config(self) -> SessionConfig:
        """The session's configuration as resolved in its process."""
        return self._call("config")

    @property
    def preset(self) -> Any:
        """The symbolisation preset in force."""
        return self._call("preset")

    def _get(self, name: str, gone: Any, *args: Any) -> Any:
        """``name(*args)``'s answer, or ``gone`` once the process has ended."""
        try:
            return self._call(name, *args)
        except SessionGone:
            return gone

    # -- the session's API ------------------------------------------------------------------

    def start(self) -> None:
        """Start the session's worker (in its process)."""
        self._call("start")

    def request_stop(self) -> None:
        """Ask the worker to stop, and return at once."""
        self._get("request_stop", None)

    def stop(self, timeout: float = 10.0) -> None:
        """Ask the worker to stop and wait up to ``timeout`` s for it."""
        self._get("stop", None, timeout)

    def wait(self, timeout: float | None = None) -> bool:
        """Wait for the worker to end by itself; True if it has."""
        return self._get("wait", True, timeout)

    def pause(self) -> None:
        """Hold the loop."""
        self._call("pause")

    def resume(self) -> None:
        """Continue after :meth:`pause`."""
        self._call("resume")

    def set_speed(self, speed: float | None) -> None:
        """Multiple of real time, or None for as fast as possible."""
        self._call("set_speed", speed)

    def perturb(self, name: str, params: Any = None, on: bool = True) -> None:
        """Switch a declared perturbation on (with parameters) or off."""
        self._call("perturb", name, params, on)

    def modulate(self, name: str, params: Any = None, on: bool = True) -> None:
        """Engage a declared modulation (with parameters) or release it."""
        self._call("modulate", name, params, on)

    def set_auto(self, auto: Any) -> None:
        """Configure automatic modulation, or None to switch it off."""
        self._call("set_auto", auto)

    def calibrate_baseline(self, n_windows: int | None = None) -> None:
        """Gather a new baseline from the next ``n_windows`` windows."""
        self._call("calibrate_baseline", n_windows)

    def save_baseline(self, path: str | Path) -> Any:
        """Save what the session fitted as a baseline profile (in its process)."""
        return self._call("save_baseline", path)

    def reconfigure(self, **changes: Any) -> None:
        """Change symbolisation (see :meth:`Session.reconfigure`)."""
        self._call("reconfigure", **changes)

    def schedule(self, at: int, kind: str, **args: Any) -> None:
        """Apply a command exactly when ``at`` transitions have been processed."""
        self._call("schedule", at, kind, **args)

    def note(self, text: str) -> None:
        """Add a note event (recorded)."""
        self._call("note", text)

    def start_recording(self, path: str | Path) -> None:
        """Record from the next chunk on into ``path``."""
        self._call("start_recording", path)

    def stop_recording(self) -> None:
        """Close the recording; the session goes on."""
        self._call("stop_recording")

    def events_since(self, n: int) -> list[dict[str, Any]]:
        """The session's events from the ``n``-th on ([] once its process has ended)."""
        return self._get("events_since", [], n)

    def export_session(self, out: str | Path, fmt: str = "csv") -> list[Path]:
        """Write what the session holds (in its process; the files are the same)."""
        return self._call("export_session", out, fmt)

    def pipeline_settings(self) -> dict[str, Any]:
        """The pipeline's settings in force."""
        return self._call("pipeline_settings")

    def snapshot(self, limit: int = 2000) -> Snapshot:
        """The session's snapshot: the windows it has not sent yet, and the rest kept here.

        Once the process has ended: its last snapshot, in state ``error`` with how it ended.
        """
        try:
            snap = self._call("snapshot", self._ring.capacity, self._ring.total)
        except SessionGone as gone:
            if self._last is None:
                raise
            if self._last.state not in ("stopped", "error"):  # it died running
                self._last = dataclasses.replace(self._last, state="error", error=str(gone))
            return dataclasses.replace(self._last, windows=self._ring.tail(limit))
        k = len(snap.windows["t"])
        if k < snap.n_windows - self._ring.total:  # more than the ring holds: a new ring
            self._ring.total = snap.n_windows - k
        self._ring.append(snap.windows, k)
        self._last = dataclasses.replace(snap, windows={})
        return dataclasses.replace(snap, windows=self._ring.tail(limit))

    def close(self) -> None:
        """Let the session go: its process stops it (the recording closed).

        The process then serves the next session of its source (it waits warmed), or ends.
        """
        _LIVE.discard(self)
        with self._lock:
            # A build refused (its exception raised) leaves the child waiting for the next.
            free = not self._built and self._gone is None
            if self._built and self._gone is None:
                try:
                    self._conn.send(("close", (), {}))
                    self._conn.recv()
                    free = True
                except (EOFError, OSError):
                    pass
            self._gone = self._gone or "the session was closed"
        if not (free and _keep(self._name, self._proc, self._conn)):
            _end(self._proc, self._conn, self.CLOSE_TIMEOUT)


#: A child per source name that waits, warmed, for the next session: the child of a session
#: let go, or one started once a session is built (its warm-up builds a session of the
#: source's defaults, loads its kernels and lets it go). A session starts in a fraction of a
#: second, not the 3-4 s a fresh interpreter takes to import torch and MuJoCo.
_STANDBY: dict[str, tuple[subprocess.Popen, Connection]] = {}
#: Builds under way per source name: a Start while one is under way waits for its child
#: (a Start given up comes back warm) rather than starting yet another interpreter, so
#: clicking Start and Cancel over and over never piles up processes.
_BUILDING: dict[str, int] = {}
_STANDBY_LOCK = threading.Condition()
#: Seconds a build waits for another build's child before it starts one of its own.
WAIT_FOR_CHILD = 120.0


def _take(name: str, given_up: Callable[[], bool]) -> tuple[subprocess.Popen, Connection]:
    """The child waiting for ``name``; or, once no build of it is under way, a new one."""
    deadline = time.monotonic() + WAIT_FOR_CHILD
    with _STANDBY_LOCK:
        while name not in _STANDBY and _BUILDING.get(name) and time.monotonic() < deadline:
            if given_up():
                raise BuildGivenUp("the build was given up before it began")
            _STANDBY_LOCK.wait(0.2)
        child = _STANDBY.pop(name, None)
        if child is None or child[0].poll() is not None:
            child = _spawn(name)
        _BUILDING[name] = _BUILDING.get(name, 0) + 1
    return child


def _built_one(name: str, ok: bool) -> None:
    """A build of ``name`` ended; a built one starts the next session's child warming."""
    with _STANDBY_LOCK:
        _BUILDING[name] -= 1
        if ok and name not in _STANDBY and memory_to_spare():
            _STANDBY[name] = _spawn(name)
        _STANDBY_LOCK.notify_all()


#: A spare child is started only with this much memory available: a warm RL child holds
#: about 600 MB (torch, MuJoCo, the policy), which a machine short of memory needs more.
SPARE_MEMORY = 2 * 2**30


def memory_to_spare() -> bool:
    """Whether the machine has :data:`SPARE_MEMORY` available (True where it is not known).

    Linux's ``MemAvailable``: what can be given to a new process without swapping.
    """
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024 >= SPARE_MEMORY
    except (OSError, ValueError, IndexError):
        pass
    return True


def _give_back(name: str, proc: subprocess.Popen, conn: Connection) -> None:
    """A build given up: wait for it, let its session go, keep the (warm) child."""
    try:
        status, _ = conn.recv()
        if status == "ok":
            conn.send(("close", (), {}))
            conn.recv()
        kept = _keep(name, proc, conn)
    except (EOFError, OSError):
        kept = False
    _built_one(name, ok=False)  # the child kept is the next one: none started
    if not kept:
        _end(proc, conn, 5.0)


def _keep(name: str, proc: subprocess.Popen, conn: Connection) -> bool:
    """Keep a child that served a session (warm) to wait for the next; False if it ended."""
    if proc.poll() is not None:
        return False
    with _STANDBY_LOCK:
        waiting = _STANDBY.get(name)
        _STANDBY[name] = (proc, conn)
        _STANDBY_LOCK.notify_all()
    if waiting is not None:
        _discard(*waiting)
    return True


def _spawn(name: str) -> tuple[subprocess.Popen, Connection]:
    """A child interpreter for source ``name``, and its end of the pipe."""
    ours, theirs = socket.socketpair()
    proc = subprocess.Popen(
        [sys.executable, "-c", "from idt_desk.live.process import main; main()",
         str(theirs.fileno()), name], pass_fds=(theirs.fileno(),))
    theirs.close()
    return proc, Connection(ours.detach())


def _end(proc: subprocess.Popen, conn: Connection, timeout: float) -> None:
    """Close a child's pipe (it ends at its end) and wait for it; killed if it does not."""
    conn.close()
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(5.0)


def _discard(proc: subprocess.Popen, conn: Connection) -> None:
    """End a waiting child: it holds nothing (no session), so it is killed at once."""
    conn.close()
    proc.kill()
    proc.wait(5.0)


def _drop_standbys() -> None:
    with _STANDBY_LOCK:
        children = list(_STANDBY.values())
        _STANDBY.clear()
    for child in children:
        _discard(*child)


def main() -> None:
    """The child's entry: its pipe's descriptor and its source's name are its arguments.

    It warms while it waits for the build's arguments, the pipe's first message: a session of
    the source's default settings is built, its kernels loaded, and let go (imports, model
    files, numba's cache). The end of the pipe first means it was not needed.
    """
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    conn = Connection(int(sys.argv[1]))
    from idt_desk.live.plugins import load_source

    try:
        warm = build_session(load_source(sys.argv[2]), {}, {}, None, process=False)
        warm.pipeline.warm()
        warm.close()
    except Exception:  # the real build says what is wrong, as a thread's would
        pass
    while True:
        try:
            args = conn.recv()
        except (EOFError, OSError):
            return
        serve(conn, *args)
        gc.collect()  # the last session's memory, before the next one


def serve(conn: Any, name: str, settings: dict[str, Any], config: dict[str, Any],
          record: Path | None) -> None:
    """The child's body: build the session, answer calls, stop it when the pipe closes."""
    from idt_desk.live.plugins import load_source

    try:
        session = build_session(load_source(name), settings, config, record, process=False)
    except Exception as exc:  # said by the parent, as a thread's build would raise it
        _answer(conn, "raise", exc)
        return
    facts = {k: getattr(session.source, k) for k in FACTS if hasattr(session.source, k)}
    _answer(conn, "ok", (facts, session.config.history))
    try:
        while True:
            try:
                call, args, kwargs = conn.recv()
            except (EOFError, OSError):
                break
            if call == "close":
                session.close()
                _answer(conn, "ok", None)
                break
            try:
                if call not in CALLS:
                    raise AttributeError(f"a session has no {call!r}")
                value = getattr(session, call)
                if callable(value):
                    value = value(*args, **kwargs)
            except Exception as exc:
                _answer(conn, "raise", exc)
                continue
            _answer(conn, "ok", value)
    finally:
        session.close()


def _answer(conn: Any, status: str, value: Any) -> None:
    """Send an answer; one that cannot be pickled becomes a RuntimeError naming it.

    An exception that would not unpickle in the window (an ``__init__`` of its own) goes as
    its nearest built-in kind (a ValueError stays a ValueError) with its message.
    """
    if status == "raise":
        try:
            pickle.loads(pickle.dumps(value))
        except Exception:
            kind = next(k for k in type(value).__mro__ if k.__module__ == "builtins")
            value = kind(str(value))
    try:
        conn.send((status, value))
    except (EOFError, OSError):
        pass  # the parent is gone: the loop ends at its next recv
    except Exception as exc:  # pickling: an exception type or value the parent cannot take
        what = f"{type(value).__name__}: {value}" if status == "raise" else repr(exc)
        conn.send(("raise", RuntimeError(what)))
