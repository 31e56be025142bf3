"""A session's commands: what a button, a schedule or a replayed event asks of the loop.

Commands reach the worker thread through a queue and are carried out between chunks, at
an exact transition: pause, resume, speed, perturb, modulate, auto, calibrate_baseline,
reconfigure, note and record. A source's own events (a replay's recorded switches) are
placed at the transition they belong to.
"""

from __future__ import annotations

import queue
from pathlib import Path
from typing import Any

from idt_desk.limits import check_limit, check_pipeline
from idt_desk.live.alarms import auto_controller, baseline_overlap
from idt_desk.live.sink import open_recording, pipeline_record, preset_record
from idt_desk.live.source import Batch

__all__ = ["apply_command", "drain", "source_events", "warn_overlap"]


def apply_command(session: Any, kind: str, args: dict[str, Any]) -> None:
    """Carry out one command (from the queue, the schedule or a replayed event)."""
    src = session.source
    if kind == "pause":
        session._state = "paused"
        session._resume.clear()
        session._event("pause")
    elif kind == "resume":
        session._state = "running"
        session._paused_reason = None
        session._resume.set()
        session._pace_reset = True
        session._event("resume")
    elif kind == "speed":
        session.config.speed = args["speed"]
        session._pace_reset = True
        session._event("speed", speed=args["speed"])
    elif kind == "perturb":
        name, params = args["name"], args["params"]
        on = params is not None
        if not on and name not in src.active_perturbations:
            return
        resolved = src.set_perturbation(name, params)
        if on:
            declared = src.perturbation(name)
            impulse = declared.is_impulse(resolved)
            if not declared.scheduled:  # armed only: latency counts from its impulses
                i = session.n_transitions
                session._alarms.new_onset(name, i, impulse)
            if impulse:
                # One shot: applied by the next step, then off again (see _run).
                session._impulses.append(name)
                session._event("perturbation_pulse", name=name, params=resolved)
            else:
                # A schedule says so: the plots shade no period for it, a replay starts no
                # latency from it (its impulses are logged by the source).
                session._event("perturbation_on", name=name, params=resolved,
                               **({"scheduled": True} if declared.scheduled else {}))
            warn_overlap(session, [name])
        else:
            i = session.n_transitions
            session._alarms.onset_off(name, i)
            session._event("perturbation_off", name=name)
    elif kind == "modulate":
        name, params = args["name"], args["params"]
        if params is None:
            if name in src.active_modulations:
                src.set_modulation(name, None)
                session._event("modulation_off", name=name, auto=False)
        else:
            resolved = src.set_modulation(name, params)
            session._event("modulation_on", name=name, params=resolved, auto=False)
    elif kind == "auto":
        auto = args["auto"]
        old = session._alarms.auto
        if old is not None and old.engaged:
            src.set_modulation(old.modulation, None)
            session._event("modulation_off", name=old.modulation, auto=True)
        session.config.auto = auto
        session._alarms.auto = auto_controller(auto)
        session._event("auto", auto=auto)
    elif kind == "calibrate_baseline":
        check_limit("baseline_windows", args.get("n"))
        session.monitor.recalibrate(args.get("n"))
        if args.get("n"):
            session.config.baseline_windows = int(args["n"])
        session._info.pop("baseline_logged", None)
        session._event("calibrate_baseline", n=session.monitor.n_baseline)
        warn_overlap(session, list(src.active_perturbations))
    elif kind == "reconfigure":
        check_pipeline(args, strict=True)  # a replayed change is data: checked, then applied
        for key, value in args.items():
            setattr(session.config, key, value)
        session._build_pipeline()
        session._info.pop("baseline_logged", None)
        session._event("reconfigure", pipeline=pipeline_record(session))
        warn_overlap(session, list(src.active_perturbations))
        if session._recorder is not None:
            session._recorder.write_config(session=session.config.to_dict(),
                                        preset=preset_record(session))
    elif kind == "note":
        session._event("note", text=args["text"])
    elif kind == "record":
        if session._recorder is not None and not session._recorder.closed:
            session._event("recording_stop")
            session._recorder.close()
        session._recorder = None
        if args["path"] is not None:
            open_recording(session, Path(args["path"]))
            if session.n_transitions > 0:
                # A recording is a session-contained experiment: symbols and baseline are
                # calibrated afresh from its own first windows, so it replays exactly.
                session._build_pipeline()
                session._info.pop("baseline_logged", None)
                session._event("reconfigure", pipeline=session._pipeline_dict(),
                            reason="recording")


def warn_overlap(session: Any, names: list[Any]) -> None:
    """Log ``baseline_overlap`` for each perturbation on now while the calibration runs.

    Said at once (the GUI's event log, the recording): the symbols and the baseline gathered
    now take the perturbation for normal, and the alarm calibrated on them cannot see it.
    """
    src = session.source
    # A schedule being on perturbs nothing: its impulses (logged by the source) are told.
    names = [n for n in names if not any(p.name == n and p.scheduled
                                         for p in src.perturbations)]
    overlap = baseline_overlap(session, session.n_transitions, None) if names else None
    if overlap is not None:
        for name in names:
            session._event("baseline_overlap", name=name, **overlap)


def drain(session: Any) -> None:
    """Carry out every queued command; a bad one is logged as an error event."""
    while True:
        try:
            kind, args = session._commands.get_nowait()
        except queue.Empty:
            return
        try:
            apply_command(session, kind, args)
        except Exception as exc:  # a bad command must not kill the loop
            session._event("error", command=kind, message=f"{type(exc).__name__}: {exc}")


def source_events(session: Any, b: Batch, before: bool) -> None:
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
            apply_command(session, kind, {"n": ev.get("n")} if kind == "calibrate_baseline"
                        else dict(ev.get("pipeline") or {}))
            continue
        # A replayed event's own i/t/wall belong to the original session.
        fields = {k: v for k, v in ev.items() if k not in ("kind", "i", "t", "wall", "row")}
        i = session.n_transitions - len(b) + row + 1 if not before else session.n_transitions
        # Every impulse starts a latency (a schedule's injections included: they are what the
        # schedule does); a period does unless it is a schedule being armed.
        if kind == "perturbation_pulse" or (kind == "perturbation_on"
                                            and not fields.get("scheduled")):
            session._alarms.new_onset(fields.get("name"), i, kind == "perturbation_pulse")
        elif kind == "perturbation_off":
            session._alarms.onset_off(fields.get("name"), i)
        session._event(kind, at=i, **fields)
        if kind in ("perturbation_on", "perturbation_pulse") and before and \
                not fields.get("replayed"):
            # A live source's own impulse (a scheduled injection); a replay replays the
            # recorded session's baseline_overlap events instead.
            warn_overlap(session, [fields.get("name")])
