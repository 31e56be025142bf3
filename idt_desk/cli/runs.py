"""``idt-desk runs PATH``: every run under a folder (or a server's, over SSH), one line each.

Everything printed from the runs' files (folder names, states, errors) is passed through
:func:`~idt_desk.words.shown`: a name holding a newline or an ESC sequence cannot forge a row
or command the terminal. What the listing left out (links leading outside PATH, folders
reached twice, too deep) is said on stderr, a line each.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time

from idt_desk.errors import InputError
from idt_desk.words import shown as shown_text

__all__ = ["add_runs", "parse_duration"]

_UNITS = {"s": 1.0, "min": 60.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def parse_duration(text: str, option: str) -> float:
    """Seconds of ``30s``, ``10min``, ``2h``, ``1d`` (a bare number: seconds)."""
    t = text.strip().lower()
    unit = next((u for u in sorted(_UNITS, key=len, reverse=True) if t.endswith(u)), "s")
    number = t[: len(t) - len(unit)] if t.endswith(unit) else t
    try:
        value = float(number)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value <= 0:
        raise InputError(f"{option} {text}: give a positive duration such as 30s, 10min, 2h, 1d")
    return value * _UNITS[unit]


def add_runs(sub: argparse._SubParsersAction) -> None:
    """The ``runs`` command: every run under a folder."""
    p = sub.add_parser(
        "runs", help="every run under a folder, local or ssh://, alarmed first",
        description="List every run under PATH, recursively (a run is a folder holding a "
        "recording's config.json): its state (writing, idle, ended, stopped responding, "
        "error), transitions, windows, baseline, alarms, the last alarm's loop time, its "
        "severity and cost. Alarmed runs first, then the most recently active. PATH may be "
        "ssh://[user@]host[:port]/path: read over SFTP with your ~/.ssh config, keys, agent "
        "and known_hosts (an unknown host key is refused). Nothing outside PATH is opened (a file "
        "linked outside is that run's error), names and errors are printed with control "
        "characters escaped, a folder reached twice is listed once, and /, /proc, /sys, /dev "
        "and an empty path are refused; what was left out is said on stderr.")
    p.add_argument("path", help="a folder of runs (or one run), or ssh://[user@]host[:port]/path")
    p.add_argument("--json", action="store_true",
                   help="print a JSON list (keys: path, state, transitions, windows, "
                   "baseline, alarms, last_alarm, severity, cost, active, error)")
    p.add_argument("--filter", metavar="GLOB", default=None,
                   help="only runs whose path under PATH matches, e.g. 'sac-*/seed1*'")
    p.add_argument("--active-within", metavar="DURATION", default=None,
                   help="only runs active within this long, e.g. 10min, 2h")
    p.add_argument("--silence", type=float, default=10.0,
                   help="seconds without a heartbeat after which an open run counts as "
                   "stopped responding (default 10)")
    p.set_defaults(func=_run_runs)


def _run_runs(args: argparse.Namespace) -> int:
    from idt_desk.cli.validate import check_float
    from idt_desk.recordings.runs import RunIndex, root_problem, row_line, select

    check_float("--silence", args.silence, 0.5)
    within = None if args.active_within is None else \
        parse_duration(args.active_within, "--active-within")
    index = None
    try:
        index = RunIndex(args.path, silence=args.silence)
        rows = index.refresh()
    except OSError as exc:
        raise InputError(root_problem(args.path, exc)) from None
    finally:
        if index is not None:
            index.close()  # an SFTP connection
    for note in index.notes:
        print(f"idt-desk runs: {note}", file=sys.stderr)
    now = time.time()
    shown = select(rows, args.filter, within, now)
    if args.json:
        print(json.dumps(shown, indent=1, allow_nan=False))
        return 0
    where = shown_text(args.path)
    if not rows:
        print(f"{where}: no run here (a run is a folder with a recording's config.json)")
    elif not shown:
        print(f"{where}: {len(rows)} run{'s' if len(rows) != 1 else ''}, none matching")
    for row in shown:
        print(row_line(row, now))
    return 0
