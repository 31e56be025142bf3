"""The session runner: one source in a worker thread, the IDT pipeline, ring buffers.

::

    source (worker thread) --batches--> modulation state -> sink -> symboliser -> engine
        ^ Commands (queue, schedule)                                 -> monitor/Alarms/Auto
    consumers (GUI timer, CLI progress) <-- snapshot() copies of lock-protected ring buffers

One file: the session is one object whose state its loop and its consumers share under one
lock; each collaborator with state of its own is already a module (``config``, ``worker``,
``commands``, ``alarms``, ``ranges``, ``sink``, ``turns``, ``process``).

No Qt here: the GUI and ``idt-desk run`` drive the same class; its helpers reach its state
through ``idt_desk.live.seams``. Commands act at the next chunk boundary; a source exception
stops the session with its message in ``error`` and an ``error`` event.

Event timing. Every event carries ``i``, the transition index at which it takes effect,
and ``t``, the loop time of that moment (transition ``i - 1``'s S'); neither depends on the
chunking, so a scripted experiment (:meth:`Session.schedule`) gives the same windows and
events at any speed, headless or in the GUI, and in its replay:

- scheduled commands cut the chunk at their transition;
- alarms, symbol-range warnings and the baseline are stamped at the end of the window that
  caused them; calibration at the transition that completed it;
- while automatic modulation is on, chunks end at window ends, so a switch it makes takes
  effect at the transition right after the window that triggered it.

Thresholds are fitted by the window that completes the baseline, in milliseconds
(``idt_desk.detection.nulls``): every window is judged as it arrives, as in a replay.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from idt_desk.detection.agency import agency_conditions
from idt_desk.detection.attribution import twin_attribution
from idt_desk.live.alarms import Alarms, auto_controller
from idt_desk.live.commands import Commands, source_events
from idt_desk.live.config import (
    MAX_SPEED_CHUNKS,
    WINDOW_COLUMNS,
    EventJournal,
    SessionConfig,
    WindowRing,
    undefined_reason,
)
from idt_desk.live.ranges import RangeWatch
from idt_desk.live.sink import Sink, export_session, preset_record
from idt_desk.live.snapshot import Snapshot, detector_info
from idt_desk.live.source import Batch, Source
from idt_desk.live.turns import TurnPath
from idt_desk.live.worker import LoopState, Pacer, run_headless, run_loop
from idt_desk.pipeline import Pipeline, Step, source_monitor, source_preset
from idt_desk.recordings import RecordingError
from idt_desk.recordings.profile import FIXED, FitCheck, Profile
from idt_desk.settings import PIPELINE_KEYS, PipelineSettings, check_finite, check_limit

__all__ = ["MAX_SPEED_CHUNKS", "WINDOW_COLUMNS", "Session", "SessionConfig", "Snapshot",
           "run_headless", "undefined_reason"]

class Session:
    """Run one source through the IDT pipeline in a worker thread.

    Symbols that stop covering the data raise ``symbols_out_of_range``, re-checked with
    wider bins (``idt_desk.live.ranges``); :meth:`reconfigure` () re-calibrates them.

    Parameters
    ----------
    config
        The session configuration.
    source
        An already-built source (otherwise built from ``config.source``/``settings``).
    record
        Directory to record into from the start (``start_recording`` can start later).
    """

    #: Mean out-of-range fraction above which the symbols are said not to cover the data.
    OUT_OF_RANGE_WARN = 0.05
    #: Windows that mean is taken over.
    OUT_OF_RANGE_PERSIST = 20

    def __init__(
        self,
        config: SessionConfig | None = None,
        source: Source | None = None,
        record: str | Path | None = None,
    ) -> None:
        self.config = config or SessionConfig()
        if source is None:
            from idt_desk.live.plugins import load_source

            source = load_source(self.config.source)(**self.config.settings)
        self.source = source
        self.config.source = source.name
        self.config.settings = dict(source.config)
        overrides = source.recorded_pipeline()
        if overrides and self.config.profile is not None:
            # A recording judged against a profile given now: its rows through the profile's
            # symbols and thresholds, not those it was recorded with.
            overrides = {k: v for k, v in overrides.items()
                         if k not in (*FIXED, *SessionConfig.SYMBOL_FIELDS, "profile")}
        if overrides:
            # A replay re-runs the pipeline exactly as it was recorded: its settings checked
            # as any other (a recording is data, not code).
            PipelineSettings.parse({k: v for k, v in overrides.items() if k != "tokenizer"},
                                   strict=True)
            if not isinstance(overrides.get("tokenizer", ""), str):
                raise ValueError(f"tokenizer {overrides['tokenizer']!r}: must be a name")
            for key, value in overrides.items():
                setattr(self.config, key, value)
        if source.metric_path not in ("windows", "turns"):
            raise ValueError(f"source {source.name}: metric_path must be 'windows' or 'turns', "
                             f"not {source.metric_path!r}")
        turn_path = source.metric_path == "turns"
        #: The baseline profile in force (``idt_desk.recordings.profile``; None: the session
        #: fits its own symbols and baseline). Its settings fill those left unset, first.
        self.profile: Profile | None = None
        if self.config.profile is not None:
            self.profile = Profile.of(self.config.profile)
            self.profile.check_loop(source)  # the loop first: its difference said first
            self.profile.settle(self.config)
        #: The profile check's verdict on the first windows (None: none yet, or no profile).
        self.profile_check: dict[str, Any] | None = None
        self.config.resolve_defaults(source)  # so a recording states what was in force
        #: The turn path (a dialogue: token metrics, transcript, length confound), or None.
        self.turns = TurnPath(self.config, source, self._emit, self._show) if turn_path else None
        if not turn_path:
            self.config.baselines = False
        check_limit("history", self.config.history)  # before the window ring is allocated
        settings = PipelineSettings.parse(self.pipeline_settings())
        self._lock = threading.Lock()
        #: Where the loop is (running, paused, stopped) and its stop/resume flags.
        self.loop_state = LoopState()
        #: Loop time against the wall clock, and the loop's rate.
        self.pacer = Pacer()
        #: The commands waiting for the loop: the queue, the schedule, pending impulses.
        self.commands = Commands()
        #: The recording (``record``: from the start; ``start_recording`` can start later).
        self.sink = Sink(record)
        self._thread: threading.Thread | None = None
        self._closed = False
        self._ring = WindowRing(self.config.history, WINDOW_COLUMNS)
        #: Every event of the session, the latest ones and the switches.
        self.journal = EventJournal()
        self._info: dict[str, Any] = {}
        #: Alarm lights, the latest onset and its verdict, Auto.
        self.alarms = Alarms(turn_path, source, self._later)
        self.n_transitions = 0
        #: Stop by itself after this many transitions (None: run until stopped).
        self.limit: int | None = None
        self._sim_time = 0.0
        self._n_undefined = 0
        self._agency: dict[str, Any] | None = None
        self._window_events: list[tuple[int, str, dict[str, Any]]] = []
        self._listeners: list[Callable[[], None]] = []
        self._window_listeners: list[Callable[[dict[str, np.ndarray]], None]] = []
        self._known_ranges: dict[str, Any] = {}
        self._detector: dict[str, Any] | None = None
        #: A failed write (a full disk) ends the session (True), or the caller holds its
        #: rows back until there is room again (``idt_desk.Recorder``).
        self.stop_on_write_error = True
        self.rebuild_pipeline(settings)
        source.should_stop = lambda: self.loop_state.stop_requested
        source.publish = lambda info: self._show(None, info)

    # -- public API (any thread) ------------------------------------------------------------

    @property
    def state(self) -> str:
        """idle, running, paused, stopped or error."""
        return self.loop_state.state

    @property
    def error(self) -> str | None:
        """The message that stopped the session, if one did."""
        return self.loop_state.error

    @property
    def running(self) -> bool:
        """True while the worker thread is alive."""
        return self._thread is not None and self._thread.is_alive()

    def add_listener(self, fn: Callable[[], None]) -> None:
        """Call ``fn()`` (from the worker thread, data-less) when new windows arrive."""
        self._listeners.append(fn)

    def add_window_listener(self, fn: Callable[[dict[str, np.ndarray]], None]) -> None:
        """Call ``fn(windows)`` (the loop's thread) with every new block of windows, judged.

        All the pipeline's columns (the engine's, the twin's, the flags, the window's mean
        and end columns), ``start`` and ``end`` counted from the session's first transition,
        after the events of those windows were logged: what a wrapper around a loop hands
        on (``idt_desk.gym``), computed once.
        """
        self._window_listeners.append(fn)

    def add_event_listener(self, fn: Callable[[dict[str, Any]], None]) -> None:
        """Call ``fn(event)`` with every event as logged (a snapshot's are bounded)."""
        self.journal.add_listener(fn)

    def start(self) -> None:
        """Start the worker thread."""
        if self._thread is not None:
            raise RuntimeError("a session runs once; build a new Session to run again")
        self._thread = threading.Thread(target=self._run, name=f"idt-{self.source.name}",
                                        daemon=True)
        self.loop_state.start()
        self._thread.start()

    def request_stop(self) -> None:
        """Ask the worker to stop, and return at once (:attr:`running` says when it has).

        A step waiting on the outside (a followed run's server) is interrupted.
        """
        self.loop_state.request_stop()
        self.source.interrupt()

    @property
    def stopping(self) -> bool:
        """The loop is over (asked to stop, or at a replay's end) but the worker still runs."""
        return self.running and (self.loop_state.stop_requested
                                 or self.loop_state.state in ("stopped", "error"))

    def stop(self, timeout: float = 10.0) -> None:
        """Ask the worker to stop and wait up to ``timeout`` s for it.

        The worker flushes and closes the recording before it ends.
        """
        self.request_stop()
        if self._thread is not None:
            self._thread.join(timeout)
            if self._thread.is_alive():
                raise RuntimeError(f"session worker did not stop within {timeout} s")
        elif self.sink.recorder is not None:
            self.end()

    def close(self) -> None:
        """Let the session go: a running one is stopped, a never-started one's source closed."""
        if self._thread is None and not self._closed:
            self._closed = True
            self.source.close()
        elif self.running:
            self.stop()

    def wait(self, timeout: float | None = None) -> bool:
        """Wait for the worker to end by itself (a replay's end); True if it has."""
        if self._thread is None:
            return True
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def pause(self) -> None:
        """Hold the loop (the source is not stepped) until :meth:`resume`."""
        self._command("pause")

    def resume(self) -> None:
        """Continue after :meth:`pause`."""
        self._command("resume")

    def set_speed(self, speed: float | None) -> None:
        """Multiple of real time, or None for as fast as possible."""
        if speed is not None and not (speed > 0):
            raise ValueError(f"speed must be > 0 or None (max), got {speed}")
        self._command("speed", speed=speed)

    def perturb(self, name: str, params: Mapping[str, Any] | None = None, on: bool = True) -> None:
        """Switch a declared perturbation on (with parameters) or off."""
        spec = self.source.perturbation(name)
        resolved = spec.resolve(params) if on else None
        self._command("perturb", name=name, params=resolved)

    def modulate(self, name: str, params: Mapping[str, Any] | None = None, on: bool = True) -> None:
        """Engage a declared modulation (with parameters) or release it."""
        spec = self.source.modulation(name)
        resolved = spec.resolve(params) if on else None
        self._command("modulate", name=name, params=resolved)

    def set_auto(self, auto: Mapping[str, Any] | None) -> None:
        """Configure automatic modulation ({"modulation", "params", "persist", "release"})."""
        if auto is not None:
            self.source.modulation(auto["modulation"])
        self._command("auto", auto=dict(auto) if auto is not None else None)

    def save_baseline(self, path: str | Path) -> Profile:
        """Save what this session fitted (symbols, twin, baseline) as a profile at ``path``.

        Every later session given it (``--baseline``, ``baseline=``, the window's *Load
        baseline…*) is armed at its first window. Refused in one line
        (:class:`~idt_desk.recordings.profile.ProfileError`) before the baseline is complete.
        """
        from idt_desk.recordings.profile import save_baseline

        run = self.recording_path
        return save_baseline(self, path, [{
            "run": str(run) if run is not None else f"a {self.source.name} session, not "
            "recorded", "transitions": self.n_transitions}])

    def calibrate_baseline(self, n_windows: int | None = None) -> None:
        """Gather a new baseline from the next ``n_windows`` windows."""
        self._command("calibrate_baseline", n=n_windows)

    def reconfigure(self, **changes: Any) -> None:
        """Change symbolisation (preset, bins, window, stride, calibration_windows, correction).

        The symboliser is re-calibrated from the data that follows, and the engine and
        baseline start afresh.
        """
        if bad := set(changes) - set(PIPELINE_KEYS):
            raise ValueError(f"cannot reconfigure {sorted(bad)}; allowed: {sorted(PIPELINE_KEYS)}")
        source_preset(self.source, {**self.pipeline_settings(), **changes})  # validate now
        self._command("reconfigure", **changes)

    def schedule(self, at: int, kind: str, **args: Any) -> None:
        """Apply a command exactly when ``at`` transitions have been processed.

        ``kind`` is a command name: ``perturb`` (name, params or None), ``modulate``,
        ``calibrate_baseline``, ``reconfigure``, ``note``. For reproducible batch runs.
        """
        if self._thread is not None:
            raise RuntimeError("schedule commands before start(); send them live otherwise")
        if kind == "perturb" and args.get("params") is not None:
            args["params"] = self.source.perturbation(args["name"]).resolve(args["params"])
        self.commands.schedule(at, kind, args)

    def note(self, text: str) -> None:
        """Add a note event (recorded)."""
        self._command("note", text=str(text))

    def start_recording(self, path: str | Path) -> None:
        """Record from the next chunk on into ``path`` (a new directory)."""
        self._command("record", path=str(path))

    def stop_recording(self) -> None:
        """Close the recording; the session goes on."""
        self._command("record", path=None)

    def snapshot(self, limit: int = 2000, since: int | None = None) -> Snapshot:
        """Copies of the latest ``limit`` windows and of the session's state.

        ``since``: only the windows after the first ``since`` (a consumer that keeps what it
        has had: :class:`~idt_desk.live.process.SessionProcess`).
        """
        events, switches = self.journal.recent()
        with self._lock:
            if since is not None:
                limit = min(limit, self._ring.total - since)
            windows = self._ring.tail(max(0, limit))
            pipe, alarms, src = self.pipeline, self.alarms, self.source
            self._detector = detector_info(self.monitor, self._detector)
            return Snapshot(
                state=self.loop_state.state, error=self.loop_state.error,
                source=src.name, n_transitions=self.n_transitions,
                n_windows=self._ring.total, sim_time=self._sim_time,
                speed=self.config.speed, preset=self._preset_dict,
                calibration=(pipe.n_buffered if not pipe.calibrated
                             else pipe.calibration_transitions, pipe.calibration_transitions),
                baseline=self.monitor.baseline,
                baseline_progress=self.monitor.baseline_progress,
                windows=windows, info=dict(self._info),
                events=events, switches=switches,
                active_perturbations={k: dict(v) for k, v in src.active_perturbations.items()},
                active_modulations={k: dict(v) for k, v in src.active_modulations.items()},
                auto=alarms.auto_state(),
                alarm=dict(alarms.alarm),
                onset=None if alarms.onset is None else dict(alarms.onset),
                attribution=alarms.attribution, severity=alarms.severity,
                latest_alarm=alarms.latest_alarm,
                recording=str(self.sink.path) if self.sink.recording else None,
                throughput=self.pacer.throughput, loop_rate=self.pacer.loop_rate,
                out_of_range_warning=None if self._range.warning is None
                else dict(self._range.warning),
                n_undefined=self._n_undefined,
                agency=self._agency,
                paused_reason=self.loop_state.paused_reason,
                tokenizer=self.config.tokenizer if self.turns is not None else None,
                detector=self._detector,
                n_alarms=alarms.n_alarms, rate=float(src.rate),
            )

    @property
    def recording_path(self) -> Path | None:
        """The latest recording this session wrote (open or closed), or None."""
        return self.sink.path

    @property
    def on_disk(self) -> bool:
        """Everything it showed is on disk: it replays a recording, or was recorded whole."""
        return self.source.replays or (self.sink.path is not None and not self.sink.gap)

    # -- pipeline ---------------------------------------------------------------------------

    def pipeline_settings(self) -> dict[str, Any]:
        """The pipeline's settings in force (``settings.PIPELINE_KEYS``)."""
        # A profile is stated only where one is in force: a recording without one reads as
        # every recording before profiles did.
        return {key: getattr(self.config, key) for key in PIPELINE_KEYS
                if key != "profile" or self.config.profile is not None}

    def rebuild_pipeline(self, settings: PipelineSettings | None = None) -> None:
        """(Re)build symbols, engine and monitor from the configuration (or its ``settings``)."""
        c = self.config
        settings = settings or PipelineSettings.parse(self.pipeline_settings())
        self.preset = source_preset(self.source, settings)
        self._preset_dict = self.preset.to_dict()  # snapshots are taken 30 times a second
        self._detector = None
        # The loop's nominal model, where the source declares one (the windows path only).
        twin = None if self.turns is not None or not settings.twin else self.source.twin()
        # Seconds of loop time convert through the source's rate, never the wall clock.
        self.monitor = source_monitor(self.source, settings, self.preset,
                                      twin=twin is not None)
        #: Transition index of the pipeline's sample 0 (it restarts with every rebuild).
        self.offset = self.n_transitions
        self._tail = np.empty((0, 1))
        self._range = RangeWatch(self.OUT_OF_RANGE_WARN, self.OUT_OF_RANGE_PERSIST,
                                 self._later, self)
        self.alarms.auto = auto_controller(c.auto)
        if self.turns is not None:
            # Token counts need no symbols: nothing to calibrate, one row per turn.
            self.pipeline = Pipeline(self.preset, self.monitor, turns=True)
        else:
            self.pipeline = Pipeline(
                self.preset, self.monitor, state_names=self.source.state_names,
                action_names=None if self.source.passive else self.source.action_names,
                state_bins=self.source.state_bins, action_bins=self.source.action_bins,
                calibration_windows=c.calibration_windows, correction=c.correction,
                twin=twin)
        self.engine = self.pipeline.engine
        #: The profile's announcement at the pipeline's first rows, and its check.
        self._announce = self._fit_check = self._profile_baseline = None
        if self.profile is not None and self.config.profile is not None:
            self.profile.check_loop(self.source, self.preset)
            self.profile.arm(self.pipeline)
            self._announce = self.profile.reference()
            self._fit_check = FitCheck(self.profile)
            self._profile_baseline = self.monitor.baseline
            self.profile_check = None
        self.alarms.attribute = twin_attribution(self.pipeline.evidence,
                                                 passive=self.source.passive,
                                                 note=self.source.twin_note)
        # A class is named once a window holds only what followed the change (windows path):
        # a window length after the alarm's first window, which may end at the change itself
        # (a twin sees a sensor's first wrong reading at once).
        self.alarms.attribute_after = 0 if self.turns is not None else max(
            -(-self.preset.window // self.preset.stride), 0)

    def _time_at(self, i: int) -> float:
        """Loop time at the moment ``i`` transitions have been processed."""
        tail = self._tail
        k = i - 1 - (self.n_transitions - len(tail))
        if i == self.n_transitions or len(tail) == 0:
            return self._sim_time
        if 0 <= k < len(tail):
            return float(tail[k, 0])
        if k == -1:  # before the first transition: one step before its S'
            return float(tail[0, 0]) - 1.0 / self.source.rate
        return self._sim_time

    def _process(self, b: Batch) -> None:
        n = len(b)
        if n == 0:
            return
        i0 = self.n_transitions
        t = b.t if b.t is not None else (i0 + 1 + np.arange(n)) / self.source.rate
        if self.sink.error is not None and self.stop_on_write_error:
            raise self.sink.error  # a full disk: stop, rather than fill memory
        if self._announce is not None:
            self._announce_profile()
        if self.turns is None:  # refused at the transition that carries it, unrecorded
            src = self.source
            check_finite("s", b.s, src.state_names, i0)
            if b.a is not None and not src.passive:
                check_finite("a", b.a, src.action_names, i0)
            check_finite("s_next", b.s_next, src.state_names, i0)
        self.sink.transitions(i0, t, b.s, b.a, b.s_next, b.reward, b.episode,
                              None if self.turns is None else b.turns or ())
        # The loop times events of the next windows may ask for.
        keep = self.preset.window + n + self.pipeline.n_buffered
        self._tail = np.concatenate([self._tail, np.asarray(t, dtype=np.float64)[:, None]]
                                    )[-keep:]
        self.n_transitions += n
        self._sim_time = float(t[-1])
        if self.turns is not None:
            self.turns.feed(b, i0, t)
            return
        r = b.reward if b.reward is not None else np.full(n, np.nan)
        a = None if self.pipeline.sym_a is None else b.a
        self._range.add_rows(b.s, a, b.s_next, self.pipeline.n_buffered)
        columns = {"reward": r, "t": np.asarray(t, dtype=np.float64)}
        if b.episode is not None:  # an episodic loop's windows know their phase
            columns["episode"] = b.episode
        step = self.pipeline.push(b.s, a, b.s_next, columns, ranges=self._value_ranges)
        if step.calibrated is not None:
            cal = step.calibrated
            self.event("calibrated", at=self.offset + cal["transitions"],
                        transitions=cal["transitions"], value_ranges=self._known_ranges,
                        symbolizer=cal["symbolizer"],
                        action_symbolizer=cal["action_symbolizer"],
                        **({"view": cal["view"]["view"]} if "view" in cal else {}),
                        **({"twin": cal["twin"]} if "twin" in cal else {}))
            if "view" in cal:  # what the symbols are, said where the preset is shown
                self._preset_dict = {**self.preset.to_dict(), "view": cal["view"]["view"]}
        if step.windows is not None:
            self._emit_step(step, self.offset)

    def _announce_profile(self) -> None:
        """A profile's symbols and baseline, in force from the pipeline's first row.

        The events a calibration and a baseline would have logged, naming the profile.
        """
        ref, self._announce = self._announce, None
        p, at = self.pipeline, self.offset
        if p.sym_s is not None:
            self.event("calibrated", at=at, transitions=0, value_ranges={},
                       symbolizer=p.sym_s.to_dict(),
                       action_symbolizer=None if p.sym_a is None else p.sym_a.to_dict(),
                       **({"view": p.view} if p.view else {}), profile=ref)
        self.event("baseline", at=at, **self.monitor.baseline.to_dict(),
                   detector=self.monitor.to_dict(), profile=ref)

    def _emit_step(self, step: Step, offset: int) -> None:
        """The windows of a judged pipeline step, as the session's table (see _emit)."""
        w = step.windows
        table: dict[str, np.ndarray] = {c: w[c] for c in w if c in WINDOW_COLUMNS}
        table["start"], table["end"] = w["start"] + offset, w["end"] + offset
        if not self.source.has_reward:
            table.pop("reward", None)
        self._emit(table, len(w["start"]), step)
        if self._window_listeners:
            full = {**w, "start": table["start"], "end": table["end"]}
            for fn in self._window_listeners:
                fn(full)

    def _value_ranges(self) -> tuple[dict[int, tuple[float, float]], ...]:
        """The source's value ranges when the symbols are fitted, by state/action column."""
        known = self._known_ranges = self.source.value_ranges()
        return tuple({j: known[v] for j, v in enumerate(names) if v in known}
                     for names in (self.source.state_names, self.source.action_names))

    def _show(self, agency: dict[str, Any] | None, info: Mapping[str, Any]) -> None:
        """Display state (``Source.publish``, the turn path's) and agency (None: same)."""
        with self._lock:
            if agency is not None:
                self._agency = agency
            self._info.update(info)

    def _emit(self, table: dict[str, np.ndarray], k: int, step: Step | None = None) -> None:
        """New metric rows (either path): judged, logged, kept, recorded, announced.

        ``step``: the pipeline's verdicts on the windows path; the turn path's rows are
        judged here.
        """
        self._n_undefined += int(np.isnan(table["P"]).sum())
        self._judged(table, step := step or self.pipeline.judge(table))
        self._range.update(table, step.baseline_row)
        self._log_window_events()
        with self._lock:
            self._ring.append(table, k)
        self.sink.windows(table)
        for fn in self._listeners:
            fn()

    def _log_window_events(self) -> None:
        """The events of the windows just processed, in transition order, however cut."""
        for at, kind, fields in sorted(self._window_events, key=lambda e: e[0]):
            self.event(kind, at=at, **fields)
        self._window_events.clear()

    def _later(self, kind: str, at: int, **fields: Any) -> None:
        """Queue an event of the windows being processed (logged in order by :meth:`_emit`)."""
        self._window_events.append((at, kind, fields))

    def _judged(self, table: dict[str, np.ndarray], step: Step) -> None:
        """The baseline's event, and the alarms (and their attribution) of judged windows.

        The symbols' calibration windows get no verdict; the baseline is the next ones.
        """
        if step.baseline_row is not None:
            self._later("baseline", at=int(table["end"][step.baseline_row]),
                        **self.monitor.baseline.to_dict(), detector=self.monitor.to_dict())
        if step.flags is not None and np.isfinite(step.flags["IDT"]).any():
            # Every alarm says how far the components moved (its ``severity``), a detected
            # onset too: the windows' z, as the detectors see them.
            z = self.monitor.zscores(step.windows or table)
            self.alarms.memory = self.monitor.spec.detector.memory()
            self.alarms.update(table, step.flags, self.monitor.metrics,
                                self._ring.total, z)
            check = self._fit_check
            if check is not None and self.monitor.baseline is self._profile_baseline:
                verdict = check.add(z)
                if verdict is not None:  # said once, at the window that completed it
                    self._fit_check, self.profile_check = None, verdict
                    self._later("profile_check", at=int(table["end"][-1]), **verdict)

    def update_agency(self) -> None:
        """Choice, effect and asymmetry of the latest W transitions (display only)."""
        if self.engine is None or not self.pipeline.calibrated or \
                self.engine.n_seen < self.preset.window:
            return
        s, a, n = self.engine.recent()
        result = agency_conditions(s, a, n, draws=100, seed=self.n_transitions)
        result["window_end"] = self.n_transitions
        with self._lock:
            self._agency = result

    def next_window_end(self) -> int:
        """Transition index at which the engine's next window ends."""
        if self.turns is not None:
            return self.n_transitions + 1
        return self.offset + self.engine.next_window_start + self.preset.window

    # -- worker -----------------------------------------------------------------------------

    def event(self, kind: str, at: int | None = None, **fields: Any) -> None:
        """Log an event at transition ``at`` (default: now) to the ring and the recording."""
        i = self.n_transitions if at is None else int(at)
        ev = {"kind": kind, "i": i, "t": self._time_at(i), "wall": time.time(), **fields}
        if kind == "episode_end" and isinstance(fields.get("return"), int | float):
            self.alarms.episode_end(i, float(fields["return"]), fields.get("length"))
        self.sink.event(ev)
        self.journal.log(ev)

    def events_since(self, n: int) -> list[dict[str, Any]]:
        """The session's events from the ``n``-th on (all of them from 0), oldest first."""
        return self.journal.since(n)

    def export_session(self, out: str | Path, fmt: str = "csv") -> list[Path]:
        """Write what the session holds without a recording (see :func:`.sink.export_session`)."""
        with self._lock:
            windows = self._ring.tail(self.config.history)
            n_windows = self._ring.total
        events = self.journal.since(0)
        return export_session(out, self.config, preset_record(self),
                              {"name": self.source.name, "rate": self.source.rate}, windows,
                              events, n_transitions=self.n_transitions, n_windows=n_windows,
                              fmt=fmt)

    def _command(self, kind: str, **args: Any) -> None:
        self.commands.put(kind, args)
        if kind == "resume":
            self.loop_state.wake()

    # -- one step of the loop, for the worker thread and for drivers that step many sources
    # together (``reproduce cheetah``): begin(), then plan() / the source steps / advance(),
    # then end().

    def begin(self) -> None:
        """Open the recording asked for, load the kernels, reset the source, log the start.

        The kernels (:meth:`Pipeline.warm`) and a dialogue's embedder before the source's first
        step: its first rows never wait for them. The source is reset with the session's seed.
        """
        self.sink.open_pending(self)
        self.pipeline.warm()
        if self.turns is not None:
            self.turns.warm()
        self.source.reset(seed=self.config.seed)
        self.event("session_start", source=self.source.name, settings=dict(self.source.config),
                    pipeline=self.pipeline_settings())

    def plan(self, n: int) -> int:
        """Apply the scheduled commands that are due; how many steps the source may take now.

        ``n`` is cut at the next scheduled command, at the end of calibration, at the next
        window end while Auto is on (a switch acts right after the window that made it) and
        at ``limit``. 0: the limit is reached.
        """
        self.commands.apply_due(self)
        due = self.commands.next_due()
        if due is not None:
            n = min(n, due - self.n_transitions)
        if not self.pipeline.calibrated:
            # Calibration asks the source for its value ranges: at its exact transition.
            n = min(n, self.offset + self.pipeline.calibration_transitions - self.n_transitions)
        elif self.alarms.auto is not None:
            n = min(n, self.next_window_end() - self.n_transitions)
        if self.limit is not None:
            n = min(n, self.limit - self.n_transitions)
            if n <= 0:
                return 0
        return max(1, n)

    def advance(self, b: Batch) -> None:
        """Take in what the source returned for the steps :meth:`plan` allowed."""
        for name in self.commands.take_impulses():  # applied by that step: off, silently
            self.source.set_perturbation(name, None)
        if b.info:
            self._show(None, b.info)
        source_events(self, b, before=True)
        self._process(b)
        source_events(self, b, before=False)

    def end(self) -> None:
        """Close the source and the recording (the worker thread does this when it stops)."""
        try:
            # A detection whose class was still to be named is told now, without it.
            self.alarms.flush(self.n_transitions)
            self._log_window_events()
            self.source.close()
        finally:
            run = self.loop_state
            if self.sink.recording:
                if self.sink.error is not None:
                    run.fail(f"{type(self.sink.error).__name__}: {self.sink.error}")
                self.event("session_end", state=run.state, error=run.error)
                try:
                    self.sink.close(final_state=run.state, error=run.error)
                except RecordingError as exc:  # a full disk: the run ends in error, said once
                    run.fail(f"{type(exc).__name__}: {exc}")
            for fn in self._listeners:
                fn()

    def _run(self) -> None:
        run_loop(self)
