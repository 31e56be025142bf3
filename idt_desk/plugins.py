"""Discovering data sources through the ``idt_desk.sources`` entry-point group.

Entry points are listed without importing anything; a source is imported the first time it
is asked for. A plugin that fails to import is reported with its error, never raised at
start-up (as npe2's ``discover`` does), so one broken plugin cannot take the app down.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib.metadata import EntryPoint, entry_points

from idt_desk.source import Source

__all__ = ["GROUP", "SourceEntry", "SourceLoadError", "discover", "load_source"]

GROUP = "idt_desk.sources"


class SourceLoadError(LookupError):
    """A source that is not registered or cannot be imported; the message says which and why."""


@dataclass
class SourceEntry:
    """A registered source: its entry point, and once loaded, its class or its load error."""

    name: str
    value: str
    entry_point: EntryPoint | None = None
    cls: type[Source] | None = None
    error: str | None = None

    def load(self) -> type[Source]:
        """Import the source class (once); raise :class:`SourceLoadError` with the reason."""
        if self.cls is not None:
            return self.cls
        if self.error is None:
            try:
                obj = self.entry_point.load() if self.entry_point else None
            except Exception as exc:  # any import failure is reported
                self.error = f"{type(exc).__name__}: {exc}"
            else:
                if isinstance(obj, type) and issubclass(obj, Source):
                    self.cls = obj
                    return obj
                self.error = f"{self.value} is not a Source subclass"
        raise SourceLoadError(f"source {self.name!r} ({self.value}) failed to load: {self.error}")


_cache: dict[str, SourceEntry] | None = None


def discover(refresh: bool = False) -> dict[str, SourceEntry]:
    """Registered sources by name, sorted, without importing them."""
    global _cache
    if _cache is None or refresh:
        eps = sorted(entry_points(group=GROUP), key=lambda ep: ep.name)
        _cache = {ep.name: SourceEntry(ep.name, ep.value, ep) for ep in eps}
    return _cache


def register(cls: type[Source]) -> None:
    """Register a source class at run time (tests, notebooks); entry points are the norm."""
    entries = discover()
    entries[cls.name] = SourceEntry(cls.name, f"{cls.__module__}:{cls.__qualname__}", cls=cls)


def load_source(name: str) -> type[Source]:
    """The source class registered as ``name``."""
    entries = discover()
    if name not in entries:
        known = ", ".join(entries) or "none"
        raise SourceLoadError(f"no source named {name!r}; registered: {known}")
    return entries[name].load()
