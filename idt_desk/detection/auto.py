"""Automatic modulation: engage when the IDT alarm persists, release with hysteresis.

The paper (§4.3, §6) leaves "the specific control laws mapping coherence deviations to
bandwidth adjustments" to future work; this is the simplest law with the properties a user
needs: it does not chatter on a single excursion (``persist``), and once engaged it holds
until the loop has been quiet for a while (``release``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = ["AutoController"]


@dataclass
class AutoController:
    """Engage a modulation when the IDT alarm persists; release it when the loop is quiet.

    ``modulation`` engages after ``persist`` consecutive alarmed windows and releases after
    ``release`` consecutive quiet windows. ``update`` takes the IDT alarm of new windows and
    returns the switches to make, in order, as (window offset in the batch, "engage" |
    "release").
    """

    modulation: str
    params: dict[str, Any] = field(default_factory=dict)
    persist: int = 3
    release: int = 10
    engaged: bool = False
    _run: int = 0

    def __post_init__(self) -> None:
        if self.persist < 1 or self.release < 1:
            raise ValueError("persist and release must be >= 1 window")

    def update(self, alarm: np.ndarray) -> list[tuple[int, str]]:
        """Feed alarm flags of consecutive windows; return the switches they trigger."""
        switches = []
        for j, a in enumerate(np.asarray(alarm, dtype=bool)):
            if a != self.engaged:
                self._run += 1
                if self._run >= (self.persist if a else self.release):
                    self.engaged = bool(a)
                    self._run = 0
                    switches.append((j, "engage" if a else "release"))
            else:
                self._run = 0
        return switches
