"""What to reproduce: :class:`DialogueConfig`, the command line's options.

Checked (:meth:`DialogueConfig.resolved`) against the paper's tests
(:data:`~idt_desk_sources.dialogue.reproduce.paper.TESTS`) and the dialogue source's settings
(host, models, backends, judge, ...), which it carries to every dialogue.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from idt_desk_sources.dialogue.reproduce.paper import TESTS

from idt_desk.plugin import InputError


@dataclass(frozen=True)
class DialogueConfig:
    """What to reproduce (the command line's options; the tests and conditions: see paper.py)."""

    tests: tuple[int, ...] = (3, 4, 8, 7, 9, 10)
    conditions: tuple[str, ...] = ("normal", "constrained")
    seeds: tuple[int, ...] = (0,)
    turns: int | None = None  # None: each test's own length
    settings: tuple[tuple[str, Any], ...] = ()  # the source's settings (host, models, ...)
    retries: int = 2
    workers: int | None = None
    scheduler: str | None = None
    out: str | None = None

    def resolved(self) -> DialogueConfig:
        """Checked against the source's settings and the paper's tests.

        Raises
        ------
        InputError
            An unknown test or condition, a bad setting, too few turns.

        """
        from idt_desk_sources.dialogue._source import CONDITIONS, DialogueSource

        bad = [t for t in self.tests if t not in TESTS]
        if bad or not self.tests:
            raise InputError(f"--tests: the paper's tests are {', '.join(map(str, TESTS))}; "
                             f"got {', '.join(map(str, self.tests)) or 'none'}")
        bad_c = [c for c in self.conditions if c not in CONDITIONS]
        if bad_c or not self.conditions:
            raise InputError(f"--conditions: choose from {', '.join(CONDITIONS)}; got "
                             f"{', '.join(self.conditions) or 'none'}")
        if not self.seeds or any(s < 0 for s in self.seeds):
            raise InputError("--seeds: one or more whole numbers >= 0")
        if self.turns is not None and self.turns < 33:
            raise InputError(f"--turns {self.turns}: at least 33 (30 baseline turns and an "
                             "injection after turn 31 with two turns to see it)")
        if self.retries < 0:
            raise InputError(f"--retries {self.retries}: must be >= 0")
        known = {p.name: p for p in DialogueSource.settings}
        settings = {}
        for name, value in self.settings:
            if name not in known or name in ("condition", "style"):
                names = ", ".join(n for n in known if n not in ("condition", "style"))
                raise InputError(f"setting {name!r}: not one of {names}")
            try:
                settings[name] = known[name].validate(value)
            except ValueError as exc:
                raise InputError(f"setting {name}: {exc}") from None
        return DialogueConfig(**{**asdict(self), "settings": tuple(sorted(settings.items())),
                                 "tests": tuple(self.tests), "conditions": tuple(
                                     self.conditions), "seeds": tuple(self.seeds)})

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form (for ``summary.json``)."""
        d = asdict(self)
        d["settings"] = dict(self.settings)
        return d
