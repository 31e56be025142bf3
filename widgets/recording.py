"""The recording panel (folder, Record, exports, figures, notes) and the watch on a folder.

:class:`RecordPanel` owns the "Recording and export" group: where new recordings go
(:meth:`RecordPanel.new_record_path`), what is being recorded and how large it has grown
(:meth:`RecordPanel.show_record_size`), the figure options and the note field; its buttons
emit signals the main window turns into session commands. :class:`FolderWatch` looks at a
folder of runs once a second and emits ``new_run`` when one starts there
(``idt-desk watch FOLDER``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from idt_desk_widgets.forms import compact_combo, set_quietly
from PySide6.QtCore import QObject, QTimer, Signal
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QFileDialog,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from idt_desk.live.session import Session
from idt_desk.recordings import RecordingError, newest_recording, recording_size

__all__ = ["FolderWatch", "RecordPanel", "figure_title"]


def figure_title(session: Session | None) -> str:
    """What a figure says it shows: source, model, preset, baseline, detector ("": none)."""
    if session is None:
        return ""
    s, c, p = session.source, session.config, session.preset
    model = ""
    for key in ("policy", "student_model", "path"):
        v = s.config.get(key)
        if v:
            model = f" · {Path(str(v)).name}"
            break
    det = session.snapshot(limit=1).detector or {}
    symbols = "token counts per turn" if c.metric_path == "turns" else (
        f"preset {p.name} ({p.bins} bins, W {p.window}, stride {p.stride})")
    return (f"{s.label}{model} · {symbols} · baseline {c.baseline_windows} "
            f"{'turns' if c.metric_path == 'turns' else 'windows'} · "
            f"{det.get('describe', c.detector)}")


class RecordPanel(QGroupBox):
    """The "Recording and export" group.

    Parameters
    ----------
    record_dir
        The folder new recordings are created in (editable in the panel).
    parent
        The parent widget.

    Record emits ``record_toggled``; Export CSV / Parquet ``export_requested`` with the
    format; Save plots PNG / SVG ``figure_path_chosen`` with the file chosen; Add note
    ``note_added`` with the text. What an export did is said with ``message``.
    """

    #: Record was switched on or off.
    record_toggled = Signal(bool)
    #: Export CSV or Export Parquet was clicked: "csv" or "parquet".
    export_requested = Signal(str)
    #: A file to save the plots in was chosen (Save plots PNG… / SVG…): its path.
    figure_path_chosen = Signal(str)
    #: Add note was clicked with a note written.
    note_added = Signal(str)
    #: What an export did, in words (for the status bar), or why it failed ("Export failed").
    message = Signal(str)
    #: An export the buttons started has been written (or failed): the buttons' state is
    #: the window's to set again.
    export_done = Signal()

    #: Seconds between two looks at the recording's size.
    RECORD_SIZE_EVERY = 1.0

    def __init__(self, record_dir: Path, parent: QWidget | None = None) -> None:
        super().__init__("Recording and export", parent)
        #: Where a session's own tables go when it has no recording (the folder given).
        self.record_dir = record_dir
        #: The last recording started (what Export writes), None before any.
        self.last_recording: Path | None = None
        #: (session's id, its windows) at the latest export of an unrecorded session.
        self._exported: tuple[int, int] | None = None
        #: The next recording's folder itself (``gui --record DIR``: DIR, as ``run --record
        #: DIR`` records into DIR); None: a new folder in the recordings folder.
        self.next_record_path: Path | None = None
        #: When the recording started, and when its size was last looked at (monotonic).
        self._record_since = (0.0, 0.0)
        lay = QVBoxLayout(self)
        row = QHBoxLayout()
        self.record_dir_edit = QLineEdit(str(record_dir), self)
        self.record_dir_edit.setToolTip("Folder new recordings are created in")
        pick = QPushButton("…", self)
        pick.setMaximumWidth(30)
        pick.clicked.connect(self._pick_record_dir)
        row.addWidget(self.record_dir_edit)
        row.addWidget(pick)
        lay.addLayout(row)
        self.record_button = QPushButton("● Record", self)
        self.record_button.setCheckable(True)
        self.record_button.setToolTip(
            "Record transitions, windows and events while running. Starting a recording "
            "mid-session re-calibrates symbols and baseline, so the recording is a "
            "self-contained experiment that replays exactly.")
        self.record_button.toggled.connect(lambda on: self.record_toggled.emit(on))
        lay.addWidget(self.record_button)
        self.record_label = QLabel("not recording", self)
        self.record_label.setWordWrap(True)
        lay.addWidget(self.record_label)
        row = QHBoxLayout()
        self.export_csv_button = QPushButton("Export CSV", self)
        self.export_parquet_button = QPushButton("Export Parquet", self)
        self.export_csv_button.clicked.connect(lambda: self.export_requested.emit("csv"))
        self.export_parquet_button.clicked.connect(
            lambda: self.export_requested.emit("parquet"))
        row.addWidget(self.export_csv_button)
        row.addWidget(self.export_parquet_button)
        lay.addLayout(row)
        self._buttons = {"csv": self.export_csv_button, "parquet": self.export_parquet_button}
        for fmt, button in self._buttons.items():
            button.setToolTip(f"Write the last recording's transitions, windows and events as "
                              f"{fmt.upper()} into a new folder you choose (without a "
                              "recording: the session's windows and events)")
        #: The export running (format, folder, thread, its result, start, label, words).
        self._export: tuple | None = None
        self._export_timer = QTimer(self)
        self._export_timer.setInterval(250)
        self._export_timer.timeout.connect(self._export_progress)
        row = QHBoxLayout()
        png = QPushButton("Save plots PNG…", self)
        svg = QPushButton("Save plots SVG…", self)
        png.clicked.connect(lambda: self.ask_figure_path("png"))
        svg.clicked.connect(lambda: self.ask_figure_path("svg"))
        row.addWidget(png)
        row.addWidget(svg)
        lay.addLayout(row)
        row = QHBoxLayout()
        self.figure_scale = compact_combo(QComboBox(self), 4)
        for k in (1, 2, 3, 4):
            self.figure_scale.addItem(f"{k}×", k)
        self.figure_scale.setCurrentIndex(1)
        self.figure_scale.setToolTip("PNG pixels per screen pixel (2× is about 200 dpi at "
                                     "the size on screen)")
        self.figure_title = QCheckBox("title line", self)
        self.figure_title.setChecked(True)
        self.figure_title.setToolTip("Write the source, model, preset, baseline and detector "
                                     "above the plots")
        row.addWidget(QLabel("Figure", self))
        row.addWidget(self.figure_scale)
        row.addWidget(self.figure_title)
        lay.addLayout(row)
        row = QHBoxLayout()
        self.note_edit = QLineEdit(self)
        self.note_edit.setPlaceholderText("note for the recording…")
        note = QPushButton("Add note", self)
        note.clicked.connect(self._add_note)
        row.addWidget(self.note_edit)
        row.addWidget(note)
        lay.addLayout(row)

    @property
    def folder(self) -> Path:
        """The folder new recordings go to."""
        return Path(self.record_dir_edit.text()).expanduser()

    def _pick_record_dir(self) -> None:
        path = QFileDialog.getExistingDirectory(self, "Folder for recordings",
                                                self.record_dir_edit.text())
        if path:
            self.record_dir_edit.setText(path)

    def ask_figure_path(self, fmt: str) -> None:
        """Ask where to save the plots as ``fmt`` ("png", "svg"): ``figure_path_chosen``."""
        path, _ = QFileDialog.getSaveFileName(
            self, "Save plots", str(self.folder / f"idt-plots.{fmt}"),
            f"{fmt.upper()} (*.{fmt})")
        if path:
            self.figure_path_chosen.emit(path)

    def _add_note(self) -> None:
        text = self.note_edit.text().strip()
        if text:
            self.note_added.emit(text)

    # -- the recording ----------------------------------------------------------------------

    def new_record_path(self, name: str) -> Path:
        """Where the next recording of source ``name`` goes (a folder not there yet).

        :attr:`next_record_path` once (unless a recording is there already); else
        ``NAME-YYYYmmdd-HHMMSS`` in the recordings folder.
        """
        if self.next_record_path is not None:
            path, self.next_record_path = self.next_record_path, None
            if not (path / "config.json").exists():
                return path
        base = self.folder
        stamp = time.strftime("%Y%m%d-%H%M%S")
        path = base / f"{name}-{stamp}"
        k = 1
        while path.exists():
            k += 1
            path = base / f"{name}-{stamp}-{k}"
        return path

    def recording_started(self, path: Path) -> None:
        """A recording into ``path`` began: it is the last recording now."""
        self.last_recording = path
        self._record_since = (time.monotonic(), 0.0)
        self.record_label.setText(f"recording into {path}")

    def show_armed(self, on: bool) -> None:
        """Record toggled without a running session: armed for the next one, or not."""
        self.record_label.setText("armed: recording starts with the session" if on
                                  else "not recording")

    def show_not_recording(self) -> None:
        """A session started without recording: an earlier "recorded: …" is not its."""
        self.record_label.setText("not recording: Export writes this session's windows and "
                                  "events (no transitions)")

    def kept(self, session: Session) -> bool:
        """Whether what ``session`` shows is kept: recorded whole, or exported as it stands.

        As it stands: no window came after the export.
        """
        return session.on_disk or self._exported == (id(session),
                                                      session.snapshot(limit=1).n_windows)

    def recording_ended(self) -> None:
        """The session ended while recording: Record is released, the size is final."""
        if self.record_button.isChecked():
            set_quietly(self.record_button, False)
            self.show_record_size(recorded=True)

    def show_record_size(self, recorded: bool = False) -> None:
        """The recording's size on disk, and its growth while it records.

        Looked at once a second at most: a recording at max speed grows by tens of MB a
        second, which the user should see.
        """
        path = self.last_recording
        if path is None:
            return
        now = time.monotonic()
        t0, last = self._record_since
        if not recorded and now - last < self.RECORD_SIZE_EVERY:
            return
        self._record_since = (t0, now)
        total, size = recording_size(path)
        if recorded:
            text = f"recorded: {path} ({size})"
        else:
            rate = total / 1e6 / max(now - t0, 1e-3)
            text = f"recording into {path} — {size} so far ({rate:,.1f} MB/s)"
        if self.record_label.text() != text:
            self.record_label.setText(text)

    def set_state(self, loading: bool, stopping: bool, has_session: bool) -> None:
        """Enable Record and the exports as the session allows.

        The build took the armed state (``loading``); a stopping worker closes its recording
        itself. Without a recording, Export writes the session's own windows and events.
        """
        self.record_button.setEnabled(not loading and not stopping)
        can = (self.last_recording is not None or has_session) and \
            not self.record_button.isChecked() and self._export is None
        self.export_csv_button.setEnabled(can)
        self.export_parquet_button.setEnabled(can)

    def export_target(self, session: Session | None, fmt: str) -> Path | None:
        """Where an export as ``fmt`` goes unless told (None: nothing to export).

        Beside the last recording of ``session``, or a new folder in :attr:`record_dir`.
        """
        if not self._recorded(session) and session is not None:
            return self.record_dir / f"session-{time.strftime('%Y%m%d-%H%M%S')}-{fmt}"
        if self.last_recording is None:
            return None
        return self.last_recording.with_name(f"{self.last_recording.name}-{fmt}")

    def _recorded(self, session: Session | None) -> bool:
        return self.last_recording is not None and session is not None and \
            session.recording_path == self.last_recording

    def export(self, session: Session | None, fmt: str, out: str | Path | None = None
               ) -> list[Path]:
        """Export the last recording's tables (next to it by default) as ``fmt``; wait.

        Without a recording of ``session`` (the current one), the session's own windows and
        events (``Session.export_session``) go to a new folder in :attr:`record_dir`: a
        forgotten Record costs the transitions, not the results. The buttons export off the
        GUI thread instead, with progress (:meth:`start_export`).
        """
        job = self._export_job(session, fmt, out)
        if job is None:
            return []
        _target, write, said = job
        try:
            paths = write()
        except (RecordingError, OSError, ValueError) as exc:
            self.message.emit(f"Export failed: {exc}")
            return []
        self.message.emit(said(paths))
        return paths

    def _export_job(self, session: Session | None, fmt: str, out: str | Path | None
                    ) -> tuple[Path, Callable[[], list[Path]], Callable[[list[Path]], str]] | None:
        """(the folder, what writes it, what to say once written), or None: nothing."""
        target = Path(out) if out else self.export_target(session, fmt)
        if target is None:
            return None
        if not self._recorded(session) and session is not None:
            def done(_paths: list[Path]) -> str:
                self._exported = (id(session), session.snapshot(limit=1).n_windows)
                return ("exported the session's windows and events (no recording: no "
                        f"transitions) into {target}")

            return target, lambda: session.export_session(target, fmt), done
        recording = self.last_recording

        def write() -> list[Path]:
            # pandas and pyarrow are imported by the first export, not by the window's start.
            from idt_desk.recordings import export_recording, load_recording

            return export_recording(load_recording(recording), target, fmt)

        return target, write, lambda paths: f"exported {len(paths)} files into {target}"

    def ask_export_path(self, session: Session | None, fmt: str) -> Path | None:
        """Ask where the export goes (a new folder; the default proposed), None: cancelled."""
        target = self.export_target(session, fmt)
        if target is None:
            return None
        path, _ = QFileDialog.getSaveFileName(
            self, f"Export {fmt.upper()} into a new folder", str(target), "Folder (*)")
        return Path(path) if path else None

    @property
    def exporting(self) -> bool:
        """Whether an export the buttons started is still being written."""
        return self._export is not None

    def start_export(self, session: Session | None, fmt: str, out: Path) -> bool:
        """Export as :meth:`export` does, on a thread of its own (False: nothing to do).

        The button of ``fmt`` says how much is written so far while it runs (a recording
        of an hour exports 100 MB of CSV in about 15 s); the status bar what was written,
        how large, in how long, or why it failed.
        """
        job = self._export_job(session, fmt, out)
        if job is None or self._export is not None:
            return False
        target, write, said = job
        result: dict[str, Any] = {}

        def run() -> None:
            try:
                result["paths"] = write()
            except (RecordingError, OSError, ValueError) as exc:
                result["error"] = exc

        worker = threading.Thread(target=run, name=f"idt-export-{fmt}", daemon=True)
        self._export = (fmt, target, worker, result, time.monotonic(),
                        self._buttons[fmt].text(), said)
        for button in self._buttons.values():
            button.setEnabled(False)
        self._buttons[fmt].setText(f"Exporting {fmt.upper()}…")
        self.message.emit(f"exporting {fmt.upper()} into {target}…")
        worker.start()
        self._export_timer.start()
        return True

    def _export_progress(self) -> None:
        """The running export: its size so far on its button; once written, what it did."""
        fmt, target, worker, result, since, label, said = self._export
        took = time.monotonic() - since
        if worker.is_alive():
            self._buttons[fmt].setText(
                f"Exporting {fmt.upper()}… {recording_size(target)[1]}, {took:.0f} s")
            return
        self._export_timer.stop()
        self._export = None
        self._buttons[fmt].setText(label)
        self.export_done.emit()
        if "error" in result:
            self.message.emit(f"Export failed: {result['error']}")
            return
        self.message.emit(f"{said(result['paths'])} ({recording_size(target)[1]} in "
                          f"{took:.1f} s)")


class FolderWatch(QObject):
    """Looks at a folder of runs once a second; ``new_run`` says a run started there.

    Parameters
    ----------
    folder
        The watched folder (or a run's own folder, before its writer starts).
    parent
        The owner (the main window).

    :meth:`start` begins watching; a run there then is not new. The window sets
    :attr:`busy` and :attr:`following` so that a run is not taken while a session is
    being built, nor the watched run itself while a session follows it.
    """

    #: A run that started in the folder since the watch began (its path).
    new_run = Signal(object)

    #: How often the folder is looked at (ms).
    WATCH_MS = 1000

    def __init__(self, folder: Path, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.folder = folder
        #: Whether a session is being built (the folder is looked at again later).
        self.busy: Callable[[], bool] = lambda: False
        #: Whether a session exists (the watched path itself, once a run, is what it follows).
        self.following: Callable[[], bool] = lambda: False
        #: Runs in the watched folder that are not new: there when the watch began, or seen.
        self.runs_seen: set[Path] = set()
        self.timer = QTimer(self)
        self.timer.setInterval(self.WATCH_MS)
        self.timer.timeout.connect(self.look)

    def start(self, followed: str | None) -> None:
        """Begin watching: the runs there now are not new.

        Except the one that started last when it is not ``followed``: it started after the
        run to follow was picked.
        """
        try:
            self.runs_seen = {d for d in self.folder.iterdir()
                              if (d / "config.json").is_file()}
        except OSError:
            self.runs_seen = set()
        newest = newest_recording(self.folder)
        if newest is not None and (not followed or Path(followed) != newest):
            self.runs_seen.discard(newest)
        self.timer.start()

    def stop(self) -> None:
        """Stop watching."""
        self.timer.stop()

    def look(self) -> None:
        """The timer's slot: emit ``new_run`` for the run that started last, if it is new.

        Cheap enough for once a second: a listing of the folder and a stat or two a run
        (``newest_recording``; a run's start time is read once). Runs are ordered by when
        they started, so the previous run finishing later (its config.json rewritten) never
        takes the window back.
        """
        folder = self.folder
        if self.busy():
            return
        run = newest_recording(folder)
        # The watched path itself may become the run (watch RUN before its writer starts).
        if run is None or (run == folder and self.following()) or run in self.runs_seen:
            return
        try:  # its writer has logged recording_start: following it starts at once
            with open(run / "events.jsonl", "rb") as f:
                if b'"recording_start"' not in f.read(1 << 16).partition(b"\n")[0]:
                    return
        except OSError:
            return
        self.runs_seen.add(run)
        self.new_run.emit(run)
