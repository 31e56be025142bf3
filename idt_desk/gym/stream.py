"""The wrapper's and the callback's shared parts: the stream of one env, and its options.

:class:`Stream` buffers one env's transitions into blocks for a session (the one path from
a loop to an alarm: its pipeline, twin, attribution and recording), the spaces and presets
come from :mod:`idt_desk.gym.spaces`, and the options are checked against the settings
table. See :mod:`idt_desk.gym`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from idt_desk.detection.detectors import (
    CONTROL_BASELINE_WINDOWS,
    CONTROL_DETECTOR,
    DetectorSpec,
)
from idt_desk.gym.spaces import GENERIC_PRESET, SpaceCodec, resolve_preset
from idt_desk.live.loop import Marks
from idt_desk.metrics.engine import WINDOW_KEYS
from idt_desk.metrics.presets import Preset
from idt_desk.metrics.regime import regime, regime_text
from idt_desk.metrics.twin import TWIN_COLUMNS, Twin
from idt_desk.settings import SETTINGS, PipelineSettings, check_finite, check_limit

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["ALARM_DEFAULTS", "GENERIC_PRESET", "IDT_COLUMNS", "LOGGED_METRICS", "SpaceCodec",
           "Stream", "StreamMarks", "check_settings", "frame", "loop_rate",
           "record_path", "resolve_preset", "resolve_twin"]

#: Keys of a window, in order (``info["idt"]``, the rows of ``windows``): ``start`` and
#: ``end`` (first transition and one past the last: the number of transitions seen when the
#: window finished), ``episode`` (episode of the window's last transition), the engine's
#: :data:`~idt_desk.WINDOW_KEYS`, ``reward`` (mean reward over the window),
#: ``out_of_range`` (fraction of its transitions with a value clamped into an edge bin),
#: ``motion`` (how far S moved in the window, in bins: under 1, the loop is ``still``) and
#: the alarm's flags ``x_P`` … ``x_IDT`` (1.0 alarm, 0.0 none, NaN no verdict: calibration
#: and baseline windows, or no detector), exactly as a live session flags them, and the
#: twin's residual channels and alarm (``idt_desk.metrics.twin``; NaN without a twin).
IDT_COLUMNS = ("start", "end", "episode", *WINDOW_KEYS[1:], "reward", "out_of_range",
               "motion", "x_P", "x_H_f", "x_H_b", "x_dH", "x_IDT", *TWIN_COLUMNS)
_INT_COLUMNS = frozenset({"start", "end", "episode", "K_S", "K_A", "K_S_next", "K_SAS"})

#: What the SB3 callback logs (as ``idt/<key>``) by default.
LOGGED_METRICS = ("P", "H_f", "H_b", "dH", "unique_frac")

# ---------------------------------------------------------------------------------------------
# The stream: shared by the wrapper and the callback
# ---------------------------------------------------------------------------------------------


class _Columns:
    """Growable column store of windows (8 bytes per column per window)."""

    def __init__(self) -> None:
        self.n = 0
        self._data = {c: np.empty(64, dtype=np.int64 if c in _INT_COLUMNS else np.float64)
                      for c in IDT_COLUMNS}

    def extend(self, block: Mapping[str, np.ndarray], k: int) -> None:
        cap = len(self._data["start"])
        if self.n + k > cap:
            new = max(2 * cap, self.n + k)
            for c, v in self._data.items():
                grown = np.empty(new, dtype=v.dtype)
                grown[: self.n] = v[: self.n]
                self._data[c] = grown
        for c, v in self._data.items():
            v[self.n: self.n + k] = block[c]
        self.n += k

    def arrays(self) -> dict[str, np.ndarray]:
        return {c: v[: self.n].copy() for c, v in self._data.items()}


class Stream:
    """One (S, A, S') stream: buffered into blocks for a session, its windows kept.

    The stream is a :class:`~idt_desk.live.session.Session` around the loop (an
    :class:`~idt_desk.live.loop.LoopSource` declaring its names, rate, episodes, twin,
    a Discrete space's own bins and the control defaults), driven block by block from the
    caller's thread: its pipeline, monitor, twin, attribution and, with ``record``, its
    recording are the session's, built in one place and computed once, as the dashboard's
    and :class:`idt_desk.Recorder`'s are. :meth:`add` copies a transition into a buffer;
    when the buffer completes the calibration or a window, the block goes to the session
    and the windows it finished are returned (and kept: :meth:`windows`). Every IDT alarm
    is attributed as a session's are (:attr:`alarms`; ``twin_note`` says why not without a
    twin).

    Parameters
    ----------
    preset
        The resolved preset (:func:`resolve_preset`).
    state, action
        The spaces' codecs.
    settings
        The pipeline settings of the settings table (``idt_desk.settings.SETTINGS``):
        ``calibration_windows``, ``correction``, ``detector`` (None: windows only, no
        flags), ``false_alarms``, ``baseline_windows``, ``persist``, ``k``, ``drift``,
        ``ewma_lambda``, ``phase_baseline``; unset ones take the control defaults.
    rate, episode_steps
        The loop's transitions per second of its own time (None: the step count) and its
        time limit (None: none).
    block
        Transitions at least per block (None: the stride).
    twin, twin_note
        The loop's nominal model, or None and why not.
    record
        A new folder to record the stream into (None: none).
    baseline
        A baseline profile (its path, or a :class:`~idt_desk.recordings.profile.Profile`):
        the symbols, twin and detectors fitted on a known-good run, so the first complete
        window is judged. The settings left at the wrapper's defaults become the profile's;
        one set otherwise, other variables, another env id or rate are refused in one line.
    env_id
        The env's registered id (its ``spec.id``; None: unregistered), checked against a
        profile's and written into a profile saved from this stream.
    """

    def __init__(
        self,
        preset: Preset,
        state: SpaceCodec,
        action: SpaceCodec,
        settings: Mapping[str, Any] | None = None,
        *,
        rate: float | None = None,
        episode_steps: int | None = None,
        block: int | None = None,
        twin: Twin | None = None,
        twin_note: str = "",
        record: Path | None = None,
        baseline: Any = None,
        env_id: str | None = None,
    ) -> None:
        from idt_desk.live.config import SessionConfig
        from idt_desk.live.loop import LoopSource
        from idt_desk.live.session import Session
        from idt_desk.recordings.profile import Profile

        given = dict(settings or {})
        profile = None if baseline is None else Profile.of(baseline)
        if profile is not None:  # the wrapper's defaults are the profile's settings
            given = {k: v for k, v in given.items()
                     if not (k in ALARM_DEFAULTS and v == ALARM_DEFAULTS[k])}
        cw = given.get("calibration_windows", 20)
        if isinstance(cw, bool) or not isinstance(cw, int | np.integer) or cw < 1:
            raise ValueError(f"calibration_windows must be an integer >= 1, got {cw!r}")
        #: Whether the wrapper asked for an alarm (detector None: windows without flags; the
        #: session still judges them, as its recording does).
        self.alarmed = given.get("detector", CONTROL_DETECTOR) is not None
        if not self.alarmed:
            given["detector"] = None
        self.preset = preset
        self._state, self._action = state, action
        self._names = ([f"obs_{j}" for j in range(state.dim)],
                       [f"act_{j}" for j in range(action.dim)])
        ranges = {f"{prefix}_0": codec.ranges[0]
                  for prefix, codec in (("obs", state), ("act", action))
                  if codec.discrete_n is not None}
        #: The loop as the session sees it.
        self.source = LoopSource(self._names[0], self._names[1], rate, True, episode_steps,
                                 twin, control=True, state_bins=state.discrete_n,
                                 action_bins=action.discrete_n, value_ranges=ranges)
        self.source.env_id = env_id
        if twin is None:
            self.source.twin_note = twin_note or self.source.twin_note
        config = SessionConfig(
            source="loop", speed=None, preset_spec=preset.to_dict(), twin=twin is not None,
            history=1, profile=None if profile is None else profile.setting(),
            **{k: v for k, v in given.items() if k in _SESSION_KEYS})
        #: The session the blocks go to (its pipeline, monitor, twin, alarms, recording).
        self.session = Session(config, source=self.source, record=record)
        #: Why alarms are not attributed ("" with a twin).
        self.twin_note = "" if twin is not None else self.source.twin_note
        #: Each IDT alarm: ``end`` of its first window, ``attribution``, ``component``,
        #: ``size``, ``evidence`` and ``isolation`` (the session's ``attributed`` event, a
        #: window length after it).
        self.alarms: list[dict[str, Any]] = []
        self._alarmed = False
        self._marks: list[dict[str, Any]] = []
        self._got: list[dict[str, np.ndarray]] = []
        self.session.add_window_listener(lambda w: self._got.append(w))
        self.session.add_event_listener(self._event)
        self.pipeline = self.session.pipeline
        self.engine = self.pipeline.engine
        self.monitor = self.session.monitor
        self.calibration_windows = int(cw)
        #: Transitions the symbols are calibrated on.
        self.calibration_transitions = self.pipeline.calibration_transitions
        if block is not None:
            check_limit("block", block)
        #: At least this many transitions per block handed on (blocks end at window ends).
        self.block = preset.stride if block is None else int(block)
        # A stream judged from its first rows (a profile) waits a whole window for its first.
        cap = max(self.calibration_transitions, preset.window, self.block + preset.stride)
        self._s, self._n = state.buffer(cap), state.buffer(cap)
        self._a = action.buffer(cap)
        #: Values a transition's S, A and S' hold (checked at each step, before numpy would
        #: broadcast a wrong one silently or fail naming nothing).
        self._widths = tuple(int(np.prod(b.shape[1:])) for b in (self._s, self._a, self._n))
        self._r = np.empty(cap)
        self._ep = np.empty(cap)
        self._k = 0  # rows buffered
        # Rows that complete the next block: the calibration, or (a profile) the first window.
        self._due = self.calibration_transitions or preset.window
        # Each handed-on row's episode, from the first row a window to come may end at
        # (the calibration's rows are judged at once, when it completes).
        self._episodes = np.empty(0)
        self._episodes_from = 0
        self._windows = _Columns()
        self.latest: dict[str, float | int] | None = None
        self.closed = False
        self.session.begin()

    @property
    def calibrated(self) -> bool:
        """Whether the symbols are frozen (the first windows have been computed)."""
        return self.pipeline.calibrated

    @property
    def n_transitions(self) -> int:
        """Transitions added so far."""
        return self.session.n_transitions + self._k

    def add(self, s: Any, a: Any, s_next: Any, reward: float, episode: int
            ) -> dict[str, np.ndarray] | None:
        """Add one transition; return the windows it finished (columns), or None."""
        k = self._k
        ws, wa, wn = self._widths
        if np.size(s) != ws or np.size(a) != wa or np.size(s_next) != wn:
            self._wrong_shape(s, a, s_next)
        self._s[k] = s
        self._a[k] = a
        self._n[k] = s_next
        self._r[k] = reward
        self._ep[k] = episode
        for what, buf, names in (("s", self._s, self._names[0]), ("a", self._a, self._names[1]),
                                 ("s_next", self._n, self._names[0])):
            # Refused at this step, not a block later inside the pipeline.
            check_finite(what, buf[k].reshape(1, -1), names, self.n_transitions)
        self._k = k = k + 1
        if k < self._due:
            return None
        return self._flush()

    def mark(self, kind: str, **fields: Any) -> None:
        """An event of the loop's own at the next transition (a perturbation it applies)."""
        self._marks.append({"kind": kind, **fields, "row": -1})

    def _wrong_shape(self, s: Any, a: Any, s_next: Any) -> None:
        """Raise, naming the value whose size is not its space's (off the per-step path)."""
        for what, value, width in zip(("observation", "action", "next observation"),
                                      (s, a, s_next), self._widths, strict=True):
            if np.size(value) != width:
                raise ValueError(f"{what} of transition {self.n_transitions:,}: "
                                 f"{np.size(value)} value(s), shape {np.shape(value)}; the "
                                 f"space has {width} variable(s)")

    def flush(self) -> dict[str, np.ndarray] | None:
        """Hand on what is buffered (after calibration); return the new windows."""
        if not self.calibrated or self._k == 0:
            return None
        return self._flush()

    def _hand_marks(self) -> None:
        """Marks after the last transition: logged now, at that transition."""
        if self._marks:
            from idt_desk.live.source import Batch

            marks, self._marks = self._marks, []
            width = self._s.shape[1:] if self._s.ndim > 1 else ()
            empty = np.empty((0, int(np.prod(width))))
            self.session.advance(Batch(s=empty, s_next=empty, events=marks))

    def _flush(self) -> dict[str, np.ndarray] | None:
        from idt_desk.live.source import Batch

        k, self._k = self._k, 0
        s = self._s[:k].reshape(k, -1)
        a = self._a[:k].reshape(k, -1)
        n = self._n[:k].reshape(k, -1)
        ep = self._ep[:k].copy()
        self._episodes = np.concatenate([self._episodes, ep])
        i = 0
        while i < k:  # cut where the session says (the calibration's end)
            m = self.session.plan(k - i)
            sl = slice(i, i + m)
            marks, self._marks = (self._marks, []) if i == 0 else ([], self._marks)
            self.session.advance(Batch(s=s[sl], a=a[sl], s_next=n[sl], reward=self._r[sl],
                                       episode=ep[sl], events=marks))
            i += m
        W, stride = self.preset.window, self.preset.stride
        # The next block ends at the first window end at least `block` transitions away.
        due = self.engine.next_window_start + W - self.engine.n_seen
        self._due = due + max(0, -(-(self.block - due) // stride)) * stride
        got, self._got = self._got, []
        if not got:
            self._forget_episodes()
            return None
        w = {c: np.concatenate([g[c] for g in got]) for c in got[0]}
        m = len(w["start"])
        table: dict[str, np.ndarray] = {}
        for c in IDT_COLUMNS:
            if c == "episode":
                at = w["end"].astype(np.int64) - 1 - self._episodes_from
                table[c] = self._episodes[at].astype(np.int64)
            elif c in w:
                table[c] = np.asarray(w[c])
            else:
                table[c] = np.full(m, np.nan)
        if not self.alarmed:  # no alarm asked for: no verdicts said
            for c in FLAG_COLUMNS:
                table[c] = np.full(m, np.nan)
        self._forget_episodes()
        self._windows.extend(table, m)
        flags = table["x_IDT"]
        if np.isfinite(flags).any():
            self._alarmed = bool(flags[np.isfinite(flags)][-1] == 1.0)
        self.latest = {c: v[-1].item() for c, v in table.items()}
        # The estimator's regime of this window, and what it means (never silent when blind).
        name = regime(self.latest["unique_frac"], self.latest["H_f"], self.latest["motion"])
        self.latest["regime"] = name
        self.latest["regime_text"] = regime_text(name, self.latest["unique_frac"], W)
        if self.pipeline.view:  # an auto preset's choice, made on the calibration windows
            self.latest["view"] = self.pipeline.view
        if self._alarmed and self.alarms:  # the alarm in force says what changed
            self.latest.update({k: self.alarms[-1][k]
                                for k in ("attribution", "component", "size", "evidence")})
        return table

    def _forget_episodes(self) -> None:
        """Let go of the episodes of rows no window to come can end at.

        The next window ends at the engine's next start + W; the calibration's rows wait for
        its windows.
        """
        if not self.calibrated:
            return
        first = self.engine.next_window_start + self.preset.window - 1
        drop = min(max(first - self._episodes_from, 0), len(self._episodes))
        if drop:
            self._episodes = self._episodes[drop:]
            self._episodes_from += drop

    def _event(self, ev: Mapping[str, Any]) -> None:
        """An alarm's class, as the session named it (the one attribution of every loop)."""
        if ev.get("kind") == "attributed" and not ev.get("during_alarm") and self.alarmed:
            twin = ev.get("twin") or {}
            self.alarms.append({"end": int(ev["alarm_i"]), "attribution": ev["attribution"],
                                "component": ev.get("component"), "size": twin.get("size"),
                                "evidence": ev.get("evidence", ""),
                                "isolation": twin.get("isolation")})

    def save_baseline(self, path: Any) -> Any:
        """Save what the stream fitted as a baseline profile (see :class:`IDTMonitor`)."""
        self.flush()
        return self.session.save_baseline(path)

    def refit_baseline(self) -> None:
        """Gather a new baseline from the next windows (a loop the profile does not fit)."""
        self.flush()
        # The caller drives this session: a command scheduled now is applied at its next row.
        self.session.schedule(self.session.n_transitions, "calibrate_baseline", n=None)

    def windows(self) -> dict[str, np.ndarray]:
        """Every window finished so far (buffered transitions flushed), as columns (copies)."""
        self.flush()
        return self._windows.arrays()

    def close(self, error: str | None = None) -> None:
        """End the stream: the session's end.

        Its recording, if any, is closed complete (with ``error``: as an error).
        """
        if self.closed:
            return
        self.closed = True
        self.flush()
        self._hand_marks()
        self.session.loop_state.finish(error)
        self.session.end()

    def end_recording(self, error: str | None = None) -> None:
        """End the recording (complete; with ``error``: as an error); the stream goes on.

        What is buffered is handed on first, so the recording holds every transition added.
        """
        sink = self.session.sink
        if not sink.recording:
            return
        self.flush()
        self._hand_marks()
        self.session.event("recording_stop", **({"error": error} if error else {}))
        sink.close(final_state="error" if error else "stopped", error=error)

    @property
    def recording(self) -> Path | None:
        """The folder the stream records into (None: none)."""
        return self.session.recording_path


#: The settings a stream takes from the settings table (those a session's pipeline reads).
_SESSION_KEYS = frozenset({"calibration_windows", "correction", "detector", "false_alarms",
                           "baseline_windows", "persist", "k", "drift", "ewma_lambda",
                           "phase_baseline"})
#: A window's flag columns (``x_P`` … ``x_IDT`` and the twin's).
FLAG_COLUMNS = tuple(c for c in IDT_COLUMNS if c.startswith("x_"))


#: The wrapper's and the callback's defaults: the settings table's, but for what a policy
#: acting in an environment has of its own (the detector, the baseline), which are the loop
#: source's control defaults (``LoopSource(control=True)``, the gym source's too); the
#: budget is left to the loop (1/10h of its time, else per episodes or windows).
ALARM_DEFAULTS: dict[str, Any] = {
    **{key: SETTINGS[key].default for key in ("k", "ewma_lambda", "drift", "phase_baseline")},
    "detector": CONTROL_DETECTOR, "false_alarms": None,
    "baseline_windows": CONTROL_BASELINE_WINDOWS, "persist": DetectorSpec.m}


class StreamMarks(Marks):
    """A stream's marks of what its loop does itself (the wrapper's ``recorder``)."""

    def __init__(self, stream: Stream) -> None:
        self._stream = stream

    def _queue_mark(self, kind: str, fields: dict[str, Any]) -> None:
        if self._stream.closed:
            raise ValueError(f"{self._stream.recording}: the recording is closed")
        self._stream.mark(kind, **fields)


def check_settings(given: Mapping[str, Any]) -> None:
    """The wrapper's and the callback's settings, checked as every front end checks them.

    ``given`` holds pipeline settings (a ``preset`` given as a :class:`Preset` is the caller's
    to check) and ``block``; an error is the settings table's, naming the field.

    Raises
    ------
    SettingError
        A value the settings table (``idt_desk.settings.SETTINGS``) does not take.
    """
    pipeline = {k: v for k, v in given.items() if k != "block" and
                not (k == "preset" and isinstance(v, Preset))}
    PipelineSettings.parse(pipeline, strict=True)
    check_limit("block", given.get("block"))


def loop_rate(env: Any) -> float | None:
    """Steps per second of the env's own time: 1 / ``dt``, else its ``render_fps``."""
    dt = getattr(getattr(env, "unwrapped", env), "dt", None)
    if isinstance(dt, int | float) and dt > 0:
        return 1.0 / float(dt)
    fps = (getattr(env, "metadata", None) or {}).get("render_fps")
    return float(fps) if isinstance(fps, int | float) and fps > 0 else None


def resolve_twin(twin: Any, env: Any) -> tuple[Twin | None, str]:
    """The wrapper's and the callback's ``twin=``: the twin and, without one, why not.

    True: the env's own, where it is a MuJoCo env whose observation is its state
    (:func:`idt_desk.gym.twin.mujoco_twin`); False: none; a :class:`Twin`: that one.
    """
    if twin is False or twin is None:
        return None, "twin=False: no model of the loop, no class of change"
    if twin is True:
        from idt_desk.gym.twin import mujoco_twin

        got, why = mujoco_twin(env)
        return got, "" if got is not None else f"{why}: no class of change"
    if not isinstance(twin, Twin):
        raise TypeError(f"twin must be True, False or an idt_desk.Twin (predict, hypotheses, "
                        f"kinds, description), got {type(twin).__name__}")
    return twin, ""


# ---------------------------------------------------------------------------------------------
# Recordings: record= of the wrapper and the callback
# ---------------------------------------------------------------------------------------------


def record_path(record: Any) -> Path | None:
    """``record`` as a Path (None: no recording); a path already holding one is refused."""
    if record is None:
        return None
    if not isinstance(record, str | os.PathLike):
        raise TypeError(f"record must be a path (str or os.PathLike) or None, "
                        f"got {type(record).__name__}")
    if not str(record).strip():  # Path("") is the working directory: never meant
        raise ValueError("record: a recording needs a folder's name (got an empty one)")
    path = Path(record)
    if (path / "config.json").exists():
        from idt_desk.recordings import RecordingError

        raise RecordingError(f"record={str(record)!r}: {path} already holds a recording; "
                             f"choose a new path")
    return path


def frame(columns: dict[str, np.ndarray]) -> pd.DataFrame:
    """The columns as a DataFrame (the wrapper's and the callback's ``windows``)."""
    import pandas as pd

    return pd.DataFrame(columns)


# ---------------------------------------------------------------------------------------------
# The Gymnasium wrapper
# ---------------------------------------------------------------------------------------------
