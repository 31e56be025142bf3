"""The seams between a session and its collaborators: what each may ask of the other.

A :class:`~idt_desk.live.session.Session` owns the pipeline and the windows; its
collaborators own their own state: the :class:`~idt_desk.live.worker.LoopState` (running,
paused, stopped), the :class:`~idt_desk.live.worker.Pacer` (loop time against the wall
clock), the :class:`~idt_desk.live.commands.Commands` (the queue, the schedule, pending
impulses), the :class:`~idt_desk.live.sink.Sink` (the recording) and the
:class:`~idt_desk.live.alarms.Alarms` (lights, onsets, Auto). Each reaches the session only
through one of the ``*Host`` protocols below, and the session reaches each collaborator
through the protocol it implements, so a reader knows what a helper can touch and a test can
hand it a small stand-in (``tests/test_seams.py``). This module names no collaborator's
class: it sits below all of them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from idt_desk.detection.auto import AutoController
from idt_desk.detection.monitor import Monitor
from idt_desk.live.config import SessionConfig
from idt_desk.live.snapshot import Snapshot
from idt_desk.live.source import Batch, Source
from idt_desk.metrics.presets import Preset
from idt_desk.pipeline import Pipeline

__all__ = ["AlarmState", "CalibrationHost", "CommandHost", "CommandQueue", "Dialogue",
           "EventLog", "LoopControl", "LoopHost", "Pace", "RecordedHost", "Recording",
           "Runnable"]


# -- what the collaborators offer ----------------------------------------------------------


class LoopControl(Protocol):
    """Where the loop is (``worker.LoopState``)."""

    state: str
    error: str | None

    @property
    def stop_requested(self) -> bool:
        """Asked to stop."""

    @property
    def held(self) -> bool:
        """Paused: the source is not stepped."""

    def pause(self, reason: str | None = None) -> None:
        """Hold the loop."""

    def resume(self) -> None:
        """Go on after a pause."""

    def wait_held(self, seconds: float) -> None:
        """Wait while held, up to ``seconds``."""

    def finish(self, error: str | None = None) -> None:
        """The loop is over: stopped, or in error."""


class Pace(Protocol):
    """Loop time against the wall clock (``worker.Pacer``)."""

    loop_rate: float

    def reset(self) -> None:
        """Pace from the next step on."""

    def idle(self, n_done: int) -> None:
        """The loop is held."""

    def allowance(self, n_done: int, speed: float | None, rate: float, chunk: int) -> int:
        """Steps due now (0: none yet)."""

    def stepped(self, k: int, t0: float, n_done: int) -> None:
        """The source made ``k`` transitions."""

    def agency_due(self) -> bool:
        """Time to recompute the agency conditions."""

    def agency_done(self) -> None:
        """They were just recomputed."""


class CommandQueue(Protocol):
    """The commands waiting for the loop (``commands.Commands``)."""

    def drain(self, host: CommandHost) -> None:
        """Carry out every queued command."""

    def arm_impulse(self, name: str) -> None:
        """``name`` acts for the next step only."""


class Recording(Protocol):
    """The session's recording (``sink.Sink``)."""

    @property
    def recording(self) -> bool:
        """A recording is open."""

    def open(self, host: RecordedHost, path: Path) -> None:
        """Start recording into ``path``."""

    def close(self, final_state: str | None = None, error: str | None = None) -> None:
        """Close the recording, if one is open."""

    def rewrite_config(self, host: RecordedHost) -> None:
        """The pipeline changed: the header says so."""


class AlarmState(Protocol):
    """Alarm lights, onsets and Auto (``alarms.Alarms``)."""

    auto: AutoController | None

    def new_onset(self, name: str | None, i: int, impulse: bool = False) -> None:
        """A perturbation went on at transition ``i``."""

    def onset_off(self, name: str | None, i: int) -> None:
        """It went off at transition ``i``."""


class Dialogue(Protocol):
    """A dialogue's turn path (``turns.TurnPath``), as a recording's header reads it."""

    #: Its token metrics (``metrics.tokens.DialogueMetrics``: ``tokenizer.describe()``).
    dialogue: Any
    #: Every turn so far, with its texts and metrics.
    log: Sequence[Mapping[str, Any]]


# -- what the session offers its collaborators ---------------------------------------------


class EventLog(Protocol):
    """Logs an event at transition ``at`` (default: now), to the session and its recording."""

    def event(self, kind: str, at: int | None = None, **fields: Any) -> None:
        """Log ``kind`` with ``fields`` at transition ``at`` (default: now)."""


class CalibrationHost(Protocol):
    """What the calibration still to come is read from (``alarms.baseline_span``)."""

    config: SessionConfig
    source: Source
    preset: Preset
    monitor: Monitor
    pipeline: Pipeline
    n_transitions: int
    #: Transition index of the pipeline's sample 0 (it restarts with every rebuild).
    offset: int

    def next_window_end(self) -> int:
        """Transition index at which the pipeline's next window ends."""


class RecordedHost(EventLog, Protocol):
    """What a recording's header states (``Sink.open``)."""

    config: SessionConfig
    source: Source
    preset: Preset
    n_transitions: int
    turns: Dialogue | None

    def pipeline_settings(self) -> dict[str, Any]:
        """The pipeline's settings in force."""


class CommandHost(CalibrationHost, RecordedHost, Protocol):
    """What a command changes (``commands.HANDLERS``)."""

    alarms: AlarmState
    loop_state: LoopControl
    pacer: Pace
    sink: Recording
    commands: CommandQueue

    def rebuild_pipeline(self) -> None:
        """Rebuild symbols, engine and monitor from the configuration."""


class LoopHost(CommandHost, Protocol):
    """What the worker thread drives (``worker.run_loop``): one step of the loop at a time."""

    def begin(self) -> None:
        """Open the recording asked for, warm the kernels, reset the source."""

    def plan(self, n: int) -> int:
        """Apply due commands; how many of ``n`` steps the source may take (0: done)."""

    def advance(self, b: Batch) -> None:
        """Take in what the source returned."""

    def end(self) -> None:
        """Close the source and the recording."""

    def update_agency(self) -> None:
        """Recompute the agency conditions of the latest window."""


class Runnable(Protocol):
    """What drives a session from outside (``worker.run_headless``)."""

    #: Stop by itself after this many transitions (None: run until stopped).
    limit: int | None

    @property
    def running(self) -> bool:
        """The worker thread is alive."""

    def start(self) -> None:
        """Start the worker thread."""

    def wait(self, timeout: float | None = None) -> bool:
        """Wait for the worker to end by itself."""

    def stop(self, timeout: float = 10.0) -> None:
        """Ask the worker to stop and wait for it."""

    def snapshot(self, limit: int = 2000) -> Snapshot:
        """Copies of the latest windows and of the session's state."""
