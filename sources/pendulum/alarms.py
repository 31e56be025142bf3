"""The pendulum's perturbations, detected with their false-alarm rates.

``idt-desk reproduce pendulum-alarms`` asks of the live pendulum what the paper asks of the
RL agent (§10.4): is a perturbation detected, how soon, and — which the paper does not
report — how often does the same detector fire on an unperturbed run?

One trial
---------
1. The live source (``PendulumSource``) released from a random start drawn from the trial's
   seed, run ``seconds`` (60) of loop time at 1 kHz through the live session's pipeline
   (preset ``pendulum-live``: 16 bins, W = 300, stride 75; symbols calibrated on the first 20
   windows, the baseline the next 200).
2. At ``onset`` (20 s) a perturbation switches on until the end (a one-shot kick at 20 s,
   repeated kicks every 2 s), or nothing: the **control** trials.
3. The windows are flagged by each detector exactly as the live monitor flags them (the
   same :class:`~idt_desk.detection.monitor.Monitor`, fed the windows in order):

   - ``paper``: the first window beyond 3σ of the baseline (the paper's rule, uncalibrated);
   - ``persistence``: 5 windows in a row beyond a kσ calibrated to the budget (the live
     default);
   - ``cusum``: a two-sided CUSUM calibrated to the same budget;
   - ``mmd``, ``lsdd``: the generic online drift detectors (alibi-detect's online MMD and
     LSDD, ``idt_desk.detection.drift``) on the trial's transitions, one a window (the
     window's last), standardised on the baseline windows' and calibrated to the same
     budget (their expected run time the budget's windows per false alarm).

4. The observation span is the same for every trial: the windows from the first one that
   sees the onset to the end. A perturbed trial is *detected* when the IDT alarm (any of P,
   H_f, H_b, ΔH) fires in it, latency counted in windows from its first window; a control
   trial that alarms in it is a *false alarm* at the same exposure (40 s, about 530 windows).

Matched false-alarm rate: for the paper rule and persistence the IDT statistic after the
onset (largest over the four components of |z|, or of the smallest |z| of the last 5
windows) is kept as its running-maximum records, and the threshold is set so that at most
5 % of the control trials exceed it: detection and latency are then compared at that
false-alarm rate (``idt_desk.detection.matched.matched_comparison``, the reproductions' one
comparison).
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from idt_desk.plugin import (
    DEFAULT_BUDGET,
    DETECTOR_KINDS,
    DRIFT_KINDS,
    IDT_METRICS,
    DetectorSpec,
    InputError,
    add_settings,
    build_monitor,
    check_float,
    check_int,
    check_out_dir,
    detector_statistic,
    drift_alarms,
    judge,
    matched_comparison,
    parse_budget,
    records,
    run_tasks,
    write_report,
)

HELP = "detect the pendulum's perturbations, with false alarms counted on unperturbed runs"

#: (name, perturbation, parameters): the conditions of assets/docs/pendulum.md's table.
CONDITIONS: tuple[tuple[str, str | None, dict[str, Any]], ...] = (
    ("none", None, {}),
    ("kick_once", "kick", {"period": 0.0}),
    ("kick_every_2s", "kick", {"period": 2.0}),
    ("friction", "friction", {}),
    ("gravity", "gravity", {}),
    ("sensor_noise", "sensor_noise", {}),
    ("coarse_sensor", "coarse_sensor", {}),
)
#: Symbols' calibration and baseline windows (the live session's defaults).
CALIBRATION_WINDOWS, BASELINE_WINDOWS = 20, 200
#: Swept detectors: (kind, m) of the statistic whose records are kept.
SWEPT = {"paper": ("paper", 1), "persistence": ("persistence", 5)}


@dataclass(frozen=True)
class AlarmTask:
    """One trial: a condition, a seed, and the experiment's fixed settings."""

    condition: str
    seed: int
    seconds: float = 60.0
    onset: float = 20.0
    budget: str = DEFAULT_BUDGET


@dataclass
class AlarmsConfig:
    """``idt-desk reproduce pendulum-alarms``'s settings."""

    seeds: int = 10
    seconds: float = 60.0
    onset: float = 20.0
    budget: str = DEFAULT_BUDGET
    conditions: tuple[str, ...] = tuple(c[0] for c in CONDITIONS)
    workers: int | None = None
    out: Path | None = None

    def validate(self) -> None:
        """Raise InputError on a bad setting, before anything runs."""
        check_int("--seeds", self.seeds, 2, 10_000)
        check_float("--seconds", self.seconds, 0.0, 3600.0, lo_open=True)
        check_float("--onset", self.onset, 0.0, lo_open=True)
        known = [c[0] for c in CONDITIONS]
        bad = [c for c in self.conditions if c not in known]
        if bad:
            raise InputError(f"--conditions: unknown {bad}; known: {', '.join(known)}")
        if "none" not in self.conditions:
            raise InputError("--conditions: include 'none' (the controls count false alarms)")
        try:
            parse_budget(self.budget)
        except ValueError as exc:
            raise InputError(f"--false-alarms: {exc}") from None
        from idt_desk_sources.pendulum import PendulumSource

        from idt_desk.plugin import PRESETS

        p = PRESETS[PendulumSource.presets[0]]
        ready = (p.window + (CALIBRATION_WINDOWS + BASELINE_WINDOWS - 1) * p.stride) / 1000
        if self.onset < ready:
            raise InputError(f"--onset {self.onset:g}: the baseline completes at {ready:g} s "
                             "of loop time; the onset must come after it")
        if self.seconds <= self.onset + 5:
            raise InputError(f"--seconds {self.seconds:g}: leave at least 5 s after the "
                             f"onset ({self.onset:g} s)")


def run_trial(task: AlarmTask) -> dict[str, Any]:
    """Simulate one trial and flag its windows with every detector (see the module)."""
    from idt_desk_sources.pendulum import PendulumSource

    from idt_desk.plugin import Session, SessionConfig, run_headless

    cond = {c[0]: c for c in CONDITIONS}[task.condition]
    src = PendulumSource(random_start=True)
    # The IDT's detectors are judged here (the twin's alarm is the RL page's study).
    cfg = SessionConfig(source="pendulum", speed=None, seed=task.seed, detector="paper",
                        calibration_windows=CALIBRATION_WINDOWS,
                        baseline_windows=BASELINE_WINDOWS, history=10**6, twin=False)
    session = Session(cfg, source=src)
    onset_i = round(task.onset * src.rate)
    # The transitions the drift detectors read, as the loop produces them.
    taken: list[Any] = []
    step = src.step

    def keep(n: int) -> Any:
        b = step(n)
        taken.append(np.column_stack([b.s, b.s_next]))
        return b

    src.step = keep
    if cond[1] is not None:
        params = src.perturbation(cond[1]).resolve(cond[2])
        session.schedule(onset_i, "perturb", name=cond[1], params=params)
    run_headless(session, steps=round(task.seconds * src.rate))
    w = session.snapshot(limit=10**6).windows
    preset = session.preset
    j0 = int(np.searchsorted(w["end"], onset_i, side="right"))  # first window seeing it
    row: dict[str, Any] = {"condition": task.condition, "seed": task.seed,
                           "windows": len(w["end"]), "onset_window": j0,
                           "P_before": float(np.nanmean(w["P"][CALIBRATION_WINDOWS:j0])),
                           "P_after": float(np.nanmean(w["P"][j0:]))}
    table = {m: w[m] for m in IDT_METRICS}
    for kind in DETECTOR_KINDS:
        mon = build_monitor(IDT_METRICS, baseline_windows=BASELINE_WINDOWS, detector=kind,
                            false_alarms=task.budget, rate=src.rate, stride=preset.stride,
                            window=preset.window, what="the pendulum")
        flags, _ = judge(mon, table, 0, CALIBRATION_WINDOWS)
        idt = flags["IDT"]
        hits = np.flatnonzero(idt[j0:] == 1.0)
        row[f"alarm_{kind}"] = bool(hits.size)
        row[f"latency_{kind}"] = int(hits[0]) if hits.size else None
        row[f"alarm_before_onset_{kind}"] = bool((idt[:j0] == 1.0).any())
        if kind in SWEPT:
            spec = DetectorSpec(*SWEPT[kind][:1], m=SWEPT[kind][1])
            s = np.max([detector_statistic(spec, mon.calibration.standardise(m, w[m]))[0]
                        for m in IDT_METRICS], axis=0)
            row[f"records_{kind}"] = json.dumps(records(s[j0:]))
        if kind != "paper":
            row[f"too_short_{kind}"] = bool(mon.calibration.too_short)
    # The drift detectors: (S, S') of each window's last transition (the pendulum has no
    # action), the baseline windows' the reference, at the budget's windows per alarm.
    last = np.asarray(w["end"], dtype=np.int64) - 1
    x = np.concatenate(taken)[last][CALIBRATION_WINDOWS:]
    for kind, got in drift_alarms(x, j0 - CALIBRATION_WINDOWS, mon.budget_windows()).items():
        row[f"alarm_{kind}"] = not np.isnan(got.latency)
        row[f"latency_{kind}"] = None if np.isnan(got.latency) else int(got.latency)
        row[f"records_{kind}"] = json.dumps(records(got.ratio))
        row[f"skipped_{kind}"] = got.skipped
    return row


def _summary(config: AlarmsConfig, trials: pd.DataFrame, wall: float) -> dict[str, Any]:
    from idt_desk.plugin import summarize, summary_document

    control = trials[trials["condition"] == "none"]
    out: dict[str, Any] = summary_document(
        summarize({"P_before": control["P_before"].to_numpy(),
                   "P_after": control["P_after"].to_numpy()}, ("P_before", "P_after")),
        notes=["metrics: per-trial mean P of the control trials' windows before and after "
               "the onset time", "a false alarm is an IDT alarm in a control trial's "
               "windows from the onset on (the span a perturbed trial is judged on)"],
        config={"seeds": config.seeds, "seconds": config.seconds, "onset": config.onset,
                "budget": str(parse_budget(config.budget)),
                "calibration_windows": CALIBRATION_WINDOWS,
                "baseline_windows": BASELINE_WINDOWS, "preset": "pendulum-live",
                "conditions": list(config.conditions)},
        wall_seconds=wall, detectors={}, matched_false_alarm={})
    for kind in (*DETECTOR_KINDS, *DRIFT_KINDS):
        if f"alarm_{kind}" not in trials:
            continue
        block: dict[str, Any] = {
            "false_alarms": {"alarms": int(control[f"alarm_{kind}"].sum()),
                             "trials": len(control),
                             "rate": float(control[f"alarm_{kind}"].mean())}}
        for name in config.conditions:
            if name == "none":
                continue
            g = trials[trials["condition"] == name]
            lat = g[f"latency_{kind}"].dropna()
            block[name] = {"detected": int(g[f"alarm_{kind}"].sum()), "trials": len(g),
                           "median_latency": float(lat.median()) if len(lat) else None}
        out["detectors"][kind] = block
    for kind in (*SWEPT, *DRIFT_KINDS):  # θ matched on the controls to MATCHED_RATE
        if f"records_{kind}" not in trials:
            continue
        recs = {i: json.loads(r) for i, r in trials[f"records_{kind}"].items()}
        ctrl = [recs[i] for i in control.index]
        got = matched_comparison(ctrl, [])
        block = {k: got[k] for k in ("threshold_sigma", "allowed_false_alarms", "false_alarms")}
        for name in config.conditions:
            if name == "none":
                continue
            idx = trials.index[trials["condition"] == name]
            got = matched_comparison(ctrl, [recs[i] for i in idx])
            block[name] = {"detected": got["detection"]["detected"], "trials": len(idx),
                           "median_latency": got["median_latency"]}
        out["matched_false_alarm"][kind] = block
    return out


_LABELS = {"kick_once": "kick (once, at onset)", "kick_every_2s": "kick (every 2 s)",
           "friction": "friction (0.3)", "gravity": "gravity ×1.5",
           "sensor_noise": "sensor noise (0.05 rad, 0.3 rad/s)",
           "coarse_sensor": "coarse sensor (0.2 rad, 1 rad/s)"}


#: Each detector's column head.
_HEADS = {"paper": "paper rule (3σ)", "persistence": "persistence (calibrated)",
          "cusum": "CUSUM (calibrated)", "ewma": "EWMA (calibrated)",
          "mewma": "MEWMA (calibrated)", "mmd": "online MMD (calibrated)",
          "lsdd": "online LSDD (calibrated)"}


def format_table(summary: dict[str, Any]) -> str:
    """The markdown report: detection / latency per detector, false alarms beside."""
    c = summary["config"]
    dets = summary["detectors"]
    matched = summary["matched_false_alarm"]
    names = [n for n in _LABELS if n in dets["paper"]]
    lines = [f"# Pendulum perturbations: detection and false alarms ({c['seeds']} seeds, "
             f"onset {c['onset']:g} s of {c['seconds']:g} s)", "",
             "Detected trials (median latency in windows); the last row is the false alarms "
             "of the unperturbed controls over the same span. Calibrated detectors: "
             f"{c['budget']}; online MMD and LSDD: the generic drift detectors on the "
             "transitions (one a window), their expected run time the same budget.", "",
             "| perturbation | " + " | ".join(_HEADS.get(k, k) for k in dets) + " | "
             + " | ".join(f"{_HEADS.get(k, k).split(' (')[0]}, matched 5 %" for k in matched)
             + " |", "|---|" + "---|" * (len(dets) + len(matched))]

    def cell(b: dict[str, Any]) -> str:
        lat = b["median_latency"]
        return f"{b['detected']}/{b['trials']}" + ("" if lat is None else f" ({lat:g})")

    for n in names:
        cells = [cell(dets[k][n]) for k in dets] + [cell(matched[k][n]) for k in matched]
        lines.append(f"| {_LABELS[n]} | " + " | ".join(cells) + " |")
    fa = [f"{dets[k]['false_alarms']['alarms']}/{dets[k]['false_alarms']['trials']}"
          for k in dets]
    fa += [f"{matched[k]['false_alarms']['alarms']}/{matched[k]['false_alarms']['trials']} "
           f"(θ = {matched[k]['threshold_sigma']:.2f}{'σ' if k in SWEPT else '×'})"
           for k in matched]
    lines.append("| **false alarms (controls)** | " + " | ".join(fa) + " |")
    return "\n".join(lines) + "\n"


def reproduce_alarms(config: AlarmsConfig, progress: bool = True
                     ) -> tuple[pd.DataFrame, dict[str, Any]]:
    """Run every (condition, seed) trial; the trials table and the summary."""
    config.validate()
    tasks = [AlarmTask(c, s, config.seconds, config.onset, config.budget)
             for c in config.conditions for s in range(config.seeds)]
    t0 = time.perf_counter()
    rows = run_tasks(run_trial, tasks, workers=config.workers, progress=progress,
                     desc="pendulum trials", unit="trial")
    trials = pd.DataFrame(rows)
    summary = _summary(config, trials, time.perf_counter() - t0)
    if config.out is not None:
        write_report(Path(config.out), rows=trials, rows_name="trials.csv", summary=summary,
                     markdown=format_table(summary))
    return trials, summary


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``idt-desk reproduce pendulum-alarms``'s options."""
    parser.description = HELP[0].upper() + HELP[1:] + (
        ": random-start pendulum trials, a perturbation at the onset or none, flagged by the "
        "paper's rule and the calibrated detectors; trials.csv, summary.json, table.md.")
    parser.add_argument("--seeds", type=int, default=10, help="trials per condition (10)")
    parser.add_argument("--seconds", type=float, default=60.0,
                        help="loop time per trial (60 s)")
    parser.add_argument("--onset", type=float, default=20.0, help="perturbation onset (20 s)")
    add_settings(parser, ("false_alarms",), false_alarms=DEFAULT_BUDGET,
                 notes={"false_alarms": "the calibrated detectors'"})
    parser.add_argument("--conditions", type=lambda s: tuple(x for x in s.split(",") if x),
                        default=tuple(c[0] for c in CONDITIONS), metavar="NAME,NAME",
                        help="subset of: " + ", ".join(c[0] for c in CONDITIONS))
    parser.add_argument("--workers", type=int, default=None, help="processes (all cores)")
    parser.add_argument("--out", type=Path, required=True, help="output directory")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace, print_fn: Callable[[str], None] = print) -> int:
    """Run it from parsed arguments; print the table."""
    check_out_dir(args.out, "--out")
    config = AlarmsConfig(seeds=args.seeds, seconds=args.seconds, onset=args.onset,
                          budget=args.false_alarms, conditions=args.conditions,
                          workers=args.workers, out=args.out)
    _, summary = reproduce_alarms(config, progress=not args.no_progress)
    print_fn(format_table(summary).rstrip("\n"))
    print_fn(f"\nwall time: {summary['wall_seconds']:.1f} s; wrote {args.out}/trials.csv, "
             "summary.json, table.md")
    return 0
