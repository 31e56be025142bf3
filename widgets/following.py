"""Following runs another program writes: a watched folder's newest run, or one of a fleet.

``idt-desk watch FOLDER`` follows the newest run in a folder and each run that starts there
later (:class:`~idt_desk_widgets.recording.FolderWatch`); ``idt-desk watch`` of a sweep, here
or over ``ssh://``, lists its runs in a table (:class:`~idt_desk_widgets.fleet.FleetView`)
and follows the one double-clicked, with **◀ All runs** back. :class:`Following` is that
part of the window: it sets the watch and the table up and turns their requests into the
window's session commands (stop, select the replay source, start it following).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from idt_desk_widgets.fleet import FleetView
from idt_desk_widgets.recording import FolderWatch

if TYPE_CHECKING:
    from idt_desk_widgets.main_window import MainWindow

    from idt_desk.recordings.runs import RunIndex

__all__ = ["Following"]


class Following:
    """A window's following of runs: the folder watch, the fleet, a run chosen there."""

    def __init__(self, window: MainWindow) -> None:
        self.window = window

    def setup(self, watch_folder: str | Path | None, path: str | None,
              fleet: RunIndex | None, fleet_location: str | None) -> None:
        """The watch on a folder (its newest run followed) and the fleet's table, if asked."""
        w = self.window
        w.watch_folder = Path(watch_folder) if watch_folder is not None else None
        w.watch: FolderWatch | None = None  # the watch on it (None: no folder watched)
        if w.watch_folder is not None:
            w.watch = FolderWatch(w.watch_folder, w)
            w.watch.busy = lambda: w.starting
            w.watch.following = lambda: w.session is not None
            w.watch.new_run.connect(self.new_run)
            w.watch.start(path)
            if not path:
                # Nothing to follow yet (an empty folder): the window waits in plain view.
                w.plots.show_hint(f"Waiting for a run in {w.watch_folder} …<br><small>"
                                  "a recording that starts there is followed at once"
                                  "</small>")
                w.status_line.say(f"watching {w.watch_folder}: no run yet")
        w.fleet: FleetView | None = None  # the table of a sweep's runs (None: none)
        if fleet is not None:
            w.fleet = FleetView(fleet, fleet_location or fleet.files.root, w)
            w.fleet.open_run.connect(self.open_run)
            w.fleet.listed.connect(self.say_fleet)
            w.back_button.clicked.connect(self.show_fleet)
            w.centre_stack.addWidget(w.fleet)
            w.fleet.start()
            self.show_fleet()

    def new_run(self, run: Path) -> bool:
        """A new run started in the watched folder: stop this session and follow ``run``.

        Says so in the status bar and in the new session's event log. Nothing changes when
        another source than the replay is selected (the user chose it); False then, or when
        the new run cannot be followed (the banner says why).
        """
        w = self.window
        text = f"a new run started: {run.name}; following it"
        form = w.source_panel.settings_form
        if w.source_class is None or not w.source_class.replays or form is None:
            w.statusBar().showMessage(
                f"a new run started: {run.name} (not followed: another source is selected)",
                10_000)
            return False
        w.stop_session(wait=True)
        form.set_values({"path": str(run), "follow": True})
        # The note leads the new session's event log (at its first transition).
        started = w.start_session(schedule=[(0, "note", {"text": text})])
        w.statusBar().showMessage(text, 10_000)
        return started

    def open_run(self, location: str) -> bool:
        """Follow the run at ``location`` (a path or an ``ssh://`` URL) chosen in the fleet.

        The session that follows another run is stopped first; a session of another source
        is left alone (the status bar says to stop it first). False when nothing is followed.
        """
        w = self.window
        if w.session is not None and w.session.running and not self.replaying():
            w.statusBar().showMessage("stop the running session first: it is not a "
                                      "followed run", 10_000)
            return False
        w.centre_stack.setCurrentIndex(0)
        w.right_scroll.show()
        w.controls_scroll.show()
        name = location.rstrip("/").rsplit("/", 1)[-1]
        w.back_bar.show()
        w.back_label.setText(f"  following {location}")
        if w.session is not None and w.session.running and \
                (w.source_panel.settings_form.values().get("path") == location):
            return True  # already followed: only the page changes
        w.stop_session(wait=True)
        if w.source_class is None or not w.source_class.replays:
            w.select_source("replay", {})  # the shipped source that follows a run
        form = w.source_panel.settings_form
        if form is None:
            return False
        form.set_values({"path": location, "follow": True})
        text = f"following {name} (chosen in the runs of {w.fleet.location})" \
            if w.fleet is not None else f"following {name}"
        started = w.start_session(schedule=[(0, "note", {"text": text})], background=True)
        w.statusBar().showMessage(text, 10_000)
        return started

    def show_fleet(self) -> None:
        """Back to the watched folder's runs (the followed run goes on being followed)."""
        w = self.window
        if w.fleet is None:
            return
        w.centre_stack.setCurrentWidget(w.fleet)
        # The table wants the width, and nothing in the side columns (a source's settings,
        # the pipeline, the alarm panel) is about it: they come back with a followed run.
        w.right_scroll.hide()
        w.controls_scroll.hide()
        w.fleet.refresh()
        w.fleet.table.setFocus()

    def say_fleet(self, summary: str) -> None:
        """The status line over the table, while no run is followed: what to do there."""
        w = self.window
        if w.fleet is not None and w.centre_stack.currentWidget() is w.fleet and \
                (w.session is None or not w.session.running):
            w.status_line.say(f"watching {w.fleet.location}: double-click a run to "
                              "follow it")

    def replaying(self) -> bool:
        """Whether the window's source replays or follows a recording."""
        w = self.window
        return w.source_class is not None and w.source_class.replays
