"""The ``idt-desk`` command line: the parser, its core commands, and the entry point.

``run`` and ``analyze`` live in :mod:`~idt_desk.cli.run` and :mod:`~idt_desk.cli.analyze`;
plugins add the rest through the ``idt_desk.commands`` entry points (:func:`_add_commands`).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from idt_desk.cli.analyze import add_analyze
from idt_desk.cli.fit import add_fit
from idt_desk.cli.run import add_run
from idt_desk.cli.runs import add_runs
from idt_desk.cli.validate import (
    check_float,
    check_int,
    check_out_dir,
    path_arg,
)
from idt_desk.errors import InputError
from idt_desk.live.plugins import (
    CommandEntry,
    PluginLoadError,
    discover_commands,
    duplicate_commands,
)
from idt_desk.words import shown

__all__ = ["build_parser", "main"]


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
    lp = bsub.add_parser("loop", help="a recorded loop's and a max-speed run's speed through "
                         "the detector's fit, vs a detector with nothing to fit")
    lp.add_argument("--n", type=int, default=100_000, help="transitions the loop adds")
    lp.set_defaults(func=_run_bench_loop)
    k = bsub.add_parser("kill", help="SIGKILL recording runs at random moments: rows accepted "
                        "but not on disk")
    k.add_argument("--runs", type=int, default=10, help="kills per kind (default 10)")
    k.add_argument("--seed", type=int, default=0)
    k.set_defaults(func=_run_bench_kill)
    c = bsub.add_parser("calibrate", help="the detectors' threshold fit vs the reference "
                        "(long null paths, bisection) on a pendulum and an RL baseline")
    c.add_argument("--detectors", default="persistence,cusum,ewma,mewma",
                   help="comma-separated (default: every calibrated detector)")
    c.add_argument("--baselines", default="pendulum,rl",
                   help="pendulum (800 windows, 1/h) and/or rl (2,015 windows, 1/10h)")
    c.set_defaults(func=_run_bench_calibrate)
    rec = bsub.add_parser("recording", help="the transitions log vs the CSV writer: bytes, "
                          "recording cost at max speed, load and replay (pendulum, RL agent)")
    rec.add_argument("--rounds", type=int, default=3, help="interleaved rounds (default 3)")
    rec.add_argument("--scale", type=float, default=1.0,
                     help="loop time of each case times this (default 1: 600 s of the "
                     "pendulum, 300 s of the RL agent)")
    rec.set_defaults(func=_run_bench_recording)
    wr = bsub.add_parser("wrapper", help="IDTMonitor(record=) against IDTMonitor: steps/s and "
                         "the same windows bit for bit")
    wr.add_argument("--env-id", default="HalfCheetah-v5")
    wr.add_argument("--steps", type=int, default=16_000, help="steps a round (default 16,000)")
    wr.add_argument("--rounds", type=int, default=3, help="interleaved rounds (default 3)")
    wr.add_argument("--baseline-windows", type=int, default=None,
                    help="the wrapper's baseline (default its own: 2,200 windows)")
    wr.set_defaults(func=_run_bench_wrapper)
    r = bsub.add_parser("runs", help="listing and refreshing 10, 100, 1,000 runs vs reading "
                        "every events.jsonl whole")
    r.add_argument("--ssh", metavar="URL", default=None,
                   help="also over SFTP: ssh://[user@]host[:port] (the temporary folder's "
                   "path is appended; your ~/.ssh setup is used)")
    r.set_defaults(func=_run_bench_runs)
    return bsub


def _run_bench_wrapper(args: argparse.Namespace) -> int:
    from idt_desk.cli.bench_wrapper import bench_wrapper

    options = {} if args.baseline_windows is None else {
        "baseline_windows": check_int("--baseline-windows", args.baseline_windows, 2, 10_000)}
    bench_wrapper(args.env_id, n=check_int("--steps", args.steps, 1, 10**8),
                  rounds=check_int("--rounds", args.rounds, 1, 100), **options)
    return 0


def _run_bench_recording(args: argparse.Namespace) -> int:
    from idt_desk.cli.bench_recording import CASES, bench_recording

    scale = check_float("--scale", args.scale, 0.001, 100.0)
    bench_recording(tuple((s, t * scale) for s, t in CASES),
                    rounds=check_int("--rounds", args.rounds, 1, 100))
    return 0


def _run_bench_runs(args: argparse.Namespace) -> int:
    from idt_desk.cli.bench_runs import bench_runs

    bench_runs(ssh=args.ssh)
    return 0


def _run_bench_calibrate(args: argparse.Namespace) -> int:
    from idt_desk.cli.bench_calibrate import BASELINES, bench_calibrate
    from idt_desk.detection.detectors import DETECTORS

    kinds = tuple(k.strip() for k in args.detectors.split(",") if k.strip())
    names = tuple(b.strip() for b in args.baselines.split(",") if b.strip())
    known = {b[0] for b in BASELINES}
    fitted = [k for k, c in DETECTORS.items() if c.calibrated]
    bad = [k for k in kinds if k not in fitted] + [b for b in names if b not in known]
    if bad or not kinds or not names:
        raise SystemExit(f"idt-desk bench calibrate: unknown {', '.join(bad) or 'nothing'}; "
                         f"detectors: {', '.join(fitted)}; baselines: "
                         f"{', '.join(sorted(known))}")
    bench_calibrate(kinds, tuple(b for b in BASELINES if b[0] in names))
    return 0


def _run_bench_loop(args: argparse.Namespace) -> int:
    from idt_desk.cli.bench_loop import bench_loop

    bench_loop(n=check_int("--n", args.n, 20_000, 10**8))
    return 0


def _run_bench_kill(args: argparse.Namespace) -> int:
    from idt_desk.cli.bench_loop import bench_kill

    bench_kill(runs=check_int("--runs", args.runs, 1, 10_000),
               seed=check_int("--seed", args.seed, 0))
    return 0


def _run_bench_memory(args: argparse.Namespace) -> int:
    from idt_desk.cli.bench import bench_memory

    bench_memory(seconds=args.seconds, source=args.source)
    return 0


def _add_reproduce(sub: argparse._SubParsersAction) -> argparse._SubParsersAction:
    """``reproduce``: no core children; sources add theirs as ``reproduce.NAME`` commands."""
    p = sub.add_parser("reproduce", help="reproduce the paper's tables")
    return p.add_subparsers(dest="what", required=True)


def _add_commands(
    sub: argparse._SubParsersAction, parents: dict[str, argparse._SubParsersAction],
    wanted: str | None = "*",
) -> dict[str, str]:
    """Add every command contributed through the ``idt_desk.commands`` entry points.

    ``GROUP.NAME`` goes under the core parent ``GROUP`` (a key of ``parents``), a bare
    ``NAME`` at top level. A command whose module fails to import (or whose
    ``add_arguments`` raises or sets no ``func``) is still added: its help says why, and
    running it, with any arguments, reports the reason and exits 2.

    ``wanted``: the command the command line names (its first word; None for none, "*" for
    every one). Only the commands it can reach are imported (``idt-desk runs`` imports no
    reproduction); the others are added by name, so the parser still knows every choice.
    With none named, the top-level commands are imported for their help lines.

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
        reached = wanted == "*" or (entry.parent or entry.leaf) == wanted or (
            wanted is None and entry.parent is None)
        if not reached:  # a name to parse against, its module left unimported
            target.add_parser(entry.leaf)
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


def _add_export(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "export", help="export a recording's tables to CSV or Parquet",
        description="Write a recording's transitions, windows, events (and a dialogue's "
        "turns) as CSV or Parquet files, with its config.json, into --out; or, with "
        "--format recording, the recording itself in the current format (a recording made "
        "before format 2 gets its transitions.csv as transitions.arrows, about a quarter of "
        "the size, every value the same). An incomplete recording (a killed session's) is "
        "exported as far as it goes, with a note.")
    p.add_argument("recording", type=Path, help="the recording directory (holds config.json)")
    p.add_argument("--format", choices=("csv", "parquet", "recording"), default="parquet",
                   help="file format (default parquet; events' nested parameters are JSON "
                   "text there), or a recording of the current format")
    p.add_argument("--out", type=path_arg, required=True,
                   help="output directory (created if needed)")
    p.set_defaults(func=_run_export)


def _run_export(args: argparse.Namespace) -> int:
    from idt_desk.recordings import RecordingError, export_recording, load_recording

    check_out_dir(args.out, "--out")
    if args.out.resolve() == args.recording.resolve():
        raise InputError(f"--out {args.out}: is the recording itself; choose another directory")
    try:
        rec = load_recording(args.recording)
        paths = export_recording(rec, args.out, args.format)
    except RecordingError as exc:
        raise InputError(str(exc)) from None
    from idt_desk.words import say

    for w in [*rec.warnings, *rec.notes]:
        say(f"note: {w}")
    say(f"{len(rec.transitions)} transitions, {len(rec.windows)} windows, "
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
            for sug in prm.suggestions:
                if sug.value:  # the default is the line above
                    print(f"        {sug.value}  ({sug.label})")
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


def _version() -> str:
    """The installed package's version (the source tree's, if it is not installed)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("idt-desk")
    except PackageNotFoundError:
        from idt_desk import __version__

        return __version__


def build_parser(wanted: str | None = "*") -> argparse.ArgumentParser:
    """The argument parser with every subcommand.

    ``wanted``: the command to be run (see :func:`_add_commands`): the plugin commands it
    cannot reach are named, not imported. The default imports every one.
    """
    parser = argparse.ArgumentParser(
        prog="idt-desk",
        description="IDT Desk: live bi-predictability (P, H_f, H_b, dH) of closed loops.",
    )
    parser.add_argument("--version", action="version", version=f"idt-desk {_version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    add_run(sub)
    add_analyze(sub)
    _add_export(sub)
    add_runs(sub)
    add_fit(sub)
    parents = {"reproduce": _add_reproduce(sub)}
    sources = _add_sources(sub)
    parents["bench"] = _add_bench(sub)
    sources.set_defaults(skipped_commands=_add_commands(
        sub, parents, "*" if wanted == "sources" else wanted))
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``idt-desk`` console script."""
    for stream in (sys.stdout, sys.stderr):  # a terminal that cannot show a character: \u03c3
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="backslashreplace")
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or (argv[0].startswith("--") and argv[0] not in ("--help", "-h", "--version")):
        argv = ["gui", "--start", *argv]  # plain `idt-desk` starts the pendulum at once
    parser = build_parser(None if argv[0].startswith("-") else argv[0])
    args, extra = parser.parse_known_args(argv)
    if extra and getattr(args, "failed_command", None) is None:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")  # as parse_args does

    try:
        return int(args.func(args) or 0)
    except (InputError, KeyError, PluginLoadError) as exc:
        msg = exc.args[0] if isinstance(exc, KeyError) and exc.args else exc
        print(f"idt-desk {args.command}: error: {shown(msg, 2000)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"idt-desk {args.command}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader went away (`idt-desk runs DIR | head -1`): nothing more to say, and no
        # traceback when the interpreter flushes standard output at its exit.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return 141  # 128 + SIGPIPE, as a shell reports it
