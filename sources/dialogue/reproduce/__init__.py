"""``idt-desk reproduce dialogue``: the paper's dialogue protocol (§5.2, §11; Figure 4, Table 6).

It runs the paper's tests with whatever models a user has (Ollama for either role, or the
built-in SmolLM2) and asks whether token statistics see the injections, how large the effects
are, and how P relates to the embedding-based structural baselines, one module per step of the
protocol: :mod:`~idt_desk_sources.dialogue.reproduce.paper` holds the paper's tests
(:data:`TESTS`) and its numbers (:data:`PAPER`); :mod:`~idt_desk_sources.dialogue.reproduce.config`
what to reproduce (:class:`DialogueConfig`); :mod:`~idt_desk_sources.dialogue.reproduce.dialogues`
the dialogues and running or carrying one on (:class:`Dialogue`, :func:`read_turns`,
:func:`run_dialogue`, the executor's task, its turns kept as they arrive);
:mod:`~idt_desk_sources.dialogue.reproduce.turns` the per-turn table (the IDT's metrics, the
structural baselines, the judge's scores); :mod:`~idt_desk_sources.dialogue.reproduce.detection`
the per-turn rule (3σ from turns 1–30 within two turns of an injection, false alarms at the
same turns of the baseline tests, the matched false-alarm comparison);
:mod:`~idt_desk_sources.dialogue.reproduce.effects` the effect sizes (Cohen's d);
:mod:`~idt_desk_sources.dialogue.reproduce.correlations` Table 6 (P and ΔH against the
structural baseline and the judge); :mod:`~idt_desk_sources.dialogue.reproduce.summary` builds
``summary.json`` and :mod:`~idt_desk_sources.dialogue.reproduce.report` its tables and
Figure 4; :mod:`~idt_desk_sources.dialogue.reproduce.runner` runs a whole reproduction
(:func:`reproduce`); :mod:`~idt_desk_sources.dialogue.reproduce.command` is the command line
(:data:`HELP`, :func:`add_arguments`, :func:`run`). The package re-exports the names other code
imports from it.
"""

from __future__ import annotations

from idt_desk_sources.dialogue.reproduce.command import HELP, add_arguments, run
from idt_desk_sources.dialogue.reproduce.dialogues import Dialogue, read_turns, run_dialogue

__all__ = ["HELP", "Dialogue", "add_arguments", "read_turns", "run", "run_dialogue"]
