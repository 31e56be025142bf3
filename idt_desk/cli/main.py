"""The ``idt-desk`` command line."""

from __future__ import annotations

import argparse
import json
import math
import signal
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from idt_desk.cli.validate import (
    build_source,
    check_float,
    check_int,
    check_limit,
    check_out_dir,
    parse_auto,
    parse_speed,
    schedule_switches,
)
from idt_desk.detection.detectors import DETECTOR_KINDS, parse_budget
from idt_desk.errors import InputError
from idt_desk.live.plugins import (
    CommandEntry,
    PluginLoadError,
    discover_commands,
    duplicate_commands,
)

__all__ = ["main"]


def _int_list(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated integers, got {text!r}"
        ) from None


def _groups(text: str) -> tuple[tuple[int, ...], ...]:
    """Parse "0,1,8;2,3,4" into ((0, 1, 8), (2, 3, 4))."""
    return tuple(_int_list(g) for g in text.split(";") if g.strip())


def _names(text: str) -> list[str]:
    return [x.strip() for x in text.split(",") if x.strip()]


def _add_analyze(sub: argparse._SubParsersAction) -> None:
    from idt_desk.metrics.presets import ANGLE_MODES, PRESETS

    p = sub.add_parser(
        "analyze",
        help="symbolise a CSV/Parquet trajectory and compute windowed P, H_f, H_b, dH; or "
        "a dialogue recording's per-turn metrics and their length confound",
        description=(
            "Read a trajectory (columns s_0.., a_0.., s_next_0.., optional reward, episode), "
            "symbolise it with the whole file as calibration, and write the per-window table "
            "(windows.csv), summary.json (min/mean/max/std as in the paper's Tables 1-2) and "
            "metrics.png into --out. Given a dialogue recording (a directory with "
            "turns.jsonl): one row per turn, the length confound (r of each metric with the "
            "log token counts over the baseline turns, --baseline-windows, default the "
            "recording's), the length-adjusted metrics and every injection's z and verdict."
        ),
    )
    p.add_argument("file", type=Path, help="trajectory file (.csv or .parquet), or a dialogue "
                   "recording's directory")
    p.add_argument("--out", type=Path, required=True, help="output directory")
    p.add_argument("--preset", choices=sorted(PRESETS), help="symbolisation/window preset")
    p.add_argument("--bins", type=int, help="equal-width bins per variable (default 16)")
    p.add_argument("--window", type=int, help="window length in transitions (default 300)")
    p.add_argument("--stride", type=int, help="window step in transitions (default 75)")
    p.add_argument("--groups", type=_groups, help='state groups, e.g. "0,1,8;2,3,4;5,6"')
    p.add_argument("--action-groups", type=_groups, help='action groups, e.g. "0,1,2;3,4,5"')
    p.add_argument("--angles", type=_int_list, help="indices of angular state variables")
    p.add_argument("--angle-mode", choices=ANGLE_MODES, help="unwrap (default), wrap or none")
    p.add_argument("--s-prefix", default="s_", help="state column prefix (default s_)")
    p.add_argument("--a-prefix", default="a_", help="action column prefix (default a_)")
    p.add_argument("--s-next-prefix", default="s_next_", help="next-state column prefix")
    p.add_argument("--state-columns", type=_names, help="explicit state columns, comma-separated")
    p.add_argument("--action-columns", type=_names, help="explicit action columns")
    p.add_argument("--passive", action="store_true", help="ignore action columns")
    p.add_argument("--correction", choices=("none", "miller-madow"), default="none")
    p.add_argument("--null", type=int, default=0, metavar="N",
                   help="shuffle-surrogate draws per window (0 = off)")
    p.add_argument("--seed", type=int, default=0, help="seed for the surrogate null")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--onset", type=int,
                   help="perturbation onset (transition index): the baseline is every window "
                        "wholly before it")
    g.add_argument("--baseline-windows", type=int, help="baseline = the first N windows")
    p.add_argument("--k", type=float, default=3.0,
                   help="the paper rule's threshold in sigmas (default 3)")
    p.add_argument("--detector", choices=DETECTOR_KINDS, default="paper",
                   help="paper (default: the first window beyond --k σ, as the paper's "
                   "tables), persistence or cusum (calibrated to --false-alarms, as live)")
    p.add_argument("--false-alarms", metavar="BUDGET",
                   help="budget of a calibrated detector: 1/10000windows (default), or in "
                   "loop time (1/h) with --rate")
    p.add_argument("--persist", type=int, default=5,
                   help="persistence: windows in a row (default 5)")
    p.add_argument("--rate", type=float,
                   help="transitions per second of loop time (for a budget in time)")
    p.set_defaults(func=_run_analyze)


def _run_analyze_dialogue(args: argparse.Namespace) -> int:
    """``analyze`` of a dialogue recording: per-turn metrics, length confound, injections."""
    from idt_desk.experiments.analyze import analyze_dialogue, format_table, write_outputs

    check_out_dir(args.out, "--out")
    if args.baseline_windows is not None:
        check_int("--baseline-windows", args.baseline_windows, 2)
    result = analyze_dialogue(args.file, baseline_turns=args.baseline_windows)
    paths = write_outputs(result, args.out, title=f"{args.file.name} — per turn")
    s = result.summary
    print(f"{args.file}: a dialogue, {s['turns']} turns; baseline turns 1-"
          f"{s['config']['baseline_turns']}")
    print(format_table(s, label=""))
    print("length confound, r with log(1 + tokens) of S' over the baseline turns: " + ", ".join(
        f"{m} {c['n_S_next']['r']:+.2f}" for m, c in s["length_confound"].items()
        if c["n_S_next"]["r"] is not None))
    for inj in s["injections"]:
        print(f"injection at turn {inj['turn']} ({inj['type']}): " + ", ".join(
            f"{d} {'detected' if v['detected'] else 'not'} (z {_z(v['z'])})"
            for d, v in inj.items() if isinstance(v, dict)))
    print("wrote " + ", ".join(str(p) for p in paths))
    return 0


def _z(zs: list[float | None]) -> str:
    return ", ".join("—" if z is None else f"{z:+.1f}" for z in zs)


def _run_analyze(args: argparse.Namespace) -> int:
    if args.file.is_dir() and (args.file / "turns.jsonl").is_file():
        return _run_analyze_dialogue(args)
    from idt_desk.experiments.analyze import (
        analyze_trajectory,
        format_table,
        preset_with_overrides,
        write_outputs,
    )
    from idt_desk.metrics.presets import Preset, get_preset
    from idt_desk.recordings.trajectory import load_trajectory

    base = get_preset(args.preset) if args.preset else Preset(
        "custom", "set from the command line", bins=16, window=300, stride=75,
        angle_mode="unwrap",
    )
    preset = preset_with_overrides(
        base, bins=args.bins, window=args.window, stride=args.stride,
        state_groups=args.groups, action_groups=args.action_groups, angles=args.angles,
        angle_mode=args.angle_mode,
    )
    for key in ("bins", "window", "stride"):
        check_limit(key, getattr(preset, key))
    check_int("--null", args.null, 0, 10_000)
    check_limit("seed", args.seed)
    check_float("--k", args.k, 0.0, lo_open=True)
    check_int("--persist", args.persist, 1, 1000)
    if args.rate is not None:
        check_float("--rate", args.rate, 0.0, lo_open=True)
    if args.false_alarms is not None:
        try:
            parse_budget(args.false_alarms)
        except ValueError as exc:
            raise InputError(f"--false-alarms: {exc}") from None
    check_int("--onset", args.onset, 0)
    check_limit("baseline_windows", args.baseline_windows)
    check_out_dir(args.out, "--out")
    traj = load_trajectory(
        args.file, s_prefix=args.s_prefix, a_prefix=args.a_prefix,
        s_next_prefix=args.s_next_prefix, state_columns=args.state_columns,
        action_columns=args.action_columns, passive=args.passive,
    )
    _check_fits_file(args, preset, traj)
    result = analyze_trajectory(
        traj, preset, correction=None if args.correction == "none" else args.correction,
        null_draws=args.null, seed=args.seed, onset=args.onset,
        n_baseline=args.baseline_windows, k=args.k, source=str(args.file),
        detector=args.detector, false_alarms=args.false_alarms, persist=args.persist,
        rate=args.rate,
    )
    paths = write_outputs(result, args.out, title=f"{args.file.name} — preset {preset.name}")
    s = result.summary
    print(
        f"{args.file}: {s['transitions']} transitions, {s['windows']} windows "
        f"(W={preset.window}, stride {preset.stride}, {preset.bins} bins, "
        f"{'passive' if s['passive'] else 'with action'})"
    )
    print(format_table(s, label=""))
    for note in s["notes"]:
        print(f"note: {note}")
    print("wrote " + ", ".join(str(p) for p in paths))
    return 0


def _check_groups(option: str, groups, n: int, what: str) -> None:
    if groups is None:
        return
    flat = [j for g in groups for j in g]
    if not groups or not all(groups) or len(set(flat)) != len(flat) or \
            any(j < 0 or j >= n for j in flat):
        text = ";".join(",".join(map(str, g)) for g in groups)
        raise InputError(f"{option} {text!r}: groups must be non-empty and use distinct {what} "
                         f"column indices from 0 to {n - 1}")


def _check_fits_file(args: argparse.Namespace, preset, traj) -> None:
    """The options that depend on the file (its length, its columns), before any analysis."""
    n, w, stride = traj.n, preset.window, preset.stride
    if n < w:
        raise InputError(f"--window {w}: {args.file}: {n} transitions, fewer than one window "
                         f"of {w}; allowed: 2 to {max(n, 2)}")
    n_windows = (n - w) // stride + 1
    if args.baseline_windows is not None and args.baseline_windows > n_windows:
        raise InputError(f"--baseline-windows {args.baseline_windows}: {args.file} has "
                         f"{n_windows} windows (W={w}, stride {stride}); allowed: 2 to "
                         f"{n_windows}")
    if args.onset is not None and not w + stride <= args.onset < n:
        raise InputError(f"--onset {args.onset}: must be a transition index from {w + stride} "
                         f"(two baseline windows before it) to {n - 1} ({args.file} has {n} "
                         "transitions)")
    by = "--preset " + preset.name
    n_s = traj.s.shape[1]
    _check_groups("--groups" if args.groups is not None else by, preset.state_groups, n_s,
                  "state")
    if traj.a is not None:
        _check_groups("--action-groups" if args.action_groups is not None else by,
                      preset.action_groups, traj.a.shape[1], "action")
    if preset.angle_mode != "none":
        _check_groups("--angles" if args.angles is not None else by,
                      [preset.angles] if preset.angles else None, n_s, "state")


def _add_bench(sub: argparse._SubParsersAction) -> argparse._SubParsersAction:
    """``bench`` and its core children; sources add theirs as ``bench.NAME`` commands."""
    p = sub.add_parser("bench", help="speed benchmarks with same-run baselines")
    bsub = p.add_subparsers(dest="what", required=True)
    e = bsub.add_parser("engine", help="metric engine vs a numpy np.unique recount")
    e.add_argument("--n", type=int, default=1_000_000, help="transitions (default 1e6)")
    e.add_argument("--window", type=int, default=300)
    e.add_argument("--repeats", type=int, default=3)
    e.set_defaults(func=_run_bench_engine)
    m = bsub.add_parser("memory", help="RSS over a long headless run (flat memory)")
    m.add_argument("--seconds", type=float, default=1800.0, help="wall seconds (default 1800)")
    m.add_argument("--source", default="pendulum")
    m.set_defaults(func=_run_bench_memory)
    return bsub


def _run_bench_memory(args: argparse.Namespace) -> int:
    from idt_desk.cli.bench import bench_memory

    bench_memory(seconds=args.seconds, source=args.source)
    return 0


def _add_reproduce(sub: argparse._SubParsersAction) -> argparse._SubParsersAction:
    """``reproduce``: no core children; sources add theirs as ``reproduce.NAME`` commands."""
    p = sub.add_parser("reproduce", help="reproduce the paper's tables")
    return p.add_subparsers(dest="what", required=True)


def _add_commands(
    sub: argparse._SubParsersAction, parents: dict[str, argparse._SubParsersAction]
) -> dict[str, str]:
    """Add every command contributed through the ``idt_desk.commands`` entry points.

    ``GROUP.NAME`` goes under the core parent ``GROUP`` (a key of ``parents``), a bare
    ``NAME`` at top level. A command whose module fails to import (or whose
    ``add_arguments`` raises or sets no ``func``) is still added: its help says why, and
    running it, with any arguments, reports the reason and exits 2.

    Returns
    -------
    dict
        The skipped entry-point names and why (a clash with a core command, a parent command
        the core does not have, a malformed name), for ``idt-desk sources``. Their modules
        are never imported.
    """
    skipped: dict[str, str] = {}
    for name, entry in discover_commands().items():
        target = sub if entry.parent is None else parents.get(entry.parent)
        if target is None:
            skipped[name] = (f"no core command {entry.parent!r} to add it to "
                             f"(parents: {', '.join(sorted(parents))})")
            continue
        if not entry.leaf or "." in entry.leaf:
            skipped[name] = "not a valid command name (NAME or GROUP.NAME)"
            continue
        if entry.leaf in target.choices:
            where = entry.leaf if entry.parent is None else f"{entry.parent} {entry.leaf}"
            skipped[name] = f"clashes with the command 'idt-desk {where}'"
            continue
        p = target.add_parser(entry.leaf, help=entry.help, description=entry.description)
        if entry.error is None:
            try:
                entry.load().add_arguments(p)
                if not callable(p.get_default("func")):
                    entry.fail(f"{entry.value}.add_arguments(parser) sets no func")
            except Exception as exc:  # a broken plugin is reported, never raised
                entry.fail(exc)
        if entry.error is not None:
            p.description = f"failed to load: {entry.error}"
            p.set_defaults(func=_failed_command(entry), failed_command=name)
    return skipped


def _failed_command(entry: CommandEntry) -> Callable[[argparse.Namespace], int]:
    """The ``func`` of a command that failed to load: raise its load error (exit 2)."""

    def run(args: argparse.Namespace) -> int:
        entry.load()  # raises CommandLoadError with the reason
        return 2

    return run


def _run_bench_engine(args: argparse.Namespace) -> int:
    from idt_desk.cli.bench import bench_engine

    bench_engine(n=args.n, window=args.window, repeats=args.repeats)
    return 0


def _add_session_options(p: argparse.ArgumentParser) -> None:
    from idt_desk.metrics.presets import PRESETS

    p.add_argument("--source", default="pendulum", help="source name (see: idt-desk sources)")
    p.add_argument("--set", action="append", metavar="KEY=VALUE", default=[],
                   help="set a declared source setting (repeatable)")
    p.add_argument("--preset", choices=sorted(PRESETS),
                   help="symbolisation preset (default: the source's first)")
    p.add_argument("--bins", type=int, help="equal-width bins per variable (2 to 65536)")
    p.add_argument("--window", type=int, help="window length W in transitions (2 to 100000)")
    p.add_argument("--stride", type=int, help="window step in transitions (1 to 100000)")
    p.add_argument("--calibration-windows", type=int, default=20,
                   help="symbol statistics frozen from the first N windows (default 20)")
    p.add_argument("--baseline-windows", type=int, default=None,
                   help="baseline = the N windows that follow the calibration windows "
                        "(default 200; a dialogue's 30 turns)")
    p.add_argument("--detector", choices=DETECTOR_KINDS, default="persistence",
                   help="the alarm: persistence (default; m windows in a row beyond a "
                   "calibrated kσ), cusum (two-sided CUSUM, calibrated) or paper (the first "
                   "window beyond --k σ: the paper's rule, not calibrated)")
    p.add_argument("--false-alarms", metavar="BUDGET",
                   help="false-alarm budget in loop time: 1/h (default), 2/30min, "
                   "1/10episodes, 1/100turns (a dialogue's default), 1/1000windows")
    p.add_argument("--persist", type=int, default=None,
                   help="persistence: windows in a row (default 5; a dialogue's 1 turn)")
    p.add_argument("--k", type=float, default=3.0,
                   help="the paper rule's threshold in sigmas (> 0; default 3)")
    p.add_argument("--correction", choices=("none", "miller-madow"), default="none")
    p.add_argument("--seed", type=int, default=0, help="seed of the source (>= 0)")


def _check_pipeline(args: argparse.Namespace) -> None:
    for key in ("bins", "window", "stride", "calibration_windows", "baseline_windows", "seed"):
        check_limit(key, getattr(args, key))
    check_float("--k", args.k, 0.0, lo_open=True)
    check_int("--persist", args.persist, 1, 1000)
    if args.false_alarms is not None:
        try:
            parse_budget(args.false_alarms)
        except ValueError as exc:
            raise InputError(f"--false-alarms: {exc}") from None


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
    config = SessionConfig(
        source=args.source, preset=args.preset, bins=args.bins, window=args.window,
        stride=args.stride, calibration_windows=args.calibration_windows,
        baseline_windows=args.baseline_windows, k=args.k, detector=args.detector,
        false_alarms=args.false_alarms, persist=args.persist,
        correction=None if args.correction == "none" else args.correction,
        speed=speed, seed=args.seed, auto=auto,
    )
    try:
        return Session(config, source=source, record=record)
    except ValueError as exc:  # a pipeline check of the core that the CLI does not repeat
        msg = str(exc)
        key = next((k for k in ("calibration_windows", "baseline_windows", "bins", "window",
                                "stride") if k in msg), None)
        if key is None and "false-alarm budget" in msg:
            raise InputError(f"--false-alarms {config.false_alarms}: {msg}") from None
        key = key or "preset"
        raise InputError(f"--{key.replace('_', '-')} {getattr(args, key)}: {msg}") from None


def _add_run(sub: argparse._SubParsersAction) -> None:
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
    p.add_argument("--record", type=Path, help="record the session into this new directory")
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
    p.set_defaults(func=_run_run)


class _Interrupted(Exception):
    """Raised in the main thread, outside any join, once SIGINT/SIGTERM has arrived."""


class _SourcePaused(Exception):
    """The source paused the loop (a dialogue's server failed): headless, that ends the run."""


@contextmanager
def _deferred_signals() -> Iterator[list[int]]:
    """SIGINT and SIGTERM only note themselves in the yielded list while the block runs.

    Python 3.11's ``Thread.join`` marks a still-running thread as finished when a
    KeyboardInterrupt interrupts it (cpython#90882), so the session's stop() then returns at
    once and the process exits with the worker still writing: the recording stays incomplete
    and its last flush interval is lost. Here nothing is raised inside a join; the caller
    polls the list and stops the session itself, and a second signal cannot break the stop.
    """
    received: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield received
        return
    previous = {s: signal.signal(s, lambda signum, frame: received.append(signum))
                for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield received
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


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
                   "the window clamped to edge bins)")
    p_text = f"{p:.4f}" if p == p else "—"
    if getattr(snap, "tokenizer", None) is not None:  # a dialogue: one window per turn
        return f"turn={snap.n_transitions} P={p_text} {status}"
    return f"t={snap.sim_time:.1f}s windows={snap.n_windows} P={p_text} {status}"


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
    if source.notice:
        print(f"idt-desk run: note: {source.notice}", file=sys.stderr)
    bar = None if args.quiet else tqdm(total=steps, unit="tr", dynamic_ncols=True,
                                        desc=session.source.name)

    # From here to the last line printed, SIGINT/SIGTERM (a first or a second one) only
    # ask for a clean stop: nothing can interrupt closing the recording or the report.
    with _deferred_signals() as received:

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
        code = _report_run(args, snap, received)
        if paused is not None and code == 0:
            # What was made is recorded (the partial reply in a source_paused event).
            print(f"idt-desk run: {paused}", file=sys.stderr)
            return 2
        return code


def _report_run(args: argparse.Namespace, snap, received: list[int]) -> int:
    """Print what ran and what was recorded; the exit code (128 + signal if interrupted)."""
    if getattr(snap, "tokenizer", None) is not None:
        print(f"{snap.source}: {snap.n_transitions} turns, state {snap.state}")
    else:
        print(f"{snap.source}: {snap.n_transitions} transitions, {snap.n_windows} windows, "
              f"{snap.sim_time:.2f} s of loop time, state {snap.state}")
    cal, need = getattr(snap, "calibration", (0, 0)) or (0, 0)
    if getattr(snap, "tokenizer", None) is None and snap.n_windows == 0 and cal < need:
        print(f"note: no window: the symbols are calibrated on the first {need:,} "
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
        print(f"alarm: {det['describe']}; {base}; {n} alarm{'s' if n != 1 else ''}")
    confound = (getattr(snap, "info", None) or {}).get("length_confound")
    if confound:
        rs = ", ".join(f"{m} {c['n_S_next']['r']:+.2f}" for m, c in confound.items()
                       if isinstance(c, dict) and c["n_S_next"]["r"] is not None)
        print(f"length confound: r with log(1 + tokens) of S' over turns 1-{confound['turns']}: "
              f"{rs}")
    n_undefined = getattr(snap, "n_undefined", 0)
    if n_undefined:
        print(f"{n_undefined} window(s) had P undefined (constant windows: every S, A and S' "
              "symbol the same, H(S) + H(A) + H(S') = 0)")
    rec = ""
    if args.record is not None and (args.record / "config.json").exists():
        config = json.loads((args.record / "config.json").read_text())
        complete = bool(config.get("complete"))
        print(f"recorded into {args.record}"
              + ("" if complete else " (incomplete: the session did not close it)"))
        if complete:
            rec = (f"; the recording in {args.record} is complete "
                   f"({config.get('n_transitions')} transitions)")
    if snap.error:
        print(f"idt-desk run: error: {snap.error}", file=sys.stderr)
        return 1
    if received:
        print(f"idt-desk run: interrupted by {signal.Signals(received[0]).name}: stopped "
              f"cleanly after {snap.n_transitions} transitions{rec}", file=sys.stderr)
        return 128 + received[0]
    return 0


def _add_export(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "export", help="export a recording's tables to CSV or Parquet",
        description="Write a recording's transitions, windows, events (and a dialogue's "
        "turns) as CSV or Parquet files, with its config.json, into --out. An incomplete "
        "recording (a killed session's) is exported as far as it goes, with a note.")
    p.add_argument("recording", type=Path, help="the recording directory (holds config.json)")
    p.add_argument("--format", choices=("csv", "parquet"), default="parquet",
                   help="file format (default parquet; events' nested parameters are JSON "
                   "text there)")
    p.add_argument("--out", type=Path, required=True,
                   help="output directory (created if needed)")
    p.set_defaults(func=_run_export)


def _run_export(args: argparse.Namespace) -> int:
    from idt_desk.recordings._recording import RecordingError, export_recording, load_recording

    check_out_dir(args.out, "--out")
    if args.out.resolve() == args.recording.resolve():
        raise InputError(f"--out {args.out}: is the recording itself; choose another directory")
    try:
        rec = load_recording(args.recording)
        paths = export_recording(rec, args.out, args.format)
    except RecordingError as exc:
        raise InputError(str(exc)) from None
    for w in rec.warnings:
        print(f"note: {w}")
    print(f"{len(rec.transitions)} transitions, {len(rec.windows)} windows, "
          f"{len(rec.events)} events -> " + ", ".join(str(p) for p in paths))
    return 0


def _add_sources(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = sub.add_parser("sources", help="list registered sources, their settings and buttons, "
                                       "and the commands sources contribute")
    p.set_defaults(func=_run_sources, skipped_commands={})
    return p


def _run_sources(args: argparse.Namespace) -> int:
    from idt_desk.live.plugins import SourceLoadError, discover

    for name, entry in discover().items():
        try:
            cls = entry.load()
        except SourceLoadError as exc:
            print(f"{name}: FAILED TO LOAD: {exc}")
            continue
        print(f"{name}: {cls.label} — {cls.description}")
        for prm in cls.settings:
            print(f"    --set {prm.name}={prm.default!r}  {prm.label} {prm.unit}".rstrip())
        for pert in cls.perturbations:
            ps = ", ".join(f"{q.name}={q.default!r}" for q in pert.params)
            print(f"    perturbation {pert.name} ({pert.target}): {ps}")
        mods = ", ".join(m.name for m in cls.modulations) or "none (passive)"
        print(f"    modulations: {mods}; presets: {', '.join(cls.presets) or '-'}")
    print("commands (entry points idt_desk.commands):")
    for name, entry in discover_commands().items():
        if name in args.skipped_commands:
            print(f"    {name}: SKIPPED ({entry.value}): {args.skipped_commands[name]}")
        elif entry.error is not None:
            print(f"    {name}: FAILED TO LOAD ({entry.value}): {entry.error}")
        else:
            print(f"    {name}: {entry.value}")
    for dup in duplicate_commands():  # a name an earlier entry point took
        where = dup.leaf if dup.parent is None else f"{dup.parent} {dup.leaf}"
        print(f"    {dup.name}: SKIPPED ({dup.value}): clashes with the command "
              f"'idt-desk {where}' ({discover_commands()[dup.name].value})")
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with every subcommand."""
    parser = argparse.ArgumentParser(
        prog="idt-desk",
        description="IDT Desk: live bi-predictability (P, H_f, H_b, dH) of closed loops.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    _add_run(sub)
    _add_analyze(sub)
    _add_export(sub)
    parents = {"reproduce": _add_reproduce(sub)}
    sources = _add_sources(sub)
    parents["bench"] = _add_bench(sub)
    sources.set_defaults(skipped_commands=_add_commands(sub, parents))
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``idt-desk`` console script."""
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or (argv[0].startswith("--") and argv[0] not in ("--help", "-h")):
        argv = ["gui", "--start", *argv]  # plain `idt-desk` starts the pendulum at once
    args, extra = parser.parse_known_args(argv)
    if extra and getattr(args, "failed_command", None) is None:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")  # as parse_args does

    try:
        return int(args.func(args) or 0)
    except (InputError, KeyError, PluginLoadError) as exc:
        msg = exc.args[0] if isinstance(exc, KeyError) and exc.args else exc
        print(f"idt-desk {args.command}: error: {msg}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"idt-desk {args.command}: interrupted", file=sys.stderr)
        return 130
