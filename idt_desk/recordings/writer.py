"""Writing a recording while a loop runs: whole lines, flushed at least every half second."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from idt_desk.recordings._format import (
    FORMAT_VERSION,
    RecordingError,
    _json_safe,
    _JsonLines,
    _Table,
)

__all__ = ["Recorder"]


class Recorder:
    """Writes a recording while a session runs.

    Parameters
    ----------
    path
        Recording directory (created; must not already hold a recording).
    config
        The session's full configuration (JSON-able).
    state_names, action_names
        Variable names, stored in the config; the table columns are ``s_j``/``a_j``.
    window_columns
        Columns of the windows table.
    flush_seconds
        Longest time between flushes to the operating system.
    turns
        Also write turns.jsonl (a dialogue's texts).
    """

    def __init__(
        self,
        path: str | Path,
        config: Mapping[str, Any],
        state_names: Sequence[str],
        action_names: Sequence[str],
        window_columns: Sequence[str],
        flush_seconds: float = 0.5,
        turns: bool = False,
    ) -> None:
        self.path = Path(path)
        if (self.path / "config.json").exists():
            raise RecordingError(f"{self.path}: already holds a recording; choose a new path")
        self.path.mkdir(parents=True, exist_ok=True)
        self.flush_seconds = float(flush_seconds)
        self._ds, self._da = len(state_names), len(action_names)
        cols = ["i", "t", *[f"s_{j}" for j in range(self._ds)],
                *[f"a_{j}" for j in range(self._da)],
                *[f"s_next_{j}" for j in range(self._ds)], "reward", "episode"]
        self.config = dict(config)
        self.config.update(
            format_version=FORMAT_VERSION,
            state_names=list(state_names),
            action_names=list(action_names),
            created=time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        )
        self.write_config()
        self._transitions = _Table(self.path / "transitions.csv", cols)
        self._windows = _Table(self.path / "windows.csv", window_columns)
        self._events = _JsonLines(self.path / "events.jsonl")
        self._turns = _JsonLines(self.path / "turns.jsonl") if turns else None
        self._last_flush = time.monotonic()
        self.n_transitions = 0
        self.n_windows = 0
        self.n_events = 0
        self.n_turns = 0
        self.closed = False

    @property
    def window_columns(self) -> list[str]:
        """Columns of the windows table."""
        return self._windows.columns

    def write_config(self, **updates: Any) -> None:
        """Rewrite config.json atomically (a reader never sees half a file)."""
        self.config.update(updates)
        tmp = self.path / "config.json.tmp"
        tmp.write_text(json.dumps(_json_safe(self.config), indent=2) + "\n")
        os.replace(tmp, self.path / "config.json")

    def add_transitions(
        self,
        i0: int,
        t: np.ndarray | None,
        s: np.ndarray,
        a: np.ndarray | None,
        s_next: np.ndarray,
        reward: np.ndarray | None,
        episode: np.ndarray | None,
    ) -> None:
        """Append a block of transitions starting at global index ``i0``."""
        n = s.shape[0]
        if n == 0:
            return
        nan = np.full((n, 1), np.nan)
        parts = [
            np.arange(i0, i0 + n, dtype=np.float64)[:, None],
            nan if t is None else np.asarray(t, dtype=np.float64)[:, None],
            s,
            *([] if self._da == 0 else [a]),
            s_next,
            nan if reward is None else np.asarray(reward, dtype=np.float64)[:, None],
            nan if episode is None else np.asarray(episode, dtype=np.float64)[:, None],
        ]
        self._transitions.append(np.hstack(parts))
        self.n_transitions += n
        self._maybe_flush()

    def add_windows(self, table: Mapping[str, np.ndarray]) -> None:
        """Append windows given as columns (missing columns are written as NaN)."""
        n = len(next(iter(table.values()))) if table else 0
        if n == 0:
            return
        block = np.column_stack([
            np.asarray(table[c], dtype=np.float64) if c in table else np.full(n, np.nan)
            for c in self._windows.columns
        ])
        self._windows.append(block)
        self.n_windows += n
        self._maybe_flush()

    def add_event(self, event: Mapping[str, Any]) -> None:
        """Append one event (a JSON object; ``kind`` required)."""
        if "kind" not in event:
            raise ValueError("an event needs a 'kind'")
        self._events.append(event)
        self.n_events += 1
        self._maybe_flush()

    def add_turns(self, turns: Sequence[Mapping[str, Any]]) -> None:
        """Append a dialogue's turns (their texts and settings) to turns.jsonl."""
        if self._turns is None:
            raise ValueError("this recording was opened without turns")
        for turn in turns:
            self._turns.append(turn)
            self.n_turns += not turn.get("history")
        self._maybe_flush()

    def _maybe_flush(self) -> None:
        if time.monotonic() - self._last_flush >= self.flush_seconds:
            self.flush()

    def flush(self) -> None:
        """Hand everything pending to the operating system.

        Events first: a reader that reads the transitions, then the events, finds every
        event logged before the transitions it has (a follower places each at its row).
        """
        self._events.flush()
        if self._turns is not None:
            self._turns.flush()
        self._transitions.flush()
        self._windows.flush()
        self._last_flush = time.monotonic()

    def close(self, **config_updates: Any) -> None:
        """Flush, record final counts in the config, and close the files."""
        if self.closed:
            return
        self.flush()
        self._transitions.close()
        self._windows.close()
        self._events.close()
        counts = {"n_turns": self.n_turns} if self._turns is not None else {}
        if self._turns is not None:
            self._turns.close()
        self.write_config(n_transitions=self.n_transitions, n_windows=self.n_windows,
                          n_events=self.n_events, complete=True, **counts, **config_updates)
        self.closed = True
