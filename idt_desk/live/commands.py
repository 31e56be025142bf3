"""A session's commands: what a button, a schedule or a replayed event asks of the loop.

Commands reach the worker thread through :class:`Commands`' queue and are carried out
between chunks, at an exact transition: pause, resume, speed, perturb, modulate, auto,
calibrate_baseline, reconfigure, note and record, each by its handler in :data:`HANDLERS`.
A source's own events (a replay's recorded switches) are placed at the transition they
belong to (:func:`source_events`).
"""

from __future__ import annotations

import queue
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from idt_desk.live.alarms import auto_controller, baseline_overlap
from idt_desk.live.sink import pipeline_record
from idt_desk.live.source import Batch
from idt_desk.settings import check_limit, check_pipeline

if TYPE_CHECKING:
    from idt_desk.live.seams import CommandHost

__all__ = ["HANDLERS", "Commands", "source_events", "warn_overlap"]

#: A command's handler: what it does to the session, from its arguments.
Handler = Callable[["CommandHost", dict[str, Any]], None]


class Commands:
    """The commands waiting for the loop: the queue (any thread), the schedule, impulses.

    ``put`` may be called from any thread; everything else runs in the loop's thread.
    """

    def __init__(self) -> None:
        self._queue: queue.Queue[tuple[str, dict[str, Any]]] = queue.Queue()
        #: (transition, kind, args), in transition order.
        self._schedule: list[tuple[int, str, dict[str, Any]]] = []
        #: One-shot perturbations applied by the next step, then switched off silently.
        self._impulses: list[str] = []

    def put(self, kind: str, args: dict[str, Any]) -> None:
        """Queue a command for the loop's next chunk boundary."""
        if kind not in HANDLERS:
            raise ValueError(f"unknown command {kind!r}; known: {', '.join(sorted(HANDLERS))}")
        self._queue.put((kind, args))

    def schedule(self, at: int, kind: str, args: dict[str, Any]) -> None:
        """Carry ``kind`` out exactly when ``at`` transitions have been processed."""
        if kind not in HANDLERS:
            raise ValueError(f"unknown command {kind!r}; known: {', '.join(sorted(HANDLERS))}")
        self._schedule.append((int(at), kind, args))
        self._schedule.sort(key=lambda c: c[0])

    def next_due(self) -> int | None:
        """The transition of the next scheduled command (None: none left)."""
        return self._schedule[0][0] if self._schedule else None

    def apply_due(self, host: CommandHost) -> None:
        """Carry out the scheduled commands due at the host's transition."""
        while self._schedule and self._schedule[0][0] <= host.n_transitions:
            _, kind, args = self._schedule.pop(0)
            apply(host, kind, args)

    def drain(self, host: CommandHost) -> None:
        """Carry out every queued command; a bad one is logged as an error event."""
        while True:
            try:
                kind, args = self._queue.get_nowait()
            except queue.Empty:
                return
            try:
                apply(host, kind, args)
            except Exception as exc:  # a bad command must not kill the loop
                host.event("error", command=kind, message=f"{type(exc).__name__}: {exc}")

    def arm_impulse(self, name: str) -> None:
        """``name`` acts for the next step only (:meth:`take_impulses` after it)."""
        self._impulses.append(name)

    def take_impulses(self) -> list[str]:
        """The impulses the last step applied (and forget them)."""
        names, self._impulses = self._impulses, []
        return names


def apply(host: CommandHost, kind: str, args: dict[str, Any]) -> None:
    """Carry out one command (from the queue, the schedule or a replayed event)."""
    try:
        handler = HANDLERS[kind]
    except KeyError:
        raise ValueError(f"unknown command {kind!r}") from None
    handler(host, args)


def _pause(host: CommandHost, args: dict[str, Any]) -> None:
    host.loop_state.pause()
    host.event("pause")


def _resume(host: CommandHost, args: dict[str, Any]) -> None:
    host.loop_state.resume()
    host.pacer.reset()
    host.event("resume")


def _speed(host: CommandHost, args: dict[str, Any]) -> None:
    host.config.speed = args["speed"]
    host.pacer.reset()
    host.event("speed", speed=args["speed"])


def _perturb(host: CommandHost, args: dict[str, Any]) -> None:
    src = host.source
    name, params = args["name"], args["params"]
    if params is None:
        if name in src.active_perturbations:
            src.set_perturbation(name, None)
            host.alarms.onset_off(name, host.n_transitions)
            host.event("perturbation_off", name=name)
        return
    resolved = src.set_perturbation(name, params)
    declared = src.perturbation(name)
    impulse = declared.is_impulse(resolved)
    if not declared.scheduled:  # armed only: latency counts from its impulses
        host.alarms.new_onset(name, host.n_transitions, impulse)
    if impulse:
        # One shot: applied by the next step, then off again (Session.advance).
        host.commands.arm_impulse(name)
        host.event("perturbation_pulse", name=name, params=resolved)
    else:
        # A schedule says so: the plots shade no period for it, a replay starts no latency
        # from it (its impulses are logged by the source).
        host.event("perturbation_on", name=name, params=resolved,
                   **({"scheduled": True} if declared.scheduled else {}))
    warn_overlap(host, [name])


def _modulate(host: CommandHost, args: dict[str, Any]) -> None:
    src = host.source
    name, params = args["name"], args["params"]
    if params is None:
        if name in src.active_modulations:
            src.set_modulation(name, None)
            host.event("modulation_off", name=name, auto=False)
    else:
        resolved = src.set_modulation(name, params)
        host.event("modulation_on", name=name, params=resolved, auto=False)


def _auto(host: CommandHost, args: dict[str, Any]) -> None:
    auto = args["auto"]
    old = host.alarms.auto
    if old is not None and old.engaged:
        host.source.set_modulation(old.modulation, None)
        host.event("modulation_off", name=old.modulation, auto=True)
    host.config.auto = auto
    host.alarms.auto = auto_controller(auto)
    host.event("auto", auto=auto)


def _calibrate_baseline(host: CommandHost, args: dict[str, Any]) -> None:
    check_limit("baseline_windows", args.get("n"))
    host.monitor.recalibrate(args.get("n"))
    if args.get("n"):
        host.config.baseline_windows = int(args["n"])
    host.event("calibrate_baseline", n=host.monitor.n_baseline)
    warn_overlap(host, list(host.source.active_perturbations))


def _reconfigure(host: CommandHost, args: dict[str, Any]) -> None:
    check_pipeline(args, strict=True)  # a replayed change is data: checked, then applied
    for key, value in args.items():
        setattr(host.config, key, value)
    host.rebuild_pipeline()
    host.event("reconfigure", pipeline=pipeline_record(host))
    warn_overlap(host, list(host.source.active_perturbations))
    host.sink.rewrite_config(host)


def _note(host: CommandHost, args: dict[str, Any]) -> None:
    host.event("note", text=args["text"])


def _record(host: CommandHost, args: dict[str, Any]) -> None:
    if host.sink.recording:
        host.event("recording_stop")
    host.sink.close()
    if args["path"] is not None:
        host.sink.open(host, Path(args["path"]))
        if host.n_transitions > 0:
            # A recording is a session-contained experiment: symbols and baseline are
            # calibrated afresh from its own first windows, so it replays exactly.
            host.rebuild_pipeline()
            host.event("reconfigure", pipeline=host.pipeline_settings(), reason="recording")


#: Every command the loop knows, by kind.
HANDLERS: dict[str, Handler] = {
    "pause": _pause, "resume": _resume, "speed": _speed, "perturb": _perturb,
    "modulate": _modulate, "auto": _auto, "calibrate_baseline": _calibrate_baseline,
    "reconfigure": _reconfigure, "note": _note, "record": _record,
}


def warn_overlap(host: CommandHost, names: list[Any]) -> None:
    """Log ``baseline_overlap`` for each perturbation on now while the calibration runs.

    Said at once (the GUI's event log, the recording): the symbols and the baseline gathered
    now take the perturbation for normal, and the alarm calibrated on it cannot see it.
    """
    src = host.source
    # A schedule being on perturbs nothing: its impulses (logged by the source) are told.
    names = [n for n in names if not any(p.name == n and p.scheduled
                                         for p in src.perturbations)]
    overlap = baseline_overlap(host, host.n_transitions, None) if names else None
    if overlap is not None:
        for name in names:
            host.event("baseline_overlap", name=name, **overlap)


def source_events(host: CommandHost, b: Batch, before: bool) -> None:
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
            apply(host, kind, {"n": ev.get("n")} if kind == "calibrate_baseline"
                  else dict(ev.get("pipeline") or {}))
            continue
        # A replayed event's own i/t/wall belong to the original session.
        fields = {k: v for k, v in ev.items() if k not in ("kind", "i", "t", "wall", "row")}
        i = host.n_transitions - len(b) + row + 1 if not before else host.n_transitions
        # Every impulse starts a latency (a schedule's injections included: they are what the
        # schedule does); a period does unless it is a schedule being armed.
        if kind == "perturbation_pulse" or (kind == "perturbation_on"
                                            and not fields.get("scheduled")):
            host.alarms.new_onset(fields.get("name"), i, kind == "perturbation_pulse")
        elif kind == "perturbation_off":
            host.alarms.onset_off(fields.get("name"), i)
        host.event(kind, at=i, **fields)
        if kind in ("perturbation_on", "perturbation_pulse") and before and \
                not fields.get("replayed"):
            # A live source's own impulse (a scheduled injection); a replay replays the
            # recorded session's baseline_overlap events instead.
            warn_overlap(host, [fields.get("name")])
