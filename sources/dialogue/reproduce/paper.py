"""The paper's dialogue tests (§11.1, §11.4) and the numbers it reported (§5.2.2, §5.2.3, §11.5).

- Baseline tests 3 (varied questioning, 200 turns), 4 (deep topic exploration, 200) and
  8 (natural progression, 150): the teacher styles of :mod:`idt_desk_sources.dialogue._texts`.
- Perturbation tests 7 (contradictions), 9 (topic shifts), 10 (non-sequiturs): 100 turns of
  varied questioning, with the source's ``paper_schedule`` injecting a text of about 40 words
  as the teacher prompt after turns 31, 46, 61, 76 and 91 (the S' of those turns; the
  student answers it in the next turn).
- Each under the student conditions normal (temperature 0.7, top_k 40) and constrained
  (0.1, 10), and each sampling seed asked for.

:data:`TESTS` holds them by number; :data:`PAPER` the paper's values, reported beside a run's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Test:
    """One of the paper's tests (§11.1)."""

    number: int
    name: str
    style: str
    turns: int
    injection: str | None = None


#: The paper's tests, by number.
TESTS: dict[int, Test] = {t.number: t for t in (
    Test(3, "varied questioning", "varied", 200),
    Test(4, "deep topic exploration", "deep", 200),
    Test(8, "natural progression", "natural", 150),
    Test(7, "contradictions", "varied", 100, "contradiction"),
    Test(9, "topic shifts", "varied", 100, "topic_shift"),
    Test(10, "non-sequiturs", "varied", 100, "non_sequitur"),
)}

#: The paper's numbers (§5.2.2, §5.2.3, §11.5).
PAPER: dict[str, Any] = {
    "detection": {"P": "9/9 per condition", "dH": "9/9 per condition", "p": "< 0.001"},
    "table6": {"P": {"cosine": "29/34 (85%)", "judge": "44%"},
               "dH": {"cosine": "26/34 (76%)", "judge": "47%"}},
    "cohens_d": {"all": "> 0.8 in all 36 comparisons", "P": [1.26, 6.99],
                 "judge": [2.22, 4.55]},
    "example_correlation": {"test": 7, "teacher": "Claude", "r": 0.838, "ci": [0.77, 0.89]},
    "turns": 4574,
    "conditions": 34,
    "student": "Llama 3.1 8B (Ollama)",
    "teachers": ["Claude Sonnet 4", "GPT-4o-mini", "Gemini Pro Preview"],
    "tokenizer": "Llama-2-7b-hf (NousResearch)",
}
