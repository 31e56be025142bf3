"""IDT Desk: the Information Digital Twin's core, free of Qt.

Symbolise continuous (S, A, S') streams, compute bi-predictability P, forward and backward
predictive uncertainty H_f, H_b and their asymmetry dH over sliding windows, and detect
3-sigma excursions against a baseline; read session recordings back with
:func:`load_recording` and export them with :func:`export_recording`.
"""

from __future__ import annotations

from idt_desk.detection.monitor import (
    IDT_METRICS,
    Baseline,
    Detection,
    Monitor,
    detect,
    detection_latency,
    first_post_onset_window,
)
from idt_desk.errors import InputError
from idt_desk.live.recorder import Recorder
from idt_desk.metrics.engine import (
    WINDOW_KEYS,
    MetricEngine,
    sliding_metrics,
    surrogate_null,
    window_means,
)
from idt_desk.metrics.presets import PRESETS, Preset, get_preset
from idt_desk.metrics.symbolize import SymbolizationError, Symbolizer, combine_digits
from idt_desk.recordings import RecordingError, export_recording, load_recording
from idt_desk.recordings.trajectory import Trajectory, load_trajectory

__version__ = "0.1.0"

__all__ = [
    "IDT_METRICS",
    "PRESETS",
    "WINDOW_KEYS",
    "Baseline",
    "Detection",
    "InputError",
    "MetricEngine",
    "Monitor",
    "Preset",
    "Recorder",
    "RecordingError",
    "SymbolizationError",
    "Symbolizer",
    "Trajectory",
    "combine_digits",
    "detect",
    "detection_latency",
    "export_recording",
    "first_post_onset_window",
    "get_preset",
    "load_recording",
    "load_trajectory",
    "sliding_metrics",
    "surrogate_null",
    "window_means",
]
