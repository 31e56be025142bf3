"""The desktop's commands, contributed to ``idt-desk`` as plugins (``idt_desk.commands``).

``idt-desk gui`` (and plain ``idt-desk``), ``idt-desk watch`` and the window's benchmarks
``idt-desk bench gui|follow|storm``: their options, checks and entry functions. They live
with the widgets so that the Qt-free core never imports the GUI; ``pyproject.toml`` names
each object below as an entry point, as it does the sources' commands.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from idt_desk.cli.validate import (
    build_source,
    check_float,
    check_out_dir,
    key_values,
    parse_speed,
    schedule_switches,
    source_class,
)
from idt_desk.errors import InputError

__all__ = ["BENCH_FLEET", "BENCH_FOLLOW", "BENCH_GUI", "BENCH_STORM", "GUI", "PICTURES",
           "WATCH"]


def _gui_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--source", default="pendulum", help="source to select (default pendulum)")
    p.add_argument("--set", action="append", metavar="KEY=VALUE", default=[],
                   help="set a declared source setting (repeatable)")
    p.add_argument("--start", action="store_true",
                   help="start the session at once (plain `idt-desk` does)")
    p.add_argument("--speed", default=None,
                   help="multiple of real time (> 0) or 'max' (default 1; a replay: the speed "
                        "it was recorded at)")
    p.add_argument("--record", type=Path, metavar="DIR",
                   help="record the session into DIR, as `run --record DIR` does (with "
                        "--start from the start; later sessions into new folders beside it)")
    p.add_argument("--perturb", action="append", default=[], metavar="SPEC",
                   help="with --start, schedule a perturbation: NAME[:k=v,...]@START[-END] (s)")
    p.add_argument("--modulate", action="append", default=[], metavar="SPEC",
                   help="with --start, schedule a modulation: NAME[:k=v,...]@START[-END] (s)")
    p.add_argument("--baseline", type=Path, metavar="PROFILE",
                   help="a baseline profile (idt-desk fit): every Start takes its symbols, "
                   "twin and thresholds and judges from the first window")
    p.add_argument("--startup-times", action="store_true",
                   help="with --start: say when the window was shown and its first window "
                        "plotted (seconds after the command started), then quit")
    _add_window_args(p)


def _add_window_args(p: argparse.ArgumentParser) -> None:
    """--screenshot, --quit-after and --size (gui, watch; checked by _window_options)."""
    p.add_argument("--screenshot", type=Path, help="save a PNG of the window, then quit")
    p.add_argument("--quit-after", type=float, default=None,
                   help="seconds before the screenshot / quitting")
    p.add_argument("--size", metavar="WxH", help="window size in pixels, e.g. 1024x700")


def _window_options(args: argparse.Namespace) -> tuple[int, int] | None:
    """Check --quit-after, --size and --screenshot (gui, watch); the size, if given."""
    check_float("--quit-after", args.quit_after, 0.0)
    size = None
    if args.size is not None:
        w, x, h = args.size.lower().partition("x")
        if not (x and w.isdigit() and h.isdigit() and 200 <= int(w) <= 10000
                and 200 <= int(h) <= 10000):
            raise InputError(f"--size {args.size}: give WIDTHxHEIGHT in pixels, e.g. 1024x700")
        size = (int(w), int(h))
    if args.screenshot is not None:
        if args.screenshot.suffix.lower() not in (".png", ".jpg", ".jpeg", ".bmp"):
            raise InputError(f"--screenshot {args.screenshot}: must end in .png, .jpg or .bmp")
        check_out_dir(args.screenshot.parent, "--screenshot")
        if args.screenshot.is_dir():
            raise InputError(f"--screenshot {args.screenshot}: is a directory; give a file")
    return size


def _watch_arguments(p: argparse.ArgumentParser) -> None:
    p.description = (
        "PATH is a recording, or a folder of runs (searched recursively; local, or "
        "ssh://[user@]host[:port]/path on a server, read over SFTP with your ~/.ssh setup). "
        "A folder of several runs opens on their table (alarmed first, kept live): "
        "double-click a run to follow it, Alt+Left or '◀ All runs' to come back. A folder "
        "with one run or none (here) follows the one that started last, and a run that "
        "starts there later in its turn. Waits for the writer to start. Headless, the same "
        "is `idt-desk run --source replay --set path=RUN --set follow=true`; the list is "
        "`idt-desk runs PATH`.")
    p.add_argument("path", help="a recording directory, or a folder of runs (a path, or "
                   "ssh://[user@]host[:port]/path)")
    p.add_argument("--silence", type=float, default=10.0,
                   help="seconds without new data (and no session_end) after which the "
                   "writer counts as stopped (default 10)")
    p.add_argument("--wait", type=float, default=600.0,
                   help="seconds a run that has appeared may take to start writing "
                   "(default 600); without any run yet the window opens and waits")
    _add_window_args(p)


def _run_watch(args: argparse.Namespace) -> int:
    import time

    from idt_desk_widgets.app import run_gui

    from idt_desk.recordings import RecordingError, newest_recording, runs_by_start
    from idt_desk.recordings.checks import read_config
    from idt_desk.recordings.runs import RunIndex, root_problem
    from idt_desk.words import shown

    check_float("--silence", args.silence, 0.5)
    check_float("--wait", args.wait, 0.0)
    size = _window_options(args)
    text = str(args.path)
    follow = {"follow": True, "silence": args.silence, "wait": args.wait}
    window = dict(screenshot=args.screenshot, quit_after=args.quit_after, size=size)
    path = Path(text).expanduser()
    if text.startswith("ssh://") or (path.is_dir() and not (path / "config.json").exists()):
        # A server's folder that does not exist yet is waited for, as a local one is.
        index = RunIndex(text if text.startswith("ssh://") else path, silence=args.silence,
                         wait=text.startswith("ssh://"))
        try:
            try:
                rows = index.refresh()
            except OSError as exc:
                raise InputError(root_problem(text, exc)) from None
            if [r["path"] for r in rows] == ["."]:  # the URL names one run: follow it
                index.close()
                return run_gui(source="replay", settings={"path": text, **follow},
                               start=True, speed=None, **window)
            if text.startswith("ssh://") or len(rows) >= 2:
                alarmed = sum(1 for r in rows if r["alarms"])
                print(f"idt-desk watch: {len(rows)} run{'s' if len(rows) != 1 else ''} in "
                      f"{text} ({alarmed} alarmed); the window lists them (double-click one "
                      "to follow it)" if not index.notes or rows else
                      f"idt-desk watch: {index.notes[0]}; the window lists its runs once "
                      "they start", file=sys.stderr)
                return run_gui(source="replay", settings={"path": "", **follow},
                               start=False, speed=None, fleet=index, fleet_location=text,
                               **window)
        finally:
            index.close()
    args.path = path
    outside: list[str] = []
    run = newest_recording(args.path, outside)
    if outside:  # as `idt-desk runs` says it: a watched folder is that folder
        n = len(outside)
        print(f"idt-desk watch: {n} link{'s' if n != 1 else ''} leading outside "
              f"{shown(args.path)} not followed", file=sys.stderr)
    if run is None:
        # The window opens at once and waits there (it follows the first run that starts).
        print(f"idt-desk watch: no recording in {shown(args.path)} yet; the window waits for "
              "one", file=sys.stderr)
        return run_gui(source="replay", settings={"path": "", **follow},
                       start=False, speed=None, watch_folder=args.path, **window)
    folder = None if run == args.path else args.path
    if folder is not None:
        runs = runs_by_start(folder)
        print(f"idt-desk watch: {len(runs)} run{'s' if len(runs) != 1 else ''} in "
              f"{shown(folder)} (by start, the latest last):", file=sys.stderr)
        for started, d in runs:
            try:  # the reader's checked way to a config (bounded, regular files only)
                done = read_config(d).get("complete") is True
            except RecordingError:
                done = False
            when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(started))
            print(f"  {shown(d.name)}  started {when}  "
                  f"{'ended' if done else 'open (being written, or its writer died)'}",
                  file=sys.stderr)
    print(f"idt-desk watch: following {shown(run)}"
          + (f"; a run that starts in {shown(folder)} later is followed in its turn"
             if folder is not None else ""), file=sys.stderr)
    return run_gui(source="replay", settings={"path": str(run), **follow},
                   start=True, speed=None, watch_folder=folder, **window)


def _run_gui(args: argparse.Namespace) -> int:
    from idt_desk_widgets.app import run_gui

    # The same checks as `idt-desk run`, before any window opens.
    speed = parse_speed(args.speed or "1")
    if check_out_dir(args.record, "--record") is not None and \
            (args.record / "config.json").exists():
        raise InputError(f"--record {args.record}: already holds a recording; choose a new path")
    size = _window_options(args)
    for option, specs in (("--perturb", args.perturb), ("--modulate", args.modulate)):
        if specs and not args.start:
            raise InputError(f"{option} {specs[0]}: needs --start (scheduled times count "
                             "from the session's start)")
    if args.startup_times and not args.start:
        raise InputError("--startup-times: needs --start (it times the first plotted window)")
    if args.baseline is not None:  # one line before any window opens
        from idt_desk.recordings.profile import Profile

        Profile.read(args.baseline)
    cls, values = source_class(args.source, args.set)
    if args.speed is None and cls.replays and values.get("path"):
        from idt_desk.recordings import RecordingError, recorded_speed

        try:  # a replay runs at the speed it was recorded at, unless told
            speed = recorded_speed(values["path"])
        except RecordingError:
            pass  # the replay source says what is wrong with it
    if cls.slow_to_load:
        # The window comes first: the source is built there, behind its loading screen. Here
        # its settings are checked by their declarations and the switches by their syntax;
        # their times become transitions at the source's own rate once it is built.
        schedule_switches(args.perturb, cls)
        schedule_switches(args.modulate, cls, kind="modulate")

        def schedule(built: Any) -> list[tuple[int, str, dict]]:
            return [*schedule_switches(args.perturb, built),
                    *schedule_switches(args.modulate, built, kind="modulate")]

        return run_gui(
            source=cls.name, settings=values, start=args.start, speed=speed,
            screenshot=args.screenshot, quit_after=args.quit_after, record=args.record,
            schedule=schedule, size=size, startup_times=args.startup_times,
            baseline=args.baseline,
        )
    source = build_source(args.source, args.set)
    try:
        schedule = [*schedule_switches(args.perturb, source),
                    *schedule_switches(args.modulate, source, kind="modulate")]
    finally:
        source.close()
    settings = {k: source.config[k] for k in key_values(args.set, "--set")}
    return run_gui(
        source=source.name, settings=settings, start=args.start, speed=speed,
        screenshot=args.screenshot, quit_after=args.quit_after, record=args.record,
        schedule=schedule, size=size, startup_times=args.startup_times,
        baseline=args.baseline,
    )



def _pictures_arguments(p: argparse.ArgumentParser) -> None:
    p.description = ("Retake the documentation's screenshots from this build: each one a "
                     "session run to a set moment of loop time and paused there (see "
                     "idt_desk_widgets.pictures). Needs a display: xvfb-run -a idt-desk "
                     "pictures.")
    p.add_argument("names", nargs="*", help="pictures to take (default: all)")
    p.add_argument("--out", type=Path, default=Path("assets/docs/img"),
                   help="folder to write them into (default assets/docs/img)")
    p.add_argument("--timeout", type=float, default=600.0,
                   help="seconds a picture's session may take to reach its moment (600)")


def _run_pictures(args: argparse.Namespace) -> int:
    from idt_desk_widgets.pictures import take_pictures

    check_float("--timeout", args.timeout, 0.0, lo_open=True)
    check_out_dir(args.out, "--out")
    try:
        take_pictures(args.out, tuple(args.names), timeout=args.timeout)
    except ValueError as exc:
        raise InputError(str(exc)) from None
    return 0


def _bench_gui_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--seconds", type=float, default=10.0)
    p.add_argument("--source", default="pendulum", help="source to run (default pendulum)")
    p.add_argument("--record", action="store_true",
                   help="record in the window and headless alike (into a temporary folder)")
    p.add_argument("--history", type=int, default=0, metavar="N",
                   help="instead: the frame rate at real time of a session of N windows "
                        "(made at maximum speed, with perturbations) against a fresh "
                        "session's, the two drawing in turns (issue 78: try 20000)")


def _bench_storm_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--minutes", type=float, default=5.0, help="minutes per source (default 5)")
    p.add_argument("--source", action="append", default=None,
                    help="source to storm (repeat; default: pendulum and gym)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--only", choices=("all", "lifecycle"), default="all",
                    help="'lifecycle': only Start and Stop (the RL leak's bisection)")


def _bench_follow_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--seconds", type=float, default=20.0,
                   help="seconds measured, after the warm-up (default 20)")
    p.add_argument("--rate", type=float, default=100_000.0,
                   help="the writer's target in transitions/s (default 100,000)")


def _bench_fleet_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--runs", type=int, action="append", default=None,
                   help="runs in the folder (repeat; default 100 and 1,000)")
    p.add_argument("--ssh", default=None,
                   help="also over SFTP: ssh://[user@]host[:port] (the temporary folder's "
                        "path is appended; the host must be this machine)")
    p.add_argument("--refreshes", type=int, default=5, help="refreshes timed (default 5)")


def _run_bench_fleet(args: argparse.Namespace) -> int:
    from idt_desk_widgets.fleet import bench_fleet

    counts = tuple(args.runs or (100, 1000))
    if any(n < 1 or n > 100_000 for n in counts):
        raise InputError("--runs: give 1 to 100,000 runs")
    if not 1 <= args.refreshes <= 1000:
        raise InputError("--refreshes: give 1 to 1,000")
    if args.ssh is not None and not args.ssh.startswith("ssh://"):
        raise InputError(f"--ssh {args.ssh}: give ssh://[user@]host[:port]")
    bench_fleet(counts, ssh=args.ssh, refreshes=args.refreshes)
    return 0


def _run_bench_gui(args: argparse.Namespace) -> int:
    from idt_desk_widgets.app import bench_gui

    if not 0 <= args.history <= 10_000_000:
        raise InputError(f"--history {args.history}: give 0 to 10,000,000 windows")
    bench_gui(seconds=args.seconds, source=args.source, record=args.record,
              history=args.history)
    return 0


def _run_bench_follow(args: argparse.Namespace) -> int:
    from idt_desk_widgets.app import bench_follow

    check_float("--seconds", args.seconds, 0.5)
    check_float("--rate", args.rate, 1.0)
    res = bench_follow(seconds=args.seconds, rate=args.rate)
    return 0 if res["final_follower_rows"] == res["final_writer_rows"] else 1


def _run_bench_storm(args: argparse.Namespace) -> int:
    from idt_desk_widgets.app import bench_storm

    failed = 0
    for source in args.source or ["pendulum", "gym"]:
        failed += bench_storm(minutes=args.minutes, source=source, seed=args.seed,
                              lifecycle_only=args.only == "lifecycle")
    return 1 if failed else 0


def _command(help_text: str, arguments, run) -> SimpleNamespace:
    """A command object: ``HELP`` and ``add_arguments(parser)``, which sets ``func``."""

    def add_arguments(p: argparse.ArgumentParser) -> None:
        arguments(p)
        p.set_defaults(func=run)

    return SimpleNamespace(HELP=help_text, add_arguments=add_arguments, __doc__=help_text)


GUI = _command("open the desktop dashboard (the default command)", _gui_arguments, _run_gui)
WATCH = _command("open the dashboard on a recording another program is writing "
                 "(idt_desk.Recorder, IDT Desk's own) and keep up as it grows",
                 _watch_arguments, _run_watch)
PICTURES = _command("retake the documentation's screenshots from this build",
                    _pictures_arguments, _run_pictures)
BENCH_GUI = _command("GUI frame rate with a source at maximum speed",
                     _bench_gui_arguments, _run_bench_gui)
BENCH_STORM = _command("click storm soak: random actions on the window, per source, with "
                       "exceptions and the memory curve", _bench_storm_arguments, _run_bench_storm)
BENCH_FOLLOW = _command("the window following a recording a fast writer writes: writer vs "
                        "follower rate, lag, GUI frame rate", _bench_follow_arguments,
                        _run_bench_follow)
BENCH_FLEET = _command("the window's table of a folder's runs: first listing and refreshes of "
                       "100 and 1,000 runs, local and over SSH, against the listing alone",
                       _bench_fleet_arguments, _run_bench_fleet)
