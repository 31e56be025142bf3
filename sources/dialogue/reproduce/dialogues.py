"""The dialogues: one per test, condition and seed, and running (or carrying on) one.

One dialogue (:class:`Dialogue`) is one task for the shared executor
(:func:`idt_desk.experiments.executor.run_tasks`; :func:`run_dialogue` is the function it
runs). Every completed turn is appended to ``out/dialogues/<key>.jsonl`` as it arrives: a
dialogue that fails (a backend that stops answering, Ctrl-C, a crash) keeps its turns, is
reported, and the same command run again carries it on from the next turn
(:meth:`~idt_desk_sources.dialogue.DialogueSource.restore`). The key holds the test,
condition, seed and every setting that changes what is asked, so a different model is a
different dialogue.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from idt_desk_sources.dialogue.reproduce.config import DialogueConfig
from idt_desk_sources.dialogue.reproduce.paper import TESTS

#: Settings of the source that change what a dialogue says (its key holds them).
_KEYED = ("host", "student_host", "teacher_host", "student_backend", "teacher_backend",
          "student_model", "teacher_model", "topic", "judge", "judge_model", "judge_host",
          "teacher_length")


@dataclass(frozen=True)
class Dialogue:
    """One dialogue: a test under a condition with a sampling seed."""

    test: int
    condition: str
    seed: int
    turns: int
    settings: tuple[tuple[str, Any], ...]
    retries: int = 2
    dialogue_dir: str | None = None  # where its turns are kept as they arrive

    @property
    def key(self) -> str:
        """File name of its turns: the test, condition, seed and what changes the texts."""
        keyed = {k: v for k, v in self.settings if k in _KEYED}
        h = hashlib.sha256(json.dumps(keyed, sort_keys=True).encode()).hexdigest()[:10]
        return f"test{self.test}-{self.condition}-seed{self.seed}-{h}"

    @property
    def path(self) -> Path | None:
        """Its turns' file (None: kept in memory only)."""
        return None if self.dialogue_dir is None else Path(self.dialogue_dir) / f"{self.key}.jsonl"


def make_dialogues(config: DialogueConfig) -> list[Dialogue]:
    """Every dialogue of ``config``, in the order they are started.

    The perturbation tests first (what a run cut short should have), then the baseline tests
    longest first.
    """
    out = None if config.out is None else str(Path(config.out) / "dialogues")
    tasks = [Dialogue(t, c, s, config.turns or TESTS[t].turns, config.settings,
                      config.retries, out)
             for t in config.tests for c in config.conditions for s in config.seeds]
    return sorted(tasks, key=lambda d: (TESTS[d.test].injection is None, -d.turns))


def read_turns(path: Path | None) -> list[dict[str, Any]]:
    """The turns kept in a dialogue's file (a line cut short by a crash is dropped)."""
    if path is None or not path.exists():
        return []
    turns = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            turn = json.loads(line)
        except json.JSONDecodeError:
            break  # only the last line can be cut short
        if int(turn["turn"]) != len(turns) + 1:
            break
        turns.append(turn)
    return turns


def run_dialogue(task: Dialogue, *, run: bool = True) -> dict[str, Any]:
    """Run (or carry on) one dialogue; returns its turns and whether it finished.

    A backend failure is retried ``task.retries`` times (a few seconds apart); after that the
    dialogue is returned unfinished with the error, its turns kept. ``run=False`` only reads
    the turns kept so far.
    """
    from idt_desk_sources.dialogue._source import DialogueSource

    from idt_desk.plugin import SourcePaused

    test = TESTS[task.test]
    path = task.path
    turns = read_turns(path)[:task.turns]
    resumed_from = len(turns)
    result: dict[str, Any] = {"key": task.key, "test": task.test, "condition": task.condition,
                              "seed": task.seed, "resumed_from": resumed_from, "error": None}
    t0 = time.monotonic()
    if run and len(turns) < task.turns:
        source = DialogueSource(**dict(task.settings), condition=task.condition,
                                style=test.style)
        source.reset(task.seed)
        source.restore(turns)
        if test.injection is not None:
            source.set_perturbation("paper_schedule", {"type": test.injection})
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            # Rewrite what was read, dropping a line a crash cut short.
            path.write_text("".join(json.dumps(t) + "\n" for t in turns), encoding="utf-8")
        failures = 0
        try:
            while len(turns) < task.turns:
                try:
                    batch = source.step(1)
                except SourcePaused as exc:
                    failures += 1
                    if failures > task.retries:
                        result["error"] = f"turn {len(turns) + 1}: {exc}"
                        break
                    time.sleep(min(30.0, 3.0 * failures))
                    continue
                for turn in batch.turns or []:
                    turns.append(turn)
                    if path is not None:
                        with open(path, "a", encoding="utf-8") as f:
                            f.write(json.dumps(turn) + "\n")
        finally:
            source.close()
    result["turns"] = turns
    result["complete"] = len(turns) >= task.turns
    result["seconds"] = time.monotonic() - t0
    return result
