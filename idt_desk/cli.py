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


def _run_bench_engine(args: argparse.Namespace) -> int:
    from idt_desk.bench import bench_engine

    bench_engine(n=args.n, window=args.window, repeats=args.repeats)
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with every subcommand."""
    parser = argparse.ArgumentParser(
        prog="idt-desk",
        description="IDT Desk: live bi-predictability (P, H_f, H_b, dH) of closed loops.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    _add_analyze(sub)
    _add_bench(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``idt-desk`` console script."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    try:
        return int(args.func(args) or 0)
    except (InputError, KeyError) as exc:
        msg = exc.args[0] if isinstance(exc, KeyError) and exc.args else exc
        print(f"idt-desk {args.command}: error: {msg}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
