"""A whole reproduction: :func:`reproduce` runs every dialogue and analyses what they said.

The dialogues go through the shared executor (:func:`idt_desk.experiments.executor.run_tasks`,
resuming the turns kept in ``out/dialogues``), the progress bar following the turns written so
far; then the per-turn table, ``summary.json`` and the report.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from idt_desk_sources.dialogue.reproduce.config import DialogueConfig
from idt_desk_sources.dialogue.reproduce.dialogues import Dialogue, make_dialogues, run_dialogue
from idt_desk_sources.dialogue.reproduce.report import write_outputs
from idt_desk_sources.dialogue.reproduce.summary import DialogueResult, summarize
from idt_desk_sources.dialogue.reproduce.turns import turn_table

from idt_desk.plugin import InputError


class _LineCounter:
    """Turns kept in the dialogues' files so far, for the progress bar.

    Asked every second; the files only grow, so each read starts where the last one ended.
    """

    def __init__(self, tasks: Sequence[Dialogue]) -> None:
        self._tasks = list(tasks)
        self._seen = {t.path: (0, 0) for t in self._tasks}  # path -> (bytes read, lines)

    def __call__(self) -> int:
        total = 0
        for t in self._tasks:
            offset, lines = self._seen[t.path]
            if t.path is not None and t.path.exists():
                with open(t.path, "rb") as f:
                    if f.seek(0, 2) < offset:  # rewritten shorter (a cut line dropped)
                        offset, lines = 0, 0
                    f.seek(offset)
                    data = f.read()
                offset += len(data)
                lines += data.count(b"\n")
                self._seen[t.path] = (offset, lines)
            total += min(lines, t.turns)
        return total


def reproduce(config: DialogueConfig, *, executor: Any | None = None, progress: bool = True,
              baselines: bool | None = None, report_only: bool = False) -> DialogueResult:
    """Run every dialogue (resuming kept turns) through the shared executor and analyse.

    ``report_only``: run nothing, report on the turns kept in ``out`` so far (while another
    process may still be adding to them).

    Raises
    ------
    InputError
        Bad settings, Dask missing, or an unreachable scheduler.

    """
    from idt_desk.plugin import run_tasks

    config = config.resolved()
    tasks = make_dialogues(config)
    t0 = time.perf_counter()
    if report_only:
        if config.out is None:
            raise InputError("--report-only reports on the turns kept in --out")
        results = [run_dialogue(t, run=False) for t in tasks]
    else:
        results = run_tasks(
            run_dialogue, tasks, executor=executor, workers=config.workers,
            scheduler=config.scheduler, progress=progress, desc="dialogue turns", unit="turn",
            weight=lambda d: d.turns,
            poll=None if config.out is None else _LineCounter(tasks))
    wall = time.perf_counter() - t0
    rows = turn_table(results, baselines=baselines)
    summary = summarize(rows, results, config, wall)
    result = DialogueResult(config, rows, summary, wall)
    if config.out is not None:
        result.files = write_outputs(result, Path(config.out))
    return result
