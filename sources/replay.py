"""Replay a recording through the same pipeline, at any speed.

The recorded transitions (written with 17 significant digits, so bit-exact) are streamed in
order; the session rebuilds the pipeline the recording started with, and re-applies the
recorded pipeline changes (re-symbolisation, baseline re-calibration) at the transitions they
were made at. The windows therefore come out identical to the recorded ones. Recorded
perturbation and modulation events are replayed too, at their recorded transitions, so plots
shade the same periods and latency counts from the same onset. Batches are cut at every
recorded event, so each one is handed over before the batch it precedes (``row`` -1).
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from idt_desk.plugin import (
    MAX_SPEED_CHUNKS,
    PIPELINE_KEYS,
    TRANSITIONS,
    Batch,
    InputError,
    Param,
    RecordingError,
    RecordingTail,
    Source,
    SourceLoadError,
    load_recording,
    load_source,
    mujoco_twin,
    row_place,
)

__all__ = ["DRAWN_FROM_RECORDING", "ReplaySource"]

_PIPELINE = ("reconfigure", "calibrate_baseline")
_SHOWN = ("perturbation_on", "perturbation_off", "perturbation_pulse", "modulation_on",
          "modulation_off", "note", "baseline_overlap")
#: Views a replay draws from its recording alone.
DRAWN_FROM_RECORDING = ("pendulum", "dialogue")
#: Finished episodes whose returns a replay's info holds (the latest; as the RL source).
MAX_RETURNS = 500


class ReplaySource(Source):
    """Streams a recording's transitions; the session ends when the recording does."""

    name = "replay"
    label = "Replay a recording"
    description = "Re-run a recorded session through the IDT pipeline at any speed."
    settings = (
        Param("path", "", "Recording",
              help="recording directory, or ssh://[user@]host[:port]/path on a server "
                   "(read over SFTP, always as if followed)"),
        Param("follow", False, "Follow while written",
              help="keep up with a recording that is still being written (idt-desk watch)"),
        Param("silence", 10.0, "Writer silent after", 0.5, 86_400.0, unit="s",
              help="following: stop when neither new data nor the writer's heartbeat (once "
                   "a second while it runs) has come for this long and the writer has not "
                   "ended the recording"),
        Param("wait", 60.0, "Wait for the writer", 0.0, 86_400.0, unit="s",
              help="following: how long to wait for the recording to start"),
    )
    chunk = 50
    replays = True

    def __init__(self, **settings: Any) -> None:
        super().__init__(**settings)
        path = self.config["path"]
        if not path:
            raise ValueError("replay: set 'path' to a recording directory")
        # A server's recording is read as it is followed (by byte offset over SFTP): a run
        # that has ended is read to its end and stops there, as a replay does.
        self.follow = bool(self.config["follow"]) or str(path).startswith("ssh://")
        #: Said once before the replay runs (the command line, the GUI's banner): what the
        #: recording lacks. None for a complete recording.
        self.notice: str | None = None
        self._tail: RecordingTail | None = None
        if self.follow:
            self._tail = tail = RecordingTail(path)
            try:
                early_rows, events = self._first_rows(tail)
            except BaseException:
                tail.close()
                raise
            config = tail.config
            rows = np.concatenate(early_rows)
        else:
            rec = load_recording(path)
            if not rec.complete:
                self._say(f"{rec.path} is incomplete ({'; '.join(rec.warnings)}): the "
                          f"replay runs the {len(rec.transitions):,} transitions it holds")
            config = rec.config
            rows = rec.transitions
            events = rec.events.to_dict("records") if len(rec.events) else []
        #: The recording's transitions file (its rows are named as that file places them).
        self._table = TRANSITIONS.get(config.get("format_version"), TRANSITIONS[1])
        src = config.get("source", {})
        self.state_names = tuple(config.get("state_names", ()))
        self.action_names = tuple(config.get("action_names", ()))
        self.has_reward = bool(src.get("has_reward", False))
        self.rate = float(src.get("rate") or 1000.0)
        self.episode_steps = src.get("episode_steps") or None
        # A Discrete space's values, each its own bin, as the recorded loop declared them.
        self.state_bins, self.action_bins = src.get("state_bins"), src.get("action_bins")
        #: The recorded source's name (its declarations label the replayed switches).
        self.recorded_source: str | None = src.get("name")
        #: The recorded source's settings and what it said of itself (its twin is built
        #: from them).
        self._recorded_settings = dict(src.get("settings") or {})
        self._details = src.get("details") if isinstance(src.get("details"), dict) else {}
        self._scheduled: frozenset[str] | None = None
        #: The recorded source's view; the replay draws it only when the recording holds what
        #: it is drawn from (the pendulum's angles, the dialogue's turns; not the cheetah's
        #: MuJoCo state): otherwise the replay's own view (progress, episodes).
        self.recorded_view = str(src.get("view", ""))
        self.view = self.recorded_view if self.recorded_view in DRAWN_FROM_RECORDING \
            else "replay"
        session = config.get("session", {})
        self.metric_path = str(session.get("metric_path", "windows"))
        if self.follow and self.metric_path == "turns":
            raise ValueError("replay: following a dialogue (turns) recording as it is written "
                             "is not supported yet; replay it once it has ended")
        if self.metric_path == "windows" and self.rate < 100:
            # A step hands over a slice of recorded rows, cheap whatever the recorded loop's
            # rate; but the session takes MAX_SPEED_CHUNKS chunks a step at maximum speed
            # only from a source of 100 transitions/s or more, and a loop recorded without a
            # rate has rate 1: 50 rows a step (43 k transitions/s headless; in the window
            # behind a 100 k/s writer, 29 k and 16 frames/s). As large steps as a fast
            # source's, then.
            self.chunk = type(self).chunk * MAX_SPEED_CHUNKS
        self._tokenizer = session.get("tokenizer")
        self._turns: list[dict[str, Any]] = []
        self._history: list[dict[str, Any]] = []
        if not self.follow:
            _metric = ("i", "P", "dH", "H_b", "alarm")
            turns = [] if rec.turns is None else [
                {k: v for k, v in turn.items() if k not in _metric} for turn in rec.turns]
            self._history = [t for t in turns if t.get("history")]
            self._turns = [t for t in turns if not t.get("history")]
            if self.metric_path == "turns" and len(self._turns) != len(rec.transitions):
                raise ValueError(f"replay: {rec.path} holds {len(rec.transitions)} transitions "
                                 f"but {len(self._turns)} turns")
        ds, da = len(self.state_names), len(self.action_names)
        self._cols = ([f"s_{j}" for j in range(ds)], [f"s_next_{j}" for j in range(ds)],
                      [f"a_{j}" for j in range(da)])
        self._s = np.empty((0, ds))
        self._n = np.empty((0, ds))
        self._a = np.empty((0, da)) if da else None
        self._t = np.empty(0)
        self._r = np.empty(0) if self.has_reward else None
        self._ep: np.ndarray | None = np.empty(0, dtype=np.int64)
        self._has_episodes = False
        # phase_baseline's check across reads: the last episode taken and its steps so far
        # (a follower hands rows over and drops them; the episode in progress stays known).
        self._last_episode: float | None = None
        self._run = 0
        #: Transition index of the arrays' first row: following drops the rows it has
        #: handed over, so memory holds only what is yet to be stepped.
        self._base = 0
        self._pos = 0  # the next transition to hand over
        # The live view of the replayed system is drawn from the recorded state and settings.
        self._view_info = {k: float(v) for k, v in (src.get("settings") or {}).items()
                           if isinstance(v, int | float) and not isinstance(v, bool)}
        self._start = int(config.get("start_index", 0))
        self._events: list[tuple[int, dict[str, Any]]] = []
        self._pipeline0: dict[str, Any] | None = None
        # Ranges the recorded source declared at each calibration, so symbols come out the same.
        self._ranges: list[tuple[int, dict[str, tuple[float, float]]]] = []
        if not self.follow and len(rows):
            self._start = int(config.get("start_index", rows["i"].iloc[0]))
        self._take_events(events)
        self._take_rows(rows)
        self._next_event = 0
        self._ended = False
        #: The server's connection problem while following over SSH (None: connected).
        self._lost: str | None = None
        self._new_replay()
        if self._pipeline0 is None and not self.follow:
            self._pipeline0 = _pipeline_of_config(config)
            self._say(f"{path} has no recording_start event: the pipeline is rebuilt from "
                      "config.json (the settings in force when it was last written)")

    def _new_replay(self) -> None:
        """No episode seen yet (a replay's start)."""
        #: The episode being replayed, its steps and return so far; finished episodes'
        #: [episode, return] pairs (the latest ``MAX_RETURNS``).
        self._episode: int | None = None
        self._episode_step = 0
        self._episode_return = 0.0
        self._returns: list[list[float]] = []

    def _episodes(self, sl: slice, done: bool,
                  events: list[dict[str, Any]] | None = None) -> dict[str, Any]:
        """Episode counters after the rows of ``sl`` (the RL source's info keys).

        From the recorded episode index and reward columns, so a loop recorded without
        ``episode_end`` events (``idt_desk.Recorder``) has its returns too. An episode ends
        when the index changes; the last one at the replay's end when it ran its recorded
        length (``episode_steps``). Each end is handed over as an ``episode_end`` event at its
        last row (into ``events``), as the RL source does: what an alarm's cost is read from.
        """
        if self._r is None or not self._has_episodes:
            return {}
        ep, r = self._ep[sl], np.nan_to_num(self._r[sl])
        if len(ep):
            starts = np.concatenate([[0], np.flatnonzero(np.diff(ep)) + 1])
            sums = np.add.reduceat(r, starts)
            lengths = np.diff(np.append(starts, len(ep)))
            for k, at in enumerate(starts):
                e = int(ep[at])
                if e != self._episode:
                    self._finish_episode(events, int(at) - 1)
                    self._episode, self._episode_step, self._episode_return = e, 0, 0.0
                self._episode_step += int(lengths[k])
                self._episode_return += float(sums[k])
        if done and self.episode_steps and self._episode_step >= int(self.episode_steps):
            self._finish_episode(events, len(ep) - 1)
            self._episode_step, self._episode_return = 0, 0.0
        if self._episode is None or self._episode < 0:
            return {"episode_returns": [list(x) for x in self._returns]}
        return {"episode": self._episode, "episode_step": self._episode_step,
                "episode_return": self._episode_return,
                "episode_returns": [list(x) for x in self._returns]}

    def _finish_episode(self, events: list[dict[str, Any]] | None = None, row: int = -1
                        ) -> None:
        if self._episode is not None and self._episode >= 0 and self._episode_step:
            self._returns.append([self._episode, self._episode_return])
            del self._returns[:-MAX_RETURNS]
            if events is not None:
                events.append({"kind": "episode_end", "row": row, "episode": self._episode,
                               "return": self._episode_return,
                               "length": self._episode_step, "replayed": True})

    def _say(self, text: str) -> None:
        """Add to what is said once before the replay runs (:attr:`notice`)."""
        self.notice = text if not self.notice else f"{self.notice}; {text}"

    def _take_rows(self, rows: Any) -> None:
        """Append recorded transitions (a DataFrame, or an array in the tail's columns)."""
        if len(rows) == 0:
            return
        if self._tail is not None and self._pos > self._base:
            # Following: keep only the rows not yet handed over (bounded memory; each poll
            # copies what is pending, not the whole run).
            k = self._pos - self._base
            self._s, self._n, self._t, self._ep = (self._s[k:], self._n[k:], self._t[k:],
                                                   self._ep[k:])
            if self._a is not None:
                self._a = self._a[k:]
            if self._r is not None:
                self._r = self._r[k:]
            self._base = self._pos
        if isinstance(rows, np.ndarray):
            idx = {c: j for j, c in enumerate(self._tail.columns)}  # type: ignore[union-attr]

            def cols(names: list[str]) -> np.ndarray:
                return rows[:, [idx[c] for c in names]]

            def col(name: str) -> np.ndarray:
                return rows[:, idx[name]]
        else:
            def cols(names: list[str]) -> np.ndarray:
                return rows[names].to_numpy(np.float64)

            def col(name: str) -> np.ndarray:
                return rows[name].to_numpy(np.float64)
        s_cols, n_cols, a_cols = self._cols
        self._s = np.concatenate([self._s, cols(s_cols)])
        self._n = np.concatenate([self._n, cols(n_cols)])
        if self._a is not None:
            self._a = np.concatenate([self._a, cols(a_cols)])
        self._t = np.concatenate([self._t, col("t")])
        if self._r is not None:
            self._r = np.concatenate([self._r, col("reward")])
        # A recording without its episode column (a plain file) has no episodes.
        ep = col("episode") if self._column("episode", rows) else np.full(len(rows), np.nan)
        self._check_phases(ep)
        if not np.isnan(ep).all():
            self._has_episodes = True
        self._ep = np.concatenate([self._ep, np.nan_to_num(ep, nan=-1).astype(np.int64)])

    def _column(self, name: str, rows: Any) -> bool:
        columns = self._tail.columns if isinstance(rows, np.ndarray) else rows.columns  # type: ignore[union-attr]
        return name in columns

    def _row(self, k: int) -> str:
        """Where the recording's transition ``k`` (0-based) is: its file and line or row."""
        return f"{self._table} {row_place(self._table, k)}"

    def _check_phases(self, ep: np.ndarray) -> None:
        """A recording judged by phase (``phase_baseline``) needs its episodes to replay so.

        Every transition's episode, a whole number from 0 that never goes back, each episode
        no longer than the recorded ``episode_steps``; else one line naming the line.
        """
        if not (self._pipeline0 or {}).get("phase_baseline") or not len(ep):
            return
        first = self._base + len(self._ep)  # transition index of ep[0]
        why = "the recording judged each window against its episode's phase (phase_baseline)"
        if (bad := np.flatnonzero(np.isnan(ep) | (ep < 0) | (ep != np.round(ep)))).size:
            j = int(bad[0])
            value = "blank" if np.isnan(ep[j]) else f"{ep[j]:g}"
            raise InputError(f"replay: {self._row(first + j)}: episode {value}; "
                             f"{why}, so every transition needs its episode, a whole number "
                             "from 0")
        last = [] if self._last_episode is None else [self._last_episode]
        seq = np.concatenate([np.asarray(last, np.float64), ep])
        if (back := np.flatnonzero(np.diff(seq) < 0)).size:
            j = int(back[0]) + 1 - (len(seq) - len(ep))
            raise InputError(f"replay: {self._row(first + j)}: episode goes back "
                             f"to {ep[j]:g}; {why}, so episodes only count up")
        if self.episode_steps:  # each episode's length, the last one's carried over
            offset = len(seq) - len(ep)  # 1: seq[0] is the last row already taken
            starts = np.concatenate([[0], np.flatnonzero(np.diff(seq) != 0) + 1])
            lengths = np.diff(np.concatenate([starts, [len(seq)]]))
            if offset:
                lengths[0] += self._run - 1
            steps = int(self.episode_steps)
            if (long := np.flatnonzero(lengths > steps)).size:
                r = int(long[0])
                j = steps - self._run if r == 0 and offset else int(starts[r]) - offset + steps
                raise InputError(f"replay: {self._row(first + j)}: episode "
                                 f"{ep[j]:g} runs past its {steps:,} steps; {why}, which has "
                                 "no phase beyond them")
            self._run = int(lengths[-1])
        self._last_episode = float(ep[-1])

    def _take_events(self, events: list[dict[str, Any]]) -> None:
        """File recorded events at the transitions they were logged at."""
        for ev in events:
            ev = {k: v for k, v in ev.items() if not _missing(v)}
            kind, i = ev.get("kind"), int(ev.get("i", self._start)) - self._start
            if kind == "recording_start":
                self._pipeline0 = ev.get("pipeline")
            elif kind == "calibrated":
                ranges = ev.get("value_ranges") or {}
                self._ranges.append((i, {k: (float(v[0]), float(v[1]))
                                         for k, v in ranges.items()}))
            elif kind in _PIPELINE and not (i == 0 and ev.get("reason") == "recording"):
                self._events.append((i, ev))
            elif kind in _SHOWN:
                if kind == "perturbation_on" and ev.get("name") in self._schedules():
                    ev["scheduled"] = True  # a recording made before the event said so
                self._events.append((i, {**ev, "replayed": True}))
        # Stable: events of one transition keep the order they were logged in.
        self._events.sort(key=lambda e: e[0])

    def _recorded_class(self) -> type[Source] | None:
        """The recorded source's class (None: unnamed, or not installed here)."""
        try:
            return load_source(self.recorded_source) if self.recorded_source else None
        except SourceLoadError:
            return None

    @property
    def env_id(self) -> str | None:
        """The recorded loop's env id, where it had one (a baseline profile is checked by it)."""
        got = self._details.get("env_id") or self._recorded_settings.get("env_id")
        return str(got) if got else None

    def twin(self) -> Any:
        """The recorded loop's twin, built from its recorded settings (None: it has none)."""
        if not hasattr(self, "_twin"):
            cls = self._recorded_class()
            self._twin = None
            env_id = (self._details.get("twin") or {}).get("env_id")
            if env_id:  # a loop recorded with a MuJoCo env's copy (idt_desk.Recorder)
                self._twin, why = mujoco_twin(str(env_id))
                if why:
                    self.twin_note = f"{why}: no class of change"
            elif cls is None:
                self.twin_note = (f"the recorded source {self.recorded_source!r} is not "
                                  "installed here: no twin, no class of change")
            else:
                try:
                    self._twin = cls.twin_for(self._recorded_settings)
                except ValueError as exc:
                    self.twin_note = f"{exc}: no class of change"
                else:
                    if self._twin is None:
                        self.twin_note = cls.twin_note
        return self._twin

    def _schedules(self) -> frozenset[str]:
        """The recorded source's schedules (:attr:`Perturbation.scheduled`), loaded once."""
        if self._scheduled is None:
            # An unknown source: its switches are taken as they were logged.
            cls = self._recorded_class()
            self._scheduled = frozenset(p.name for p in getattr(cls, "perturbations", ())
                                        if p.scheduled)
        return self._scheduled

    def recorded_pipeline(self) -> dict[str, Any] | None:
        """The pipeline configuration the recording started with (and its tokenizer).

        A recording made before the calibrated detectors has no ``detector``: it alarmed by
        the paper's rule over a 30-window baseline, and replays so.
        """
        p = self._pipeline0
        if p is not None and "detector" not in p:
            p = {**p, "detector": "paper", "baseline_windows": p.get("baseline_windows") or 30}
        if self._tokenizer:
            return {**(p or {}), "tokenizer": self._tokenizer}
        return p

    def value_ranges(self) -> dict[str, tuple[float, float]]:
        """The ranges the recorded source declared at the calibration now being replayed."""
        done = [r for i, r in self._ranges if i <= self._pos]
        return done[-1] if done else {}

    def reset(self, seed: int | None = None) -> None:
        """Rewind to the first recorded transition.

        Following, only before the first step: the rows handed over are dropped.
        """
        self._pos = 0
        self._next_event = 0
        self._new_replay()

    @property
    def _n_rows(self) -> int:
        """Transitions read so far (handed over or pending)."""
        return self._base + len(self._s)

    def _follow_info(self, done: bool) -> dict[str, Any]:
        """What the window's status line says while following (nothing for a replay)."""
        tail = self._tail
        if tail is None:
            return {}
        if not done and tail.connection_problem is not None:
            writer = "not known: the connection to the server is lost; reconnecting"
        elif not done:
            idle, silent = tail.idle_for(), tail.silent_for()
            writer = "writing" if idle < 2.0 else \
                f"idle for {idle:.0f} s, still running" if silent < 2.0 else \
                f"no new data for {silent:.0f} s"
        else:
            try:
                writer = "ended the run" if tail.finished else "stopped responding"
            except RecordingError:
                writer = "its config.json was replaced by garbage"
        return {"following": str(tail.path), "writer": writer}

    #: Following: how long a step waits for new data before it hands over an empty batch.
    FOLLOW_POLL = 0.05
    #: Following over ssh://: seconds a lost server is waited for before the follow ends
    #: (after the keepalive found it gone: about 6 s; a reconnection tries for 5 s).
    LOST_GRACE = 4.0

    def _follow(self, need: int) -> list[dict[str, Any]]:
        """Read what the writer added until ``need`` transitions are at hand.

        Stops early when the recording ends or the writer has gone silent; returns the
        events to log now (a silent writer's note).
        """
        tail = self._tail
        assert tail is not None
        deadline = time.monotonic() + self.FOLLOW_POLL
        while True:
            try:
                rows, events = tail.poll()
            except RecordingError as exc:
                self._ended = True
                return [{"kind": "note", "text": f"following stopped: {exc}"}]
            self._take_events(events)
            self._take_rows(rows)
            if self._lost is not None and tail.connection_problem is None:
                self._lost = None
                tail.last_beat = time.monotonic()  # the outage is not the writer's silence
                return [{"kind": "note", "text": "the connection to the server is back; "
                         f"following on from transition {self._n_rows:,}"}]
            if self._n_rows >= need:
                return []
            try:
                finished = tail.finished
            except RecordingError as exc:
                self._ended = True
                return [{"kind": "note", "text": f"following stopped: {exc}"}]
            if finished:
                self._ended = True  # the writer closed it and every row has been read
                return []
            if tail.connection_problem is not None:
                # The server, not the writer, went away: a blip (a dropped connection, the
                # server back at once) is waited out, trying again twice a second; a server
                # still gone after LOST_GRACE s (stopped, killed) ends the follow, its rows
                # kept, within the keepalive's time and a reconnection's.
                said = self._lost
                self._lost = tail.connection_problem
                lost_since = tail.lost_since or time.monotonic()
                if time.monotonic() - lost_since > self.LOST_GRACE:
                    self._ended = True
                    return [{"kind": "note", "text": (
                        f"following stopped: {tail.connection_problem}; still gone after "
                        f"{self.LOST_GRACE:g} s: the {self._n_rows:,} transitions read are "
                        "kept")}]
                time.sleep(0.5)
                return [] if said else [{"kind": "note", "text": (
                    f"{tail.connection_problem}: the follow waits {self.LOST_GRACE:g} s for "
                    "the server and goes on if it is back")}]
            if tail.silent_for() > float(self.config["silence"]):
                self._ended = True
                return [{"kind": "note", "text": (
                    "the writer stopped responding: no new data and no heartbeat for "
                    f"{self.config['silence']:g} s and no session_end; following stopped "
                    f"after {self._n_rows:,} transitions")}]
            if time.monotonic() > deadline or self.should_stop():
                return []
            time.sleep(0.005)

    def _first_rows(self, tail: RecordingTail) -> tuple[list[np.ndarray], list[dict[str, Any]]]:
        """Wait for the writer to start (``wait``); what it wrote so far."""
        deadline = time.monotonic() + float(self.config["wait"])
        early_rows: list[np.ndarray] = []
        events: list[dict[str, Any]] = []
        # The writer logs recording_start (the pipeline to rebuild) when it opens.
        while True:
            if tail.ready():
                got, new = tail.poll()
                early_rows.append(got)
                events.extend(new)
                if any(e.get("kind") == "recording_start" for e in events):
                    return early_rows, events
            if time.monotonic() > deadline:
                raise ValueError(f"replay: no recording started in {tail.path} within "
                                 f"{self.config['wait']:g} s")
            time.sleep(0.05)

    def close(self) -> None:
        """Let the followed recording go (a server's connection is closed)."""
        if self._tail is not None:
            self._tail.close()

    def interrupt(self) -> None:
        """See :meth:`Source.interrupt`: a read waiting on a server ends now."""
        if self._tail is not None:
            self._tail.interrupt()

    def step(self, n: int) -> Batch:
        """The next ``n`` recorded transitions, cut so every event lands on a batch start.

        Following, a step waits briefly for the writer and may hand over fewer (or none).
        """
        lo = self._pos
        notes: list[dict[str, Any]] = []
        if self._tail is not None and not self._ended and lo + n > self._n_rows:
            notes = self._follow(lo + n)
        total, base = self._n_rows, self._base
        hi = min(lo + n, total)
        events = []
        while self._next_event < len(self._events) and self._events[self._next_event][0] <= lo:
            events.append({**self._events[self._next_event][1], "row": -1})
            self._next_event += 1
        if self._next_event < len(self._events):
            hi = min(hi, max(self._events[self._next_event][0], lo + 1))
        hi = max(lo, min(hi, total))
        self._pos = hi
        sl = slice(lo - base, hi - base)
        done = hi >= total and (self._tail is None or self._ended)
        events += [{**e, "row": -1} for e in notes]
        return Batch(
            s=self._s[sl], s_next=self._n[sl],
            a=None if self._a is None else self._a[sl],
            reward=None if self._r is None else self._r[sl],
            episode=self._ep[sl] if self._has_episodes else None,
            t=self._t[sl], events=events, done=done,
            turns=None if self.metric_path != "turns" else
            [*(self._history if lo == 0 else ()), *self._turns[sl]],
            info={**self._view_info, "replay_progress": hi / max(total, 1),
                  "replay_position": hi, "replay_rows": total,
                  **self._follow_info(done), **self._episodes(sl, done, events),
                  **({"y": self._n[hi - 1 - base].copy(), "time": float(self._t[hi - 1 - base])}
                     if hi > lo else {})},
        )


def _pipeline_of_config(config: dict[str, Any]) -> dict[str, Any]:
    """A recording's pipeline from config.json: its session's settings and preset by value."""
    session = config.get("session") or {}
    p = {k: session[k] for k in PIPELINE_KEYS if k in session}
    if isinstance(config.get("preset"), dict):
        p.update(preset=None, preset_spec=config["preset"])
    return p


def _missing(v: Any) -> bool:
    return v is None or (isinstance(v, float) and np.isnan(v))
