"""A whole reproduction: :func:`reproduce` runs every trial group and writes the report.

The groups of :func:`~idt_desk_sources.gym.reproduce.config.make_groups` go through the shared
executor (local processes or a Dask scheduler), each to
:func:`~idt_desk_sources.gym.reproduce.lockstep.run_group`; with ``--out`` each finished
group's rows are kept in ``out/groups/`` under a key of its settings and its policy's bytes,
so an interrupted run resumes. The rows are then summarised and the report written.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from idt_desk_sources.gym.reproduce.config import CheetahConfig, TrialGroup, make_groups
from idt_desk_sources.gym.reproduce.lockstep import run_group
from idt_desk_sources.gym.reproduce.report import write_outputs
from idt_desk_sources.gym.reproduce.summary import CheetahResult, summarize_trials


def _group_key(group: TrialGroup) -> str:
    """What a group's results depend on: its settings and the policy file's bytes."""
    import hashlib
    import pickle

    h = hashlib.sha256(pickle.dumps(group))
    h.update(Path(group.policy).read_bytes())
    return h.hexdigest()[:24]


def reproduce(config: CheetahConfig, *, executor: Any | None = None, progress: bool = True
              ) -> CheetahResult:
    """Run every trial (grouped per policy) through the shared executor and summarise.

    With ``out`` set, each finished group's rows are kept in ``out/groups/``: run the same
    command again after an interruption and only the groups left are run.

    Raises
    ------
    InputError
        Bad settings, Dask missing, or an unreachable scheduler.

    """
    import pandas as pd

    from idt_desk.plugin import run_tasks

    config = config.resolved()
    groups = make_groups(config)
    t0 = time.perf_counter()
    results = run_tasks(run_group, groups, executor=executor, workers=config.workers,
                        scheduler=config.scheduler, progress=progress, desc="cheetah trials",
                        unit="trial", weight=lambda g: len(g.trials),
                        resume_dir=None if config.out is None else Path(config.out) / "groups",
                        key=_group_key)
    wall = time.perf_counter() - t0
    rows = pd.DataFrame([r for group in results for r in group])
    summary = summarize_trials(rows, config, wall)
    result = CheetahResult(config, rows, summary, wall)
    if config.out is not None:
        result.files = write_outputs(result, Path(config.out))
    return result
