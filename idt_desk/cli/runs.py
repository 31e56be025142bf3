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
    p.add_argument("--baseline", metavar="PROFILE", default=None,
                   help="also judge every run listed against this baseline profile (idt-desk "
                   "fit): its rows replayed through the profile's symbols and thresholds, "
                   "so a sweep's runs are compared with one reference, not each with its own "
                   "beginning (local runs; a replay per run)")
    p.add_argument("--fail-on-alarm", action="store_true",
                   help="exit with status 3 when a run listed alarmed (with --baseline: "
                   "alarmed against the profile)")
    p.set_defaults(func=_run_runs)


def _run_runs(args: argparse.Namespace) -> int:
    from idt_desk.cli.validate import check_float
    from idt_desk.recordings.runs import RunIndex, root_problem, row_line, select

    check_float("--silence", args.silence, 0.5)
    profile = None
    if args.baseline is not None:
        from idt_desk.recordings.profile import Profile

        if str(args.path).startswith("ssh://"):
            raise InputError("--baseline: judges local runs (a replay each); copy the runs "
                             "here, or run idt-desk runs on the server")
        profile = Profile.read(args.baseline)
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
    if profile is not None:
        _judge_all(shown, args.path, profile)
    alarmed = any((r.get("profile") or {}).get("alarms") if profile is not None
                  else r.get("alarms") for r in shown)
    code = 3 if args.fail_on_alarm and alarmed else 0
    if args.json:
        print(json.dumps(shown, indent=1, allow_nan=False))
        return code
    where = shown_text(args.path)
    if not rows:
        print(f"{where}: no run here (a run is a folder with a recording's config.json)")
    elif not shown:
        print(f"{where}: {len(rows)} run{'s' if len(rows) != 1 else ''}, none matching")
    for row in shown:
        line = row_line(row, now)
        if "profile" in row:
            line += f"  |  {_profile_words(row['profile'])}"
        print(line)
    return code


def _judge_all(rows: list[dict], root: str, profile) -> None:
    """Each row's run judged by ``profile`` (its ``profile`` key: the verdict, or why not)."""
    from pathlib import Path

    from idt_desk.live.fit import judge_run

    base = Path(root)
    for row in rows:
        run = base / row["path"] if row["path"] not in ("", ".") else base
        try:
            row["profile"] = judge_run(run, profile)
        except InputError as exc:  # another loop's run, or one that cannot be replayed
            row["profile"] = {"error": str(exc)}


def _profile_words(v: dict) -> str:
    if "error" in v:
        return f"vs profile: {shown_text(v['error'], 160)}"
    first = "" if v["first_alarm"] is None else f", first at {v['first_alarm']:,.1f} s"
    fit = {True: "fits", False: "outside its spread", None: "too short to check"}[v["fits"]]
    return f"vs profile: {v['alarms']} alarm{'s' * (v['alarms'] != 1)}{first}; {fit}"
