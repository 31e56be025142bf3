"""A session's turn path: a dialogue's metrics from its texts' token counts, one row a turn.

A dialogue has one (S, A, S') per turn (the teacher's prompt, the student's reply, the next
prompt), not a window of numeric rows: :class:`TurnPath` computes each turn's P, H_f, H_b
and ΔH from the pooled token counts of the texts (:class:`~idt_desk.metrics.tokens.
DialogueMetrics`), their length-adjusted values and, when installed, the structural
baselines (sentence embeddings), hands the rows to the session to judge, and keeps the
transcript and, once the baseline turns are in, the length confound.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from idt_desk.metrics import embeddings
from idt_desk.metrics.embeddings import StructuralBaselines
from idt_desk.metrics.tokens import (
    CONFOUND_METRICS,
    LENGTH_COLUMNS,
    TOKENIZER,
    DialogueMetrics,
    length_confound,
    load_tokenizer,
)

if TYPE_CHECKING:
    from idt_desk.live.config import SessionConfig
    from idt_desk.live.source import Batch, Source

__all__ = ["TurnPath"]


class TurnPath:
    """The dialogue so far and its per-turn metrics, for the session that owns it.

    ``config`` is the session's configuration: its tokenizer and structural-baseline
    switch are resolved here (a recording states what was in force). ``emit(table, k)``
    hands the session ``k`` new metric rows to judge, log and keep; ``show(agency, info)``
    publishes what the dashboard shows of the dialogue (under the session's lock).
    """

    def __init__(self, config: SessionConfig, source: Source,
                 emit: Callable[[dict[str, np.ndarray], int], None],
                 show: Callable[[dict[str, Any] | None, dict[str, Any]], None]) -> None:
        self.config, self.source, self._emit, self._show = config, source, emit, show
        cfg = config
        cfg.tokenizer = cfg.tokenizer or TOKENIZER
        #: Every turn's texts, which later turns' contexts and a recording started
        #: mid-dialogue need. The length model of the adjusted metrics fits the detectors'
        #: baseline turns.
        self.dialogue = DialogueMetrics(load_tokenizer(cfg.tokenizer),
                                        baseline_turns=cfg.baseline_windows)
        if cfg.baselines and not embeddings.available():
            raise ValueError(embeddings.MISSING)
        cfg.baselines = embeddings.available() if cfg.baselines is None else cfg.baselines
        #: The transcript: every turn with its metrics.
        self.log: list[dict[str, Any]] = []
        #: The baseline turns' metrics and token counts, until the length confound is out.
        self._length_rows: dict[str, list[float]] | None = {}
        #: The structural baselines (when on): the model loads in the loop's thread before
        #: its first step (:meth:`warm`), about 10 s, never in the caller's.
        self._baselines: StructuralBaselines | None = None

    def warm(self) -> None:
        """Load the structural baselines' model (when on) now, before the first step.

        In the loop's thread, never the caller's: a Stop during the first turn then never
        waits for it (about 10 s: torch).
        """
        if self.config.baselines and self._baselines is None:
            self._baselines = StructuralBaselines(embeddings.load_embedder())

    def feed(self, b: Batch, i0: int, t: np.ndarray) -> None:
        """One metric row per transition of batch ``b`` (transitions ``i0``...), judged."""
        table = self.dialogue.push(b.turns or [])
        if self.config.baselines:
            self.warm()
            table.update(self._baselines.push(b.turns or []))
        # A replay's first batch may lead with history turns (texts of earlier contexts).
        turns = [turn for turn in b.turns or [] if not turn.get("history")]
        if len(turns) != len(b):
            raise ValueError(f"{self.source.name}: a batch of {len(b)} transitions carries "
                             f"{len(turns)} turns")
        k = len(b)
        table["start"] = i0 + np.arange(k, dtype=np.float64)
        table["end"] = table["start"] + 1
        table["t"] = np.asarray(t, dtype=np.float64)
        table["out_of_range"] = np.zeros(k)
        if self.source.has_reward:
            table["reward"] = np.asarray(b.reward, dtype=np.float64)
        self._emit(table, k)
        rows = [{**turn, "i": i0 + j, "P": float(table["P"][j]), "dH": float(table["dH"][j]),
                 "H_b": float(table["H_b"][j]), "P_adj": float(table["P_adj"][j]),
                 "alarm": table["x_IDT"][j] == 1.0}
                for j, turn in enumerate(turns)]
        self._watch_length(table, k)
        self.log.extend(rows)
        # The agency conditions of the latest turn, read off its pooled token counts (a
        # value per turn, no null: a dialogue has one S, A, S' per turn, not a window).
        agency = {
            name: {"value": v, "holds": bool(v > 0), "method": "per turn, pooled counts"}
            for name, v in (("choice", float(table["H_A_given_S"][-1])),
                            ("effect", float(table["MI_A_S_next_given_S"][-1])),
                            ("asymmetry", abs(float(table["dH"][-1]))))}
        end = i0 + k
        # Replaced, never mutated: a snapshot's shallow copy stays consistent.
        self._show({**agency, "window_end": end, "where": f"turn {end} (its token counts)"},
                   {"transcript": tuple(self.log[-self.config.history:])})

    def _watch_length(self, table: Mapping[str, np.ndarray], k: int) -> None:
        """Gather the baseline turns' metrics and counts; at its end, the length confound.

        ``info["length_confound"]``: :func:`idt_desk.metrics.tokens.length_confound` over the
        baseline turns (the dashboard shows it beside the transcript).
        """
        need = int(self.config.baseline_windows or 0)
        have = self._length_rows
        if have is None or not need:
            return
        for c in (*CONFOUND_METRICS, *LENGTH_COLUMNS):
            have.setdefault(c, []).extend(np.asarray(table[c], dtype=np.float64)[:k].tolist())
        if len(have["P"]) >= need:
            self._length_rows = None
            confound = length_confound([{c: np.array(v[:need]) for c, v in have.items()}],
                                       need)
            self._show(None, {"length_confound": {"turns": need, **confound}})
