"""A session's recording sink: the recording's header, its pipeline record, and export.

The session writes every transition, window and event through the recording writer
(:class:`~idt_desk.recordings.Recorder`); this module builds what the recording says about
the session (its configuration, source, preset, library versions, and for a dialogue the
tokenizer and the structural baselines), the pipeline as a replay rebuilds it, and exports
what a session holds when nothing was recorded.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from idt_desk.live.config import SessionConfig, versions, window_columns
from idt_desk.metrics import embeddings
from idt_desk.recordings import Recorder

__all__ = ["export_session", "open_recording", "pipeline_record", "preset_record"]


def open_recording(session: Any, path: Path) -> None:
    """Start ``session`` recording into the new folder ``path`` (``recording_start``)."""
    cfg = {
        "session": session.config.to_dict(),
        "source": {"name": session.source.name, "label": session.source.label,
                   "settings": dict(session.source.config), "rate": session.source.rate,
                   "episode_steps": getattr(session.source, "episode_steps", None),
                   "has_reward": session.source.has_reward,
                   "passive": session.source.passive, "view": session.source.view,
                   "details": session.source.describe()},
        "preset": preset_record(session),
        "versions": versions(),
        "start_index": session.n_transitions,
    }
    if session._turn_path:
        cfg["tokenizer"] = session._turns.dialogue.tokenizer.describe()
        cfg["baselines"] = ({"columns": list(embeddings.BASELINE_COLUMNS),
                             "model": embeddings.EMBEDDER} if session.config.baselines
                            else None)
    session.recording_path = Path(path)
    session._recorder = Recorder(path, cfg, session.source.state_names,
                                 session.source.action_names,
                                 window_columns(session._turn_path),
                                 turns=session._turn_path)
    if session._turns is not None and session._turns.log:
        # Started mid-dialogue: the turns later contexts still hold, so a replay can
        # rebuild them (they give no metric rows of their own).
        keep = ("turn", "prompt", "reply", "next_prompt", "context_start")
        session._recorder.add_turns([{**{k: r[k] for k in keep if k in r}, "history": True}
                                     for r in session._turns.log])
    session._event("recording_start", path=str(path), pipeline=pipeline_record(session),
                   perturbations=session.source.active_perturbations,
                   modulations=session.source.active_modulations)


def pipeline_record(session: Any) -> dict[str, Any]:
    """The pipeline as recorded (a replay rebuilds it): the preset in full, by value.

    The turn path's leaves out the symbol settings, which do not apply to it.
    """
    p = {**session._pipeline_dict(), "preset": None, "preset_spec": session.preset.to_dict()}
    if session._turn_path:
        for key in SessionConfig.SYMBOL_FIELDS:
            p.pop(key, None)
    return p


def preset_record(session: Any) -> dict[str, Any] | None:
    """The symbols' preset as a recording states it (None on the turn path: no symbols)."""
    return None if session._turn_path else session.preset.to_dict()


def export_session(session: Any, out: str | Path, fmt: str = "csv") -> list[Path]:
    """Write what the session holds without a recording: its windows and events.

    ``windows.{fmt}`` (the latest ``history`` windows, every one of a shorter session),
    ``events.{fmt}`` (all of them) and ``config.json`` (the session and preset, and what
    is missing: the transitions, which only a recording keeps). The same layout and
    writer as :func:`idt_desk.recordings.export_recording`.
    """
    import pandas as pd

    from idt_desk.recordings import Recording, export_recording
    from idt_desk.recordings._format import _json_safe

    with session._lock:
        windows = session._ring.tail(session.config.history)
        events = list(session._event_log)
        n_windows = session._ring.total
    table = pd.DataFrame({c: windows[c] for c in window_columns(session._turn_path)})
    config = _json_safe({
        "session": session.config.to_dict(), "preset": preset_record(session),
        "source": {"name": session.source.name, "rate": session.source.rate},
        "exported_without_recording": True, "n_transitions": session.n_transitions,
        "n_windows": n_windows, "windows_exported": len(table),
        "note": "no transitions: only a recording (Record) keeps them"})
    rec = Recording(Path(out), config, pd.DataFrame(), table,
                    pd.DataFrame([_json_safe(e) for e in events]), [], False, None)
    return export_recording(rec, out, fmt)
