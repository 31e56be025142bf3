"""Finished runs' ``trials.csv``, read and checked: one line for anything an analysis cannot use.

The analyses of finished runs (``idt-desk reproduce cheetah --pool``, ``--out-of-sample``,
``--modulation``) read their runs only through :func:`read_runs`. A run given twice, an empty,
truncated or binary file, a missing column, a header without trials, a trial written twice, a
cell that is not a finite number where a number belongs, a list of returns that is not a list
of finite numbers, or a run whose every trial failed is refused with one line naming the run,
the file, its line and column (an :class:`~idt_desk.plugin.InputError`: exit code 2), never a
traceback or a number computed from it.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from idt_desk.plugin import InputError

__all__ = ["TRIAL_KEY", "read_runs", "read_trials", "trial_keys"]

#: Columns every run's table has (the analyses select on them).
REQUIRED = ("policy", "perturbation", "error", "auto")
#: Columns that hold counts.
INTEGERS = ("policy_seed", "env_seed", "onset_step", "steps", "windows", "baseline_windows",
            "engagements_pre", "engagements_post")
#: Columns that hold numbers (blank: not measured), by name or by prefix.
NUMBERS = ("loop_seconds_per_step", "out_of_range_post", "return_pre", "return_pre_cv",
           "return_post", "engage_latency", "engaged_fraction_post", "group_wall_seconds")
NUMBER_PREFIXES = ("latency_", "excursion_frac_", "d_", "baseline_", "post_", "live_")
#: Columns that hold a JSON list of finite returns, one per episode (``records_*``: a JSON list
#: of [window, statistic] pairs).
RETURN_LISTS = ("returns_pre", "returns_post")


#: What one trial is: its policy, protocol, perturbation, Auto setting, environment seed and
#: onset. Two rows with the same key are one trial (the loop is deterministic given them).
TRIAL_KEY = ("policy", "actions", "perturbation", "auto", "env_seed", "onset_step")


def trial_keys(rows: Any) -> list[tuple[str, ...]]:
    """Each row's :data:`TRIAL_KEY` (the columns the table has), as text."""
    cols = [c for c in TRIAL_KEY if c in rows]
    return [tuple(str(v) for v in k) for k in rows[cols].itertuples(index=False, name=None)]


def read_runs(dirs: Sequence[Any], flag: str) -> list[Any]:
    """Each finished run's checked ``trials.csv``; a run given twice is refused.

    Given twice means the same folder twice, or a folder whose every trial (:data:`TRIAL_KEY`)
    is in a run given before it (a copy): its trials would count twice. Runs that share some
    trials are read; the analyses count a shared trial once and say so.

    Raises
    ------
    InputError
        The first thing wrong, in one line naming the option and the run.
    """
    seen: dict[Path, str] = {}
    for d in dirs:
        key = Path(d).resolve()
        if key in seen:
            raise InputError(f"{flag} {d}: given twice (as {seen[key]}): its trials would count "
                             "twice; give each run once")
        seen[key] = str(d)
    tables = [read_trials(d, flag) for d in dirs]
    before: dict[tuple[str, ...], str] = {}
    for d, rows in zip(dirs, tables, strict=True):
        keys = trial_keys(rows)
        if keys and all(k in before for k in keys):
            raise InputError(f"{flag} {d}: every trial in it is one of {before[keys[0]]}'s (a "
                             "copy of that run?): its trials would count twice; give each run "
                             "once")
        before.update({k: str(d) for k in keys if k not in before})
    return tables


def read_trials(run: Any, flag: str) -> Any:
    """One finished run's ``trials.csv`` as a DataFrame, every cell an analysis uses checked.

    Numbers become numbers (counts ``int64`` where whole and complete, else ``float64``),
    ``detected_*`` booleans; text stays text, blanks NaN.
    """
    import pandas as pd
    import psutil

    path = Path(run) / "trials.csv"
    where = f"{flag} {path}"
    if not path.is_file():
        raise InputError(f"{flag} {run}: no trials.csv (a finished run's --out)")
    # Looked at before it is read: a 4 GiB hole grew a reader past 24 GB until the kernel
    # killed it (a table of text takes several times its size once parsed).
    with open(path, "rb") as f:
        head, size = f.read(1 << 20), os.fstat(f.fileno()).st_size
    if b"\x00" in head:
        raise InputError(f"{where}: holds NUL bytes: not a table of trials")
    free = psutil.virtual_memory().available
    if size > free // 8:
        raise InputError(f"{where}: {size / 2**30:.1f} GiB, more than an eighth of the memory "
                         f"available ({free / 2**30:.1f} GiB): too large to read")
    try:
        rows = pd.read_csv(path, dtype=str, keep_default_na=False, na_values=[""])
    except pd.errors.EmptyDataError:
        raise InputError(f"{where}: empty (not even a header)") from None
    except (pd.errors.ParserError, UnicodeDecodeError, ValueError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise InputError(f"{where}: not a table of trials ({first[:120]})") from None
    if missing := [c for c in REQUIRED if c not in rows]:
        raise InputError(f"{where}: no column {missing[0]!r} (a finished run's trials.csv has "
                         f"{', '.join(REQUIRED)})")
    if rows.empty:
        raise InputError(f"{where}: a header and no trials")
    twice = rows.duplicated(keep=False)
    if twice.any():
        lines = [int(i) + 2 for i in np.flatnonzero(twice.to_numpy())]
        raise InputError(f"{where}, line {lines[1]}: the same trial as line {lines[0]}: a trial "
                         "written twice would count twice")
    for col in rows.columns:
        if col in INTEGERS or col in NUMBERS or col.startswith(NUMBER_PREFIXES):
            rows[col] = _numbers(rows[col], f"{where}", col, whole=col in INTEGERS)
        elif col.startswith("detected_"):
            rows[col] = _booleans(rows[col], where, col)
        elif col in RETURN_LISTS or col.startswith("records_"):
            check = _returns if col in RETURN_LISTS else _records
            for i, cell in rows[col].items():
                if isinstance(cell, str):
                    check(cell, f"{where}, line {int(i) + 2}, {col}")
    failed = rows["error"].notna() & (rows["error"].astype(str) != "")
    if failed.all():
        raise InputError(f"{where}: every trial failed (line 2: "
                         f"{str(rows['error'].iloc[0])[:100]})")
    return rows


def _numbers(cells: Any, where: str, col: str, whole: bool) -> Any:
    """A column of numbers: a blank is NaN; text, an infinity or a spelt-out NaN is refused."""
    import pandas as pd

    values = pd.to_numeric(cells, errors="coerce")
    bad = cells.notna() & ~np.isfinite(values.to_numpy(dtype=np.float64))
    if whole:
        bad |= values.notna() & (values.to_numpy(dtype=np.float64) % 1 != 0)
    if bad.any():
        i = int(np.flatnonzero(bad.to_numpy())[0])
        kind = "a whole number" if whole else "a finite number"
        raise InputError(f"{where}, line {i + 2}, {col}: {cells.iloc[i]!r} is not {kind}")
    if whole and values.notna().all():
        return values.astype(np.int64)
    return values.astype(np.float64)


def _booleans(cells: Any, where: str, col: str) -> Any:
    """A column of True / False."""
    known = {"True": True, "False": False, "true": True, "false": False}
    bad = ~cells.isin(list(known))
    if bad.any():
        i = int(np.flatnonzero(bad.to_numpy())[0])
        raise InputError(f"{where}, line {i + 2}, {col}: {cells.iloc[i]!r} is not True or "
                         "False")
    return cells.map(known).astype(bool)


def _returns(cell: str, where: str) -> None:
    """A JSON list of finite returns, at least one."""
    try:
        value = json.loads(cell)
    except (ValueError, RecursionError):  # RecursionError: nested too deep to read
        raise InputError(f"{where}: {cell[:60]!r} is not a JSON list of returns") from None
    if not (isinstance(value, list) and value and all(
            isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)
            for v in value)):
        raise InputError(f"{where}: {cell[:60]!r} is not a non-empty list of finite returns "
                         "(one per episode)")


def _records(cell: str, where: str) -> None:
    """A detector's records: a JSON list of [window, statistic] pairs of numbers."""
    try:
        value = json.loads(cell)
    except (ValueError, RecursionError):  # RecursionError: nested too deep to read
        value = None
    if not (isinstance(value, list) and all(
            isinstance(r, list) and len(r) == 2 and all(
                isinstance(v, int | float) and not isinstance(v, bool) for v in r)
            for r in value)):
        raise InputError(f"{where}: {cell[:60]!r} is not a list of [window, statistic] pairs")
