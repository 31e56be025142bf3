"""What a session shows: its snapshot and its detector in words.

:class:`Snapshot` is the copy of its state the window and the command line read 30 times a
second; :func:`detector_info` what it says about its detector (the alarm panel's words).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from idt_desk.detection.monitor import Baseline, Monitor

__all__ = ["Snapshot", "detector_info"]


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
    #: Windows so far whose P is undefined (see :func:`idt_desk.live.config.undefined_reason`).
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
    #: The source's transitions per second of loop time (real time: speed 1).
    rate: float = 0.0
    #: The latest alarm's class of change (an ``attributed`` event's fields, ``alarm_i`` its
    #: first window's end), None before one is named.
    attribution: dict[str, Any] | None = None
    #: How far the latest alarm moved each component, its mean z up to the alarm (an
    #: ``alarm_on`` event's ``severity``), None before the first.
    severity: dict[str, float] | None = None
    #: The latest IDT alarm, ``{"i": its first window's end, "t": its loop time}`` (None
    #: before one): what the panel describes, whatever the onset's verdict was.
    latest_alarm: dict[str, Any] | None = None

    @property
    def achieved_speed(self) -> float | None:
        """The multiple of real time the loop ran at lately (None: not measured yet)."""
        if self.state != "running" or self.loop_rate <= 0 or self.rate <= 0:
            return None
        return self.loop_rate / self.rate



def detector_info(monitor: Monitor, cached: dict[str, Any] | None = None) -> dict[str, Any]:
    """The alarm's detector in words, for the alarm panel (see ``Snapshot.detector``).

    ``cached``: the last answer, kept while the baseline has neither come nor gone
    (snapshots are taken 30 times a second).
    """
    if cached is not None and cached["calibrated"] == (monitor.baseline is not None):
        return cached
    cal = monitor.calibration
    return {"describe": monitor.describe(), "kind": monitor.spec.kind,
            "budget": None if monitor.budget is None else str(monitor.budget),
            "baseline_windows": monitor.n_baseline, "calibrated": monitor.baseline is not None,
            "too_short": bool(cal is not None and cal.too_short),
            "needed_windows": None if cal is None else cal.needed_windows,
            "thresholds": {} if cal is None else dict(cal.threshold)}
