"""IDT Desk: the Information Digital Twin's core, free of Qt.

Symbolise continuous (S, A, S') streams, compute bi-predictability P, forward and backward
predictive uncertainty H_f, H_b and their asymmetry dH over sliding windows, and detect
3-sigma excursions against a baseline; read session recordings back with
:func:`load_recording` and export them with :func:`export_recording`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from idt_desk.lazy import lazy_names

#: Where each public name lives: imported on first use, so that ``idt-desk --help`` and a
#: listing start without numpy's, pandas' and numba's import time (``import idt_desk`` alone
#: imports nothing heavy).
_WHERE = {
    "IDT_METRICS": "idt_desk.detection.monitor",
    "Baseline": "idt_desk.detection.monitor",
    "Detection": "idt_desk.detection.monitor",
    "Monitor": "idt_desk.detection.monitor",
    "detect": "idt_desk.detection.monitor",
    "detection_latency": "idt_desk.detection.monitor",
    "first_post_onset_window": "idt_desk.detection.monitor",
    "InputError": "idt_desk.errors",
    "Recorder": "idt_desk.live.recorder",
    "WINDOW_KEYS": "idt_desk.metrics.engine",
    "MetricEngine": "idt_desk.metrics.engine",
    "sliding_metrics": "idt_desk.metrics.engine",
    "surrogate_null": "idt_desk.metrics.engine",
    "window_means": "idt_desk.metrics.engine",
    "PRESETS": "idt_desk.metrics.presets",
    "Preset": "idt_desk.metrics.presets",
    "get_preset": "idt_desk.metrics.presets",
    "SymbolizationError": "idt_desk.metrics.symbolize",
    "Symbolizer": "idt_desk.metrics.symbolize",
    "combine_digits": "idt_desk.metrics.symbolize",
    "RecordingError": "idt_desk.recordings",
    "export_recording": "idt_desk.recordings",
    "load_recording": "idt_desk.recordings",
    "Trajectory": "idt_desk.recordings.trajectory",
    "load_trajectory": "idt_desk.recordings.trajectory",
}

if TYPE_CHECKING:  # what type checkers and editors see; at run time, __getattr__
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


__getattr__, __dir__ = lazy_names(__name__, _WHERE, globals())


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
