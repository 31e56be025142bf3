"""The command line ``idt-desk reproduce dialogue``: HELP, add_arguments and run.

The options are the reproduction's (tests, conditions, seeds, turns, retries, workers, the
output folder) and the dialogue source's settings (hosts, backends, models, judge, ...), each
its own option; :func:`run` builds a
:class:`~idt_desk_sources.dialogue.reproduce.config.DialogueConfig` and prints the tables.
"""

from __future__ import annotations

import argparse
from typing import Any

from idt_desk_sources.dialogue.reproduce.config import DialogueConfig
from idt_desk_sources.dialogue.reproduce.report import format_tables
from idt_desk_sources.dialogue.reproduce.runner import reproduce

from idt_desk.plugin import add_executor_arguments

#: ``idt-desk reproduce dialogue``'s one-line help.
HELP = "the paper's LLM results: injection detection, effect sizes, Table 6 correlations"


def _ints(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: whole numbers separated by commas"
                                          ) from None


def _words(text: str) -> tuple[str, ...]:
    return tuple(v.strip() for v in text.split(",") if v.strip())


#: Options that are the source's settings (option name -> setting name).
_SETTING_OPTIONS = ("host", "student_host", "teacher_host", "student_backend",
                    "teacher_backend", "student_model", "teacher_model", "topic", "threads",
                    "timeout", "judge", "judge_model", "judge_host", "teacher_length")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``idt-desk reproduce dialogue`` options (and ``func=run``)."""
    parser.description = (
        "Run the paper's dialogue tests (baseline tests 3, 4, 8; perturbation tests 7, 9, 10 "
        "with injections after turns 31, 46, 61, 76, 91) under the normal and constrained "
        "student conditions, with Ollama models or the built-in SmolLM2 for either role, and "
        "report injection detection by P, H_b, ΔH and the structural baselines, effect sizes "
        "and the Table 6 correlations beside the paper's. Writes turns.csv, summary.json, "
        "table.md and figure4.png into --out; every turn is kept in --out/dialogues as it "
        "arrives, and the same command run again carries unfinished dialogues on.")
    parser.add_argument("--tests", type=_ints, default=(3, 4, 8, 7, 9, 10), metavar="N,N",
                        help="the paper's tests (default: 3,4,8,7,9,10)")
    parser.add_argument("--conditions", type=_words, default=("normal", "constrained"),
                        metavar="NAME,NAME", help="student conditions (normal,constrained)")
    parser.add_argument("--seeds", type=_ints, default=(0,), metavar="N,N",
                        help="sampling seeds, one dialogue per test, condition and seed (0)")
    parser.add_argument("--turns", type=int, default=None,
                        help="turns per dialogue (default: each test's own, 100-200)")
    for name in _SETTING_OPTIONS:
        from idt_desk_sources.dialogue._source import DialogueSource

        p = next(p for p in DialogueSource.settings if p.name == name)
        kw: dict[str, Any] = {"default": None, "help": (p.help or p.label)
                              + f" (default: {p.default!r})"}
        if p.choices:
            kw["choices"] = p.choices
        elif isinstance(p.default, bool):
            pass
        elif isinstance(p.default, int):
            kw["type"] = int
        elif isinstance(p.default, float):
            kw["type"] = float
        parser.add_argument("--" + name.replace("_", "-"), **kw)
    parser.add_argument("--retries", type=int, default=2,
                        help="tries again after a backend failure before a dialogue is "
                             "reported unfinished (2)")
    parser.add_argument("--report-only", action="store_true",
                        help="run nothing: report on the turns kept in --out so far")
    parser.add_argument("--no-baselines", action="store_true",
                        help="skip the embedding baselines even when installed")
    add_executor_arguments(parser, "dialogues")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace, print_fn: Any = print) -> int:
    """Run ``idt-desk reproduce dialogue`` from parsed arguments; print the tables.

    Exit status 0 when every dialogue finished, 1 when some are unfinished (their turns are
    kept and the report covers what there is).
    """
    settings = tuple((name, getattr(args, name)) for name in _SETTING_OPTIONS
                     if getattr(args, name, None) is not None)
    config = DialogueConfig(tests=args.tests, conditions=args.conditions, seeds=args.seeds,
                            turns=args.turns, settings=settings, retries=args.retries,
                            workers=args.workers, scheduler=args.scheduler,
                            out=str(args.out))
    result = reproduce(config, progress=not args.no_progress,
                       baselines=False if args.no_baselines else None,
                       report_only=args.report_only)
    print_fn(format_tables(result.summary).rstrip("\n"))
    print_fn("")
    print_fn("wrote " + ", ".join(str(p) for p in result.files))
    if result.summary["unfinished"]:
        print_fn(f"{len(result.summary['unfinished'])} dialogue(s) unfinished: run the same "
                 "command again" + (" without --report-only" if args.report_only else "")
                 + " to carry them on")
        return 1
    return 0
