"""A session's recording sink: the recording it writes, its header, and export.

:class:`Sink` owns the session's recording writer (:class:`~idt_desk.recordings.RecordingWriter`):
it opens it with what the recording says about the session (its configuration, source,
preset, library versions, and for a dialogue the tokenizer and the structural baselines),
takes every transition, window and event, and closes it. :func:`export_session` writes what
a session holds when nothing was recorded.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from idt_desk.live.config import SessionConfig, versions, window_columns
from idt_desk.metrics import embeddings
from idt_desk.recordings import RecordingError, RecordingWriter

if TYPE_CHECKING:
    import numpy as np

    from idt_desk.live.seams import RecordedHost

__all__ = ["Sink", "export_session", "pipeline_record", "preset_record"]


class Sink:
    """The session's recording, while there is one (``recorder``), and where it went.

    Parameters
    ----------
    pending
        A folder to record into from the loop's start (:meth:`open_pending`).
    """

    def __init__(self, pending: str | Path | None = None) -> None:
        #: The latest recording writer (open, or closed: its error stays readable).
        self.recorder: RecordingWriter | None = None
        #: The latest recording this session wrote (open or closed), or None.
        self.path: Path | None = None
        #: Transitions went by while no recording was open (Record pressed mid-session, or
        #: stopped before the end): part of the session is on no disk.
        self.gap = False
        self._pending = Path(pending) if pending is not None else None

    @property
    def recording(self) -> bool:
        """A recording is open."""
        return self.recorder is not None and not self.recorder.closed

    @property
    def error(self) -> RecordingError | None:
        """The open recording's failed write (a full disk), if its last one failed."""
        return self.recorder.error if self.recording else None

    def open_pending(self, host: RecordedHost) -> None:
        """Open the recording asked for at the session's construction, if any."""
        if self._pending is not None:
            path, self._pending = self._pending, None
            self.open(host, path)

    def open(self, host: RecordedHost, path: Path) -> None:
        """Start recording ``host`` into the new folder ``path`` (``recording_start``)."""
        src, turns = host.source, host.turns
        cfg = {
            "session": host.config.to_dict(),
            "source": {"name": src.name, "label": src.label,
                       "settings": dict(src.config), "rate": src.rate,
                       "episode_steps": getattr(src, "episode_steps", None),
                       "has_reward": src.has_reward,
                       "passive": src.passive, "view": src.view,
                       "state_bins": src.state_bins, "action_bins": src.action_bins,
                       "details": src.describe()},
            "preset": preset_record(host),
            "versions": versions(),
            "start_index": host.n_transitions,
        }
        if turns is not None:
            cfg["tokenizer"] = turns.dialogue.tokenizer.describe()
            cfg["baselines"] = ({"columns": list(embeddings.BASELINE_COLUMNS),
                                 "model": embeddings.EMBEDDER} if host.config.baselines
                                else None)
        self.path = Path(path)
        self.recorder = RecordingWriter(path, cfg, src.state_names, src.action_names,
                                 window_columns(turns is not None), turns=turns is not None)
        if turns is not None and turns.log:
            # Started mid-dialogue: the turns later contexts still hold, so a replay can
            # rebuild them (they give no metric rows of their own).
            keep = ("turn", "prompt", "reply", "next_prompt", "context_start")
            self.recorder.add_turns([{**{k: r[k] for k in keep if k in r}, "history": True}
                                     for r in turns.log])
        host.event("recording_start", path=str(path), pipeline=pipeline_record(host),
                   perturbations=src.active_perturbations,
                   modulations=src.active_modulations)

    def close(self, final_state: str | None = None, error: str | None = None) -> None:
        """Close the recording (if one is open); the session may go on.

        Raises
        ------
        RecordingError
            The last rows could not be written (a full disk).
        """
        rec = self.recorder
        if rec is not None and not rec.closed:
            if final_state is None:
                rec.close()
            else:
                rec.close(final_state=final_state, error=error)

    def rewrite_config(self, host: RecordedHost) -> None:
        """The pipeline changed: the open recording's header says so."""
        if self.recording:
            self.recorder.write_config(session=host.config.to_dict(),
                                       preset=preset_record(host))

    # -- what the loop hands over (the loop's thread) ---------------------------------------

    def transitions(self, i0: int, t: np.ndarray, s: np.ndarray, a: np.ndarray | None,
                    s_next: np.ndarray, reward: np.ndarray | None,
                    episode: np.ndarray | None, turns: Sequence[Mapping[str, Any]] | None
                    ) -> None:
        """A batch's transitions (and a dialogue's turns, ``history`` ones first)."""
        if not self.recording:
            self.gap = self.gap or len(s) > 0
            return
        rec = self.recorder
        rec.add_transitions(i0, t, s, a, s_next, reward, episode)
        if turns is not None:
            rec.add_turns([x for x in turns if x.get("history")])
            rec.add_turns([{"i": i0 + j, **x} for j, x in enumerate(
                x for x in turns if not x.get("history"))])

    def windows(self, table: Mapping[str, np.ndarray]) -> None:
        """New metric rows."""
        if self.recording:
            self.recorder.add_windows(table)

    def event(self, ev: Mapping[str, Any]) -> None:
        """An event, as the session logged it."""
        if self.recording:
            self.recorder.add_event(ev)


def pipeline_record(host: RecordedHost) -> dict[str, Any]:
    """The pipeline as recorded (a replay rebuilds it): the preset in full, by value.

    The turn path's leaves out the symbol settings, which do not apply to it.
    """
    p = {**host.pipeline_settings(), "preset": None, "preset_spec": host.preset.to_dict()}
    if host.turns is not None:
        for key in SessionConfig.SYMBOL_FIELDS:
            p.pop(key, None)
    return p


def preset_record(host: RecordedHost) -> dict[str, Any] | None:
    """The symbols' preset as a recording states it (None on the turn path: no symbols)."""
    return None if host.turns is not None else host.preset.to_dict()


def export_session(out: str | Path, config: SessionConfig, preset: dict[str, Any] | None,
                   source: Mapping[str, Any], windows: Mapping[str, np.ndarray],
                   events: Sequence[Mapping[str, Any]], *, n_transitions: int,
                   n_windows: int, fmt: str = "csv") -> list[Path]:
    """Write what a session holds without a recording: its windows and events.

    ``windows.{fmt}`` (the latest ``history`` windows, every one of a shorter session),
    ``events.{fmt}`` (all of them) and ``config.json`` (the session and preset, and what
    is missing: the transitions, which only a recording keeps). The same layout and
    writer as :func:`idt_desk.recordings.export_recording`.
    """
    import pandas as pd

    from idt_desk.recordings import Recording, export_recording
    from idt_desk.recordings.files import json_safe

    table = pd.DataFrame({c: windows[c] for c in window_columns(config.metric_path == "turns")})
    header = json_safe({
        "session": config.to_dict(), "preset": preset, "source": dict(source),
        "exported_without_recording": True, "n_transitions": n_transitions,
        "n_windows": n_windows, "windows_exported": len(table),
        "note": "no transitions: only a recording (Record) keeps them"})
    rec = Recording(Path(out), header, pd.DataFrame(), table,
                    pd.DataFrame([json_safe(e) for e in events]), [], False, None)
    return export_recording(rec, out, fmt)
