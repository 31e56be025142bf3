"""Session recordings (paper §9's "every transition kept"): write, read, follow, export.

A recording is a folder: ``config.json`` (source, settings, pipeline),
``transitions.arrows`` (every (S, A, S') row, an Arrow IPC stream; ``transitions.csv``
before format 2), ``windows.csv`` (the metrics and flags of every window),
``events.jsonl`` (perturbations, modulations, alarms, notes) and, for a dialogue,
``turns.jsonl``. This package writes one while a loop runs, reads it back (saying what is
missing from a killed one), follows one another process is writing, and exports it to
CSV or Parquet. :mod:`~idt_desk.recordings.trajectory` reads plain (S, A, S') trajectory
files for ``idt-desk analyze``. The modules: :mod:`~idt_desk.recordings.writer`,
:mod:`~idt_desk.recordings.reader`, :mod:`~idt_desk.recordings.tail`,
:mod:`~idt_desk.recordings.export`, and the format they share, ``files`` and
:mod:`~idt_desk.recordings.arrows` (the transitions log).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from idt_desk.lazy import lazy_names

#: Where each name lives, imported on first use: a listing of runs (``idt_desk.recordings.runs``)
#: reads statuses and events without pandas, which the reader and the export need.
_WHERE = {
    "export_recording": "idt_desk.recordings.export",
    **dict.fromkeys(("FORMAT_VERSION", "WINDOW_EVENTS", "RecordingError"),
                    "idt_desk.recordings.files"),
    **dict.fromkeys(("Recording", "load_recording", "newest_recording", "recorded_speed",
                     "recording_size", "runs_by_start"), "idt_desk.recordings.reader"),
    "RecordingTail": "idt_desk.recordings.tail",
    "RecordingWriter": "idt_desk.recordings.writer",
}

if TYPE_CHECKING:
    from idt_desk.recordings.export import export_recording
    from idt_desk.recordings.files import FORMAT_VERSION, WINDOW_EVENTS, RecordingError
    from idt_desk.recordings.reader import (
        Recording,
        load_recording,
        newest_recording,
        recorded_speed,
        recording_size,
        runs_by_start,
    )
    from idt_desk.recordings.tail import RecordingTail
    from idt_desk.recordings.writer import RecordingWriter


_lazy, __dir__ = lazy_names(__name__, _WHERE, globals())


def __getattr__(name: str) -> object:
    """A name of :data:`_WHERE`, imported on first use.

    ``Recorder``, the writer's old name, comes with a DeprecationWarning: two public
    classes were called ``Recorder``, this writer and ``idt_desk.Recorder`` (which records a
    loop).
    """
    if name == "Recorder":
        import warnings

        warnings.warn("idt_desk.recordings.Recorder is now idt_desk.recordings.RecordingWriter "
                      "(the file writer); idt_desk.Recorder records a Python loop",
                      DeprecationWarning, stacklevel=2)
        return _lazy("RecordingWriter")
    return _lazy(name)


__all__ = [
    "FORMAT_VERSION",
    "WINDOW_EVENTS",
    "Recording",
    "RecordingError",
    "RecordingTail",
    "RecordingWriter",
    "export_recording",
    "load_recording",
    "newest_recording",
    "recorded_speed",
    "recording_size",
    "runs_by_start",
]
