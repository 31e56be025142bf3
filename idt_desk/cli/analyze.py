"""``idt-desk analyze``: windows, summary tables and figures of a trajectory or a dialogue.

A trajectory file (CSV or Parquet of (S, A, S') rows) or a dialogue recording; a file that
does not fit the preset gets a one-line error naming the option to change.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from idt_desk.cli.validate import (
    add_settings,
    check_int,
    check_limit,
    check_out_dir,
    path_arg,
)
from idt_desk.detection.spec import ANALYZE_BUDGET, DetectorSpec, parse_budget
from idt_desk.errors import InputError

__all__ = ["add_analyze"]


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


def add_analyze(sub: argparse._SubParsersAction) -> None:
    """The ``analyze`` command: a trajectory or a dialogue recording."""
    from idt_desk.metrics.presets import ANGLE_MODES

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
    p.add_argument("file", type=Path, help="trajectory file (.csv or .parquet), or a "
                   "recording's directory (its transitions, with the preset it ran with)")
    p.add_argument("--out", type=path_arg, required=True, help="output directory")
    # The settings' types, ranges and words: the settings table (idt_desk.settings), as
    # `idt-desk run` and the window. Without a preset: 16 bins, W 300, stride 75.
    add_settings(p, ("preset", "bins", "window", "stride"))
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
    add_settings(p, ("correction",))
    p.add_argument("--null", type=int, default=0, metavar="N",
                   help="shuffle-surrogate draws per window (0 = off)")
    p.add_argument("--seed", type=int, default=0, help="seed for the surrogate null")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--onset", type=int,
                   help="perturbation onset (transition index): the baseline is every window "
                        "wholly before it")
    g.add_argument("--baseline-windows", type=int, help="baseline = the first N windows")
    # The paper's rule by default, as the paper's tables; a budget in loop time needs --rate.
    add_settings(p, ("detector", "k", "false_alarms", "persist", "ewma_lambda", "drift",
                     "rate"), detector="paper", false_alarms=ANALYZE_BUDGET,
                 persist=DetectorSpec.m)
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


def _recording(args: argparse.Namespace) -> tuple[Path, dict | None]:
    """The file to read, and the recording's config when ``args.file`` is a recording.

    A recording's directory (``config.json`` beside its transitions: ``transitions.arrows``,
    or ``transitions.csv`` before format 2) is read through its transitions, with its own
    preset and rate unless the options say otherwise.
    """
    folder = args.file
    if not folder.is_dir() or not (folder / "config.json").is_file():
        return folder, None
    from idt_desk.recordings import RecordingError
    from idt_desk.recordings.checks import check_columns, check_regular, read_config
    from idt_desk.recordings.files import TRANSITIONS, text_head_problem

    try:  # the readers' one check of a recording's config, files and columns
        config = read_config(folder)
        table = folder / TRANSITIONS[config["format_version"]]
        if not table.is_file():
            raise InputError(f"{folder}: a recording without {table.name} (an export of a "
                             "session without Record keeps only windows and events)")
        check_regular(table)
        if table.suffix == ".csv":  # the log's columns are checked as it is read
            if (problem := text_head_problem(table)) is not None:
                raise RecordingError(f"{table}: {problem}")
            with open(table, "rb") as f:
                header = f.readline().decode(errors="replace").strip().split(",")
            check_columns(header, config, str(table))
    except RecordingError as exc:
        raise InputError(str(exc)) from None
    return table, config


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
    from idt_desk.pipeline import preset_from_spec
    from idt_desk.recordings.trajectory import load_trajectory

    path, recorded = _recording(args)
    if args.preset:
        base = get_preset(args.preset)
    elif recorded is not None and recorded.get("preset"):
        base = preset_from_spec(recorded["preset"])  # the symbols the recording ran with
    else:
        base = Preset("custom", "set from the command line", bins=16, window=300, stride=75,
                      angle_mode="unwrap")
    if recorded is not None and args.rate is None:
        args.rate = (recorded.get("source") or {}).get("rate")
    preset = preset_with_overrides(
        base, bins=args.bins, window=args.window, stride=args.stride,
        state_groups=args.groups, action_groups=args.action_groups, angles=args.angles,
        angle_mode=args.angle_mode,
    )
    for key in ("bins", "window", "stride"):
        check_limit(key, getattr(preset, key))
    check_int("--null", args.null, 0, 10_000)
    for key in ("seed", "k", "persist", "ewma_lambda", "drift", "rate"):
        check_limit(key, getattr(args, key))
    try:
        parse_budget(args.false_alarms)
    except ValueError as exc:
        raise InputError(f"--false-alarms: {exc}") from None
    check_int("--onset", args.onset, 0)
    check_limit("baseline_windows", args.baseline_windows)
    check_out_dir(args.out, "--out")
    traj = load_trajectory(
        path, s_prefix=args.s_prefix, a_prefix=args.a_prefix,
        s_next_prefix=args.s_next_prefix, state_columns=args.state_columns,
        action_columns=args.action_columns, passive=args.passive,
    )
    _check_fits_file(args, preset, traj)
    result = analyze_trajectory(
        traj, preset, correction=None if args.correction == "none" else args.correction,
        null_draws=args.null, seed=args.seed, onset=args.onset,
        n_baseline=args.baseline_windows, k=args.k, source=str(args.file),
        detector=args.detector, false_alarms=args.false_alarms, persist=args.persist,
        drift=args.drift, ewma_lambda=args.ewma_lambda, rate=args.rate,
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


def _origin(args: argparse.Namespace, key: str, value: object) -> str:
    """Where a setting's value came from: the option given, the recording, or the default.

    An error never blames an option the user did not give.
    """
    if getattr(args, key, None) is not None:
        return f"--{key.replace('_', '-')} {value}"
    if args.file.is_dir():
        return f"the recording's {key} {value}"
    return f"the default {key} {value}"


def _check_fits_file(args: argparse.Namespace, preset, traj) -> None:
    """The options that depend on the file (its length, its columns), before any analysis."""
    n, w, stride = traj.n, preset.window, preset.stride
    if n < w:
        raise InputError(f"{_origin(args, 'window', w)}: {args.file}: {n} transitions, fewer "
                         f"than one window of {w}")
    n_windows = (n - w) // stride + 1
    if args.baseline_windows is not None and args.baseline_windows > n_windows:
        raise InputError(f"--baseline-windows {args.baseline_windows}: {args.file} has "
                         f"{n_windows} windows (W={w}, stride {stride}); allowed: 2 to "
                         f"{n_windows}")
    if args.onset is not None and not w + stride <= args.onset < n:
        raise InputError(f"--onset {args.onset}: must be a transition index from {w + stride} "
                         f"(two baseline windows before it) to {n - 1} ({args.file} has {n} "
                         "transitions)")
    by = f"--preset {args.preset}" if args.preset else _origin(args, "preset", preset.name)
    n_s = traj.s.shape[1]
    _check_groups("--groups" if args.groups is not None else by, preset.state_groups, n_s,
                  "state")
    if traj.a is not None:
        _check_groups("--action-groups" if args.action_groups is not None else by,
                      preset.action_groups, traj.a.shape[1], "action")
    if preset.angle_mode != "none":
        _check_groups("--angles" if args.angles is not None else by,
                      [preset.angles] if preset.angles else None, n_s, "state")
