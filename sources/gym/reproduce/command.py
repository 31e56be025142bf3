"""``idt-desk reproduce cheetah``'s command line: its options, and what runs from them.

:func:`add_arguments` adds the options (the plug-in command's contract, with :data:`HELP`);
:func:`run` either runs a reproduction (:func:`~idt_desk_sources.gym.reproduce.runner.reproduce`)
and prints its tables, or, given ``--pool``, ``--out-of-sample``, ``--modulation`` or
``--modulation-study``, one analysis of finished runs (:mod:`.pool`, :mod:`.held_out`,
:mod:`.recovery`).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

from idt_desk_sources.gym.reproduce import held_out, pool, recovery
from idt_desk_sources.gym.reproduce.config import CheetahConfig
from idt_desk_sources.gym.reproduce.report import format_tables
from idt_desk_sources.gym.reproduce.runner import reproduce

from idt_desk.plugin import (
    CONTROL_BUDGET,
    DEFAULT_BUDGET,
    InputError,
    add_executor_arguments,
    add_settings,
    check_out_dir,
)

#: ``idt-desk reproduce cheetah``'s one-line help.
HELP = "the paper's RL results: Table 3 baseline, detection coverage, Table 4 latency"


def _names(text: str) -> tuple[str, ...]:
    return tuple(x.strip() for x in text.split(",") if x.strip())


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``idt-desk reproduce cheetah`` options (and ``func=run``)."""
    from idt_desk.plugin import DETECTOR_KINDS

    parser.description = (
        "Evaluate frozen policies in HalfCheetah with each of the paper's perturbations from "
        "episode --onset, and report detection by P, H_f, H_b, dH, their union (IDT) and "
        "reward, beside the paper's Tables 3 and 4. Writes trials.csv, summary.json, "
        "table.md and detection.png into --out."
    )
    parser.add_argument("--policies", type=_names, default=(), metavar="PATH,PATH",
                        help="SB3 zips (default: every shipped HalfCheetah policy)")
    parser.add_argument("--perturbations", type=_names, default=(), metavar="NAME,NAME",
                        help="Table 9 perturbations (default: all eight)")
    parser.add_argument("--actions", type=_names, default=("deterministic",),
                        metavar="deterministic|stochastic",
                        help="how the policy acts: deterministic (its mean, as the authors' "
                             "released evaluation does; the default) or stochastic (sampled); "
                             "'deterministic,stochastic' runs every trial under both and "
                             "reports them side by side")
    parser.add_argument("--control-seeds", type=int, default=5, metavar="N",
                        help="unperturbed control trials per policy, each its own environment "
                             "seed (5): the false-alarm rates are counted over them")
    parser.add_argument("--no-control", action="store_true",
                        help="no control trial (--control-seeds 0)")
    parser.add_argument("--episodes", type=int, default=50, help="episodes per trial (50)")
    parser.add_argument("--onset", type=int, default=15,
                        help="episode the perturbation starts at (15)")
    parser.add_argument("--env-id", default="HalfCheetah-v5")
    parser.add_argument("--seed", type=int, default=0, help="environment and noise seed (0)")
    parser.add_argument("--auto", action="append", default=[], metavar="NAME[:k=v,...]",
                        help="also run every trial with Auto engaging this modulation "
                             "(hold, input_filter or dim_reduction, with parameters and "
                             "persist/release windows as `run --auto`); repeat for more")
    parser.add_argument("--manual", action="append", default=[], metavar="NAME[:k=v,...]",
                        help="also run every trial with this modulation switched on by hand "
                             "at the onset (the comparison for Auto); repeat for more")
    parser.add_argument("--auto-detector", choices=DETECTOR_KINDS, default="persistence",
                        help="the alarm Auto follows, calibrated to --auto-false-alarms: "
                             "persistence (the default, which the documented closed-loop "
                             "tables used), cusum, ewma or mewma (a live RL session's "
                             "default), or the paper's 3σ rule (paper)")
    parser.add_argument("--auto-false-alarms", default=DEFAULT_BUDGET, metavar="BUDGET",
                        help="Auto's false-alarm budget in loop time (1/h; 1/10episodes)")
    parser.add_argument("--out-of-sample", nargs=2, metavar=("RUN_A", "RUN_B"),
                        help="run nothing: from two finished runs (other --seed, same "
                             "policies), choose each detector's threshold and the best "
                             "detector on one and judge them on the other, both ways; "
                             "writes out_of_sample.json and .md into --out")
    parser.add_argument("--pool", nargs="+", metavar="RUN",
                        help="run nothing: pool the live-calibrated blocks of finished runs "
                             "(other --seed, the same policies) per policy and in all, "
                             "counting each distinct control once and warning of controls "
                             "two runs share; writes pooled.json and .md into --out")
    parser.add_argument("--modulation", nargs="+", metavar="RUN",
                        help="run nothing: from finished runs with --manual settings, each "
                             "setting's recovered share of the return a perturbation lost "
                             "and its cost on unperturbed controls, with 95 %% bootstrap "
                             "intervals over policies, runs and episodes; writes "
                             "modulation.json and .md into --out")
    parser.add_argument("--modulation-study", action="store_true",
                        help="run the RL modulation study (four batches of --manual "
                             "settings on the three shipped SAC seeds, about 35 minutes on 2 "
                             "cores; batches already in --out are kept) and write its table "
                             "as --modulation does")
    add_settings(parser, ("false_alarms",), false_alarms=CONTROL_BUDGET, notes={
        "false_alarms": "the live-calibrated block's: every trial judged by the detectors a "
                        "live session calibrates on its own pre-onset windows (persistence, "
                        "ewma, mewma; the RL source's budget)"})
    add_settings(parser, ("twin",), notes={
        "twin": "judge every trial with the env's twin too (an exact copy and one 10 %% off): "
                "its alarm alone and with the IDT's, and the class of every detection"})
    parser.add_argument("--preset", default="",
                        help="the IDT's preset (default: the source's for the env, cheetah on "
                             "HalfCheetah, auto elsewhere: each trial's view chosen on its "
                             "first 20 windows, as the Gymnasium wrappers' default does; gym: "
                             "3 bins of every variable)")
    parser.add_argument("--no-drift", action="store_true",
                        help="do not judge the trials with the generic drift detectors "
                             "(online MMD and LSDD on each trial's (S, A, S'), calibrated to "
                             "--false-alarms; a few seconds a trial)")
    parser.add_argument("--max-baseline-cv", type=float, default=0.25,
                        help="exclude seeds whose pre-onset return CV exceeds this (0.25)")
    add_settings(parser, ("k",))
    add_executor_arguments(parser, "trial groups")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace, print_fn: Callable[[str], None] = print) -> int:
    """Run ``idt-desk reproduce cheetah`` from parsed arguments; print the tables."""
    modes = [flag for flag, given in (("--out-of-sample", args.out_of_sample),
                                      ("--pool", args.pool), ("--modulation", args.modulation),
                                      ("--modulation-study", args.modulation_study)) if given]
    if len(modes) > 1:
        raise InputError(f"{modes[0]} and {modes[1]}: one analysis at a time (each writes its "
                         "own report into --out)")
    check_out_dir(args.out, "--out")
    if args.out_of_sample:
        return held_out.run(args, print_fn)
    if args.pool:
        return pool.run(args, print_fn)
    if args.modulation_study:
        from idt_desk_sources.gym.modulation import run_study

        args.modulation = run_study(args.out, workers=args.workers,
                                    progress=not args.no_progress, print_fn=print_fn)
    if args.modulation:
        return recovery.run(args, print_fn)
    config = CheetahConfig(
        policies=args.policies, perturbations=args.perturbations,
        control_seeds=0 if args.no_control else args.control_seeds, actions=args.actions,
        episodes=args.episodes, onset=args.onset,
        env_id=args.env_id, preset=args.preset, seed=args.seed, auto=tuple(args.auto),
        manual=tuple(args.manual), auto_detector=args.auto_detector,
        auto_false_alarms=args.auto_false_alarms, false_alarms=args.false_alarms,
        twin=args.twin, drift=not args.no_drift, max_baseline_cv=args.max_baseline_cv,
        k=args.k, workers=args.workers,
        scheduler=args.scheduler, out=args.out,
    )
    result = reproduce(config, progress=not args.no_progress)
    print_fn(format_tables(result.summary).rstrip("\n"))
    print_fn("")
    print_fn("wrote " + ", ".join(str(p) for p in result.files))
    return 0
