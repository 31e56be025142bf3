"""Discovering plugins through entry-point groups: data sources and command-line commands.

Entry points are listed without importing anything; a plugin is imported the first time it
is asked for. A plugin that fails to import is reported with its error, never raised at
start-up (as npe2's ``discover`` does), so one broken plugin cannot take the app down.

Two groups, one mechanism (:class:`PluginEntry`, cached per group):

``idt_desk.sources``
    ``NAME = "package.module:SourceClass"``, a :class:`~idt_desk.live.source.Source` subclass.
``idt_desk.commands``
    ``NAME = "package.module"`` (or ``"package.module:object"``), a command of ``idt-desk``.
    ``NAME`` is ``GROUP.NAME`` for a subcommand under one of the core's parent commands
    (``"reproduce.pendulum"`` is ``idt-desk reproduce pendulum``) or a bare ``NAME`` for a top-level
    command (``"train"``). The module provides ``add_arguments(parser)``, which adds its options to
    an :class:`argparse.ArgumentParser` and sets ``func`` (``parser.set_defaults(func=run)``:
    ``run(args)`` returns the exit code), and ``HELP``, a one-line help string (without it, the
    first line of the module's docstring). Keep its heavy imports inside ``run``: every command
    module is imported whenever the command line starts.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib.metadata import EntryPoint, entry_points
from types import ModuleType
from typing import Any, ClassVar

from idt_desk.live.source import Source

__all__ = [
    "COMMANDS_GROUP",
    "GROUP",
    "CommandEntry",
    "CommandLoadError",
    "PluginEntry",
    "PluginLoadError",
    "SourceEntry",
    "SourceLoadError",
    "discover",
    "discover_commands",
    "duplicate_commands",
    "load_source",
]

GROUP = "idt_desk.sources"
COMMANDS_GROUP = "idt_desk.commands"


class PluginLoadError(LookupError):
    """A plugin that is not registered or cannot be imported; the message says which and why."""


class SourceLoadError(PluginLoadError):
    """A source that is not registered or cannot be imported."""


class CommandLoadError(PluginLoadError):
    """A contributed command whose module cannot be imported or does not fit the contract."""


@dataclass
class PluginEntry:
    """A registered plugin: its entry point, and once loaded, its object or its load error."""

    #: What the plugin is, in messages ("source", "command").
    kind: ClassVar[str] = "plugin"
    #: The exception :meth:`load` raises.
    load_error: ClassVar[type[PluginLoadError]] = PluginLoadError

    name: str
    value: str
    entry_point: EntryPoint | None = None
    obj: Any = None
    error: str | None = None

    def _problem(self, obj: Any) -> str | None:
        """Why ``obj``, what the entry point gave, is not a plugin of this kind (or ``None``)."""
        return None

    def load(self) -> Any:
        """Import the plugin's object (once); raise :attr:`load_error` with the reason."""
        if self.obj is not None:
            return self.obj
        if self.error is None:
            try:
                obj = self.entry_point.load() if self.entry_point else None
            except Exception as exc:  # any import failure is reported
                self.fail(exc)
            else:
                self.error = self._problem(obj)
                if self.error is None:
                    self.obj = obj
                    return obj
        raise self.load_error(
            f"{self.kind} {self.name!r} ({self.value}) failed to load: {self.error}")

    def fail(self, reason: BaseException | str) -> None:
        """Mark the plugin unusable, e.g. when it raised after it was imported.

        Parameters
        ----------
        reason
            An exception (recorded as ``"<ExceptionType>: <message>"``) or the reason itself.
        """
        self.obj = None
        self.error = (reason if isinstance(reason, str)
                      else f"{type(reason).__name__}: {reason}")


@dataclass
class SourceEntry(PluginEntry):
    """A registered source; :meth:`load` gives its :class:`~idt_desk.live.source.Source` class."""

    kind: ClassVar[str] = "source"
    load_error: ClassVar[type[PluginLoadError]] = SourceLoadError

    @property
    def cls(self) -> type[Source] | None:
        """The source class once loaded, else ``None``."""
        return self.obj

    def _problem(self, obj: Any) -> str | None:
        if isinstance(obj, type) and issubclass(obj, Source):
            return None
        return f"{self.value} is not a Source subclass"

    def load(self) -> type[Source]:
        """Import the source class (once); raise :class:`SourceLoadError` with the reason."""
        return super().load()


@dataclass
class CommandEntry(PluginEntry):
    """A contributed command; :meth:`load` gives its module (see the module docstring)."""

    kind: ClassVar[str] = "command"
    load_error: ClassVar[type[PluginLoadError]] = CommandLoadError

    @property
    def parent(self) -> str | None:
        """The core parent command of a ``GROUP.NAME`` entry, ``None`` for a bare name."""
        return self.name.split(".", 1)[0] if "." in self.name else None

    @property
    def leaf(self) -> str:
        """The command's own name: ``NAME`` of ``GROUP.NAME``, or the bare name."""
        return self.name.split(".", 1)[-1]

    @property
    def help(self) -> str:
        """One-line help: the module's ``HELP`` (else :attr:`description`), or the error."""
        try:
            help_text = getattr(self.load(), "HELP", None)
        except CommandLoadError:
            return f"failed to load: {self.error}"
        return help_text or self.description

    @property
    def description(self) -> str:
        """The first line of the module's docstring, or the error if it failed to load."""
        try:
            doc = (self.load().__doc__ or "").strip()
        except CommandLoadError:
            return f"failed to load: {self.error}"
        return doc.splitlines()[0] if doc else ""

    def _problem(self, obj: Any) -> str | None:
        if not callable(getattr(obj, "add_arguments", None)):
            return f"{self.value} has no add_arguments(parser)"
        return None

    def load(self) -> ModuleType | Any:
        """Import the command's module or object (once); raise :class:`CommandLoadError`."""
        return super().load()


_caches: dict[str, dict[str, Any]] = {}


_duplicates: dict[str, list[PluginEntry]] = {}


def _discover(group: str, entry_type: type[PluginEntry], refresh: bool) -> dict[str, Any]:
    """The group's entry points by name, sorted, as ``entry_type`` entries (cached).

    A name registered twice keeps its first entry (in the order the installed distributions
    list them); the others are kept apart, never imported (:func:`duplicate_commands`).
    """
    if refresh or group not in _caches:
        eps = sorted(entry_points(group=group), key=lambda ep: ep.name)
        entries: dict[str, Any] = {}
        _duplicates[group] = []
        for ep in eps:
            if ep.name in entries:
                _duplicates[group].append(entry_type(ep.name, ep.value, ep))
            else:
                entries[ep.name] = entry_type(ep.name, ep.value, ep)
        _caches[group] = entries
    return _caches[group]


def duplicate_commands() -> list[CommandEntry]:
    """Commands whose name an earlier entry point already took (after :func:`discover_commands`)."""
    return list(_duplicates.get(COMMANDS_GROUP, []))


def discover(refresh: bool = False) -> dict[str, SourceEntry]:
    """Registered sources by name, sorted, without importing them."""
    return _discover(GROUP, SourceEntry, refresh)


def discover_commands(refresh: bool = False) -> dict[str, CommandEntry]:
    """Contributed commands by entry-point name, sorted, without importing them."""
    return _discover(COMMANDS_GROUP, CommandEntry, refresh)


def register(cls: type[Source]) -> None:
    """Register a source class at run time (tests, notebooks); entry points are the norm."""
    entries = discover()
    entries[cls.name] = SourceEntry(cls.name, f"{cls.__module__}:{cls.__qualname__}", obj=cls)


def load_source(name: str) -> type[Source]:
    """The source class registered as ``name``."""
    entries = discover()
    if name not in entries:
        known = ", ".join(entries) or "none"
        raise SourceLoadError(f"no source named {name!r}; registered: {known}")
    return entries[name].load()
