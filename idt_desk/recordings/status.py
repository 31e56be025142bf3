"""A run's state in one small file: what ``idt-desk runs`` and the fleet view read.

Each writer (:class:`~idt_desk.recordings.RecordingWriter`: the dashboard's recordings,
``idt_desk.Recorder``, ``IDTMonitor``/``IDTCallback`` with ``record=``) keeps ``status.json``
beside its files and replaces it whole (write a temporary file, then rename: a reader sees the
old or the new one, never half of one) when its rows are flushed and once a second while it is
idle (its heartbeat). A listing then opens one small file a run, and only for the runs whose
file changed since the last look: never a whole transitions file.

The status is a fold of the run's events (:meth:`RunStatus.fold`) and its row counts; a
recording written before status files existed is folded from its ``events.jsonl`` the same way
(:mod:`idt_desk.recordings.runs`). One mechanism, whoever reads.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from idt_desk.detection.spec import COSTLY_RETURN
from idt_desk.metrics.regime import REGIMES
from idt_desk.words import change_text

__all__ = ["BASELINE_STATES", "STATUS_FILE", "RunStatus", "write_status"]

#: The status file's name inside a recording directory.
STATUS_FILE = "status.json"

_NAMES = {"P": "P", "H_f": "H_f", "H_b": "H_b", "dH": "ΔH", "reward": "reward"}


@dataclass
class RunStatus:
    """What a run has done so far, as its events and row counts say.

    ``baseline``: ``calibrating`` (the symbols), ``gathering n/N``, ``armed`` or ``too short``
    (armed, with thresholds the calibration raised), or ``""`` (no session events).
    ``regime``: the estimator's regime in the latest window (a writer's last windows).
    ``severity``: the latest alarm's largest move ("ΔH −3.0σ"); ``cost``: the latest
    return change a perturbation was charged ("−0.1 %, cheap"); ``changed``: the latest alarm's
    class of change ("sensor", "unknown"; its ``attributed`` event's). Times: ``last_alarm`` in loop
    seconds, ``rows_wall``/``beat_wall`` the writer's wall clock at its last rows / heartbeat.
    """

    transitions: int = 0
    windows: int = 0
    alarms: int = 0
    last_alarm: float | None = None
    severity: str | None = None
    changed: str | None = None
    cost: str | None = None
    baseline: str = ""
    calibration_windows: int | None = None
    baseline_windows: int | None = None
    calibrated_at: int | None = None
    ended: bool = False
    #: The estimator's regime in the latest window (``idt_desk.metrics.regime``; "": none yet).
    regime: str = ""
    error: str | None = None
    started_wall: float | None = None
    rows_wall: float | None = None
    beat_wall: float | None = None

    def fold(self, event: dict[str, Any]) -> None:
        """Take in one event (unknown kinds and malformed fields are passed over)."""
        kind = event.get("kind")
        wall = _number(event.get("wall"), WALL_MAX)
        if self.started_wall is None and wall is not None:
            self.started_wall = wall
        if kind == "session_start":
            pipe = event.get("pipeline") if isinstance(event.get("pipeline"), dict) else {}
            self.calibration_windows = _count(pipe.get("calibration_windows"))
            self.baseline_windows = _count(pipe.get("baseline_windows"))
            self.baseline = "calibrating" if pipe.get("window") is not None or \
                self.calibration_windows is not None else self.baseline
            self.calibrated_at = None
        elif kind == "calibrated":
            self.calibrated_at = self.windows
            self.baseline = "gathering"
        elif kind == "baseline":
            self.baseline = "too short" if _too_short(event.get("detector")) else "armed"
        elif kind == "alarm_on" and event.get("metric") in ("IDT", None):
            self.alarms += 1
            self.last_alarm = _number(event.get("t"), LOOP_TIME_MAX)
            self._moved(event.get("severity"))  # every alarm's (a training run's too)
        elif kind == "detected":
            self._moved(event.get("severity"))  # a scheduled perturbation's detection
        if kind in ("attributed", "detected") and isinstance(event.get("attribution"), str):
            self.changed = event["attribution"][:TEXT_CHARS]
        elif kind == "impact":
            change = _number(event.get("change"), 1e6)
            if change is not None:
                word = "costly" if event.get("costly") else "cheap" if change <= 0 \
                    else "a gain"
                self.cost = f"{change_text(change, COSTLY_RETURN)}, {word}"
        elif kind in ("session_end", "recording_stop"):
            self.ended = True
            if event.get("error"):
                self.error = str(event["error"])[:TEXT_CHARS]

    def _moved(self, severity: Any) -> None:
        """The latest alarm's largest move, "ΔH −3.0σ" (malformed values passed over)."""
        if not isinstance(severity, dict):
            return
        moved = {k: _number(v, 1e6) for k, v in severity.items() if k != "reward"}
        moved = {k: v for k, v in moved.items() if v is not None}
        if moved:
            top = max(moved, key=lambda k: abs(moved[k]))
            self.severity = f"{_NAMES.get(top, top)} {moved[top]:+.1f}σ"

    def baseline_text(self) -> str:
        """``gathering n/N`` from the counts, or the state as it is."""
        if self.baseline == "gathering" and self.baseline_windows:
            # The baseline starts after the windows the symbols were calibrated on (a writer
            # may count them only after its "calibrated" event).
            done = max(0, self.windows - max(self.calibrated_at or 0,
                                             self.calibration_windows or 0))
            return f"gathering {min(done, self.baseline_windows):,}/{self.baseline_windows:,}"
        return self.baseline or "—"

    def to_json(self) -> dict[str, Any]:
        """The status file's content (JSON-able, finite numbers only)."""
        out = asdict(self)
        out["baseline_text"] = self.baseline_text()
        return {k: (None if isinstance(v, float) and not math.isfinite(v) else v)
                for k, v in out.items()}

    @classmethod
    def from_json(cls, data: Any) -> RunStatus:
        """A status file's content, checked field by field.

        Raises
        ------
        ValueError
            Not a JSON object, or a field of the wrong type (the message names it).
        """
        if not isinstance(data, dict):
            raise ValueError("not a JSON object")
        out = cls()
        for f in fields(cls):
            if f.name not in data or data[f.name] is None:
                continue
            v = data[f.name]
            if f.name in _COUNTS:
                if _count(v) is None:
                    raise ValueError(f"{f.name}: not a count ({_short(v)})")
                v = int(v)
            elif f.name == "ended":
                if not isinstance(v, bool):
                    raise ValueError(f"{f.name}: not true or false ({_short(v)})")
            elif f.name == "baseline":
                if v not in BASELINE_STATES:
                    raise ValueError(f"baseline: not one of {', '.join(BASELINE_STATES[1:])} "
                                     f"({_short(v)})")
            elif f.name == "regime":
                if v not in ("", *REGIMES):
                    raise ValueError(f"regime: not one of {', '.join(REGIMES)} ({_short(v)})")
            elif f.name in ("severity", "changed", "cost", "error"):
                if not isinstance(v, str):
                    raise ValueError(f"{f.name}: not a string ({_short(v)})")
                v = v if len(v) <= TEXT_CHARS else v[:TEXT_CHARS] + "…"
            elif f.name.endswith("_wall"):
                if _number(v, WALL_MAX) is None or v < 0:
                    raise ValueError(f"{f.name}: not a time of the writer's clock ({_short(v)})")
            elif _number(v, LOOP_TIME_MAX) is None:
                raise ValueError(f"{f.name}: not a loop time in seconds ({_short(v)})")
            setattr(out, f.name, v)
        return out


#: The fields that hold counts (whole numbers from 0 to :data:`COUNT_MAX`).
_COUNTS = ("transitions", "windows", "alarms", "calibration_windows", "baseline_windows",
           "calibrated_at")
#: What ``baseline`` may say (a writer's states; "" before a session's events).
BASELINE_STATES = ("", "calibrating", "gathering", "armed", "too short")
#: The largest count a status file may hold (a loop a billion steps a second for 11 days).
COUNT_MAX = 10**15
#: The latest wall-clock time (seconds since 1970) a status may name: the year 5138.
WALL_MAX = 1e11
#: The largest loop time (seconds) a status may name: 30,000 years.
LOOP_TIME_MAX = 1e12
#: The longest text field kept (an error, a severity): cut with "…" beyond.
TEXT_CHARS = 200


def _short(v: Any) -> str:
    """A field's value in a message: its repr, cut at 40 characters."""
    text = repr(v)
    return text if len(text) <= 40 else text[:40] + "…"


def write_status(directory: Path, status: RunStatus) -> None:
    """Replace ``directory``/status.json whole: a new temporary file, then a rename.

    Never written through a link put in its place
    (:func:`~idt_desk.recordings.files.replace_whole`).
    """
    from idt_desk.recordings.files import replace_whole

    replace_whole(Path(directory) / STATUS_FILE,
                  json.dumps(status.to_json(), allow_nan=False).encode("utf-8"))


def _number(v: Any, limit: float = math.inf) -> float | None:
    """``v`` as a float when it is a finite number no larger than ``limit`` in size."""
    if isinstance(v, bool) or not isinstance(v, int | float):
        return None
    try:
        v = float(v)
    except OverflowError:  # an integer of 400 digits
        return None
    return v if math.isfinite(v) and abs(v) <= limit else None


def _count(v: Any) -> int | None:
    if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= COUNT_MAX:
        return None
    return int(v)


def _too_short(detector: Any) -> bool:
    """Whether a ``baseline`` event's detector says its calibration asked for more windows."""
    if not isinstance(detector, dict):
        return False
    cals = detector.get("calibrations")
    groups = cals.values() if isinstance(cals, dict) else [detector]
    return any(isinstance(g, dict) and g.get("too_short") is True for g in groups)
