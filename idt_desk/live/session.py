"""The session runner: one source in a worker thread, the IDT pipeline, ring buffers.

::

    source (worker thread) --batches--> modulation state -> recorder -> symboliser -> engine
        ^ commands (thread-safe queue)                                   -> monitor/controller
    consumers (GUI timer, CLI progress) <-- snapshot() copies of lock-protected ring buffers

Nothing here imports Qt: the GUI and the headless ``idt-desk run`` drive the same class.
Commands take effect at the next chunk boundary (a few milliseconds of loop time); the
worker checks its stop flag between chunks. A source exception stops the session cleanly
with its message in ``error`` and an ``error`` event in the recording.

Event timing. Every event carries ``i``, the exact transition index at which it takes
effect (the number of transitions processed before it), and ``t``, the loop time of that
moment (the time of transition ``i - 1``'s S'). Neither depends on how the loop was cut into
chunks, so a scripted experiment (:meth:`Session.schedule`) gives the same windows and the
same events at any speed, headless or in the GUI, and in its replay:

- scheduled commands cut the chunk at their transition;
- alarms, symbol-range warnings and the baseline are stamped at the end of the window that
  caused them; calibration at the transition that completed it;
- while automatic modulation is on, chunks end at window ends, so a switch it makes takes
  effect at the transition right after the window that triggered it.
"""

from __future__ import annotations

import queue
import threading
import time
import traceback
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from idt_desk.detection.agency import agency_conditions
from idt_desk.detection.auto import AutoController
from idt_desk.detection.monitor import ADJUSTED_METRICS, IDT_METRICS, Baseline, Monitor
from idt_desk.live.source import Batch, Source, SourcePaused
from idt_desk.metrics import embeddings
from idt_desk.metrics.embeddings import StructuralBaselines
from idt_desk.metrics.presets import PRESETS, Preset
from idt_desk.metrics.symbolize import Symbolizer
from idt_desk.metrics.tokens import (
    CONFOUND_METRICS,
    LENGTH_COLUMNS,
    TOKENIZER,
    DialogueMetrics,
    length_confound,
    load_tokenizer,
)
from idt_desk.pipeline import FLAG_COLUMNS, WindowStage, build_monitor, judge
from idt_desk.recordings._recording import Recorder

__all__ = ["WINDOW_COLUMNS", "Session", "SessionConfig", "Snapshot", "undefined_reason"]

#: Columns of the session's windows (ring buffer, recording, snapshot).
WINDOW_COLUMNS = (
    "start", "end", "t", "P", "H_f", "H_b", "dH", "MI", "H_S", "H_A", "H_S_next", "H_SA",
    "H_SAS", "H_A_given_S", "MI_A_S_next_given_S", "K_SAS", "unique_frac", "out_of_range",
    "reward", "x_P", "x_H_f", "x_H_b", "x_dH", "x_IDT", "x_reward",
    # The structural baselines of a dialogue (turn path, idt_desk.metrics.embeddings); NaN
    # elsewhere.
    "cos_sim", "adjacent", "drift",
    # A dialogue's token counts and length-adjusted metrics with their flags
    # (idt_desk.metrics.tokens).
    *LENGTH_COLUMNS, *ADJUSTED_METRICS, *(f"x_{m}" for m in (*ADJUSTED_METRICS, "IDT_adj")),
)
#: Wall-clock granularity of real-time pacing (s).
PACE_SLICE = 0.02
#: At maximum speed, chunks of this many ``source.chunk`` per step (fast sources).
MAX_SPEED_CHUNKS = 40
#: Wall seconds between two computations of the agency conditions (about 40 ms each: <1 %).
AGENCY_EVERY = 5.0


@dataclass
class SessionConfig:
    """Everything that defines a session; recorded in full with every recording.

    Attributes
    ----------
    source, settings
        Source name and its declared settings.
    preset, bins, window, stride
        Symbolisation preset (default: the source's first) and overrides.
    calibration_windows
        The symboliser's statistics are frozen from the first this-many windows of data.
    baseline_windows
        The monitor's baseline is the this-many windows that follow the calibration windows
        (windows the symbols were fitted on cannot show data leaving the calibrated range);
        None: 200 windows (30 turns on the turn path, the paper's dialogue baseline).
    detector
        ``persistence`` (default: ``persist`` windows in a row beyond a calibrated kσ),
        ``cusum`` (two-sided, reference ``drift`` σ) or ``paper`` (the first window beyond
        ``k`` σ, uncalibrated: the paper's rule). See ``idt_desk.detection.detectors``.
    false_alarms
        The false-alarm budget in loop time ("1/h", "1/100turns", "1/10episodes"); None: the
        source's ``default_budget``. The IDT components share it; reward has its own.
    k
        The paper rule's threshold in baseline standard deviations.
    correction
        None or "miller-madow".
    speed
        Multiple of real time; None (or 0) for as fast as possible.
    seed
        Seed of the source.
    history
        Windows kept in memory for consumers (memory stays flat over hours).
    auto
        Automatic modulation: {"modulation", "params", "persist", "release"} or None.
    """

    source: str = "pendulum"
    settings: dict[str, Any] = field(default_factory=dict)
    preset: str | None = None
    bins: int | None = None
    window: int | None = None
    stride: int | None = None
    calibration_windows: int = 20
    baseline_windows: int | None = None
    detector: str = "persistence"
    false_alarms: str | None = None
    #: Persistence's m; None: 5 windows, or 1 on the turn path (an injection is one turn).
    persist: int | None = None
    drift: float = 0.5
    k: float = 3.0
    correction: str | None = None
    speed: float | None = 1.0
    seed: int = 0
    history: int = 20000
    auto: dict[str, Any] | None = None
    #: A full preset (``Preset.to_dict()``) used instead of looking ``preset`` up by name; a
    #: replay sets it to the recorded one.
    preset_spec: dict[str, Any] | None = None
    #: The metric stage, set from the source: "windows" (symbols over sliding windows; the
    #: preset, calibration and window settings apply) or "turns" (token counts per turn;
    #: ``tokenizer`` applies, no calibration, the baseline is the first ``baseline_windows``
    #: turns).
    metric_path: str = "windows"
    #: Tokenizer of the "turns" path (``idt_desk.metrics.tokens.load_tokenizer``); None: the
    #: default.
    tokenizer: str | None = None
    #: The "turns" path's structural baselines (``idt_desk.metrics.embeddings``: cosine similarities
    #: of sentence embeddings, extra columns beside the metrics): None computes them when the
    #: embeddings extra is installed, True requires it, False never.
    baselines: bool | None = None

    #: Settings only the windows path uses (symbols over sliding windows).
    SYMBOL_FIELDS = ("preset", "bins", "window", "stride", "calibration_windows", "correction",
                     "preset_spec")

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form; a turn path's leaves out the symbol settings, which do not apply."""
        out = asdict(self)
        if self.metric_path == "turns":
            for key in self.SYMBOL_FIELDS:
                out.pop(key, None)
        return out


@dataclass
class Snapshot:
    """A consistent copy of the session's state for a consumer (the GUI's timer)."""

    state: str
    error: str | None
    source: str
    n_transitions: int
    n_windows: int
    sim_time: float
    speed: float | None
    preset: dict[str, Any]
    calibration: tuple[int, int]
    baseline: Baseline | None
    baseline_progress: tuple[int, int]
    windows: dict[str, np.ndarray]
    info: dict[str, Any]
    events: list[dict[str, Any]]
    switches: list[dict[str, Any]]
    active_perturbations: dict[str, dict[str, Any]]
    active_modulations: dict[str, dict[str, Any]]
    auto: dict[str, Any] | None
    alarm: dict[str, bool]
    onset: dict[str, Any] | None
    recording: str | None
    #: Compute throughput: transitions per second of the worker's compute time.
    throughput: float
    #: Loop rate: transitions per wall-clock second the loop actually advanced.
    loop_rate: float = 0.0
    #: {"fraction", "since_i"} while the symbols' calibrated range no longer covers the data.
    out_of_range_warning: dict[str, Any] | None = None
    #: Windows so far whose P is undefined (see :func:`undefined_reason`).
    n_undefined: int = 0
    #: The agency conditions of the latest W transitions (``idt_desk.detection.agency``), refreshed
    #: every ``AGENCY_EVERY`` seconds; None for a passive source or before the first window.
    agency: dict[str, Any] | None = None
    #: Why the source paused the loop (``SourcePaused``), until it is resumed.
    paused_reason: str | None = None
    #: The tokenizer of the turn path (metrics per turn from token counts); None for windows.
    tokenizer: str | None = None
    #: The alarm's detector: {"describe", "budget", "baseline_windows", "too_short",
    #: "needed_windows", "calibrating"} (``Monitor`` in words for the alarm panel).
    detector: dict[str, Any] | None = None
    #: IDT alarm episodes (``alarm_on`` events) since the session started.
    n_alarms: int = 0


class _WindowRing:
    """Fixed-capacity column store of the latest windows."""

    def __init__(self, capacity: int, columns: tuple[str, ...]) -> None:
        self.capacity = int(capacity)
        self.columns = columns
        self.data = {c: np.full(self.capacity, np.nan) for c in columns}
        self.total = 0

    def append(self, block: Mapping[str, np.ndarray], n: int) -> None:
        if n >= self.capacity:
            block = {c: np.asarray(v)[-self.capacity:] for c, v in block.items()}
            self.total += n - self.capacity
            n = self.capacity
        pos = np.arange(self.total, self.total + n) % self.capacity
        for c in self.columns:
            self.data[c][pos] = block[c] if c in block else np.nan
        self.total += n

    def tail(self, limit: int) -> dict[str, np.ndarray]:
        n = min(limit, self.total, self.capacity)
        pos = np.arange(self.total - n, self.total) % self.capacity
        return {c: self.data[c][pos] for c in self.columns}


class Session:
    """Run one source through the IDT pipeline in a worker thread.

    When the ``out_of_range`` fraction (transitions with a value clamped into an edge bin)
    averages above ``OUT_OF_RANGE_WARN`` over the latest ``OUT_OF_RANGE_PERSIST`` windows, a
    ``symbols_out_of_range`` event is raised: the frozen symbols no longer cover the data,
    and :meth:`reconfigure` (no arguments) re-calibrates them.

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
        overrides = getattr(source, "pipeline_overrides", lambda: None)()
        if overrides:
            # A replay re-runs the pipeline exactly as it was recorded.
            for key, value in overrides.items():
                setattr(self.config, key, value)
        self.config.metric_path = source.metric_path
        if source.metric_path not in ("windows", "turns"):
            raise ValueError(f"source {source.name}: metric_path must be 'windows' or 'turns', "
                             f"not {source.metric_path!r}")
        self._turn_path = source.metric_path == "turns"
        # Defaults resolved here, so a recording states what was in force.
        if self.config.baseline_windows is None:
            self.config.baseline_windows = 30 if self._turn_path else 200
        if self.config.false_alarms is None:
            self.config.false_alarms = source.default_budget
        if self.config.persist is None:
            self.config.persist = 1 if self._turn_path else 5
        #: The dialogue so far (turn path): every turn's texts, which later turns' contexts
        #: and a recording started mid-dialogue need. It outlives pipeline rebuilds.
        self._dialogue: DialogueMetrics | None = None
        self._turn_log: list[dict[str, Any]] = []
        #: The baseline turns' metrics and token counts, until the length confound is out.
        self._length_rows: dict[str, list[float]] | None = {}
        #: The structural baselines (turn path, when on): the model loads in the loop's
        #: thread at the first turn, about 10 s, never in the caller's.
        self._baselines: StructuralBaselines | None = None
        if self._turn_path:
            self.config.tokenizer = self.config.tokenizer or TOKENIZER
            # The length model of the adjusted metrics fits the detectors' baseline turns.
            self._dialogue = DialogueMetrics(load_tokenizer(self.config.tokenizer),
                                             baseline_turns=self.config.baseline_windows)
            if self.config.baselines and not embeddings.available():
                raise ValueError(embeddings.MISSING)
            self.config.baselines = (embeddings.available() if self.config.baselines is None
                                     else self.config.baselines)
        else:
            self.config.baselines = False
        self._lock = threading.Lock()
        self._commands: queue.Queue = queue.Queue()
        self._stop = threading.Event()
        self._resume = threading.Event()
        self._resume.set()
        self._thread: threading.Thread | None = None
        self._state = "idle"
        self._error: str | None = None
        self._ring = _WindowRing(self.config.history, WINDOW_COLUMNS)
        self._events: deque[dict[str, Any]] = deque(maxlen=500)
        #: Every event of the session (a few per minute: kept whole for export_session).
        self._event_log: list[dict[str, Any]] = []
        #: The latest recording this session wrote (open or closed), or None.
        self.recording_path: Path | None = None
        # Perturbation/modulation switches, kept apart so alarm chatter cannot push the start
        # of a long perturbation out of the bounded event log.
        self._switches: deque[dict[str, Any]] = deque(maxlen=200)
        self._info: dict[str, Any] = {}
        self._alarm = {m: False for m in (*IDT_METRICS, "IDT", "reward")}
        self._n_alarms = 0
        self._onset: dict[str, Any] | None = None
        self._recorder: Recorder | None = None
        self._pending_record = Path(record) if record is not None else None
        self.n_transitions = 0
        #: Stop by itself after this many transitions (None: run until stopped).
        self.limit: int | None = None
        self._schedule: list[tuple[int, str, dict[str, Any]]] = []
        self._sim_time = 0.0
        self._throughput = 0.0
        self._loop_rate = 0.0
        self._n_undefined = 0
        self._impulses: list[str] = []
        self._agency: dict[str, Any] | None = None
        self._agency_at = 0.0
        self._window_events: list[tuple[int, str, dict[str, Any]]] = []
        self._listeners: list[Callable[[], None]] = []
        self._event_listeners: list[Callable[[dict[str, Any]], None]] = []
        self._paused_reason: str | None = None
        self._build_pipeline()
        source.should_stop = self._stop.is_set
        source.publish = self._publish

    # -- public API (any thread) ------------------------------------------------------------

    @property
    def state(self) -> str:
        """idle, running, paused, stopped or error."""
        return self._state

    @property
    def error(self) -> str | None:
        """The message that stopped the session, if one did."""
        return self._error

    @property
    def running(self) -> bool:
        """True while the worker thread is alive."""
        return self._thread is not None and self._thread.is_alive()

    def add_listener(self, fn: Callable[[], None]) -> None:
        """Call ``fn()`` (from the worker thread, data-less) when new windows arrive."""
        self._listeners.append(fn)

    def add_event_listener(self, fn: Callable[[dict[str, Any]], None]) -> None:
        """Call ``fn(event)`` with every event as it is logged (in the loop's thread).

        The event log a snapshot holds is bounded; a listener sees all of them.
        """
        self._event_listeners.append(fn)

    def start(self) -> None:
        """Start the worker thread."""
        if self._thread is not None:
            raise RuntimeError("a session runs once; build a new Session to run again")
        self._thread = threading.Thread(target=self._run, name=f"idt-{self.source.name}",
                                        daemon=True)
        self._state = "running"
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        """Ask the worker to stop and wait for it (flushes and closes the recording)."""
        self._stop.set()
        self._resume.set()
        if self._thread is not None:
            self._thread.join(timeout)
            if self._thread.is_alive():
                raise RuntimeError(f"session worker did not stop within {timeout} s")
        elif self._recorder is not None:
            self._finish()

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

    def calibrate_baseline(self, n_windows: int | None = None) -> None:
        """Gather a new baseline from the next ``n_windows`` windows."""
        self._command("calibrate_baseline", n=n_windows)

    def reconfigure(self, **changes: Any) -> None:
        """Change symbolisation (preset, bins, window, stride, calibration_windows, correction).

        The symboliser is re-calibrated from the data that follows, and the engine and
        baseline start afresh.
        """
        allowed = {"preset", "bins", "window", "stride", "calibration_windows",
                   "baseline_windows", "correction", "k", "preset_spec", "detector",
                   "false_alarms", "persist", "drift"}
        bad = set(changes) - allowed
        if bad:
            raise ValueError(f"cannot reconfigure {sorted(bad)}; allowed: {sorted(allowed)}")
        self._resolve_preset({**self._pipeline_dict(), **changes})  # validate now
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
        self._schedule.append((int(at), kind, args))
        self._schedule.sort(key=lambda c: c[0])

    def note(self, text: str) -> None:
        """Add a note event (recorded)."""
        self._command("note", text=str(text))

    def start_recording(self, path: str | Path) -> None:
        """Record from the next chunk on into ``path`` (a new directory)."""
        self._command("record", path=str(path))

    def stop_recording(self) -> None:
        """Close the recording; the session goes on."""
        self._command("record", path=None)

    def snapshot(self, limit: int = 2000) -> Snapshot:
        """Copies of the latest ``limit`` windows and of the session's state."""
        with self._lock:
            windows = self._ring.tail(limit)
            rec = self._recorder
            return Snapshot(
                state=self._state,
                error=self._error,
                source=self.source.name,
                n_transitions=self.n_transitions,
                n_windows=self._ring.total,
                sim_time=self._sim_time,
                speed=self.config.speed,
                preset=self._preset_dict,
                calibration=(self._n_calib_buffered if not self._calibrated
                             else self._calib_needed, self._calib_needed),
                baseline=self.monitor.baseline,
                baseline_progress=self.monitor.baseline_progress,
                windows=windows,
                info=dict(self._info),
                events=list(self._events),
                switches=list(self._switches),
                active_perturbations={k: dict(v) for k, v in
                                      self.source.active_perturbations.items()},
                active_modulations={k: dict(v) for k, v in
                                    self.source.active_modulations.items()},
                auto=None if self._auto is None else {
                    "modulation": self._auto.modulation, "params": self._auto.params,
                    "persist": self._auto.persist, "release": self._auto.release,
                    "engaged": self._auto.engaged},
                alarm=dict(self._alarm),
                onset=None if self._onset is None else dict(self._onset),
                recording=str(rec.path) if rec is not None and not rec.closed else None,
                throughput=self._throughput,
                loop_rate=self._loop_rate,
                out_of_range_warning=None if self._range_warning is None
                else dict(self._range_warning),
                n_undefined=self._n_undefined,
                agency=self._agency,
                paused_reason=self._paused_reason,
                tokenizer=self.config.tokenizer if self._turn_path else None,
                detector=self._detector_info(),
                n_alarms=self._n_alarms,
            )

    def _detector_info(self) -> dict[str, Any]:
        """The alarm's detector in words, for the alarm panel (see ``Snapshot.detector``)."""
        mon = self.monitor
        info = self._detector_cache
        if info is None or info["calibrated"] != (mon.baseline is not None):
            cal = mon.calibration
            info = {"describe": mon.describe(), "kind": mon.spec.kind,
                    "budget": None if mon.budget is None else str(mon.budget),
                    "baseline_windows": mon.n_baseline, "calibrated": mon.baseline is not None,
                    "too_short": bool(cal is not None and cal.too_short),
                    "needed_windows": None if cal is None else cal.needed_windows,
                    "thresholds": {} if cal is None else dict(cal.threshold)}
            self._detector_cache = info
        return info

    # -- pipeline ---------------------------------------------------------------------------

    def _pipeline_dict(self) -> dict[str, Any]:
        c = self.config
        return {"preset": c.preset, "bins": c.bins, "window": c.window, "stride": c.stride,
                "calibration_windows": c.calibration_windows,
                "baseline_windows": c.baseline_windows, "correction": c.correction, "k": c.k,
                "preset_spec": c.preset_spec, "detector": c.detector,
                "false_alarms": c.false_alarms, "persist": c.persist, "drift": c.drift}

    def _resolve_preset(self, p: Mapping[str, Any]) -> Preset:
        name = p.get("preset") or (self.source.presets[0] if self.source.presets else None)
        spec = p.get("preset_spec")
        if spec is not None and not p.get("preset"):
            fields = dict(spec)
            for key in ("state_groups", "action_groups"):
                if fields.get(key) is not None:
                    fields[key] = tuple(tuple(g) for g in fields[key])
            fields["angles"] = tuple(fields.get("angles", ()))
            base = Preset(**fields)
        elif name is None:
            base = Preset("custom", "no preset", bins=8, window=300, stride=50)
        else:
            if name not in PRESETS:
                raise ValueError(f"unknown preset {name!r}; known: {', '.join(PRESETS)}")
            base = PRESETS[name]
        from dataclasses import replace

        preset = replace(base, **{k: p[k] for k in ("bins", "window", "stride")
                                  if p.get(k) is not None})
        if preset.bins < 1 or preset.window < 2 or preset.stride < 1:
            raise ValueError(f"bins, window, stride must be positive: {preset}")
        if preset.n_state is not None and preset.n_state != len(self.source.state_names):
            raise ValueError(f"preset {preset.name} expects {preset.n_state} state variables; "
                             f"{self.source.name} has {len(self.source.state_names)}")
        for key, least in (("calibration_windows", 1), ("baseline_windows", 2)):
            if p.get(key) is not None and p[key] < least:
                raise ValueError(f"{key} must be >= {least}")
        self._monitor_for(p, preset)  # validate
        return preset

    def _monitor_for(self, p: Mapping[str, Any], preset: Preset) -> Monitor:
        """The alarm's monitor for pipeline settings ``p`` (see ``build_monitor``)."""
        turns = self._turn_path
        metrics = (*IDT_METRICS, *(ADJUSTED_METRICS if turns else ()),
                   *(("reward",) if self.source.has_reward else ()))
        return build_monitor(
            metrics, baseline_windows=int(p.get("baseline_windows") or 2),
            detector=p.get("detector") or "persistence",
            false_alarms=p.get("false_alarms") or self.source.default_budget,
            k=float(p.get("k", 3.0)), persist=int(p.get("persist") or 5),
            drift=float(p.get("drift", 0.5)), rate=self.source.rate,
            stride=1 if turns else preset.stride, window=1 if turns else preset.window,
            episode_steps=getattr(self.source, "episode_steps", None), turns=turns,
            what=self.source.name)

    def _build_pipeline(self) -> None:
        """(Re)build symbolisers, engine and monitor from the configuration."""
        c = self.config
        self.preset = self._resolve_preset(self._pipeline_dict())
        self._preset_dict = self.preset.to_dict()  # snapshots are taken 30 times a second
        self._detector_cache: dict[str, Any] | None = None
        # Seconds of loop time convert through the source's rate, never the wall clock.
        self.monitor = self._monitor_for(self._pipeline_dict(), self.preset)
        self._offset = self.n_transitions  # transition index of the engine's sample 0
        self._n_pipeline_windows = 0  # windows since this pipeline was built
        self._tail = np.empty((0, 1))
        self._range_recent: deque[float] = deque(maxlen=self.OUT_OF_RANGE_PERSIST)
        self._range_warning: dict[str, Any] | None = None
        auto = c.auto
        self._auto = None if auto is None else AutoController(
            auto["modulation"], dict(auto.get("params", {})), int(auto.get("persist", 3)),
            int(auto.get("release", 10)))
        if self._turn_path:
            # Token counts need no symbols: nothing to calibrate, one row per turn.
            self._sym_s = self._sym_a = self.engine = None
            self._calibrated, self._calib_needed, self._n_calib_buffered = True, 0, 0
            self._calib = []
            return
        ds = len(self.source.state_names)
        circular = self.preset.angles if self.preset.angle_mode == "wrap" else ()
        self._sym_s = Symbolizer(ds, self.preset.bins, self.preset.state_groups,
                                 circular=circular, names=self.source.state_names)
        sym_a = None
        if not self.source.passive:
            sym_a = Symbolizer(len(self.source.action_names), self.preset.bins,
                               self.preset.action_groups, names=self.source.action_names)
        self._stage = WindowStage(self.preset, self._sym_s, sym_a,
                                  calibration_windows=c.calibration_windows,
                                  correction=c.correction)
        self._sym_a, self.engine = sym_a, self._stage.engine
        self._calibrated = False
        self._calib_needed = self._stage.calibration_transitions
        self._calib: list[Batch] = []
        self._n_calib_buffered = 0
        # _tail (above): the loop time of recent transitions (for events' times).

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
        if self._recorder is not None:
            self._recorder.add_transitions(i0, t, b.s, b.a, b.s_next, b.reward, b.episode)
            if self._turn_path:
                turns = b.turns or ()
                self._recorder.add_turns([t for t in turns if t.get("history")])
                self._recorder.add_turns([{"i": i0 + j, **t} for j, t in enumerate(
                    t for t in turns if not t.get("history"))])
        # The loop times events of the next windows may ask for.
        keep = self.preset.window + n + (0 if self._calibrated else self._n_calib_buffered)
        self._tail = np.concatenate([self._tail, np.asarray(t, dtype=np.float64)[:, None]]
                                    )[-keep:]
        self.n_transitions += n
        self._sim_time = float(t[-1])
        if self._turn_path:
            self._feed_turns(b, i0, t)
            return
        if not self._calibrated:
            self._calib.append(b)
            self._n_calib_buffered += n
            if self._n_calib_buffered < self._calib_needed:
                return
            self._calibrate()
            return
        self._feed([b])

    def _calibrate(self) -> None:
        batches, self._calib = self._calib, []
        # Exactly the first `calibration_windows` windows' transitions, whatever the batching.
        need = self._calib_needed
        s = np.vstack([b.s for b in batches])[:need]
        known = self.source.value_ranges()

        def ranges(names: Sequence[str]) -> dict[int, tuple[float, float]]:
            return {j: known[v] for j, v in enumerate(names) if v in known}

        self._stage.fit(s, None if self._sym_a is None else np.vstack([b.a for b in batches]),
                        ranges(self.source.state_names), ranges(self.source.action_names))
        self._calibrated = True
        at = self._offset + need
        self._event("calibrated", at=at, transitions=len(s), value_ranges=known,
                    symbolizer=self._sym_s.to_dict(),
                    action_symbolizer=None if self._sym_a is None else self._sym_a.to_dict())
        self._feed(batches)

    def _feed(self, batches: Sequence[Batch]) -> None:
        """Push batches through the window stage; judge, log and keep the windows they end."""
        def cat(x: list) -> np.ndarray | None:
            return None if x[0] is None else np.concatenate(x)

        i1 = self.n_transitions
        i0 = i1 - sum(len(b) for b in batches)
        r = cat([b.reward if b.reward is not None else np.full(len(b), np.nan)
                 for b in batches])
        t = self._tail[len(self._tail) - (i1 - i0):, 0]
        w = self._stage.push(cat([b.s for b in batches]), cat([b.a for b in batches]),
                             cat([b.s_next for b in batches]), {"reward": r, "t": t})
        if w is None:
            return
        k = len(w["start"])
        table: dict[str, np.ndarray] = {c: w[c] for c in w if c in WINDOW_COLUMNS}
        table["start"], table["end"] = w["start"] + self._offset, w["end"] + self._offset
        if not self.source.has_reward:
            table.pop("reward", None)
        self._emit(table, k)

    def _feed_turns(self, b: Batch, i0: int, t: np.ndarray) -> None:
        """The turn path: one metric row per transition from its texts' token counts."""
        table = self._dialogue.push(b.turns or [])
        if self.config.baselines:
            if self._baselines is None:
                self._baselines = StructuralBaselines(embeddings.load_embedder())
            table.update(self._baselines.push(b.turns or []))
        # A replay's first batch may lead with history turns (texts of earlier contexts).
        turns = [turn for turn in b.turns or [] if not turn.get("history")]
        if len(turns) != len(b):
            raise ValueError(f"{self.source.name}: a batch of {len(b)} transitions carries "
                             f"{len(turns)} turns")
        k = len(b)
        table["start"] = i0 + np.arange(k, dtype=np.float64)
        table["end"] = table["start"] + 1
        table["t"] = np.asarray(t, dtype=np.float64)
        table["out_of_range"] = np.zeros(k)
        if self.source.has_reward:
            table["reward"] = np.asarray(b.reward, dtype=np.float64)
        self._emit(table, k)
        rows = [{**turn, "i": i0 + j, "P": float(table["P"][j]), "dH": float(table["dH"][j]),
                 "H_b": float(table["H_b"][j]), "P_adj": float(table["P_adj"][j]),
                 "alarm": table["x_IDT"][j] == 1.0}
                for j, turn in enumerate(turns)]
        self._watch_length(table, k)
        self._turn_log.extend(rows)
        # The agency conditions of the latest turn, read off its pooled token counts (a
        # value per turn, no null: a dialogue has one S, A, S' per turn, not a window).
        agency = {
            name: {"value": v, "holds": bool(v > 0), "method": "per turn, pooled counts"}
            for name, v in (("choice", float(table["H_A_given_S"][-1])),
                            ("effect", float(table["MI_A_S_next_given_S"][-1])),
                            ("asymmetry", abs(float(table["dH"][-1]))))}
        with self._lock:
            self._agency = {**agency, "window_end": self.n_transitions,
                            "where": f"turn {self.n_transitions} (its token counts)"}
            # Replaced, never mutated: a snapshot's shallow copy stays consistent.
            self._info["transcript"] = tuple(self._turn_log[-self.config.history:])

    def _watch_length(self, table: Mapping[str, np.ndarray], k: int) -> None:
        """Gather the baseline turns' metrics and counts; at its end, the length confound.

        ``info["length_confound"]``: :func:`idt_desk.metrics.tokens.length_confound` over the
        baseline turns (the dashboard shows it beside the transcript).
        """
        need = int(self.config.baseline_windows or 0)
        have = self._length_rows
        if have is None or not need:
            return
        for c in (*CONFOUND_METRICS, *LENGTH_COLUMNS):
            have.setdefault(c, []).extend(np.asarray(table[c], dtype=np.float64)[:k].tolist())
        if len(have["P"]) >= need:
            self._length_rows = None
            confound = length_confound([{c: np.array(v[:need]) for c, v in have.items()}],
                                       need)
            with self._lock:
                self._info["length_confound"] = {"turns": need, **confound}

    def _publish(self, info: Mapping[str, Any]) -> None:
        """A source's display state during a long step (``Source.publish``)."""
        with self._lock:
            self._info.update(info)

    def _emit(self, table: dict[str, np.ndarray], k: int) -> None:
        """New metric rows (either path): judged, logged, kept, recorded, announced."""
        self._n_undefined += int(np.isnan(table["P"]).sum())
        self._judge(table, k)
        self._watch_range(table)
        # Events of these windows in transition order, however the loop was chunked.
        for at, kind, fields in sorted(self._window_events, key=lambda e: e[0]):
            self._event(kind, at=at, **fields)
        self._window_events.clear()
        with self._lock:
            self._ring.append(table, k)
        if self._recorder is not None:
            self._recorder.add_windows(table)
        for fn in self._listeners:
            fn()

    def _later(self, kind: str, at: int, **fields: Any) -> None:
        """Queue an event of the windows being processed (logged in order by _feed)."""
        self._window_events.append((at, kind, fields))

    def _judge(self, table: dict[str, np.ndarray], k: int) -> None:
        """Excursion flags of new windows: NaN (no verdict) for calibration and baseline ones.

        The windows the symbols were calibrated on come first; the baseline is the windows
        that follow them; every later window is flagged against it.
        """
        first = self._n_pipeline_windows
        self._n_pipeline_windows += k
        calibration = 0 if self._turn_path else self.config.calibration_windows
        flags, completed = judge(self.monitor, table, first, calibration)
        if completed is not None:
            self._later("baseline", at=int(table["end"][completed]),
                        **self.monitor.baseline.to_dict(), detector=self.monitor.to_dict())
        if np.isfinite(flags["IDT"]).any():
            self._update_alarms(table, flags)
        for m, f in flags.items():
            table[FLAG_COLUMNS[m]] = f

    def _update_alarms(self, table: dict[str, np.ndarray], flags: dict[str, np.ndarray]
                       ) -> None:
        """Alarm lights, alarm events, latency and auto modulation from new judged windows."""
        judged = np.flatnonzero(np.isfinite(flags["IDT"]))
        if not judged.size:
            return
        ends = table["end"]
        idt = flags["IDT"][judged] == 1.0
        before = np.concatenate([[self._alarm["IDT"]], idt[:-1]])
        self._n_alarms += int(np.count_nonzero(idt & ~before))
        for j in judged[idt != before]:
            self._later("alarm_on" if flags["IDT"][j] == 1.0 else "alarm_off", at=int(ends[j]),
                        metric="IDT", window_start=int(table["start"][j]))
        for m in self._alarm:
            if m in flags and (m == "IDT" or m in self.monitor.metrics):
                self._alarm[m] = bool(flags[m][judged[-1]] == 1.0)
        onset = self._onset
        if onset is not None and onset["latency"] is None and not onset.get("expired"):
            # Windows that hold perturbed transitions: ending after the onset and, once it is
            # off, starting before it went off; and within the horizon of its first one.
            seen = judged[ends[judged] > onset["i"]]
            if onset.get("off_i") is not None:
                seen = seen[table["start"][seen] < onset["off_i"]]
            if seen.size and onset["first_window"] is None:
                onset["first_window"] = self._ring.total + int(seen[0])
            if onset["first_window"] is not None:
                late = self._ring.total + seen - onset["first_window"] >= onset["horizon"]
                if late.any():
                    onset["expired"] = True
                seen = seen[~late]
            hits = seen[flags["IDT"][seen] == 1.0]
            if hits.size:
                onset["latency"] = self._ring.total + int(hits[0]) - onset["first_window"]
                onset["expired"] = False
                self._verdict(onset, at=int(ends[hits[0]]))
            elif onset.get("expired"):
                self._verdict(onset, at=int(ends[judged[-1]]))
            elif onset.get("off_i") is not None and \
                    (table["start"][judged] >= onset["off_i"]).any():
                # Every window holding the perturbed transitions judged: none alarmed.
                self._verdict(onset, at=int(ends[judged[-1]]))
        if self._auto is not None:
            for j, what in self._auto.update(idt):
                self._auto_switch(what, int(ends[judged[j]]), int(table["start"][judged[j]]))

    #: Windows after an onset's first window within which an alarm counts as its detection
    #: (the turn path: the paper's injection turn and the two after it).
    HORIZON_WINDOWS, HORIZON_TURNS = 100, 3

    def _new_onset(self, name: str | None, i: int, impulse: bool = False) -> dict[str, Any]:
        """Latency bookkeeping of a perturbation that went on at transition ``i``."""
        horizon = self.HORIZON_TURNS if self._turn_path else self.HORIZON_WINDOWS
        return {"name": name, "i": i, "first_window": None, "latency": None,
                "horizon": horizon, "expired": False, "impulse": bool(impulse),
                "unit": "turn" if self._turn_path else "window"}

    def _verdict(self, onset: dict[str, Any], at: int) -> None:
        """Log once whether the onset's perturbation was detected (the event log's latency).

        ``detected``: the latency in windows (turns) after the onset's first window;
        ``not_detected``: the horizon ran out, or the perturbation went off undetected.
        """
        if onset.get("logged"):
            return
        onset["logged"] = True
        common = {"name": onset["name"], "onset_i": onset["i"], "unit": onset["unit"]}
        if onset["latency"] is not None:
            self._later("detected", at=at, latency=onset["latency"], **common)
        else:
            self._later("not_detected", at=at, horizon=onset["horizon"],
                        off=onset.get("off_i") is not None and not onset.get("expired"),
                        **common)

    def _onset_off(self, name: str | None, i: int) -> None:
        """The perturbation latency is measured from has gone off at transition ``i``."""
        if self._onset is not None and self._onset["name"] == name:
            self._onset["off_i"] = i

    def _auto_switch(self, what: str, at: int, window_start: int) -> None:
        name = self._auto.modulation
        if what == "engage":
            params = self.source.set_modulation(name, self._auto.params)
            self._later("modulation_on", at=at, name=name, params=params, auto=True,
                        window_start=window_start)
        else:
            self.source.set_modulation(name, None)
            self._later("modulation_off", at=at, name=name, auto=True,
                        window_start=window_start)

    def _watch_range(self, table: dict[str, np.ndarray]) -> None:
        """Warn once the symbols' calibrated range has stopped covering the data.

        Clamping comes in bursts (a pendulum whose energy grew passes its old extremes a few
        times a swing), so the rule looks at the mean out-of-range fraction of the latest
        ``OUT_OF_RANGE_PERSIST`` windows: above ``OUT_OF_RANGE_WARN`` raises the warning, below
        a fifth of it clears it.
        """
        recent = self._range_recent
        for j, frac in enumerate(table["out_of_range"]):
            recent.append(float(frac))
            if len(recent) < recent.maxlen:
                continue
            mean = sum(recent) / len(recent)
            at = int(table["end"][j])
            if self._range_warning is None and mean > self.OUT_OF_RANGE_WARN:
                self._range_warning = {"fraction": mean, "since_i": at}
                self._later("symbols_out_of_range", at=at, fraction=mean,
                            windows=len(recent))
            elif self._range_warning is not None:
                self._range_warning["fraction"] = mean
                if mean < self.OUT_OF_RANGE_WARN / 5:
                    self._range_warning = None
                    self._later("symbols_in_range", at=at, fraction=mean)

    def _update_agency(self) -> None:
        """Choice, effect and asymmetry of the latest W transitions (display only)."""
        if self.engine is None or not self._calibrated or \
                self.engine.n_seen < self.preset.window:
            return
        s, a, n = self.engine.recent()
        result = agency_conditions(s, a, n, draws=100, seed=self.n_transitions)
        result["window_end"] = self.n_transitions
        with self._lock:
            self._agency = result

    def _next_window_end(self) -> int:
        """Transition index at which the engine's next window ends."""
        if self._turn_path:
            return self.n_transitions + 1
        return self._offset + self.engine.next_window_start + self.preset.window

    # -- worker -----------------------------------------------------------------------------

    def _event(self, kind: str, at: int | None = None, **fields: Any) -> None:
        """Log an event at transition ``at`` (default: now) to the ring and the recording."""
        i = self.n_transitions if at is None else int(at)
        ev = {"kind": kind, "i": i, "t": self._time_at(i), "wall": time.time(), **fields}
        with self._lock:
            self._events.append(ev)
            self._event_log.append(ev)
            if kind.startswith(("perturbation_", "modulation_")):
                self._switches.append(ev)
        if self._recorder is not None:
            self._recorder.add_event(ev)
        for fn in self._event_listeners:
            fn(ev)

    def events_since(self, n: int) -> list[dict[str, Any]]:
        """The session's events from the ``n``-th on (all of them from 0), oldest first."""
        with self._lock:
            return list(self._event_log[max(0, int(n)):])

    def export_session(self, out: str | Path, fmt: str = "csv") -> list[Path]:
        """Write what the session holds without a recording: its windows and events.

        ``windows.{fmt}`` (the latest ``history`` windows, every one of a shorter session),
        ``events.{fmt}`` (all of them) and ``config.json`` (the session and preset, and what
        is missing: the transitions, which only a recording keeps). The same layout and
        writer as :func:`idt_desk.recordings._recording.export_recording`.
        """
        import pandas as pd

        from idt_desk.recordings._recording import Recording, _json_safe, export_recording

        with self._lock:
            windows = self._ring.tail(self.config.history)
            events = list(self._event_log)
            n_windows = self._ring.total
        table = pd.DataFrame(windows)
        config = _json_safe({
            "session": self.config.to_dict(), "preset": self._preset_record(),
            "source": {"name": self.source.name, "rate": self.source.rate},
            "exported_without_recording": True, "n_transitions": self.n_transitions,
            "n_windows": n_windows, "windows_exported": len(table),
            "note": "no transitions: only a recording (Record) keeps them"})
        rec = Recording(Path(out), config, pd.DataFrame(), table,
                        pd.DataFrame([_json_safe(e) for e in events]), [], False, None)
        return export_recording(rec, out, fmt)

    def _pipeline_record(self) -> dict[str, Any]:
        """The pipeline as recorded (a replay rebuilds it): the preset in full, by value.

        The turn path's leaves out the symbol settings, which do not apply to it.
        """
        p = {**self._pipeline_dict(), "preset": None, "preset_spec": self.preset.to_dict()}
        if self._turn_path:
            for key in SessionConfig.SYMBOL_FIELDS:
                p.pop(key, None)
        return p

    def _preset_record(self) -> dict[str, Any] | None:
        """The symbols' preset as a recording states it (None on the turn path: no symbols)."""
        return None if self._turn_path else self.preset.to_dict()

    def _command(self, kind: str, **args: Any) -> None:
        self._commands.put((kind, args))
        if kind == "resume":
            self._resume.set()

    def _open_recorder(self, path: Path) -> None:
        cfg = {
            "session": self.config.to_dict(),
            "source": {"name": self.source.name, "label": self.source.label,
                       "settings": dict(self.source.config), "rate": self.source.rate,
                       "episode_steps": getattr(self.source, "episode_steps", None),
                       "has_reward": self.source.has_reward,
                       "passive": self.source.passive, "view": self.source.view,
                       "details": self.source.describe()},
            "preset": self._preset_record(),
            "versions": _versions(),
            "start_index": self.n_transitions,
        }
        if self._turn_path:
            cfg["tokenizer"] = self._dialogue.tokenizer.describe()
            cfg["baselines"] = ({"columns": list(embeddings.BASELINE_COLUMNS),
                                 "model": embeddings.EMBEDDER} if self.config.baselines
                                else None)
        self.recording_path = Path(path)
        self._recorder = Recorder(path, cfg, self.source.state_names, self.source.action_names,
                                  WINDOW_COLUMNS, turns=self._turn_path)
        if self._turn_log:
            # Started mid-dialogue: the turns later contexts still hold, so a replay can
            # rebuild them (they give no metric rows of their own).
            keep = ("turn", "prompt", "reply", "next_prompt", "context_start")
            self._recorder.add_turns([{**{k: r[k] for k in keep if k in r}, "history": True}
                                      for r in self._turn_log])
        self._event("recording_start", path=str(path), pipeline=self._pipeline_record(),
                    perturbations=self.source.active_perturbations,
                    modulations=self.source.active_modulations)

    def _apply(self, kind: str, args: dict[str, Any]) -> None:
        src = self.source
        if kind == "pause":
            self._state = "paused"
            self._resume.clear()
            self._event("pause")
        elif kind == "resume":
            self._state = "running"
            self._paused_reason = None
            self._resume.set()
            self._pace_reset = True
            self._event("resume")
        elif kind == "speed":
            self.config.speed = args["speed"]
            self._pace_reset = True
            self._event("speed", speed=args["speed"])
        elif kind == "perturb":
            name, params = args["name"], args["params"]
            on = params is not None
            if not on and name not in src.active_perturbations:
                return
            resolved = src.set_perturbation(name, params)
            if on:
                impulse = src.perturbation(name).is_impulse(resolved)
                self._onset = self._new_onset(name, self.n_transitions, impulse)
                if impulse:
                    # One shot: applied by the next step, then off again (see _run).
                    self._impulses.append(name)
                    self._event("perturbation_pulse", name=name, params=resolved)
                else:
                    self._event("perturbation_on", name=name, params=resolved)
            else:
                self._onset_off(name, self.n_transitions)
                self._event("perturbation_off", name=name)
        elif kind == "modulate":
            name, params = args["name"], args["params"]
            if params is None:
                if name in src.active_modulations:
                    src.set_modulation(name, None)
                    self._event("modulation_off", name=name, auto=False)
            else:
                resolved = src.set_modulation(name, params)
                self._event("modulation_on", name=name, params=resolved, auto=False)
        elif kind == "auto":
            auto = args["auto"]
            if self._auto is not None and self._auto.engaged:
                src.set_modulation(self._auto.modulation, None)
                self._event("modulation_off", name=self._auto.modulation, auto=True)
            self.config.auto = auto
            self._auto = None if auto is None else AutoController(
                auto["modulation"], dict(auto.get("params", {})), int(auto.get("persist", 3)),
                int(auto.get("release", 10)))
            self._event("auto", auto=auto)
        elif kind == "calibrate_baseline":
            self.monitor.recalibrate(args.get("n"))
            if args.get("n"):
                self.config.baseline_windows = int(args["n"])
            self._info.pop("baseline_logged", None)
            self._event("calibrate_baseline", n=self.monitor.n_baseline)
        elif kind == "reconfigure":
            for key, value in args.items():
                setattr(self.config, key, value)
            self._build_pipeline()
            self._info.pop("baseline_logged", None)
            self._event("reconfigure", pipeline=self._pipeline_record())
            if self._recorder is not None:
                self._recorder.write_config(session=self.config.to_dict(),
                                            preset=self._preset_record())
        elif kind == "note":
            self._event("note", text=args["text"])
        elif kind == "record":
            if self._recorder is not None and not self._recorder.closed:
                self._event("recording_stop")
                self._recorder.close()
            self._recorder = None
            if args["path"] is not None:
                self._open_recorder(Path(args["path"]))
                if self.n_transitions > 0:
                    # A recording is a self-contained experiment: symbols and baseline are
                    # calibrated afresh from its own first windows, so it replays exactly.
                    self._build_pipeline()
                    self._info.pop("baseline_logged", None)
                    self._event("reconfigure", pipeline=self._pipeline_dict(),
                                reason="recording")

    def _drain(self) -> None:
        while True:
            try:
                kind, args = self._commands.get_nowait()
            except queue.Empty:
                return
            try:
                self._apply(kind, args)
            except Exception as exc:  # a bad command must not kill the loop
                self._event("error", command=kind, message=f"{type(exc).__name__}: {exc}")

    def _source_events(self, b: Batch, before: bool) -> None:
        """Events the source hands over with a batch, each at the transition it belongs to.

        An event's ``row`` places it after that row of the batch; -1 places it before the
        batch (a replay cuts its batches so every recorded event is one of these), where a
        recorded pipeline change is re-applied and an onset starts latency as a live one.
        Without a ``row`` an event belongs after the batch's last transition.
        """
        for ev in b.events:
            row = int(ev.get("row", len(b) - 1))
            if (row < 0) != before:
                continue
            kind = ev.get("kind", "source")
            if kind in ("calibrate_baseline", "reconfigure"):
                self._apply(kind, {"n": ev.get("n")} if kind == "calibrate_baseline"
                            else dict(ev.get("pipeline") or {}))
                continue
            # A replayed event's own i/t/wall belong to the original session.
            fields = {k: v for k, v in ev.items() if k not in ("kind", "i", "t", "wall", "row")}
            i = self.n_transitions - len(b) + row + 1 if not before else self.n_transitions
            if kind in ("perturbation_on", "perturbation_pulse"):
                self._onset = self._new_onset(fields.get("name"), i,
                                              kind == "perturbation_pulse")
            elif kind == "perturbation_off":
                self._onset_off(fields.get("name"), i)
            self._event(kind, at=i, **fields)

    # -- one step of the loop, for the worker thread and for drivers that step many sources
    # together (``reproduce cheetah``): begin(), then plan() / the source steps / advance(),
    # then end().

    def begin(self) -> None:
        """Open the recording asked for, reset the source (seeded) and log the start."""
        if self._pending_record is not None:
            self._open_recorder(self._pending_record)
            self._pending_record = None
        self.source.reset(seed=self.config.seed)
        self._event("session_start", source=self.source.name, settings=dict(self.source.config),
                    pipeline=self._pipeline_dict())

    def plan(self, n: int) -> int:
        """Apply the scheduled commands that are due; how many steps the source may take now.

        ``n`` is cut at the next scheduled command, at the end of calibration, at the next
        window end while Auto is on (a switch acts right after the window that made it) and
        at ``limit``. 0: the limit is reached.
        """
        while self._schedule and self._schedule[0][0] <= self.n_transitions:
            _, kind, args = self._schedule.pop(0)
            self._apply(kind, args)
        if self._schedule:
            n = min(n, self._schedule[0][0] - self.n_transitions)
        if not self._calibrated:
            # Calibration asks the source for its value ranges: at its exact transition.
            n = min(n, self._offset + self._calib_needed - self.n_transitions)
        elif self._auto is not None:
            n = min(n, self._next_window_end() - self.n_transitions)
        if self.limit is not None:
            n = min(n, self.limit - self.n_transitions)
            if n <= 0:
                return 0
        return max(1, n)

    def advance(self, b: Batch) -> None:
        """Take in what the source returned for the steps :meth:`plan` allowed."""
        for name in self._impulses:  # applied by that step: off again, silently
            self.source.set_perturbation(name, None)
        self._impulses.clear()
        if b.info:
            with self._lock:
                self._info.update(b.info)
        self._source_events(b, before=True)
        self._process(b)
        self._source_events(b, before=False)

    def end(self) -> None:
        """Close the source and the recording (the worker thread does this when it stops)."""
        self._finish()

    def _run(self) -> None:
        src = self.source
        try:
            self.begin()
            self._pace_reset = True
            rate_t0, rate_n0 = time.perf_counter(), 0
            while not self._stop.is_set():
                self._drain()
                if not self._resume.is_set():
                    self._resume.wait(0.05)
                    self._loop_rate = 0.0
                    rate_t0, rate_n0 = time.perf_counter(), self.n_transitions
                    continue
                if self._pace_reset:
                    wall0, sim0, self._pace_reset = time.monotonic(), self.n_transitions, False
                speed = self.config.speed
                if speed:
                    per_s = speed * src.rate
                    due = (time.monotonic() - wall0) * per_s - (self.n_transitions - sim0)
                    # Step in slices of >= PACE_SLICE of wall time (or one transition): a
                    # worker waking a thousand times a second to make one step keeps taking
                    # the GIL from the GUI thread (measured: 10 frames/s instead of 30).
                    need = max(1.0, per_s * PACE_SLICE)
                    if due < need:
                        time.sleep(min(PACE_SLICE, (need - due) / per_s))
                        continue
                    n = int(min(due, max(src.chunk, per_s * 2 * PACE_SLICE)))
                else:
                    # As fast as possible: big slices keep the worker's Python (GIL-holding)
                    # overhead per transition low; each still takes only ~10 ms.
                    n = src.chunk * MAX_SPEED_CHUNKS if src.rate >= 100 else src.chunk
                n = self.plan(n)
                if n == 0:
                    break
                t0 = time.perf_counter()
                try:
                    b = src.step(n)
                except SourcePaused as exc:
                    self._source_paused(exc)
                    continue
                self.advance(b)
                now = time.perf_counter()
                if now > t0 and len(b):
                    self._throughput = 0.9 * self._throughput + 0.1 * len(b) / (now - t0)
                if rate_n0 == 0 and now - t0 > 0.1:
                    # A slow first step (kernels loading from numba's cache) is start-up,
                    # not loop: pace and measure from its end rather than catch up after it.
                    self._pace_reset = True
                    rate_t0, rate_n0 = now, self.n_transitions
                elif now - rate_t0 >= 0.5:
                    self._loop_rate = (self.n_transitions - rate_n0) / (now - rate_t0)
                    rate_t0, rate_n0 = now, self.n_transitions
                if not src.passive and now - self._agency_at >= AGENCY_EVERY:
                    self._update_agency()
                    self._agency_at = time.perf_counter()
                if b.done:
                    self._event("source_done")
                    break
            # Commands sent just before stop() still count (a button pressed, then Stop).
            self._drain()
            self._state = "stopped"
            self._loop_rate = 0.0
        except Exception as exc:  # reported, the thread ends cleanly
            self._error = f"{type(exc).__name__}: {exc}"
            self._state = "error"
            tb = traceback.format_exc(limit=8)
            try:
                self._event("error", message=self._error, traceback=tb)
            except Exception:
                pass
        finally:
            self._finish()

    def _source_paused(self, exc: SourcePaused) -> None:
        """The source cannot go on for now: pause, keep what it made, wait for a resume."""
        self._state = "paused"
        self._resume.clear()
        self._paused_reason = str(exc)
        self._loop_rate = 0.0
        self._event("source_paused", message=str(exc), **exc.record)

    def _finish(self) -> None:
        try:
            self.source.close()
        finally:
            if self._recorder is not None and not self._recorder.closed:
                self._event("session_end", state=self._state, error=self._error)
                self._recorder.close(final_state=self._state, error=self._error)
            for fn in self._listeners:
                fn()


def _versions() -> dict[str, str]:
    import platform
    import sys

    out = {"python": sys.version.split()[0], "platform": platform.platform()}
    for mod in ("numpy", "numba", "idt_desk"):
        try:
            out[mod] = __import__(mod).__version__
        except Exception:
            out[mod] = "?"
    return out


def undefined_reason(windows: Mapping[str, np.ndarray], j: int) -> str | None:
    """Why window ``j``'s P is undefined (NaN), in one line; None when it is defined.

    P = MI / (H(S) + H(A) + H(S')) has no value when the denominator is 0: every S, A and S'
    symbol in the window is the same (a constant signal, or values clamped into one edge
    bin). Such a window is a gap, never a measured 0.
    """
    p = float(windows["P"][j])
    if p == p:
        return None
    parts = [float(windows[c][j]) for c in ("H_S", "H_A", "H_S_next") if c in windows]
    if all(x == x for x in parts) and sum(abs(x) for x in parts) == 0.0:
        return ("constant window: every S, A and S' symbol is the same "
                "(H(S) + H(A) + H(S') = 0)")
    return "P is not a number in this window (its entropies could not be computed)"


def run_headless(
    session: Session,
    *,
    steps: int | None = None,
    progress: Callable[[Snapshot], None] | None = None,
    interval: float = 0.25,
) -> Snapshot:
    """Run a session for ``steps`` transitions (or until the source ends), reporting progress."""
    session.limit = steps
    session.start()
    try:
        while session.running:
            session.wait(interval)
            if progress is not None:
                progress(session.snapshot(limit=1))
    finally:
        session.stop()
    return session.snapshot(limit=1)

