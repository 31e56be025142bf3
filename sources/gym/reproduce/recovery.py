"""``reproduce cheetah --modulation RUN ...``: what each modulation switched by hand recovered.

From finished runs with ``--manual`` settings, each setting's recovered share of the return a
perturbation lost and its cost on unperturbed controls, with bootstrap intervals
(:mod:`idt_desk_sources.gym.modulation` computes them); :func:`run` adds the verdict (which
settings help, the least costly of each modulation), prints it and writes ``modulation.json``
and ``modulation.md``.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

from idt_desk_sources.gym.reproduce.finished import read_tables, report_analysis, run_names

from idt_desk.plugin import InputError


def run(args: argparse.Namespace, print_fn: Callable[[str], None]) -> int:
    """``--modulation RUN ...``: what each hand-switched setting recovered, and cost."""
    from idt_desk_sources.gym.modulation import (
        COST_LIMIT,
        HELPS_SHARE,
        format_table,
        modulation_table,
        verdict,
    )

    tables = read_tables(args.modulation, "--modulation")
    try:
        table = modulation_table(dict(zip(run_names(args.modulation), tables, strict=True)))
    except ValueError as exc:
        raise InputError(f"--modulation: {exc}") from None
    if not table["settings"]:
        raise InputError("--modulation: no trial with a setting switched on by hand "
                         "(run reproduce cheetah with --manual SPEC)")
    said = verdict(table)
    lines = [f"# What each modulation does: {', '.join(map(str, args.modulation))}", "",
             "Recovered share of the return lost, (M − O) / (C − O), pooled over policies "
             f"and runs, [95 % bootstrap, {table['draws']} draws over units and episodes]; "
             "control cost (C_M − C) / C with the number of controls.", "",
             *format_table(table), ""]
    if said["helps"]:
        lines.append(f"Helps (≥ {100 * HELPS_SHARE:.0f} % of a ≥ 10 % loss back, interval "
                     f"above 0, controls within {100 * COST_LIMIT:.0f} %): " +
                     "; ".join(f"{s} on {p}" for s, p in said["helps"]))
    else:
        lines.append(f"No setting recovers {100 * HELPS_SHARE:.0f} % of a loss of 10 % or "
                     "more with its interval above 0 while costing controls at most "
                     f"{100 * COST_LIMIT:.0f} %.")
    lines += ["", "Least costly setting of each modulation: " +
              ", ".join(f"{s} ({100 * table['settings'][s]['cost']:+.1f} %)".replace("-", "−")
                        for s in said["cheapest"].values()), ""]
    return report_analysis(lines, {**table, "verdict": said}, args.out, "modulation", print_fn)
