"""``idt-desk run``: a session headless, with a progress line and a report of what it found.

Ctrl-C and SIGTERM end it cleanly: the recording is complete and says how it ended.
"""

from __future__ import annotations

import argparse
import json
import math
import signal
import sys
from pathlib import Path
from typing import Any

from idt_desk.cli.signals import deferred_signals
from idt_desk.cli.validate import (
    add_settings,
    build_source,
    check_float,
    check_int,
    check_limit,
    check_out_dir,
    parse_auto,
    parse_speed,
    path_arg,
    schedule_switches,
)
from idt_desk.errors import InputError
from idt_desk.settings import DEFAULTS, PIPELINE_KEYS, SETTINGS, PipelineSettings, SettingError
from idt_desk.words import say

__all__ = ["ALARM_EXIT", "add_run"]

#: ``--fail-on-alarm``'s exit status when an IDT alarm fired (2 is a usage error, 130 and 143
#: an interruption).
ALARM_EXIT = 3


#: The session options, in the order ``--help`` lists them: each one's type, range, default
#: and help come from the settings table (``idt_desk.settings.SETTINGS``).
SESSION_OPTIONS = ("preset", "bins", "window", "stride", "calibration_windows",
                   "baseline_windows", "detector", "false_alarms", "persist", "ewma_lambda",
                   "drift", "phase_baseline", "twin", "k", "correction", "seed")


def _add_session_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--source", default="pendulum", help="source name (see: idt-desk sources)")
    p.add_argument("--set", action="append", metavar="KEY=VALUE", default=[],
                   help="set a declared source setting (repeatable)")
    add_settings(p, SESSION_OPTIONS)
    p.add_argument("--baseline", type=path_arg, metavar="PROFILE",
                   help="a baseline profile (idt-desk fit RUN... --out PROFILE): its symbols, "
                   "twin and detectors, so the first window is judged; the options left unset "
                   "are the profile's")


def baseline_setting(path: Path | None) -> dict[str, Any] | None:
    """``--baseline PROFILE`` read and checked (one line if it cannot be used), as a setting."""
    if path is None:
        return None
    from idt_desk.recordings.profile import Profile

    return Profile.read(path).setting()


def _pipeline_args(args: argparse.Namespace) -> dict[str, Any]:
    """The pipeline settings the options give (``--correction none`` read as None)."""
    given = {key: getattr(args, key) for key in PIPELINE_KEYS if hasattr(args, key)}
    return {k: None if v == "none" and SETTINGS[k].unset == "none" else v
            for k, v in given.items()}


def _blame(args: argparse.Namespace, exc: SettingError) -> InputError:
    """The error as the option that gave the value: "--ewma-lambda 2.0: must be ..."."""
    value = getattr(args, exc.field)
    flag = f"--{exc.field.replace('_', '-')}" + ("" if isinstance(value, bool) else f" {value}")
    return InputError(f"{flag}: {exc.why or exc}")


def _check_pipeline(args: argparse.Namespace) -> PipelineSettings:
    """Every pipeline option checked, read once, before anything is built (errors: the flag)."""
    check_limit("seed", args.seed)
    try:
        return PipelineSettings.parse(_pipeline_args(args))
    except SettingError as exc:
        raise _blame(args, exc) from None


def _overridden(args: argparse.Namespace, session) -> str:
    """The pipeline options given that a replay's recorded pipeline overrides, in words."""
    if not session.source.recorded_pipeline():
        return ""
    out = []
    for key, given in _pipeline_args(args).items():
        default = DEFAULTS[key]
        used = getattr(session.config, key)
        if used is None and key in ("bins", "window", "stride"):
            used = getattr(session.preset, key)  # the recorded preset's
        if given != default and given != used:
            out.append(f"--{key.replace('_', '-')} {given} (recorded: {used})")
    return ", ".join(out)


def _steps(args: argparse.Namespace, rate: float) -> int | None:
    """Transitions to run from --steps or --seconds (None: until the source ends / Ctrl-C)."""
    if args.steps is not None:
        return check_int("--steps", args.steps, 1, 10**15)
    if args.seconds is None:
        return None
    check_float("--seconds", args.seconds, 0.0, lo_open=True)
    steps = args.seconds * rate
    if not (math.isfinite(steps) and 1 <= round(steps) <= 10**15):
        raise InputError(f"--seconds {args.seconds}: gives {steps:g} transitions at "
                         f"{rate:g} per second; allowed: {1 / rate:g} to {1e15 / rate:g} s")
    return round(steps)


def _build_session(args: argparse.Namespace, source, speed: float | None,
                   record: Path | None, auto: dict | None = None):
    from idt_desk.live.session import Session, SessionConfig
    from idt_desk.metrics.presets import PRESETS

    preset = PRESETS.get(args.preset) if args.preset else None
    n_state = len(source.state_names)
    if preset is not None and preset.n_state not in (None, n_state):
        raise InputError(
            f"--preset {preset.name}: expects {preset.n_state} state variables, "
            f"{source.name} has {n_state}; its presets: {', '.join(source.presets) or 'none'}"
        )
    config = SessionConfig(source=args.source, **_pipeline_args(args), speed=speed,
                           seed=args.seed, auto=auto, profile=baseline_setting(args.baseline))
    try:
        return Session(config, source=source, record=record)
    except InputError:  # a baseline profile that does not fit: its one line, as it is
        raise
    except SettingError as exc:  # what only the source decides (its preset, its units)
        # Blame an option only if it was given; else say where the value came from.
        given = _pipeline_args(args)
        if exc.field in given and given[exc.field] != DEFAULTS[exc.field]:
            raise _blame(args, exc) from None
        raise InputError(f"{_origin(args, source)}: {exc}") from None
    except ValueError as exc:  # what the source's own checks refuse (a recording's data)
        raise InputError(f"{_origin(args, source)}: {exc}") from None


def _origin(args: argparse.Namespace, source) -> str:
    """Where a value no option gave came from."""
    return "the recording's pipeline" if source.replays else \
        f"{source.name}'s default settings"


def add_run(sub: argparse._SubParsersAction) -> None:
    """The ``run`` command: a session headless."""
    p = sub.add_parser(
        "run", help="run a source headless through the IDT pipeline, optionally recording",
        description="Run a source without the GUI: the same session, pipeline and recordings. "
        "A step is one transition (one turn for a dialogue). Without --seconds/--steps a "
        "replay runs to its end and other sources until Ctrl-C (or SIGTERM), which stops the "
        "session cleanly and closes the recording (exit code 130, or 143 for SIGTERM).",
    )
    _add_session_options(p)
    g = p.add_mutually_exclusive_group()
    g.add_argument("--seconds", type=float, help="seconds of the loop's own time")
    g.add_argument("--steps", type=int, help="number of transitions")
    p.add_argument("--record", type=path_arg,
                   help="record the session into this new directory")
    p.add_argument("--speed", default="max",
                   help="multiple of real time (> 0), or 'max' (default) for as fast as possible")
    p.add_argument("--perturb", action="append", default=[], metavar="SPEC",
                   help="schedule a perturbation: NAME[:k=v,...]@START[-END] in seconds")
    p.add_argument("--modulate", action="append", default=[], metavar="SPEC",
                   help="schedule a modulation: NAME[:k=v,...]@START[-END] in seconds "
                   "(hold, input_filter, dim_reduction)")
    p.add_argument("--auto", metavar="NAME[:k=v,...]",
                   help="Auto controller: engage this modulation when the IDT alarm persists "
                   "(persist=N windows, default 3) and release it after release=M quiet ones "
                   "(default 10), e.g. hold:mode=repeat,persist=3,release=10")
    p.add_argument("--quiet", action="store_true", help="no progress line")
    p.add_argument("--fail-on-alarm", action="store_true",
                   help=f"exit with status {ALARM_EXIT} when the IDT alarm fired (for a script "
                   "or a CI job to gate on)")
    p.set_defaults(func=_run_run)


class _Interrupted(Exception):
    """Raised in the main thread, outside any join, once SIGINT/SIGTERM has arrived."""


class _SourcePaused(Exception):
    """The source paused the loop (a dialogue's server failed): headless, that ends the run."""


def _progress_text(snap) -> str:
    """The progress line's status: transitions' time, windows, the latest P and its state."""
    from idt_desk.live import session as session_module

    w = snap.windows
    j = len(w["P"]) - 1
    p = float(w["P"][j]) if j >= 0 else math.nan
    reason_of = getattr(session_module, "undefined_reason", None)
    reason = reason_of(w, j) if reason_of is not None and j >= 0 else None
    if j >= 0 and p != p:
        reason = reason or "P is NaN"
    cal, need = snap.calibration
    have, wanted = getattr(snap, "baseline_progress", (0, 0)) or (0, 0)
    if cal < need:
        status = f"calibrating {cal}/{need}"
    elif reason:
        status = f"P undefined ({reason.split(':')[0].split(' (')[0]})"
    elif snap.alarm.get("IDT"):
        status = "ALARM"
    elif snap.baseline is None and wanted:
        status = f"baseline {have}/{wanted}"
    else:
        status = "ok"
    warning = getattr(snap, "out_of_range_warning", None)
    if warning:
        status += (f"; symbols out of range ({float(warning.get('fraction', math.nan)):.0%} of "
                   "the window clamped to edge bins")
        from idt_desk.live.ranges import VERDICTS

        verdict = VERDICTS.get((warning.get("recheck") or {}).get("verdict"))
        status += f"; {verdict})" if verdict else ")"
    p_text = f"{p:.4f}" if p == p else "—"
    rec = getattr(snap, "recording", None)
    from idt_desk.recordings import recording_size

    # A recording at full speed grows by gigabytes a minute: its size is always in view.
    size = f" rec={recording_size(rec)[1]}" if rec else ""
    if getattr(snap, "tokenizer", None) is not None:  # a dialogue: one window per turn
        return f"turn={snap.n_transitions} P={p_text} {status}{size}"
    return f"t={snap.sim_time:.1f}s windows={snap.n_windows} P={p_text} {status}{size}"


def _run_run(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from idt_desk.live.session import run_headless

    # Every option is checked before anything is built, simulated or written.
    speed = parse_speed(args.speed)
    _check_pipeline(args)
    if check_out_dir(args.record, "--record") is not None and \
            (args.record / "config.json").exists():
        raise InputError(f"--record {args.record}: already holds a recording; choose a new path")
    source = build_source(args.source, args.set)
    try:
        steps = _steps(args, source.rate)
        schedule = [*schedule_switches(args.perturb, source, steps, "perturb"),
                    *schedule_switches(args.modulate, source, steps, "modulate")]
        auto = parse_auto(args.auto, source)
        session = _build_session(args, source, speed, args.record, auto)
    except InputError:
        source.close()
        raise
    for at, kind, cmd in schedule:
        session.schedule(at, kind, **cmd)
    _warn_overlaps(session, args.perturb, steps)
    if source.notice:
        say(f"idt-desk run: note: {source.notice}", file=sys.stderr)
    if getattr(source, "follow", False):
        # Why following stopped (the writer went silent, the recording went away) is said
        # as it happens; headless, nothing else would show it.
        session.add_event_listener(
            lambda ev: say(f"idt-desk run: note: {ev.get('text')}", file=sys.stderr)
            if ev["kind"] == "note" and not ev.get("replayed") else None)
    if (ignored := _overridden(args, session)):
        say(f"idt-desk run: note: a replay runs the recorded pipeline: {ignored} ignored",
              file=sys.stderr)
    bar = None if args.quiet else tqdm(total=steps, unit="tr", dynamic_ncols=True,
                                        desc=session.source.name)

    # From here to the last line printed, SIGINT/SIGTERM (a first or a second one) only
    # ask for a clean stop: nothing can interrupt closing the recording or the report.
    with deferred_signals() as received:

        def progress(snap) -> None:
            if bar is not None:
                # The postfix first, without a refresh: the update draws the bar once, with
                # the count and the loop time of the same snapshot.
                bar.set_postfix_str(_progress_text(snap), refresh=False)
                bar.update(snap.n_transitions - bar.n)
            if received:  # outside any join: run_headless's finally stops the session
                raise _Interrupted
            if snap.state == "paused" and getattr(snap, "paused_reason", None):
                raise _SourcePaused(snap.paused_reason)

        paused = None
        try:
            snap = run_headless(session, steps=steps, progress=progress)
        except _Interrupted:
            snap = session.snapshot(limit=1)
        except _SourcePaused as exc:
            snap, paused = session.snapshot(limit=1), str(exc)
        finally:
            if bar is not None:
                bar.close()
        events = session.events_since(0)
        code = _report_run(args, snap, received, events)
        if code == 0 and args.fail_on_alarm and any(
                e["kind"] == "alarm_on" and e.get("metric") == "IDT" for e in events):
            return ALARM_EXIT
        if paused is not None and code == 0:
            # What was made is recorded (the partial reply in a source_paused event).
            say(f"idt-desk run: {paused}", file=sys.stderr)
            return 2
        return code


def _warn_overlaps(session, specs: list[str], steps: int | None) -> None:
    """Say on stderr, before the run, which --perturb falls into the calibration.

    The same words the session logs (``baseline_overlap``) when the perturbation goes on.
    """
    from idt_desk.live.alarms import baseline_overlap, overlap_text

    src = session.source
    for spec in specs:
        items = schedule_switches([spec], src, steps, "perturb")
        if src.perturbation(items[0][2]["name"]).scheduled:
            continue  # its impulses come later, at the schedule's moments
        overlap = baseline_overlap(session, items[0][0], items[1][0] if len(items) > 1 else None)
        if overlap is None:
            continue
        name = items[0][2]["name"]
        label = next((p.label for p in src.perturbations if p.name == name), name)
        after = (f"turn {overlap['end']}" if overlap["unit"] == "turn"
                 else f"{overlap['end_t']:,.2f} s")
        say(f"idt-desk run: warning: --perturb {spec}: {overlap_text(label, overlap)}; "
              f"start it after {after}, or shorten --baseline-windows", file=sys.stderr)


def _verdict_lines(events: list[dict]) -> list[str]:
    """Each perturbation's verdict, how far it moved the components and what it cost."""
    from idt_desk.live.alarms import (
        attribution_text,
        during_alarm_text,
        impact_text,
        severity_text,
    )

    lines = []
    for ev in events:
        if ev.get("replayed") or ev.get("kind") not in ("detected", "not_detected", "impact"):
            continue
        if ev["kind"] == "impact" and ev.get("episodes_after", 1) != 1:
            continue  # the first episode's cost here; the latest is the run's last line
        i = ev.get("onset_i")
        at = "?" if not isinstance(i, int) else (
            f"turn {i + 1}" if ev.get("unit") == "turn" else f"on at transition {i:,}")
        head = f"{ev.get('name')} ({at}): "
        if ev["kind"] == "detected":
            unit, n = ev.get("unit", "window"), ev.get("latency")
            moved = severity_text(ev.get("severity"))
            named = attribution_text(ev)
            lines.append(head + f"detected {n} {unit}{'s' if n != 1 else ''} after the onset"
                         + (f"; moved {moved}" if moved else "")
                         + (f"; what changed: {named}" if named else ""))
        elif ev["kind"] == "not_detected":
            lines.append(head + ("not detected while it was on" if ev.get("off") else
                                 f"not detected within {ev.get('horizon')} "
                                 f"{ev.get('unit', 'window')}s")
                         + (f": {during_alarm_text(ev)}" if ev.get("during_alarm") else ""))
        else:
            lines.append(head + impact_text(ev))
    return lines


def _report_run(args: argparse.Namespace, snap, received: list[int],
                events: list[dict] | None = None) -> int:
    """Print what ran and what was recorded; the exit code (128 + signal if interrupted)."""
    if getattr(snap, "tokenizer", None) is not None:
        n = snap.n_transitions
        say(f"{snap.source}: {n} turn{'' if n == 1 else 's'}, state {snap.state}")
    else:
        say(f"{snap.source}: {snap.n_transitions} transitions, {snap.n_windows} windows, "
              f"{snap.sim_time:.2f} s of loop time, state {snap.state}")
    cal, need = getattr(snap, "calibration", (0, 0)) or (0, 0)
    if getattr(snap, "tokenizer", None) is None and snap.n_windows == 0 and cal < need:
        say(f"note: no window: the symbols are calibrated on the first {need:,} "
              f"transitions (W + (calibration windows − 1) × stride) and the run had "
              f"{snap.n_transitions:,}; run longer or use a shorter --window")
    det = getattr(snap, "detector", None)
    if det:
        n = getattr(snap, "n_alarms", 0)
        unit = "turns" if getattr(snap, "tokenizer", None) is not None else "windows"
        if not det["calibrated"]:
            base = f"baseline not complete ({det['baseline_windows']} {unit} needed): no verdict"
        elif det["too_short"]:
            base = (f"baseline {det['baseline_windows']} {unit}, too short for the budget"
                    + (f" (about {det['needed_windows']:,} needed)"
                       if det.get("needed_windows") else ""))
        else:
            base = f"baseline {det['baseline_windows']} {unit}"
        say(f"alarm: {det['describe']}; {base}; {n} alarm{'s' if n != 1 else ''}")
        for ev in events or []:  # a baseline profile: which, and whether the loop sat in it
            ref = ev.get("profile") if ev.get("kind") == "baseline" else None
            if isinstance(ref, dict):
                runs = len(ref.get("fitted_on") or [])
                say(f"baseline: profile {ref.get('path') or '(by value)'} "
                    f"({str(ref.get('digest'))[:12]}), {ref.get('windows', 0):,} windows of "
                    f"{runs} run{'s' * (runs != 1)}, armed from the first window")
            elif ev.get("kind") == "profile_check":
                say(f"profile check: {ev.get('said')}")
        caveat = (getattr(snap, "preset", None) or {}).get("caveat")
        if caveat:
            say(f"caveat ({snap.preset.get('name')}): {caveat}")
    for line in _verdict_lines(events or []):
        say(f"perturbation: {line}")
    impact = (getattr(snap, "onset", None) or {}).get("impact")
    if impact and impact.get("episodes_after", 1) > 1:
        from idt_desk.live.alarms import impact_text

        say(f"perturbation: {snap.onset.get('name')}, latest: {impact_text(impact)}")
    confound = (getattr(snap, "info", None) or {}).get("length_confound")
    if confound:
        rs = ", ".join(f"{m} {c['n_S_next']['r']:+.2f}" for m, c in confound.items()
                       if isinstance(c, dict) and c["n_S_next"]["r"] is not None)
        say(f"length confound: r with log(1 + tokens) of S' over turns 1-{confound['turns']}: "
              f"{rs}")
    n_undefined = getattr(snap, "n_undefined", 0)
    if n_undefined:
        say(f"{n_undefined} window(s) had P undefined (constant windows: every S, A and S' "
              "symbol the same, H(S) + H(A) + H(S') = 0)")
    rec = ""
    if args.record is not None and (args.record / "config.json").exists():
        from idt_desk.recordings import recording_size

        config = json.loads((args.record / "config.json").read_text())
        complete = bool(config.get("complete"))
        say(f"recorded into {args.record} ({recording_size(args.record)[1]})"
              + ("" if complete else " (incomplete: the session did not close it)"))
        if complete:
            rec = (f"; the recording in {args.record} is complete "
                   f"({config.get('n_transitions')} transitions)")
    if snap.error:
        say(f"idt-desk run: error: {snap.error}", file=sys.stderr)
        return 1
    if received:
        say(f"idt-desk run: interrupted by {signal.Signals(received[0]).name}: stopped "
              f"cleanly after {snap.n_transitions} transitions{rec}", file=sys.stderr)
        return 128 + received[0]
    return 0
