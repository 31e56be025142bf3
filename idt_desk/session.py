"""The session runner: one source in a worker thread, the IDT pipeline, ring buffers.

::

    source (worker thread) --batches--> modulation state -> recorder -> symboliser -> engine
        ^ commands (thread-safe queue)                                   -> monitor/controller
    consumers (GUI timer, CLI progress) <-- snapshot() copies of lock-protected ring buffers

Nothing here imports Qt: the GUI and the headless ``idt-desk run`` drive the same class.
Commands take effect at the next chunk boundary (a few milliseconds of loop time); the
worker checks its stop flag between chunks. A source exception stops the session cleanly
with its message in ``error`` and an ``error`` event in the recording.
"""

from __future__ import annotations

import queue
import threading
import time
import traceback
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from idt_desk._engine import MetricEngine
from idt_desk._monitor import IDT_METRICS, Baseline, Monitor
from idt_desk._symbolize import Symbolizer, wrap_angle
from idt_desk.controller import AutoController
from idt_desk.presets import PRESETS, Preset
from idt_desk.recording import Recorder
from idt_desk.source import Batch, Source

__all__ = ["WINDOW_COLUMNS", "Session", "SessionConfig", "Snapshot"]

#: Columns of the session's windows (ring buffer, recording, snapshot).
WINDOW_COLUMNS = (
    "start", "end", "t", "P", "H_f", "H_b", "dH", "MI", "H_S", "H_A", "H_S_next", "H_SA",
    "H_SAS", "H_A_given_S", "MI_A_S_next_given_S", "K_SAS", "unique_frac", "reward",
    "x_P", "x_H_f", "x_H_b", "x_dH", "x_IDT", "x_reward",
)
#: Wall-clock granularity of real-time pacing (s).
PACE_SLICE = 0.02
#: At maximum speed, chunks of this many ``source.chunk`` per step (fast sources).
MAX_SPEED_CHUNKS = 40
_FLAG_OF = {"P": "x_P", "H_f": "x_H_f", "H_b": "x_H_b", "dH": "x_dH", "IDT": "x_IDT",
            "reward": "x_reward"}


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
        The monitor's baseline is the first this-many windows after calibration.
    k
        Excursion threshold in baseline standard deviations.
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
    baseline_windows: int = 30
    k: float = 3.0
    correction: str | None = None
    speed: float | None = 1.0
    seed: int = 0
    history: int = 20000
    auto: dict[str, Any] | None = None
    #: A full preset (``Preset.to_dict()``) used instead of looking ``preset`` up by name; a
    #: replay sets it to the recorded one.
    preset_spec: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form."""
        return asdict(self)


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
    throughput: float


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

    Parameters
    ----------
    config
        The session configuration.
    source
        An already-built source (otherwise built from ``config.source``/``settings``).
    record
        Directory to record into from the start (``start_recording`` can start later).
    """

    def __init__(
        self,
        config: SessionConfig | None = None,
        source: Source | None = None,
        record: str | Path | None = None,
    ) -> None:
        self.config = config or SessionConfig()
        if source is None:
            from idt_desk.plugins import load_source

            source = load_source(self.config.source)(**self.config.settings)
        self.source = source
        self.config.source = source.name
        self.config.settings = dict(source.config)
        overrides = getattr(source, "pipeline_overrides", lambda: None)()
        if overrides:
            # A replay re-runs the pipeline exactly as it was recorded.
            for key, value in overrides.items():
                setattr(self.config, key, value)
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
        # Perturbation/modulation switches, kept apart so alarm chatter cannot push the start
        # of a long perturbation out of the bounded event log.
        self._switches: deque[dict[str, Any]] = deque(maxlen=200)
        self._info: dict[str, Any] = {}
        self._alarm = {m: False for m in (*IDT_METRICS, "IDT", "reward")}
        self._onset: dict[str, Any] | None = None
        self._recorder: Recorder | None = None
        self._pending_record = Path(record) if record is not None else None
        self.n_transitions = 0
        #: Stop by itself after this many transitions (None: run until stopped).
        self.limit: int | None = None
        self._schedule: list[tuple[int, str, dict[str, Any]]] = []
        self._sim_time = 0.0
        self._throughput = 0.0
        self._listeners: list[Callable[[], None]] = []
        self._build_pipeline()
        source.should_stop = self._stop.is_set

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
                   "baseline_windows", "correction", "k", "preset_spec"}
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
            )

    # -- pipeline ---------------------------------------------------------------------------

    def _pipeline_dict(self) -> dict[str, Any]:
        c = self.config
        return {"preset": c.preset, "bins": c.bins, "window": c.window, "stride": c.stride,
                "calibration_windows": c.calibration_windows,
                "baseline_windows": c.baseline_windows, "correction": c.correction, "k": c.k,
                "preset_spec": c.preset_spec}

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
        for key in ("calibration_windows", "baseline_windows"):
            if p.get(key) is not None and p[key] < 2:
                raise ValueError(f"{key} must be >= 2")
        return preset

    def _build_pipeline(self) -> None:
        """(Re)build symbolisers, engine and monitor from the configuration."""
        c = self.config
        self.preset = self._resolve_preset(self._pipeline_dict())
        self._preset_dict = self.preset.to_dict()  # snapshots are taken 30 times a second
        ds = len(self.source.state_names)
        self._sym_s = Symbolizer(ds, self.preset.bins, self.preset.state_groups,
                                 names=self.source.state_names)
        self._sym_a = None
        if not self.source.passive:
            self._sym_a = Symbolizer(len(self.source.action_names), self.preset.bins,
                                     self.preset.action_groups, names=self.source.action_names)
        self.engine = MetricEngine(self.preset.window, self.preset.stride,
                                   has_action=not self.source.passive, correction=c.correction)
        metrics = (*IDT_METRICS, "reward") if self.source.has_reward else IDT_METRICS
        self.monitor = Monitor(c.baseline_windows, c.k, metrics)
        self._calibrated = False
        self._calib_needed = self.preset.window + (c.calibration_windows - 1) * self.preset.stride
        self._calib: list[Batch] = []
        self._n_calib_buffered = 0
        self._offset = self.n_transitions  # transition index of the engine's sample 0
        self._tail_t = np.empty(0)
        self._tail_r = np.empty(0)
        self._unwrap_state: np.ndarray | None = None
        auto = c.auto
        self._auto = None if auto is None else AutoController(
            auto["modulation"], dict(auto.get("params", {})), int(auto.get("persist", 3)),
            int(auto.get("release", 10)))

    def _angles(self, x: np.ndarray) -> np.ndarray:
        """Angle handling of the preset on a block of states (continuous across batches)."""
        idx = list(self.preset.angles)
        if not idx or self.preset.angle_mode == "none":
            return x
        x = x.copy()
        if self.preset.angle_mode == "wrap":
            x[:, idx] = wrap_angle(x[:, idx])
        return x  # "unwrap": sources deliver continuous angles already

    def _symbolise(self, b: Batch) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        s = self._sym_s.transform(self._angles(b.s))
        n = self._sym_s.transform(self._angles(b.s_next))
        a = self._sym_a.transform(b.a) if self._sym_a is not None else None
        return s, n, a

    def _process(self, b: Batch) -> None:
        n = len(b)
        if n == 0:
            return
        i0 = self.n_transitions
        t = b.t if b.t is not None else (i0 + 1 + np.arange(n)) / self.source.rate
        if self._recorder is not None:
            self._recorder.add_transitions(i0, t, b.s, b.a, b.s_next, b.reward, b.episode)
        self.n_transitions += n
        self._sim_time = float(t[-1])
        # Time and reward of recent transitions, for each window's end time and mean reward
        # (during calibration, of every buffered transition: they are windowed at once).
        keep = self.preset.window + n + (0 if self._calibrated else self._n_calib_buffered)
        self._tail_t = np.concatenate([self._tail_t, t])[-keep:]
        r = b.reward if b.reward is not None else np.full(n, np.nan)
        self._tail_r = np.concatenate([self._tail_r, r])[-keep:]
        if not self._calibrated:
            self._calib.append(b)
            self._n_calib_buffered += n
            if self._n_calib_buffered < self._calib_needed:
                return
            self._calibrate()
            return
        self._feed(*self._symbolise(b))

    def _calibrate(self) -> None:
        batches, self._calib = self._calib, []
        # Exactly the first `calibration_windows` windows' transitions, whatever the batching.
        need = self._calib_needed
        s = np.vstack([b.s for b in batches])[:need]
        self._sym_s.fit(self._angles(s))
        if self._sym_a is not None:
            self._sym_a.fit(np.vstack([b.a for b in batches])[:need])
        self._calibrated = True
        self._event("calibrated", transitions=len(s), symbolizer=self._sym_s.to_dict(),
                    action_symbolizer=None if self._sym_a is None else self._sym_a.to_dict())
        parts = [self._symbolise(b) for b in batches]
        self._feed(
            np.concatenate([p[0] for p in parts]),
            np.concatenate([p[1] for p in parts]),
            None if self._sym_a is None else np.concatenate([p[2] for p in parts]),
        )

    def _feed(self, s: np.ndarray, n: np.ndarray, a: np.ndarray | None) -> None:
        w = self.engine.push(s, n, a)
        k = len(w["start"])
        if k == 0:
            return
        W = self.preset.window
        start = w["start"] + self._offset
        end = start + W
        # Windows end within the tail buffers kept in _process.
        tail_end = self.n_transitions
        idx_end = end - 1 - (tail_end - len(self._tail_t))
        table: dict[str, np.ndarray] = {c: w[c] for c in w if c in WINDOW_COLUMNS}
        table["start"], table["end"] = start, end
        table["t"] = self._tail_t[idx_end]
        if self.source.has_reward:
            csum = np.concatenate([[0.0], np.cumsum(self._tail_r)])
            table["reward"] = (csum[idx_end + 1] - csum[idx_end + 1 - W]) / W
        flags = self.monitor.update(table)
        ready = self.monitor.baseline is not None
        for m, col in _FLAG_OF.items():
            if m in flags:
                # Windows that went into the baseline carry NaN, not "no excursion".
                f = flags[m].astype(np.float64)
                if not ready:
                    f[:] = np.nan
                table[col] = f
        if ready and self.monitor.baseline.n_windows and "baseline_logged" not in self._info:
            self._info["baseline_logged"] = True
            self._event("baseline", **self.monitor.baseline.to_dict())
        self._update_alarms(table, flags, k)
        with self._lock:
            self._ring.append(table, k)
        if self._recorder is not None:
            self._recorder.add_windows(table)
        for fn in self._listeners:
            fn()

    def _update_alarms(self, table: dict[str, np.ndarray], flags: dict, k: int) -> None:
        for m in self._alarm:
            if m not in flags:
                continue
            f = flags[m]
            now = bool(f[-1])
            if now != self._alarm[m] and m == "IDT":
                self._event("alarm_on" if now else "alarm_off", metric=m,
                            window_start=int(table["start"][-1]))
            self._alarm[m] = now
        if self._onset is not None and self._onset.get("latency") is None:
            first = self._onset["first_window"]
            hits = np.flatnonzero(flags["IDT"] & (table["end"] > self._onset["i"]))
            if first is None:
                seen = np.flatnonzero(table["end"] > self._onset["i"])
                if seen.size:
                    self._onset["first_window"] = first = self._ring.total + int(seen[0])
            if hits.size and first is not None:
                self._onset["latency"] = self._ring.total + int(hits[0]) - first
        if self._auto is not None:
            for j, what in self._auto.update(flags["IDT"]):
                name = self._auto.modulation
                if what == "engage":
                    params = self.source.set_modulation(name, self._auto.params)
                    self._event("modulation_on", name=name, params=params, auto=True,
                                window_start=int(table["start"][j]))
                else:
                    self.source.set_modulation(name, None)
                    self._event("modulation_off", name=name, auto=True,
                                window_start=int(table["start"][j]))

    # -- worker -----------------------------------------------------------------------------

    def _event(self, kind: str, at: int | None = None, **fields: Any) -> None:
        """Log an event at transition ``at`` (default: now) to the ring and the recording."""
        ev = {"kind": kind, "i": self.n_transitions if at is None else at,
              "t": self._sim_time, "wall": time.time(), **fields}
        with self._lock:
            self._events.append(ev)
            if kind.startswith(("perturbation_", "modulation_")):
                self._switches.append(ev)
        if self._recorder is not None:
            self._recorder.add_event(ev)

    def _command(self, kind: str, **args: Any) -> None:
        self._commands.put((kind, args))
        if kind == "resume":
            self._resume.set()

    def _open_recorder(self, path: Path) -> None:
        cfg = {
            "session": self.config.to_dict(),
            "source": {"name": self.source.name, "label": self.source.label,
                       "settings": dict(self.source.config), "rate": self.source.rate,
                       "has_reward": self.source.has_reward,
                       "passive": self.source.passive, "view": self.source.view},
            "preset": self.preset.to_dict(),
            "versions": _versions(),
            "start_index": self.n_transitions,
        }
        self._recorder = Recorder(path, cfg, self.source.state_names, self.source.action_names,
                                  WINDOW_COLUMNS)
        self._event("recording_start", path=str(path),
                    pipeline={**self._pipeline_dict(), "preset": None,
                              "preset_spec": self.preset.to_dict()},
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
                self._onset = {"name": name, "i": self.n_transitions, "first_window": None,
                               "latency": None}
                self._event("perturbation_on", name=name, params=resolved)
            else:
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
            self._event("reconfigure", pipeline={**self._pipeline_dict(), "preset": None,
                                                 "preset_spec": self.preset.to_dict()})
            if self._recorder is not None:
                self._recorder.write_config(session=self.config.to_dict(),
                                            preset=self.preset.to_dict())
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

    def _apply_pipeline_events(self, b: Batch) -> None:
        """A replayed pipeline change, applied before the batch: at the recorded transition."""
        for ev in b.events:
            if ev.get("kind") == "calibrate_baseline":
                self._apply("calibrate_baseline", {"n": ev.get("n")})
            elif ev.get("kind") == "reconfigure":
                self._apply("reconfigure", dict(ev.get("pipeline") or {}))

    def _record_source_events(self, b: Batch, i0: int) -> None:
        """Events the source saw (episode ends...), at the transition they belong to."""
        for ev in b.events:
            kind = ev.get("kind", "source")
            if kind in ("calibrate_baseline", "reconfigure"):
                continue
            # A replayed event's own i/t/wall belong to the original session.
            fields = {k: v for k, v in ev.items() if k not in ("kind", "i", "t", "wall")}
            i = i0 + int(fields.pop("row", len(b) - 1)) + 1
            if kind == "perturbation_on":
                # A replayed onset: latency is measured from it as from a live one.
                self._onset = {"name": fields.get("name"), "i": i, "first_window": None,
                               "latency": None}
            self._event(kind, at=i, **fields)

    def _run(self) -> None:
        src = self.source
        try:
            if self._pending_record is not None:
                self._open_recorder(self._pending_record)
                self._pending_record = None
            src.reset(seed=self.config.seed)
            self._event("session_start", source=src.name, settings=dict(src.config),
                        pipeline=self._pipeline_dict())
            self._pace_reset = True
            while not self._stop.is_set():
                self._drain()
                if not self._resume.is_set():
                    self._resume.wait(0.05)
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
                while self._schedule and self._schedule[0][0] <= self.n_transitions:
                    _, kind, args = self._schedule.pop(0)
                    self._apply(kind, args)
                if self._schedule:
                    n = min(n, self._schedule[0][0] - self.n_transitions)
                if self.limit is not None:
                    n = min(n, self.limit - self.n_transitions)
                    if n <= 0:
                        break
                t0 = time.perf_counter()
                b = src.step(max(1, n))
                self._apply_pipeline_events(b)
                if b.info:
                    with self._lock:
                        self._info.update(b.info)
                i0 = self.n_transitions
                self._process(b)
                self._record_source_events(b, i0)
                dt = time.perf_counter() - t0
                if dt > 0 and len(b):
                    self._throughput = 0.9 * self._throughput + 0.1 * len(b) / dt
                if b.done:
                    self._event("source_done")
                    break
            # Commands sent just before stop() still count (a button pressed, then Stop).
            self._drain()
            self._state = "stopped"
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

