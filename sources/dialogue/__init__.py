"""The LLM dialogue source: a student and a teacher, per-turn token metrics (paper §5.2)."""

from idt_desk_sources.dialogue._source import DialogueSource

__all__ = ["DialogueSource"]
