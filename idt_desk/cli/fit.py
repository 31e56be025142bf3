"""``idt-desk fit RUN… --out PROFILE``: a baseline profile fitted on known-good recordings.

The fit itself is :func:`idt_desk.live.fit.fit_profile`.
"""

from __future__ import annotations

import argparse

from idt_desk.cli.validate import add_settings, path_arg
from idt_desk.live.fit import fit_profile
from idt_desk.words import say

__all__ = ["FIT_OPTIONS", "add_fit"]

#: The detector options ``fit`` takes in place of the first run's recorded ones.
FIT_OPTIONS = ("detector", "false_alarms", "persist", "ewma_lambda", "drift", "phase_baseline",
               "k")


def add_fit(sub: argparse._SubParsersAction) -> None:
    """The ``fit`` command."""
    p = sub.add_parser(
        "fit", help="fit a baseline profile on known-good recordings (for --baseline)",
        description="Fit the IDT once on known-good recordings of one loop: the symbols, the "
        "twin's residual scales and the detectors' baseline and thresholds, written as a "
        "baseline profile (JSON). Every later session given it (run/gui --baseline, "
        "IDTMonitor(env, baseline=...), IDTCallback, Recorder) is armed at its first "
        "complete window. Each run's rows before its first perturbation or modulation are "
        "used, the runs taken in order as one stream.")
    p.add_argument("runs", nargs="+", type=path_arg, metavar="RUN",
                   help="recordings of the loop running as it should")
    p.add_argument("--out", type=path_arg, required=True, metavar="PROFILE",
                   help="the profile's file (replaced if it exists)")
    add_settings(p, FIT_OPTIONS)
    p.set_defaults(func=_run_fit)


def _run_fit(args: argparse.Namespace) -> int:
    options = {k: getattr(args, k) for k in FIT_OPTIONS
               if getattr(args, k) is not None and not (k == "phase_baseline" and not
                                                        getattr(args, k))}
    profile = fit_profile(args.runs, args.out, options, progress=say)
    say(f"{profile.describe()} -> {profile.path}")
    return 0


