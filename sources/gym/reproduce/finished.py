"""What the analyses of finished runs share: their tables read, and their report written.

``--pool``, ``--out-of-sample`` and ``--modulation`` run nothing: they read finished runs'
``trials.csv`` (:func:`read_tables`: checked, with the defaults of older tables filled in),
select on blank cells (:func:`blank`), warn of control trials two runs share
(:func:`shared_controls`) and print their block and write it as JSON and Markdown
(:func:`report_analysis`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from idt_desk_sources.gym.reproduce.config import CONTROL, CheetahConfig
from idt_desk_sources.gym.reproduce.summary import with_defaults


def run_names(dirs: Sequence[Any]) -> list[str]:
    """Each run's folder as given (:func:`read_tables` refuses one given twice)."""
    return [str(d) for d in dirs]


def read_tables(dirs: Sequence[Any], flag: str) -> list[Any]:
    """Each finished run's checked ``trials.csv`` (:mod:`~idt_desk_sources.gym.reproduce.read`)."""
    from idt_desk_sources.gym.reproduce.read import read_runs

    return [with_defaults(rows, CheetahConfig()) for rows in read_runs(dirs, flag)]


def blank(rows: Any, col: str) -> Any:
    """Rows whose ``col`` is empty (read back from CSV: NaN)."""
    return rows[col].isna() | (rows[col].astype(str) == "")


#: What makes two control trials the same run: the same policy acting the same way in an
#: environment seeded alike (its trajectory is then the same, bit for bit).
CONTROL_KEY = ("policy", "actions", "env_seed")


def _control_keys(rows: Any) -> set[tuple[Any, ...]]:
    c = rows[(rows["perturbation"] == CONTROL) & blank(rows, "auto")]
    return {tuple(str(v) for v in k) for k in c[list(CONTROL_KEY)].itertuples(index=False)}


def shared_controls(runs: dict[str, Any]) -> list[str]:
    """One line per pair of runs that share control trials (none: the counts stand)."""
    keys = {name: _control_keys(rows) for name, rows in runs.items()}
    names = list(keys)
    out = []
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            both = keys[a] & keys[b]
            if both:
                seeds = sorted({k[2] for k in both})
                out.append(f"{a} and {b} share {len(both)} control trial(s) (environment "
                           f"seed(s) {', '.join(seeds[:5])}{' ...' if len(seeds) > 5 else ''}): "
                           "each is one run counted twice, and out of sample it is judged "
                           "by thresholds fitted on itself. Rerun one with another --seed "
                           "(runs from this release derive their controls' seeds so that "
                           "two --seed values never share one).")
    return out


def report_analysis(lines: list[str], result: dict[str, Any], out: Path | None, stem: str,
                    print_fn: Callable[[str], None]) -> int:
    """Print a block read from finished runs; write it as ``STEM.json`` and ``.md`` in out."""
    text = "\n".join(lines)
    print_fn(text.rstrip("\n"))
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        (out / f"{stem}.json").write_text(json.dumps(result, indent=2) + "\n")
        (out / f"{stem}.md").write_text(text)
        print_fn(f"wrote {out / f'{stem}.json'}, {out / f'{stem}.md'}")
    return 0
