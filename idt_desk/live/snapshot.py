"""What a session's snapshot says about its detector (the alarm panel's words)."""

from __future__ import annotations

from typing import Any

from idt_desk.detection.monitor import Monitor

__all__ = ["detector_info"]


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
