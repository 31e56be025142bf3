"""A small ended run for the listing tests (fleet table, hostile trees here and over SSH)."""

from __future__ import annotations

import time

import numpy as np

from idt_desk.recordings import RecordingWriter


def alarmed_run(path, alarms: int = 0) -> None:
    """An ended run at ``path``: 100 transitions, a session start, ``alarms`` IDT alarms."""
    rec = RecordingWriter(path, {"session": {}}, ["x"], ["u"], ["start", "end", "P"])
    rec.add_event({"kind": "session_start", "i": 0, "t": 0.0, "wall": time.time(),
                   "pipeline": {"calibration_windows": 2, "baseline_windows": 5}})
    z = np.zeros((100, 1))
    rec.add_transitions(0, None, z, z, z, None, None)
    for j in range(alarms):
        rec.add_event({"kind": "alarm_on", "metric": "IDT", "i": 50 + j, "t": 5.0 + j,
                       "wall": time.time()})
    rec.close()
