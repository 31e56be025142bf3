"""A session's snapshot: the copy of its state a consumer (the GUI's timer, the CLI) reads."""

from __future__ import annotations

from typing import Any

from idt_desk.live.config import Snapshot

__all__ = ["take_snapshot"]


def take_snapshot(session: Any, limit: int = 2000) -> Snapshot:
    """Copies of ``session``'s latest ``limit`` windows and of its state, under its lock."""
    ses = session
    with ses._lock:
        windows = ses._ring.tail(limit)
        rec = ses._recorder
        pipe = ses._pipe
        return Snapshot(
            state=ses._state,
            error=ses._error,
            source=ses.source.name,
            n_transitions=ses.n_transitions,
            n_windows=ses._ring.total,
            sim_time=ses._sim_time,
            speed=ses.config.speed,
            preset=ses._preset_dict,
            calibration=(pipe.n_buffered if not pipe.calibrated
                         else pipe.calibration_transitions, pipe.calibration_transitions),
            baseline=ses.monitor.baseline,
            baseline_progress=ses.monitor.baseline_progress,
            windows=windows,
            info=dict(ses._info),
            events=list(ses._events),
            switches=list(ses._switches),
            active_perturbations={k: dict(v) for k, v in
                                  ses.source.active_perturbations.items()},
            active_modulations={k: dict(v) for k, v in ses.source.active_modulations.items()},
            auto=ses._alarms.auto_state(),
            alarm=dict(ses._alarms.alarm),
            onset=None if ses._alarms.onset is None else dict(ses._alarms.onset),
            recording=str(rec.path) if rec is not None and not rec.closed else None,
            throughput=ses._throughput,
            loop_rate=ses._loop_rate,
            out_of_range_warning=None if ses._range.warning is None
            else dict(ses._range.warning),
            n_undefined=ses._n_undefined,
            agency=ses._agency,
            paused_reason=ses._paused_reason,
            tokenizer=ses.config.tokenizer if ses._turn_path else None,
            detector=detector_info(ses),
            n_alarms=ses._alarms.n_alarms,
        )


def detector_info(session: Any) -> dict[str, Any]:
    """The alarm's detector in words, for the alarm panel (see ``Snapshot.detector``).

    Cached on the session until the baseline comes or goes (snapshots are taken 30 times a
    second).
    """
    mon = session.monitor
    info = session._detector_cache
    if info is None or info["calibrated"] != (mon.baseline is not None):
        cal = mon.calibration
        info = {"describe": mon.describe(), "kind": mon.spec.kind,
                "budget": None if mon.budget is None else str(mon.budget),
                "baseline_windows": mon.n_baseline, "calibrated": mon.baseline is not None,
                "too_short": bool(cal is not None and cal.too_short),
                "needed_windows": None if cal is None else cal.needed_windows,
                "thresholds": {} if cal is None else dict(cal.threshold)}
        session._detector_cache = info
    return info
