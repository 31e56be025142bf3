"""One validation path for the command line and the GUI launch.

Every check raises :class:`~idt_desk.errors.InputError` with one line that starts with the
option, says what is wrong and what is allowed; ``idt-desk`` prints it as
``idt-desk COMMAND: error: --option VALUE: ...`` and exits with code 2. Everything here runs
before anything is simulated, read in bulk or written.
"""

from __future__ import annotations

import argparse
import math
import operator
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from idt_desk.errors import InputError
from idt_desk.settings import SETTINGS, SettingError

__all__ = [
    "SPEEDS",
    "add_settings",
    "build_source",
    "check_float",
    "check_int",
    "check_limit",
    "check_out_dir",
    "key_values",
    "parse_auto",
    "parse_speed",
    "parse_switch",
    "path_arg",
    "schedule_switches",
]


def check_int(option: str, value: int | None, lo: int, hi: int | None = None) -> int | None:
    """``value`` if it is an integer in [lo, hi] (None passes through); else InputError."""
    if value is None:
        return None
    try:
        v = operator.index(value)
    except TypeError:
        v = None
    if v is None or v < lo or (hi is not None and v > hi):
        allowed = f"from {lo:,} to {hi:,}" if hi is not None else f">= {lo:,}"
        raise InputError(f"{option} {value}: must be an integer {allowed}")
    return v


def check_limit(key: str, value: Any) -> Any:
    """``value`` if the settings table's ``key`` takes it (None passes); else InputError.

    The error names the option: "--bins 1: must be an integer from 2 to 65,536".
    """
    if value is None:
        return None
    try:
        return SETTINGS[key].check(value)
    except SettingError as exc:
        raise InputError(f"{SETTINGS[key].flag} {value}: {exc.why}") from None


def add_settings(p: argparse.ArgumentParser, keys: Iterable[str],
                 notes: Mapping[str, str] | None = None, **defaults: Any) -> None:
    """Options for settings-table ``keys``: flag, type, choices and help from the table.

    ``defaults``: a command's own default for a key (``detector="paper"``), said in its help;
    else the table's. ``notes``: what a key is for in this command, said before the table's
    help. A setting whose unset value has a name (``--correction none``) takes it. Values are
    checked where they are read (:func:`check_limit`, ``PipelineSettings``), so an option
    refuses what the window refuses, in the same words.
    """
    notes = notes or {}
    for key in keys:
        s = SETTINGS[key]
        default = defaults.get(key, s.default)
        words = s.describe(default, notes.get(key, ""))
        if s.kind is bool:  # on by default: --twin / --no-twin
            p.add_argument(s.flag, action=argparse.BooleanOptionalAction if default
                           else "store_true", default=bool(default), help=words)
        elif s.choices:
            extra = ("none",) if s.unset == "none" else ()
            p.add_argument(s.flag, choices=(*s.choices, *extra), help=words,
                           default="none" if extra and default is None else default)
        else:
            p.add_argument(s.flag, type=s.kind, default=default, help=words,
                           metavar="BUDGET" if key == "false_alarms" else None)


def check_float(
    option: str,
    value: float | None,
    lo: float | None = None,
    hi: float | None = None,
    *,
    lo_open: bool = False,
) -> float | None:
    """``value`` if it is a finite number in the range; else InputError (None passes)."""
    if value is None:
        return None
    low_ok = lo is None or (value > lo if lo_open else value >= lo)
    if not (math.isfinite(value) and low_ok and (hi is None or value <= hi)):
        parts = [] if lo is None else [f"{'>' if lo_open else '>='} {lo:g}"]
        parts += [] if hi is None else [f"<= {hi:g}"]
        allowed = "a finite number" + (" " + " and ".join(parts) if parts else "")
        raise InputError(f"{option} {value}: must be {allowed}")
    return float(value)


#: Multiples of real time a paced run may take (slower never ends in practice; faster:
#: ``max``).
SPEEDS = (1e-3, 1e6)


def parse_speed(text: str, option: str = "--speed") -> float | None:
    """A multiple of real time in :data:`SPEEDS`, or None for ``max`` (as fast as possible)."""
    if str(text).strip().lower() == "max":
        return None
    try:
        v = float(text)
    except ValueError:
        v = math.nan
    lo, hi = SPEEDS
    if not (math.isfinite(v) and lo <= v <= hi):
        raise InputError(
            f"{option} {text}: must be a multiple of real time from {lo:g} to {hi:g} (e.g. "
            "0.5, 3) or 'max'"
        )
    return v


def path_arg(text: str) -> Path:
    """An argparse ``type`` for a path option: an empty one is refused (it meant ``.``)."""
    if not str(text).strip():
        raise argparse.ArgumentTypeError("an empty path; give a directory")
    return Path(text)


def check_out_dir(path: Path | None, option: str) -> Path | None:
    """A directory that exists or can be created: nothing on its way is a file.

    Checks the path itself, then its nearest existing ancestor (which must be a writable
    directory). None passes through.
    """
    if path is None:
        return None
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise InputError(f"{option} {path}: is a file; give a directory (new or existing)")
    probe = path
    while not probe.exists():
        if probe.parent == probe:
            break
        probe = probe.parent
    if probe.exists() and not probe.is_dir():
        raise InputError(f"{option} {path}: {probe} is a file, so no directory can go there")
    if probe.exists() and not os.access(probe, os.W_OK | os.X_OK):
        raise InputError(f"{option} {path}: {probe} is not writable")
    return path


def key_values(items: Iterable[str] | None, option: str) -> dict[str, str]:
    """``["k=v", ...]`` -> ``{"k": "v"}``; InputError naming ``option`` if one lacks its ``=``."""
    out = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise InputError(f"{option} {item!r}: expected KEY=VALUE")
        out[key.strip()] = value.strip()
    return out


def _allowed(p: Any) -> str:
    """What a declared :class:`~idt_desk.live.source.Param` accepts, in words."""
    if p.choices:
        return "one of " + ", ".join(p.choices)
    if p.kind is bool:
        return "true or false"
    if p.kind is str:
        return getattr(p, "pattern_hint", "") or "text"
    noun = "an integer" if p.kind is int else "a number"
    unit = f" {p.unit}" if p.unit else ""
    if p.minimum is not None and p.maximum is not None:
        return f"{noun} from {p.minimum:g} to {p.maximum:g}{unit}"
    if p.minimum is not None:
        return f"{noun} >= {p.minimum:g}{unit}"
    if p.maximum is not None:
        return f"{noun} <= {p.maximum:g}{unit}"
    return noun


def _check_params(
    params: tuple, given: dict[str, str], what: str, owner: str
) -> dict[str, Any]:
    """Validate ``given`` against declared params: one line naming ``what`` key=value."""
    declared = {p.name: p for p in params}
    out = {}
    for key, raw in given.items():
        if key not in declared:
            known = ", ".join(declared) or "none"
            raise InputError(f"{what} {key}={raw}: {owner} has no {key!r}; known: {known}")
        try:
            out[key] = declared[key].validate(raw)
        except ValueError:
            raise InputError(
                f"{what} {key}={raw}: must be {_allowed(declared[key])}"
            ) from None
    return out


def source_class(name: str, settings: Iterable[str] | None) -> tuple[Any, dict[str, Any]]:
    """Source ``name``'s class and its ``--set`` items checked against its declarations.

    What can be checked without building the source (the types and ranges of its settings);
    :func:`build_source` checks the rest by building it.
    """
    from idt_desk.live.plugins import SourceLoadError, load_source

    try:
        cls = load_source(name)
    except SourceLoadError as exc:
        raise InputError(f"--source {name}: {exc}") from None
    return cls, _check_params(cls.settings, key_values(settings, "--set"), "--set",
                              f"source {name}")


def build_source(name: str, settings: Iterable[str] | None) -> Any:
    """Load source ``name`` and build it from ``--set`` items, every setting checked.

    Returns the constructed source (the caller closes it or hands it to a session).
    """
    cls, values = source_class(name, settings)
    try:
        return cls(**values)
    except (ValueError, OSError) as exc:
        msg = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        for prefix in (f"source {name}: ", f"{name}: "):
            msg = msg.removeprefix(prefix)
        raise InputError(f"--source {name}: {msg}") from None


def _seconds(spec: str, text: str, option: str = "--perturb") -> float:
    try:
        v = float(text)
    except ValueError:
        v = math.nan
    if not (math.isfinite(v) and 0 <= v <= 1e12):
        raise InputError(
            f"{option} {spec}: times must be seconds >= 0 (at most 10^12), e.g. NAME@10-20, "
            f"got {text!r}"
        )
    return v


def _turn(spec: str, text: str, option: str) -> int:
    """A turn number of a dialogue's schedule: a whole number from 1."""
    try:
        v = int(text)
    except ValueError:
        v = 0
    if v < 1:
        raise InputError(f"{option} {spec}: turns are whole numbers from 1 (the first turn), "
                         f"e.g. NAME@31, got {text!r}")
    return v


def schedule_switches(
    specs: Iterable[str], source: Any, steps: int | None = None, kind: str = "perturb"
) -> list[tuple[int, str, dict]]:
    """Parse ``NAME[:k=v,...]@START[-END]`` (seconds of the loop's time) into a schedule.

    ``kind`` is ``perturb`` (``--perturb``: a declared perturbation) or ``modulate``
    (``--modulate``: a declared modulation). Returns ``(transition, kind, {"name",
    "params"})`` commands; ``params`` None switches off. With ``steps`` (the run's length) a
    switch that starts at or after the run's end is refused.

    On the turn path (a dialogue) START and END are turns, counted from 1 as the transcript,
    the plots and the event log count them: ``@N`` acts on turn N (an injection is turn N's
    S'), so it is applied when N − 1 turns are done; ``@N-M`` holds for turns N to M − 1.
    """
    option = f"--{kind}"
    out = []
    rate = float(source.rate)
    turns = source.metric_path == "turns"
    for spec in specs:
        head, sep, when = spec.partition("@")
        if not sep:
            raise InputError(f"{option} {spec}: give a start time, e.g. NAME@10-20")
        name, resolved = parse_switch(head, source, kind, option, spec)
        decl = next(d for d in (source.perturbations if kind == "perturb"
                                else source.modulations) if d.name == name)
        # START[-END]; a dash inside a number (1e-3) is not the separator.
        cut = next((k for k in range(1, len(when)) if when[k] == "-"
                    and when[k - 1] not in "eE"), len(when))
        start, dash, end = when[:cut], when[cut:cut + 1], when[cut + 1:]
        if turns:
            on, off = _turn(spec, start, option) - 1, \
                (_turn(spec, end, option) - 1 if dash else None)
        else:
            on = round(_seconds(spec, start, option) * rate)
            off = round(_seconds(spec, end, option) * rate) if dash else None
        if off is not None and off <= on:
            raise InputError(f"{option} {spec}: the end must come after the start")
        if off is not None and kind == "perturb" and decl.is_impulse(resolved):
            repeat = decl.repeat
            raise InputError(
                f"{option} {spec}: {name}"
                + (f" with {repeat}={resolved[repeat]:g}" if repeat in resolved else "")
                + f" is a one-shot impulse, it has no end; give only a start ({name}@{start})"
                + (f" or {repeat} > 0" if repeat in resolved else "")
            )
        if steps is not None and on >= steps:
            raise InputError(
                f"{option} {spec}: turn {on + 1} is after the run's last turn, {steps}; "
                f"allowed: 1 to {steps}" if turns else
                f"{option} {spec}: starts at {on / rate:g} s, at or after the run's end at "
                f"{steps / rate:g} s; allowed start: 0 to {(steps - 1) / rate:g} s"
            )
        out.append((on, kind, {"name": name, "params": resolved}))
        if off is not None:
            out.append((off, kind, {"name": name, "params": None}))
    return out


def parse_switch(head: str, source: Any, kind: str = "perturb", option: str | None = None,
                 spec: str | None = None) -> tuple[str, dict[str, Any]]:
    """``NAME[:k=v,...]`` -> (a declared perturbation or modulation, its resolved params).

    ``kind`` is ``perturb`` or ``modulate``; ``option`` and ``spec`` name the input in the
    one-line error (default ``--perturb`` / ``--modulate`` and ``head``).
    """
    option = option or f"--{kind}"
    spec = head if spec is None else spec
    what = "perturbation" if kind == "perturb" else "modulation"
    declared = source.perturbations if kind == "perturb" else source.modulations
    name, given = _name_and_params(spec, head, option)
    decl = next((d for d in declared if d.name == name), None)
    if decl is None:
        known = ", ".join(d.name for d in declared) or "none"
        raise InputError(
            f"{option} {spec}: {source.name} has no {what} {name!r}; known: {known}")
    return name, decl.resolve(_check_params(decl.params, given, f"{option} {spec}:",
                                            f"{what} {name}"))


def _name_and_params(spec: str, head: str, option: str) -> tuple[str, dict[str, str]]:
    name, _, params = (x.strip() for x in head.partition(":"))
    return name, key_values([p for p in params.split(",") if p.strip()], f"{option} {spec}:")


def parse_auto(spec: str | None, source: Any) -> dict[str, Any] | None:
    """Parse ``--auto NAME[:k=v,...]`` into the Auto controller's configuration.

    The modulation, its parameters, and ``persist`` / ``release`` (windows; defaults 3, 10).
    """
    if spec is None:
        return None
    name, given = _name_and_params(spec, spec, "--auto")
    decl = next((m for m in source.modulations if m.name == name), None)
    if decl is None:
        known = ", ".join(m.name for m in source.modulations) or "none (a passive source)"
        raise InputError(f"--auto {spec}: {source.name} has no modulation {name!r}; "
                         f"known: {known}")
    counts = {k: given.pop(k) for k in ("persist", "release") if k in given}
    auto: dict[str, Any] = {"modulation": name, **{
        k: SETTINGS[f"auto_{k}"].default for k in ("persist", "release")}}
    for key, raw in counts.items():
        setting = SETTINGS[f"auto_{key}"]
        try:
            auto[key] = setting.check(int(raw))
        except (ValueError, SettingError):
            raise InputError(f"--auto {spec}: {key}={raw}: must be {setting.range_text()} "
                             "(windows)") from None
    auto["params"] = decl.resolve(_check_params(decl.params, given, f"--auto {spec}:",
                                                f"modulation {name}"))
    return auto
