"""Record any Python loop's (S, A, S') as an ordinary recording the dashboard can follow.

One line in a training script, an evaluation harness or a robot driver::

    with idt_desk.Recorder("runs/x", state_names=["x", "v"], action_names=["u"]) as rec:
        for ...:
            rec.add(s, a, s_next, reward=r)

writes ``runs/x`` as the dashboard's own sessions do (``transitions.arrows``, ``windows.csv``,
``events.jsonl``, ``config.json``), with the windows, baseline and calibrated alarms computed
by the same pipeline as the live dashboard. ``idt-desk watch runs/x`` follows it while it
grows; ``load_recording`` and replay read it like any other recording. Perturbations and
modulations the loop applies itself are marked with :meth:`Recorder.perturb` /
:meth:`Recorder.modulate` (shaded bands, detection latency), one-shot impulses with
:meth:`Recorder.impulse`, remarks with :meth:`Recorder.note`.

``add`` only checks and queues: the pipeline runs in the recorder's own thread, which takes
what was added every ``chunk`` transitions and at least every ``flush_seconds``, and the
writer's flusher puts it on disk within half a second more, so what ``add`` accepted is on
disk within about a second whatever the loop does next (trains, evaluates, waits) and the
detector's calibration never holds the loop up. A loop faster than the pipeline waits in
``add`` once ``max_queued`` transitions are queued: memory, and what a kill can lose, stay
bounded.
"""

from __future__ import annotations

import atexit
import contextlib
import threading
import weakref
from collections import deque
from collections.abc import Sequence
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from idt_desk.live.loop import LoopSource, Marks
from idt_desk.live.source import Batch
from idt_desk.metrics.twin import Twin
from idt_desk.recordings import RecordingError
from idt_desk.recordings.profile import Profile
from idt_desk.settings import DEFAULTS, PipelineSettings, check_finite, check_limit

__all__ = ["Recorder"]


def _close_at_exit(ref: weakref.ref) -> None:
    """Close a recorder the script left open (the interpreter is exiting)."""
    rec = ref()
    if rec is not None and not rec.closed:
        with contextlib.suppress(Exception):  # said in the recording; the exit goes on
            rec.close()


def _floats(x: Any, what: str) -> np.ndarray:
    """``x`` as a float64 copy; complex numbers, text, booleans and numbers past float64 refused.

    The cast would drop an imaginary part, read text as numbers, take a bool as 1, or overflow
    with a message naming nothing: each is said here, naming the value and where it is (the
    row and column of the call's array). One conversion: ``add`` may be called once a
    transition.
    """
    arr = np.asarray(x)
    kind = arr.dtype.kind
    if kind == "c":
        raise ValueError(f"{what}: complex numbers; the IDT takes real values (the imaginary "
                         "part would be dropped)")
    if kind in "USb":
        first = arr.reshape(-1)[0].item() if arr.size else ""
        words = "booleans" if kind == "b" else "text"
        raise ValueError(f"{what}: {words} ({first!r}); the IDT takes numbers")
    try:
        return np.array(arr, dtype=np.float64)
    except (TypeError, ValueError, OverflowError):
        flat = arr.reshape(-1) if arr.ndim else arr.reshape(1)
        for j, v in enumerate(flat):
            try:
                if isinstance(v, bool | np.bool_ | str | bytes):
                    raise TypeError
                float(v)
            except (TypeError, ValueError, OverflowError):
                at = [int(i) for i in np.unravel_index(j, arr.shape)] if arr.ndim else []
                where = f" at row {at[0]}, column {at[1]}" if len(at) == 2 else \
                    f" at index {at[0]}" if at else ""
                text = repr(v) if len(repr(v)) <= 40 else repr(v)[:37] + "..."
                raise ValueError(f"{what}{where}: {text} is not a number a float64 holds "
                                 "(the IDT takes finite real numbers)") from None
        raise ValueError(f"{what}: not an array of numbers") from None


def _rows(x: Any, width: int, what: str) -> np.ndarray:
    """One transition (a vector) or a batch (rows) as a 2-D float array of ``width`` columns.

    A copy: the loop may reuse its buffers once ``add`` returns.
    """
    arr = _floats(x, what)
    if arr.ndim <= 1:
        arr = arr.reshape(1, -1)
    if arr.ndim != 2 or arr.shape[1] != width:
        raise ValueError(f"{what}: expected {width} value(s) per transition, got shape "
                         f"{np.shape(x)}")
    return arr


def _column(x: Any, k: int, what: str) -> np.ndarray:
    """A number or one per row, as ``k`` floats (a copy)."""
    arr = _floats(x, what).reshape(-1)
    if arr.size not in (1, k):
        raise ValueError(f"{what}: expected one value or {k} (one per row), got {arr.size}")
    return np.array(np.broadcast_to(arr, (k,)))


class Recorder(Marks):
    """Write a loop's transitions as a recording, with the dashboard's metrics and alarms.

    Use it as a context manager (the ``with`` block closes it, an exception as an error):

    >>> import tempfile
    >>> import numpy as np
    >>> import idt_desk
    >>> path = tempfile.mkdtemp() + "/run"
    >>> rng = np.random.default_rng(0)
    >>> x, u = rng.normal(size=(2001, 1)), rng.normal(size=(2000, 1))
    >>> with idt_desk.Recorder(path, ["x"], ["u"], window=100, stride=50,
    ...                        calibration_windows=2, baseline_windows=10) as rec:
    ...     rec.add(x[:-1], u, x[1:])  # a batch of rows; or one transition at a time
    >>> recording = idt_desk.load_recording(path)
    >>> len(recording.transitions), len(recording.windows), recording.complete
    (2000, 39, True)

    A recorder still open when the interpreter exits (a script that ends without
    :meth:`close`) is closed then, its rows flushed, as a clean stop: nothing accepted is
    lost to the exit.

    Parameters
    ----------
    path
        The recording's directory (created; it must not hold a recording yet).
    state_names, action_names
        Names of the state and action variables (no actions: a passive system).
    rate
        Transitions per second of the loop's own time (a MuJoCo env's ``1 / dt``): times
        and false-alarm budgets per hour follow it. None: the time is the step count and the
        budget counts windows (``NO_RATE_BUDGET``: 1 false alarm per 10,000 windows) or, with
        ``episode_steps``, episodes (``EPISODE_BUDGET``: 1 per 100), as the wrapper's.
    reward
        Whether ``add`` is given rewards (a reward plot and alarm).
    episode_steps
        An episodic loop's time limit in steps (``add`` is given ``episode``): a budget may
        count episodes (``1/100episodes``).
    phase_baseline
        With ``episode_steps``: judge each window against the baseline at the same phase of
        the episode (``idt_desk.detection.phase``).
    preset, bins, window, stride, calibration_windows, baseline_windows, detector,
    false_alarms, persist, k, ewma_lambda, drift, correction
        The pipeline, as ``idt-desk run`` takes it (``idt_desk.live.session.SessionConfig``):
        every setting of the settings table (``idt_desk.settings.SETTINGS``) under the same
        name and range as every front end, checked there; ``detector`` None is persistence.
    chunk
        Transitions gathered before the pipeline's thread takes them (it takes what there
        is at least every ``flush_seconds`` all the same).
    flush_seconds
        Longest time an added transition waits for the pipeline's thread.
    max_queued
        Transitions ``add`` may queue ahead of the pipeline before it waits for it (None:
        four chunks, at least 10,000).
    baseline
        A baseline profile's path (or an ``idt_desk.recordings.profile.Profile``): the
        symbols, twin and detectors fitted on a known-good run of this loop, so the first
        complete window is judged (as ``IDTMonitor``'s ``baseline``); the settings left
        unset become the profile's.
    env_id
        The env's registered id, where there is one: checked against a profile's, written
        into one saved from here.
    twin
        The loop's nominal model (``idt_desk.metrics.twin.Twin``; a MuJoCo env's:
        ``idt_desk.gym.twin.MujocoTwin(env)``), stepped beside the IDT: the residual of the
        physics in each window and the class of change at every alarm. None: alarms say
        ``unknown``. A MuJoCo env's copy is written into the recording (its env id), so a
        replay rebuilds it; another twin is not, and a replay runs without it.

    Raises
    ------
    ValueError
        A setting out of its range (one line naming it), or ``path`` already a recording.
    """

    def __init__(
        self,
        path: str | Path,
        state_names: Sequence[str],
        action_names: Sequence[str] = (),
        *,
        rate: float | None = None,
        reward: bool = False,
        episode_steps: int | None = None,
        phase_baseline: bool = False,
        preset: str | None = None,
        bins: int | None = None,
        window: int | None = None,
        stride: int | None = None,
        calibration_windows: int = 20,
        baseline_windows: int | None = None,
        detector: str | None = None,
        false_alarms: str | None = None,
        persist: int | None = None,
        k: float = DEFAULTS["k"],
        ewma_lambda: float = DEFAULTS["ewma_lambda"],
        drift: float = DEFAULTS["drift"],
        correction: str | None = None,
        chunk: int = 1000,
        flush_seconds: float = 0.25,
        max_queued: int | None = None,
        twin: Twin | None = None,
        baseline: str | Path | Profile | None = None,
        env_id: str | None = None,
    ) -> None:
        from idt_desk.live.session import Session, SessionConfig

        if not str(path).strip():  # Path("") is the working directory: never meant
            raise ValueError("path: a recording needs a folder's name (got an empty one)")
        for what, names in (("state_names", state_names), ("action_names", action_names)):
            if isinstance(names, str | bytes):  # "xy" made two variables, x and y
                raise TypeError(f"{what} must be a sequence of names (a list of strings), "
                                f"got the string {names!r}; give [{names!r}] for one")
        if not list(state_names):
            raise ValueError("state_names: a loop needs at least one state variable")
        check_limit("rate", rate)  # the settings table's words, as every front end's
        check_limit("episode_steps", episode_steps)
        check_limit("phase_baseline", phase_baseline)
        if not (isinstance(chunk, int | np.integer) and 1 <= chunk <= 10**7):
            raise ValueError(f"chunk must be an integer from 1 to 10,000,000, got {chunk!r}")
        if not (isinstance(flush_seconds, int | float) and 0 < flush_seconds <= 60):
            raise ValueError(f"flush_seconds must be a number in (0, 60], got "
                             f"{flush_seconds!r}")
        self.chunk = int(chunk)
        self.max_queued = max(4 * self.chunk, 10_000) if max_queued is None else \
            int(max_queued)
        if self.max_queued < self.chunk:
            raise ValueError(f"max_queued must be >= chunk ({self.chunk}), got {max_queued!r}")
        self.path = Path(path)
        if episode_steps is not None and not (
                isinstance(episode_steps, int | np.integer) and 1 <= episode_steps <= 10**9):
            raise ValueError(f"episode_steps must be an integer from 1 to 10**9, got "
                             f"{episode_steps!r}")
        if twin is not None and not isinstance(twin, Twin):
            raise TypeError(f"twin must be an idt_desk.Twin (predict, hypotheses, kinds, "
                            f"description) or None, got {type(twin).__name__}")
        self.source = LoopSource(state_names, action_names, rate, reward,
                                 None if episode_steps is None else int(episode_steps), twin)
        if env_id is not None and not isinstance(env_id, str):
            raise TypeError(f"env_id must be an env's registered id (text), got {env_id!r}")
        self.source.env_id = env_id
        profile = None if baseline is None else Profile.of(baseline)
        settings = {"preset": preset, "bins": bins, "window": window, "stride": stride,
                    "calibration_windows": calibration_windows,
                    "baseline_windows": baseline_windows, "detector": detector,
                    "false_alarms": false_alarms, "phase_baseline": phase_baseline,
                    "persist": persist, "k": k, "ewma_lambda": ewma_lambda, "drift": drift,
                    "correction": correction}
        PipelineSettings.parse(settings, strict=True)  # one line naming the field, as all
        config = SessionConfig(source="loop", speed=None, profile=None if profile is None
                               else profile.setting(), **{
            key: bool(v) if key == "phase_baseline" else v for key, v in settings.items()})
        self.session = Session(config, source=self.source, record=self.path)
        self.session.stop_on_write_error = False  # refused until there is room: see _work
        self.flush_seconds = float(flush_seconds)
        self._ds, self._da = len(self.source.state_names), len(self.source.action_names)
        #: Transitions accepted by ``add`` so far.
        self.n_added = 0
        self.closed = False
        # What add and the marks queued, in order: ("rows", arrays) or ("mark", event).
        self._queue: deque[tuple[str, Any]] = deque()
        self._queued = 0  # transitions in the queue
        self._seq = self._done = 0  # items queued / taken in by the pipeline's thread
        self._closing = self._hurry = False
        self._failure: BaseException | None = None
        self._cond = threading.Condition()
        self.session.begin()
        self._thread = threading.Thread(target=self._work, daemon=True,
                                        name=f"idt-recorder {self.path.name}")
        self._thread.start()
        # Closed at interpreter exit if the script does not (held weakly: a dropped recorder
        # is not kept alive by it).
        self._at_exit = partial(_close_at_exit, weakref.ref(self))
        atexit.register(self._at_exit)

    # -- the loop's side --------------------------------------------------------------------

    def add(self, s: Any, a: Any = None, s_next: Any = None, *, reward: Any = None,
            t: Any = None, episode: Any = None) -> None:
        """Add one transition (vectors) or a batch (rows): S, A, S'.

        Optionally the reward, the loop's time (default: the step count over ``rate``) and
        the episode index (whole numbers), each a number or one per row. Every value must
        be finite: a bad one is refused here, naming its row, and nothing of the call is
        kept.

        Raises
        ------
        ValueError
            Wrong shapes, a value that is not finite, the recorder closed.
        RecordingError
            The recording cannot be written (a full disk) or its pipeline failed: the rows
            are refused; what was accepted before is kept.
        """
        if self.closed:
            raise ValueError(f"{self.path}: the recorder is closed")
        if s_next is None:
            raise ValueError("add(s, a, s_next): S' is required")
        s_ = _rows(s, self._ds, "s")
        n_ = _rows(s_next, self._ds, "s_next")
        k = len(s_)
        if len(n_) != k:
            raise ValueError(f"s has {k} row(s) but s_next {len(n_)}")
        if self._da:
            if a is None:
                raise ValueError(f"a: this loop has {self._da} action variable(s)")
            a_ = _rows(a, self._da, "a")
            if len(a_) != k:
                raise ValueError(f"s has {k} row(s) but a {len(a_)}")
        else:
            a_ = np.empty((k, 0))
        first = self.n_added
        names = self.source.state_names
        check_finite("s", s_, names, first)
        check_finite("a", a_, self.source.action_names, first)
        check_finite("s_next", n_, names, first)
        r_ = np.full(k, np.nan) if reward is None else _column(reward, k, "reward")
        if reward is not None:
            check_finite("reward", r_[:, None], ("reward",), first)
        t_ = None if t is None else _column(t, k, "t")
        if t_ is not None:
            check_finite("t", t_[:, None], ("t",), first)
        e_ = np.full(k, np.nan) if episode is None else _column(episode, k, "episode")
        if episode is not None:
            check_finite("episode", e_[:, None], ("episode",), first)
            if (frac := np.flatnonzero(e_ != np.round(e_))).size or \
                    (frac := np.flatnonzero(np.abs(e_) > 2.0**53)).size:
                j = int(frac[0])
                raise ValueError(f"episode of transition {first + j:,} (row {j} of this "
                                 f"call) is {e_[j]!r}; episodes are whole numbers")
        with self._cond:
            self._check()
            while self._queued >= self.max_queued and not self._check():
                self._cond.wait(0.5)  # the pipeline is behind: wait for it, bounded
            if t_ is None:
                t_ = np.arange(self.n_added + 1, self.n_added + k + 1, dtype=np.float64) / \
                    self.source.rate
            self._queue.append(("rows", (s_, a_, n_, r_, t_, e_)))
            self.n_added += k
            self._queued += k
            self._seq += 1
            if self._queued >= self.chunk:
                self._cond.notify_all()

    def _queue_mark(self, kind: str, fields: dict[str, Any]) -> None:
        if self.closed:
            raise ValueError(f"{self.path}: the recorder is closed")
        with self._cond:
            self._check()
            self._queue.append(("mark", {"kind": kind, **fields}))
            self._seq += 1

    def refit_baseline(self, n_windows: int | None = None) -> None:
        """Gather a new baseline from the windows after what was added so far.

        The next ``n_windows`` (None: the configured number): for a loop the profile does not
        fit (:attr:`profile_check`).
        """
        check_limit("baseline_windows", n_windows)
        if self.closed:
            raise ValueError(f"{self.path}: the recorder is closed")
        with self._cond:
            self._check()
            self._queue.append(("refit", n_windows))
            self._seq += 1

    def _check(self) -> bool:
        """Raise what stops the recording from taking more (the caller holds the lock)."""
        if self._failure is not None:
            raise RecordingError(f"{self.path}: the pipeline's thread failed "
                                 f"({type(self._failure).__name__}: {self._failure}); "
                                 "close the recorder (what it took is kept)")
        error = self.session.sink.error
        if error is not None:
            raise error
        return False

    # -- the pipeline's side ----------------------------------------------------------------

    def _work(self) -> None:
        """The pipeline's thread: take what was queued, run it through the session."""
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._queued >= self.chunk or self._closing
                                    or self._hurry, timeout=self.flush_seconds)
                items = list(self._queue)
                self._queue.clear()
                taken, self._queued, self._hurry = self._seq, 0, False
                closing = self._closing
            self._wait_for_room()
            try:
                self._run(items)
            except BaseException as exc:  # said by the next add, flush or close
                with self._cond:
                    self._failure = exc
                    self._cond.notify_all()
                return
            with self._cond:
                self._done = taken
                self._cond.notify_all()
                if closing and not self._queue:
                    return

    def _wait_for_room(self) -> None:
        """While a write fails (a full disk), hold the taken rows back, not the writer's memory.

        The writer's flusher tries again every ``flush_seconds``; ``add`` refuses meanwhile
        (:meth:`_check`). Once a write succeeds, the rows go on; a close does not wait (its
        last write says whether there was room).
        """
        sink = self.session.sink
        while sink.error is not None:
            with self._cond:
                if self._closing:
                    return
                self._cond.wait(self.flush_seconds)

    def _run(self, items: list[tuple[str, Any]]) -> None:
        """Hand the queued rows to the session, cut so every mark lands on a batch start."""
        marks: list[dict[str, Any]] = []
        for kind, item in items:
            if kind == "mark":
                marks.append({**item, "row": -1})
                continue
            if kind == "refit":  # at the next row the pipeline takes
                self.session.schedule(self.session.n_transitions, "calibrate_baseline",
                                      n=item)
                continue
            s, a, n, r, t, e = item
            total, pos = len(s), 0
            while pos < total:
                hi = pos + self.session.plan(total - pos)
                sl = slice(pos, hi)
                self.session.advance(Batch(
                    s=s[sl], s_next=n[sl], a=a[sl] if self._da else None,
                    reward=r[sl] if self.source.has_reward else None,
                    episode=None if np.isnan(e[sl]).all() else e[sl], t=t[sl],
                    events=marks))
                marks, pos = [], hi
        if marks:
            # Marks after the last transition: logged now, at that transition (the next
            # rows would start there), so they reach the disk while the loop is idle.
            self.session.advance(Batch(s=np.empty((0, self._ds)),
                                       s_next=np.empty((0, self._ds)), events=marks))

    @property
    def profile(self) -> Profile | None:
        """The baseline profile in force (``baseline=``), or None."""
        return self.session.profile

    @property
    def profile_check(self) -> dict[str, Any] | None:
        """With a profile: the verdict on the first windows (see ``IDTMonitor``), or None."""
        return self.session.profile_check

    def save_baseline(self, path: str | Path) -> Profile:
        """Save the symbols, twin and baseline fitted so far as a profile at ``path``.

        What was added is run through the pipeline first; refused in one line before the
        baseline is complete (its progress said).
        """
        self.flush()
        return self.session.save_baseline(path)

    def flush(self) -> None:
        """Run the pipeline on everything added and write it out now.

        Raises
        ------
        RecordingError
            The pipeline failed, or the disk is full (nothing accepted is dropped).
        """
        with self._cond:
            target = self._seq
            self._hurry = True
            self._cond.notify_all()
            while self._done < target and self._failure is None and self._thread.is_alive():
                self._cond.wait(0.5)
            self._check()
        if self.session.sink.recording:
            self.session.sink.recorder.flush()

    def close(self, error: str | None = None) -> None:
        """Process what is left and close the recording (``session_end``).

        ``error``: the loop ended with this exception; the recording says so (state
        ``error``; ``load_recording`` reports it).

        Raises
        ------
        RecordingError
            The pipeline's thread had failed, or the last rows could not be written (a full
            disk): the recording is closed as an error, with the reason.
        """
        if self.closed:
            return
        atexit.unregister(self._at_exit)
        given = error
        with self._cond:
            self._closing = True
            self._cond.notify_all()
        self._thread.join()
        self.closed = True
        failure = self._failure
        ses = self.session
        if error is None and failure is not None:
            error = f"the pipeline failed: {type(failure).__name__}: {failure}"
        ses.loop_state.finish(error)
        ses.end()
        if given is None and ses.state == "error":  # not the loop's own exception: say it
            raise RecordingError(f"{self.path}: closed as an error: {ses.error}")

    def __enter__(self) -> Recorder:
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        self.close(None if exc is None else f"{type(exc).__name__}: {exc}")

    # -- what the pipeline made -------------------------------------------------------------

    def snapshot(self, limit: int = 2000) -> Any:
        """The session's state (windows, baseline, alarms, events), as the dashboard sees it."""
        return self.session.snapshot(limit=limit)
