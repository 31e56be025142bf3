"""``reproduce cheetah --out-of-sample A B``: thresholds chosen on one run, judged on another.

:func:`out_of_sample` matches every swept detector's threshold to ≤ 5 % false alarms on one
finished run's controls, chooses the best detector there, and applies both unchanged to the
other run (other ``--seed``, the same policies), each way round; :func:`run` prints the block
and writes ``out_of_sample.json`` and ``out_of_sample.md``.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from idt_desk_sources.gym.reproduce.config import CONTROL
from idt_desk_sources.gym.reproduce.finished import (
    blank,
    read_tables,
    report_analysis,
    run_names,
    shared_controls,
)
from idt_desk_sources.gym.reproduce.judge import at_matched_threshold, swept
from idt_desk_sources.gym.reproduce.report import fmt

from idt_desk.plugin import InputError


def out_of_sample(batch_a: Any, batch_b: Any) -> dict[str, Any]:
    """Detectors and thresholds chosen on one batch of trials, judged on another.

    ``batch_a``, ``batch_b``: two runs' ``trials.csv`` tables (other seeds: other runs).
    Each way round, every swept detector's θ is matched to ≤ 5 % false alarms on the first
    batch's controls and applied unchanged to the second batch's controls (false alarms)
    and perturbed trials (detection, latency); the detector *chosen* is the one whose IDT
    detected most of the first batch's perturbed trials at its θ (fewer median windows to
    detection break a tie), for the IDT and, apart, for reward. Open-loop trials of the first
    protocol only.
    """
    from idt_desk.plugin import MATCHED_RATE

    def open_loop(rows: Any) -> tuple[Any, Any]:
        rows = rows[blank(rows, "error") & blank(rows, "auto")]
        rows = rows[rows["actions"] == rows["actions"].iloc[0]]
        return rows[rows["perturbation"] == CONTROL], rows[rows["perturbation"] != CONTROL]

    (ca, pa), (cb, pb) = open_loop(batch_a), open_loop(batch_b)
    names = [n for n in swept(batch_a) if n in swept(batch_b)]
    out: dict[str, Any] = {"target_rate": MATCHED_RATE}
    for label, (c1, p1, c2, p2) in (("a_to_b", (ca, pa, cb, pb)), ("b_to_a", (cb, pb, ca, pa))):
        block: dict[str, Any] = {"fit_controls": len(c1), "test_controls": len(c2),
                                 "test_perturbed": len(p2), "detectors": {}}
        for name in names:
            block["detectors"][name] = {m: at_matched_threshold(name, m, c1, c2, p2)
                                        for m in ("IDT", "reward")}
        for m in ("IDT", "reward"):
            ranks = {}
            for name in names:
                inside = at_matched_threshold(name, m, c1, c1, p1)
                lat = inside["median_latency"]
                ranks[name] = (inside["detection"]["detected"],
                               -(lat if lat is not None else 1e9))
            block[f"chosen_{m}"] = max(names, key=ranks.__getitem__) if names else None
        out[label] = block
    return out


def run(args: argparse.Namespace, print_fn: Callable[[str], None]) -> int:
    """``--out-of-sample A B``: the block from two finished runs' ``trials.csv``."""
    tables = read_tables(args.out_of_sample, "--out-of-sample")
    if any("records_paper_IDT" not in rows for rows in tables):
        bad = next(d for d, rows in zip(args.out_of_sample, tables, strict=True)
                   if "records_paper_IDT" not in rows)
        raise InputError(f"--out-of-sample {bad}: its trials keep no records")
    result = out_of_sample(*tables)
    lines = ["# Out of sample: detectors and thresholds chosen on one batch, judged on the "
             "other", ""]
    for text in shared_controls(dict(zip(run_names(args.out_of_sample), tables, strict=True))):
        print_fn(f"warning: {text}")
        lines += [f"**Warning**: {text}", ""]
    for label, (fit, test) in (("a_to_b", args.out_of_sample),
                               ("b_to_a", args.out_of_sample[::-1])):
        b = result[label]
        lines += [f"## θ matched (≤ {result['target_rate']:.0%}) on {fit}'s "
                  f"{b['fit_controls']} controls, applied to {test} ({b['test_controls']} "
                  f"controls, {b['test_perturbed']} perturbed)", "",
                  f"Chosen on {fit}: IDT → {b['chosen_IDT']}, reward → {b['chosen_reward']}.",
                  "", "| Detector | IDT: detection | false alarms | median latency | "
                  "reward: detection | false alarms | median latency |",
                  "|---|---|---|---|---|---|---|"]
        for name, per in b["detectors"].items():
            cells = []
            for m in ("IDT", "reward"):
                dt, fa = per[m]["detection"], per[m]["false_alarms"]
                cells += [f"{dt['detected']} of {dt['trials']}",
                          f"{fa['alarms']} of {fa['trials']}", fmt(per[m]["median_latency"])]
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
        lines.append("")
    return report_analysis(lines, result, args.out, "out_of_sample", print_fn)
