"""What a recording's config.json, events and turns must hold before anything reads them.

A recording is data another program (or person) may have written or damaged: every field a
reader, a replay or a follower uses is checked for its type and range here, and anything
else is refused with one line naming the file, the line and the field, never a traceback
further in. A recorded pipeline is checked against the same limits as the command line's
(:data:`idt_desk.settings.LIMITS`), so a crafted ``{"window": 10**9}`` is refused, not tried.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

from idt_desk.recordings.files import (
    FORMAT_VERSION,
    TRANSITIONS,
    RecordingError,
    parse_json,
    read_lines,
)
from idt_desk.settings import (
    LIMITS,
    PIPELINE_KEYS,
    check_limit,
    check_pipeline,
    check_preset_spec,
    is_int,
    is_number,
)

__all__ = ["check_columns", "check_config", "check_event", "check_regular", "check_turn",
           "parse_config", "read_config"]


def _int(v: Any, lo: int = 0) -> bool:
    return is_int(v) and v >= lo


def check_regular(path: Path) -> None:
    """``path`` must be a regular file in its recording's folder.

    A FIFO or a device would hang or flood a reader; a link to a file outside the folder
    would make a recording (shared data) read whatever file its author chose.
    """
    try:
        mode = os.stat(path).st_mode
    except OSError as exc:
        raise RecordingError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    if not stat.S_ISREG(mode):
        raise RecordingError(f"{path}: not a regular file")
    if os.path.islink(path):
        target = Path(os.path.realpath(path))
        if not target.is_relative_to(Path(os.path.realpath(path.parent))):
            raise RecordingError(f"{path}: a link to a file outside the recording "
                                 f"({target}); copy the file in instead")


def read_config(path: Path) -> dict[str, Any]:
    """A recording's config.json, read and checked: every reader's one way to it.

    Raises
    ------
    RecordingError
        Not a regular file of the folder, not JSON, not this format, or a field a reader
        uses of the wrong type or range (one line naming the file and the field).
    """
    check_regular(path / "config.json")
    return parse_config(read_lines(path / "config.json"), str(path))


def parse_config(raw: bytes, run: str) -> dict[str, Any]:
    """config.json's bytes (of the recording ``run`` names), parsed and checked."""
    where = f"{run}/config.json"
    config = parse_json(raw, where)
    version = config.get("format_version") if isinstance(config, dict) else None
    if not _int(version) or version not in TRANSITIONS:
        found = version if isinstance(config, dict) else type(config).__name__
        raise RecordingError(f"{run}: not an IDT Desk recording of format 1 to "
                             f"{FORMAT_VERSION} (config.json says format_version "
                             f"{_show(found)})")
    return check_config(config, where)


def check_config(config: Any, where: str) -> dict[str, Any]:
    """The fields of config.json a reader or a replay uses, checked; ``where`` names it."""
    if not isinstance(config, dict):
        raise RecordingError(f"{where}: not a JSON object")

    def bad(key: str, want: str) -> RecordingError:
        return RecordingError(f"{where}: {key} {_show(config_get(key))}: must be {want}")

    def config_get(key: str) -> Any:
        head, _, tail = key.partition(".")
        v = config.get(head)
        return v.get(tail) if tail and isinstance(v, dict) else v

    for key in ("state_names", "action_names"):
        names = config.get(key, [])
        if not (isinstance(names, list) and all(isinstance(n, str) for n in names)):
            raise bad(key, "a list of names")
    for key in ("source", "session"):
        if not isinstance(config.get(key, {}), dict):
            raise bad(key, "a JSON object")
    src = config.get("source", {})
    if src.get("rate") is not None and not (is_number(src["rate"]) and src["rate"] > 0):
        raise bad("source.rate", "a positive number of transitions per second")
    if src.get("episode_steps") is not None and not _int(src["episode_steps"], 1):
        raise bad("source.episode_steps", "a positive integer")
    for key in ("state_bins", "action_bins"):  # a Discrete space's values, each its own bin
        most = LIMITS["bins"][1]
        if src.get(key) is not None and not (_int(src[key], 1) and src[key] <= most):
            raise bad(f"source.{key}", f"an integer from 1 to {most:,}")
    for key, kind, want in (("has_reward", bool, "true or false"),
                            ("passive", bool, "true or false"), ("name", str, "a name"),
                            ("view", str, "text"), ("settings", dict, "a JSON object")):
        if key in src and src[key] is not None and not isinstance(src[key], kind):
            raise bad(f"source.{key}", want)
    session = config.get("session", {})
    if session.get("metric_path", "windows") not in ("windows", "turns"):
        raise bad("session.metric_path", "windows or turns")
    if session.get("tokenizer") is not None and not isinstance(session["tokenizer"], str):
        raise bad("session.tokenizer", "a name")
    if "start_index" in config and not _int(config["start_index"]):
        raise bad("start_index", "an integer >= 0")
    if config.get("preset") is not None:
        if not isinstance(config["preset"], dict):
            raise bad("preset", "a JSON object")
        try:
            check_preset_spec(config["preset"], len(config.get("state_names", [])),
                              len(config.get("action_names", [])))
        except ValueError as exc:
            raise RecordingError(f"{where}: preset: {str(exc).removeprefix('preset_spec: ')}"
                                 ) from None
    settings = {k: v for k, v in session.items() if k in PIPELINE_KEYS and k != "preset_spec"}
    try:
        check_pipeline(settings)
    except ValueError as exc:
        raise RecordingError(f"{where}: session: {exc}") from None
    if not isinstance(config.get("complete", False), bool):
        raise bad("complete", "true or false")
    return config


def check_columns(columns: list[str], config: dict[str, Any], where: str) -> None:
    """A transitions table's columns: each column once, S, A and S' as config.json names them.

    A config.json without ``state_names`` (written by another tool) names no columns to
    check: the readers then take the table's own.
    """
    seen: set[str] = set()
    for c in columns:
        if c in seen:
            raise RecordingError(f"{where}: line 1: column {c!r} appears twice")
        seen.add(c)
    if "state_names" not in config:
        return
    n_s, n_a = len(config.get("state_names", [])), len(config.get("action_names", []))
    want = ["i", *[f"s_{j}" for j in range(n_s)], *[f"a_{j}" for j in range(n_a)],
            *[f"s_next_{j}" for j in range(n_s)]]
    if missing := [c for c in want if c not in seen]:
        raise RecordingError(f"{where}: line 1: no column {missing[0]!r}, which config.json's "
                             f"{n_s} state_names and {n_a} action_names ask for")
    for prefix, n, key in (("s_", n_s, "state_names"), ("a_", n_a, "action_names")):
        extra = [c for c in columns if c.startswith(prefix) and not c.startswith("s_next")
                 and c[len(prefix):].isdigit() and int(c[len(prefix):]) >= n]
        if extra:
            raise RecordingError(f"{where}: line 1: column {extra[0]!r} beyond config.json's "
                                 f"{n} {key}")


def check_event(ev: dict[str, Any], where: str) -> None:
    """The fields of one event a replay or a follower uses, checked (``where``: file:line)."""

    def bad(key: str, want: str) -> RecordingError:
        return RecordingError(f"{where}: {key} {_show(ev.get(key))}: must be {want}")

    if not isinstance(ev.get("kind"), str):
        raise bad("kind", "a name")
    if "i" in ev and not _int(ev["i"]):
        raise bad("i", "a transition index (an integer >= 0)")
    for key in ("t", "wall"):
        if ev.get(key) is not None and not is_number(ev[key]):
            raise bad(key, "a finite number")
    for key, kind, want in (("name", str, "a name"), ("text", str, "text"),
                            ("params", dict, "a JSON object"),
                            ("pipeline", dict, "a JSON object")):
        if ev.get(key) is not None and not isinstance(ev[key], kind):
            raise bad(key, want)
    if ev["kind"] in ("recording_start", "reconfigure") and ev.get("pipeline") is not None:
        try:
            check_pipeline(ev["pipeline"], strict=True)
        except ValueError as exc:
            raise RecordingError(f"{where}: pipeline: {exc}") from None
    if ev["kind"] == "calibrate_baseline" and ev.get("n") is not None:
        try:
            check_limit("baseline_windows", ev["n"])
        except ValueError as exc:
            raise RecordingError(f"{where}: n: {exc}") from None
    ranges = ev.get("value_ranges")
    if ranges is not None and not (isinstance(ranges, dict) and all(
            isinstance(r, list) and len(r) == 2 and all(is_number(x) for x in r) and r[0] <= r[1]
            for r in ranges.values())):
        raise bad("value_ranges", "variable names with [low, high] ranges")


def check_turn(turn: dict[str, Any], where: str) -> None:
    """The fields of one dialogue turn a replay uses, checked."""
    if not _int(turn.get("turn")):
        raise RecordingError(f"{where}: turn {_show(turn.get('turn'))}: must be an integer")
    for key in ("prompt", "reply", "next_prompt"):
        if turn.get(key) is not None and not isinstance(turn[key], str):
            raise RecordingError(f"{where}: {key} must be text")
    if not isinstance(turn.get("history", False), bool):
        raise RecordingError(f"{where}: history must be true or false")


def _show(v: Any) -> str:
    """A value as a one-line message shows it (long ones cut)."""
    text = repr(v)
    return text if len(text) <= 60 else text[:57] + "..."
