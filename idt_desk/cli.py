"""The ``idt-desk`` command line."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from idt_desk._io import InputError

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
    from idt_desk.presets import ANGLE_MODES, PRESETS

    p = sub.add_parser(
        "analyze",
        help="symbolise a CSV/Parquet trajectory and compute windowed P, H_f, H_b, dH",
        description=(
            "Read a trajectory (columns s_0.., a_0.., s_next_0.., optional reward, episode), "
            "symbolise it with the whole file as calibration, and write the per-window table "
            "(windows.csv), summary.json (min/mean/max/std as in the paper's Tables 1-2) and "
            "metrics.png into --out."
        ),
    )
    p.add_argument("file", type=Path, help="trajectory file (.csv or .parquet)")
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
    p.add_argument("--onset", type=int, help="perturbation onset (transition index)")
    p.add_argument("--baseline-windows", type=int, help="baseline = first N windows")
    p.add_argument("--k", type=float, default=3.0, help="excursion threshold in sigmas")
    p.set_defaults(func=_run_analyze)


def _run_analyze(args: argparse.Namespace) -> int:
    from idt_desk._io import load_trajectory
    from idt_desk.analyze import (
        analyze_trajectory,
        format_table,
        preset_with_overrides,
        write_outputs,
    )
    from idt_desk.presets import Preset, get_preset

    base = get_preset(args.preset) if args.preset else Preset(
        "custom", "set from the command line", bins=16, window=300, stride=75,
        angle_mode="unwrap",
    )
    preset = preset_with_overrides(
        base, bins=args.bins, window=args.window, stride=args.stride,
        state_groups=args.groups, action_groups=args.action_groups, angles=args.angles,
        angle_mode=args.angle_mode,
    )
    for name in ("bins", "window", "stride"):
        if getattr(preset, name) < 1:
            raise InputError(f"--{name} must be >= 1, got {getattr(preset, name)}")
    traj = load_trajectory(
        args.file, s_prefix=args.s_prefix, a_prefix=args.a_prefix,
        s_next_prefix=args.s_next_prefix, state_columns=args.state_columns,
        action_columns=args.action_columns, passive=args.passive,
    )
    result = analyze_trajectory(
        traj, preset, correction=None if args.correction == "none" else args.correction,
        null_draws=args.null, seed=args.seed, onset=args.onset,
        n_baseline=args.baseline_windows, k=args.k, source=str(args.file),
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


def _add_bench(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("bench", help="speed benchmarks with same-run baselines")
    bsub = p.add_subparsers(dest="what", required=True)
    e = bsub.add_parser("engine", help="metric engine vs a numpy np.unique recount")
    e.add_argument("--n", type=int, default=1_000_000, help="transitions (default 1e6)")
    e.add_argument("--window", type=int, default=300)
    e.add_argument("--repeats", type=int, default=3)
    e.set_defaults(func=_run_bench_engine)
    from sources.pendulum import bench as pendulum_bench

    pendulum_bench.add_arguments(
        bsub.add_parser("pendulum", help="pendulum integrator vs scipy solve_ivp"))
    g = bsub.add_parser("gui", help="GUI frame rate with the pendulum at maximum speed")
    g.add_argument("--seconds", type=float, default=10.0)
    g.set_defaults(func=_run_bench_gui)
    m = bsub.add_parser("memory", help="RSS over a long headless run (flat memory)")
    m.add_argument("--seconds", type=float, default=1800.0, help="wall seconds (default 1800)")
    m.add_argument("--source", default="pendulum")
    m.set_defaults(func=_run_bench_memory)


def _run_bench_gui(args: argparse.Namespace) -> int:
    from idt_desk.gui_main import bench_gui

    bench_gui(seconds=args.seconds)
    return 0


def _run_bench_memory(args: argparse.Namespace) -> int:
    from idt_desk.bench import bench_memory

    bench_memory(seconds=args.seconds, source=args.source)
    return 0


def _add_reproduce(sub: argparse._SubParsersAction) -> None:
    from sources.pendulum import reproduce as pendulum_reproduce

    p = sub.add_parser("reproduce", help="reproduce the paper's tables")
    rsub = p.add_subparsers(dest="what", required=True)
    pendulum_reproduce.add_arguments(rsub.add_parser(
        "pendulum", help="the paper's double-pendulum batches (Tables 1, 2, 8; Figure 5)"))


def _run_bench_engine(args: argparse.Namespace) -> int:
    from idt_desk.bench import bench_engine

    bench_engine(n=args.n, window=args.window, repeats=args.repeats)
    return 0


def _key_values(items: list[str] | None, what: str) -> dict[str, str]:
    out = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise InputError(f"{what} expects key=value, got {item!r}")
        out[key.strip()] = value.strip()
    return out


def _parse_perturb(spec: str, rate: float) -> tuple[str, dict[str, str], int, int | None]:
    """NAME[:k=v,k=v]@START[-END] (seconds of the loop's time) -> name, params, on, off."""
    head, sep, when = spec.partition("@")
    if not sep:
        raise InputError(f"--perturb {spec!r}: give a start time, e.g. sensor_noise@10-20")
    name, _, params = head.partition(":")
    kv = _key_values([p for p in params.split(",") if p], f"--perturb {spec!r}")
    try:
        start, _, end = when.partition("-")
        on = round(float(start) * rate)
        off = round(float(end) * rate) if end else None
    except ValueError:
        raise InputError(f"--perturb {spec!r}: times must be seconds, e.g. @10-20") from None
    if off is not None and off <= on:
        raise InputError(f"--perturb {spec!r}: the end must come after the start")
    return name.strip(), kv, on, off


def _add_session_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--source", default="pendulum", help="source name (see: idt-desk sources)")
    p.add_argument("--set", action="append", metavar="KEY=VALUE", default=[],
                   help="set a declared source setting (repeatable)")
    p.add_argument("--preset", help="symbolisation preset (default: the source's first)")
    p.add_argument("--bins", type=int)
    p.add_argument("--window", type=int)
    p.add_argument("--stride", type=int)
    p.add_argument("--calibration-windows", type=int, default=20,
                   help="symbol statistics frozen from the first N windows (default 20)")
    p.add_argument("--baseline-windows", type=int, default=30,
                   help="baseline = the first N windows after calibration (default 30)")
    p.add_argument("--k", type=float, default=3.0, help="excursion threshold in sigmas")
    p.add_argument("--correction", choices=("none", "miller-madow"), default="none")
    p.add_argument("--seed", type=int, default=0, help="seed of the source")


def _build_session(args: argparse.Namespace, speed: float | None, record: Path | None):
    from idt_desk.plugins import load_source
    from idt_desk.session import Session, SessionConfig

    cls = load_source(args.source)
    raw = _key_values(args.set, "--set")
    try:
        source = cls(**raw)
    except (ValueError, OSError) as exc:
        raise InputError(f"source {args.source}: {exc}") from None
    config = SessionConfig(
        source=args.source, preset=args.preset, bins=args.bins, window=args.window,
        stride=args.stride, calibration_windows=args.calibration_windows,
        baseline_windows=args.baseline_windows, k=args.k,
        correction=None if args.correction == "none" else args.correction,
        speed=speed, seed=args.seed,
    )
    try:
        return Session(config, source=source, record=record)
    except ValueError as exc:
        raise InputError(str(exc)) from None


def _add_run(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "run", help="run a source headless through the IDT pipeline, optionally recording",
        description="Run a source without the GUI: the same session, pipeline and recordings. "
        "A step is one transition (one turn for a dialogue). Without --seconds/--steps a "
        "replay runs to its end and other sources until Ctrl-C.",
    )
    _add_session_options(p)
    g = p.add_mutually_exclusive_group()
    g.add_argument("--seconds", type=float, help="seconds of the loop's own time")
    g.add_argument("--steps", type=int, help="number of transitions")
    p.add_argument("--record", type=Path, help="record the session into this new directory")
    p.add_argument("--speed", default="max",
                   help="multiple of real time, or 'max' (default) for as fast as possible")
    p.add_argument("--perturb", action="append", default=[], metavar="SPEC",
                   help="schedule a perturbation: NAME[:k=v,...]@START[-END] in seconds")
    p.add_argument("--quiet", action="store_true", help="no progress line")
    p.set_defaults(func=_run_run)


def _speed(text: str) -> float | None:
    if str(text).lower() in ("max", "0", "none"):
        return None
    try:
        v = float(text)
    except ValueError:
        raise InputError(f"--speed must be a number or 'max', got {text!r}") from None
    if v <= 0:
        raise InputError(f"--speed must be > 0, got {v}")
    return v


def _run_run(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from idt_desk.session import run_headless

    if args.record is not None and (args.record / "config.json").exists():
        raise InputError(f"{args.record}: already holds a recording; choose a new path")
    session = _build_session(args, _speed(args.speed), args.record)
    rate = session.source.rate
    for at, kind, cmd in _schedule_perturbations(args.perturb, type(session.source)):
        session.schedule(at, kind, **cmd)
    steps = args.steps if args.steps is not None else (
        round(args.seconds * rate) if args.seconds is not None else None)
    if steps is not None and steps < 1:
        raise InputError("--steps/--seconds must give at least one transition")
    bar = None if args.quiet else tqdm(total=steps, unit="tr", dynamic_ncols=True,
                                        desc=session.source.name)

    def progress(snap) -> None:
        if bar is None:
            return
        bar.update(snap.n_transitions - bar.n)
        w = snap.windows
        p = w["P"][-1] if len(w["P"]) else float("nan")
        cal, need = snap.calibration
        status = f"calibrating {cal}/{need}" if cal < need else (
            "ALARM" if snap.alarm.get("IDT") else "ok")
        bar.set_postfix_str(f"t={snap.sim_time:.1f}s windows={snap.n_windows} P={p:.4f} {status}")

    try:
        snap = run_headless(session, steps=steps, progress=progress)
    except KeyboardInterrupt:
        session.stop()
        snap = session.snapshot(limit=1)
    finally:
        if bar is not None:
            bar.close()
    print(f"{snap.source}: {snap.n_transitions} transitions, {snap.n_windows} windows, "
          f"{snap.sim_time:.2f} s of loop time, state {snap.state}")
    if args.record is not None:
        print(f"recorded into {args.record}")
    if snap.error:
        print(f"idt-desk run: error: {snap.error}", file=sys.stderr)
        return 1
    return 0


def _add_export(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("export", help="export a recording's tables to CSV or Parquet")
    p.add_argument("recording", type=Path)
    p.add_argument("--format", choices=("csv", "parquet"), default="parquet")
    p.add_argument("--out", type=Path, required=True)
    p.set_defaults(func=_run_export)


def _run_export(args: argparse.Namespace) -> int:
    from idt_desk.recording import RecordingError, export_recording, load_recording

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


def _add_sources(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("sources", help="list registered sources, their settings and buttons")
    p.set_defaults(func=_run_sources)


def _run_sources(args: argparse.Namespace) -> int:
    from idt_desk.plugins import SourceLoadError, discover

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
    return 0


def _add_gui(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("gui", help="open the desktop dashboard (the default command)")
    p.add_argument("--source", default="pendulum", help="source to select (default pendulum)")
    p.add_argument("--set", action="append", metavar="KEY=VALUE", default=[],
                   help="set a declared source setting (repeatable)")
    p.add_argument("--start", action="store_true", help="start the session at once")
    p.add_argument("--speed", default="1", help="multiple of real time or 'max' (default 1)")
    p.add_argument("--record", type=Path, metavar="DIR",
                   help="folder for recordings; with --start, record from the start")
    p.add_argument("--perturb", action="append", default=[], metavar="SPEC",
                   help="with --start, schedule a perturbation: NAME[:k=v,...]@START[-END] (s)")
    p.add_argument("--screenshot", type=Path, help="save a PNG of the window, then quit")
    p.add_argument("--quit-after", type=float, default=None,
                   help="seconds before the screenshot / quitting")
    p.set_defaults(func=_run_gui)


def _schedule_perturbations(specs: list[str], source_cls) -> list[tuple[int, str, dict]]:
    out = []
    for spec in specs:
        name, params, on, off = _parse_perturb(spec, source_cls.rate)
        try:
            resolved = source_cls.perturbation(name).resolve(params)
        except (KeyError, ValueError) as exc:
            raise InputError(f"--perturb {spec!r}: {exc.args[0] if exc.args else exc}") from None
        out.append((on, "perturb", {"name": name, "params": resolved}))
        if off is not None:
            out.append((off, "perturb", {"name": name, "params": None}))
    return out


def _run_gui(args: argparse.Namespace) -> int:
    from idt_desk.gui_main import run_gui
    from idt_desk.plugins import load_source

    schedule = _schedule_perturbations(args.perturb, load_source(args.source))
    return run_gui(
        source=args.source, settings=_key_values(args.set, "--set"), start=args.start,
        speed=_speed(args.speed), screenshot=args.screenshot, quit_after=args.quit_after,
        record=args.record, schedule=schedule,
    )


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with every subcommand."""
    parser = argparse.ArgumentParser(
        prog="idt-desk",
        description="IDT Desk: live bi-predictability (P, H_f, H_b, dH) of closed loops.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    _add_gui(sub)
    _add_run(sub)
    _add_analyze(sub)
    _add_export(sub)
    _add_reproduce(sub)
    _add_sources(sub)
    _add_bench(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``idt-desk`` console script."""
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or (argv[0].startswith("--") and argv[0] not in ("--help", "-h")):
        argv = ["gui", *argv]  # plain `idt-desk` opens the dashboard
    args = parser.parse_args(argv)
    from idt_desk.plugins import SourceLoadError

    try:
        return int(args.func(args) or 0)
    except (InputError, KeyError, SourceLoadError) as exc:
        msg = exc.args[0] if isinstance(exc, KeyError) and exc.args else exc
        print(f"idt-desk {args.command}: error: {msg}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
