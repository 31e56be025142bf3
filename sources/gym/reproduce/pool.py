"""``reproduce cheetah --pool RUN ...``: the live-calibrated blocks of finished runs, pooled.

:func:`pool_runs` sums the perturbed trials of several runs (other ``--seed``, the same
policies) per policy and in all, counting a control or a perturbed trial two runs share once,
and the twin's classes of their detections (a confusion of true × named class);
:func:`signatures` says which components each perturbation moves (Cohen's d) and whether that
tells the perturbations apart out of sample; :func:`run` prints and writes ``pooled.json``
and ``pooled.md``.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from typing import Any

import numpy as np
from idt_desk_sources.gym.reproduce.config import COMPONENTS, CONTROL, CheetahConfig
from idt_desk_sources.gym.reproduce.finished import (
    CONTROL_KEY,
    blank,
    read_tables,
    report_analysis,
    run_names,
    shared_controls,
)
from idt_desk_sources.gym.reproduce.report import LABEL, attribution_rows, live_rows
from idt_desk_sources.gym.reproduce.summary import live_summary
from idt_desk_sources.gym.reproduce.twin import attribution_summary

from idt_desk.plugin import CONTROL_BUDGET


def pool_runs(runs: dict[str, Any], budget: str | None = None) -> dict[str, Any]:
    """The live-calibrated block of several runs, per policy and in all.

    Perturbed trials are summed; a control shared by two runs (:func:`shared_controls`), or a
    perturbed trial two runs share (``read.TRIAL_KEY``), is counted once (its first run's
    row). ``budget`` only labels the block (each run's trials
    were judged at their own run's budget: pool runs of one budget).
    """
    import pandas as pd

    frames = []
    for name, rows in runs.items():
        ok = rows[blank(rows, "error") & blank(rows, "auto")]
        ok = ok[ok["actions"] == ok["actions"].iloc[0]] if len(ok) else ok
        frames.append(ok.assign(run=name))
    every = pd.concat(frames, ignore_index=True)
    control = every[every["perturbation"] == CONTROL]
    distinct = control.drop_duplicates(subset=list(CONTROL_KEY), keep="first")
    from idt_desk_sources.gym.reproduce.read import TRIAL_KEY

    perturbed = every[every["perturbation"] != CONTROL]
    once = perturbed.drop_duplicates(subset=[c for c in TRIAL_KEY if c in perturbed],
                                     keep="first")
    every = pd.concat([once, distinct], ignore_index=True)
    config = CheetahConfig(false_alarms=budget or CONTROL_BUDGET)
    warnings = shared_controls(runs)
    if len(once) < len(perturbed):
        warnings.append(f"{len(perturbed) - len(once)} perturbed trial(s) appear in two runs "
                        "(the same policy, perturbation, environment seed and onset): each "
                        "is counted once, from the first run that has it")
    out: dict[str, Any] = {"runs": list(runs), "warnings": warnings,
                           "controls_counted": len(distinct),
                           "controls_shared": len(control) - len(distinct),
                           "perturbed_shared": len(perturbed) - len(once),
                           "all": live_summary(every, config), "policies": {},
                           "attribution": attribution_summary(every),
                           "signatures": signatures(runs)}
    for policy in dict.fromkeys(every["policy"]):
        out["policies"][policy] = live_summary(every[every["policy"] == policy], config)
    return out


#: A perturbation's signature: how far each component's post-onset mean moved (Cohen's d
#: against the trial's pre-onset windows), the IDT's four and reward.
SIGNATURE = (*COMPONENTS, "reward")
#: |d| beyond which a component counts as moved in the signature's arrows.
MOVED_D = 1.0


def signatures(runs: dict[str, Any]) -> dict[str, Any] | None:
    """Which components each perturbation moves, and whether that tells them apart.

    Per perturbation: the mean and σ of each component's Cohen's d over its trials (every
    run and policy), its arrows (↑/↓ where |mean d| > :data:`MOVED_D`, · elsewhere) and the
    return's change (``return_post`` against ``return_pre``). Out of sample, with two runs
    or more: each run's perturbed trials classified by the nearest centroid (Euclidean, in
    d) of the perturbations' signatures measured on the other runs; the share right, the
    chance level (one in the number of perturbations) and the confusions. None: no
    perturbed trial.
    """
    import pandas as pd

    frames = []
    for name, rows in runs.items():
        ok = rows[blank(rows, "error") & blank(rows, "auto")]
        frames.append(ok[ok["perturbation"] != CONTROL].assign(run=name))
    every = pd.concat(frames, ignore_index=True) if frames else None
    cols = [f"d_{m}" for m in SIGNATURE]
    if every is None or not len(every) or any(c not in every for c in cols):
        return None
    every = every.dropna(subset=cols)
    table = {}
    for pert, g in every.groupby("perturbation", sort=True):
        d = g[cols].to_numpy(np.float64)
        mean = d.mean(axis=0)
        change = ((g["return_post"] - g["return_pre"]) / g["return_pre"].abs()).to_numpy(
            np.float64) if "return_post" in g else np.array([math.nan])
        table[str(pert)] = {
            "trials": len(g), "d_mean": dict(zip(SIGNATURE, mean.tolist(), strict=True)),
            "d_std": dict(zip(SIGNATURE, (d.std(axis=0, ddof=1) if len(d) > 1 else
                                          np.full(len(cols), math.nan)).tolist(),
                              strict=True)),
            "arrows": "".join("↑" if v > MOVED_D else "↓" if v < -MOVED_D else "·"
                              for v in mean),
            "return_change": float(np.nanmean(change)) if np.isfinite(change).any() else None}
    out: dict[str, Any] = {"components": list(SIGNATURE), "moved_d": MOVED_D,
                           "perturbations": table, "out_of_sample": None}
    names = list(dict.fromkeys(every["run"]))
    if len(names) >= 2 and len(table) >= 2:
        right = total = 0
        confusions: dict[str, int] = {}
        for held in names:
            fit, test = every[every["run"] != held], every[every["run"] == held]
            cents = {p: g[cols].to_numpy(np.float64).mean(axis=0)
                     for p, g in fit.groupby("perturbation")}
            keys = list(cents)
            c = np.stack([cents[k] for k in keys])
            for truth, x in zip(test["perturbation"], test[cols].to_numpy(np.float64),
                                strict=True):
                if truth not in cents:
                    continue
                guess = keys[int(np.argmin(((c - x) ** 2).sum(axis=1)))]
                total += 1
                right += guess == truth
                if guess != truth:
                    pair = f"{truth} → {guess}"
                    confusions[pair] = confusions.get(pair, 0) + 1
        out["out_of_sample"] = {
            "classified": total, "right": right, "share": right / total if total else None,
            "chance": 1.0 / len(table),
            "confusions": dict(sorted(confusions.items(), key=lambda kv: -kv[1]))}
    return out


def _signature_rows(sig: dict[str, Any]) -> list[str]:
    """The signature table and its out-of-sample line, in Markdown."""
    heads = " | ".join(LABEL[m] for m in sig["components"])
    lines = [f"| Perturbation | trials | {heads} | moved (d beyond ±{sig['moved_d']:g}) | "
             "return change |", "|---|---|" + "---|" * len(sig["components"]) + "---|---|"]
    for pert, row in sig["perturbations"].items():
        cells = [(f"{row['d_mean'][m]:+.1f} ± {row['d_std'][m]:.1f}"
                  if math.isfinite(row["d_std"][m]) else f"{row['d_mean'][m]:+.1f}"
                  ).replace("-", "−") for m in sig["components"]]
        rc = row["return_change"]
        lines.append(f"| {pert} | {row['trials']} | " + " | ".join(cells)
                     + f" | {row['arrows']} | "
                     + ("—" if rc is None else f"{100 * rc:+.1f} %".replace("-", "−")) + " |")
    oos = sig.get("out_of_sample")
    if oos and oos["classified"]:
        conf = ", ".join(f"{k} ({v})" for k, v in list(oos["confusions"].items())[:6])
        lines += ["", f"Out of sample (each run's trials by the nearest signature measured on "
                      f"the other runs): {oos['right']} of {oos['classified']} right "
                      f"({oos['share']:.0%}; chance {oos['chance']:.0%})"
                      + (f"; confused: {conf}." if conf else ".")]
    return lines


def run(args: argparse.Namespace, print_fn: Callable[[str], None]) -> int:
    """``--pool RUN ...``: the live-calibrated blocks of finished runs, pooled."""
    tables = read_tables(args.pool, "--pool")
    result = pool_runs(dict(zip(run_names(args.pool), tables, strict=True)), args.false_alarms)
    lines = [f"# Pooled live-calibrated detectors: {', '.join(map(str, args.pool))}", "",
             f"Distinct controls counted: {result['controls_counted']} "
             f"({result['controls_shared']} shared ones counted once).", ""]
    for text in result["warnings"]:
        print_fn(f"warning: {text}")
        lines += [f"**Warning**: {text}", ""]
    for label, lv in (("all policies", result["all"]), *result["policies"].items()):
        if lv is None:
            continue
        lines += [f"## {label}: {lv['perturbed_trials']} perturbed, {lv['control_trials']} "
                  "distinct controls", "", *live_rows(lv), ""]
    if result.get("attribution"):
        lines += ["## What changed: the twin's class at each detection, pooled", "",
                  *attribution_rows(result["attribution"])]
    if result.get("signatures"):
        lines += ["## Signatures: how far each component moved (Cohen's d, mean ± σ over "
                  "trials)", "", *_signature_rows(result["signatures"]), ""]
    return report_analysis(lines, result, args.out, "pooled", print_fn)
