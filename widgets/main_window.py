"""The IDT Desk main window: its panels wired to one session.

The window is built from panels that own their widgets and say what the user asked for with
Qt signals: :mod:`.source_panel` (source, settings, Start / Pause / Stop / Reset, speed),
:mod:`.pipeline_panel` (symbolisation, baseline, detector), :mod:`.switches`
(perturbations, modulations, automatic modulation), :mod:`.recording` (Record, exports,
figures, notes; the watch on a folder of runs) and :mod:`.status` (the status line), next
to :mod:`.plots`, :mod:`.events`, :mod:`.alarms`, :mod:`.agency` and :mod:`.views`.
:class:`~idt_desk_widgets.frame.WindowFrame` lays them out in three columns
(:mod:`.columns`) and shows a source's declarations in them; :mod:`.memory` frees a
stopped session's memory.

What :class:`MainWindow` adds is the session: each panel's signals become session
commands, :meth:`MainWindow.refresh` (30 times a second) shows the session's snapshot in
every panel, and the session's lifecycle is here. One file: the lifecycle (building a
session in the background, starting, stopping, resetting, shutting down) is one state
machine over the session, its builder and the timers, which every command and the refresh
read.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

from idt_desk_widgets.following import Following
from idt_desk_widgets.forms import set_quietly
from idt_desk_widgets.frame import WindowFrame
from idt_desk_widgets.keys import install_shortcuts, may_discard, may_recalibrate
from idt_desk_widgets.loading import SessionBuilder
from idt_desk_widgets.memory import Collector
from idt_desk_widgets.recording import figure_title
from idt_desk_widgets.source_panel import idle_hint
from idt_desk_widgets.status import FRAME_MS
from PySide6.QtCore import QEventLoop, QTimer
from PySide6.QtWidgets import QApplication, QFileDialog

from idt_desk.live.alarms import overlap_text
from idt_desk.live.process import build_session
from idt_desk.live.ranges import recheck_text
from idt_desk.live.session import Session, Snapshot
from idt_desk.live.source import Source
from idt_desk.recordings import RecordingError, recorded_speed
from idt_desk.recordings.profile import FIXED, Profile, ProfileError
from idt_desk.recordings.runs import RunIndex
from idt_desk.words import eta_text

__all__ = ["MainWindow"]

#: GUI refresh interval (ms): 30 Hz (longer at max speed: ``status.GUI_SHARE``).
REFRESH_MS = FRAME_MS


class MainWindow(WindowFrame):
    """Source picker and settings, live plots, alarms, perturbation and modulation panels.

    Parameters
    ----------
    source
        Source selected at start.
    settings
        Initial values of the source's declared settings.
    speed
        Initial speed: any positive multiple of real time (one that is not a preset is
        added to the speed choices), or None for as fast as possible.
    record_dir
        Folder new recordings are created in.
    history
        Windows a refresh copies from the session (more when the plots are further behind);
        the plots keep the whole session (``MetricPlots.history``), memory flat.
    watch_folder
        A folder of runs being watched (``idt-desk watch FOLDER``): once a second the window
        looks for a run that has started there since, and follows it (the replay source,
        following) in place of the one it follows.
    fleet
        The runs of a watched folder (``idt-desk watch`` on a folder of several runs, or on
        ``ssh://``), as a :class:`~idt_desk.recordings.runs.RunIndex`: the window opens on
        their table (:class:`~idt_desk_widgets.fleet.FleetView`, kept live); a run
        double-clicked there is followed, and **◀ All runs** (Alt+Left) comes back.
    fleet_location
        The watched folder as the user gave it (the table's title).
    own_process
        Run sessions in a process of their own (True), in a thread of this one (False), or as
        the source declares (None: ``Source.own_process``, the RL source's).
    """

    def __init__(
        self,
        source: str = "pendulum",
        settings: dict[str, Any] | None = None,
        speed: float | None = 1.0,
        record_dir: str | Path | None = None,
        history: int = 2000,
        watch_folder: str | Path | None = None,
        fleet: RunIndex | None = None,
        fleet_location: str = "",
        own_process: bool | None = None,
    ) -> None:
        super().__init__(Path(record_dir) if record_dir
                         else Path.home() / "idt-desk-recordings")
        self._quit_confirmed = False  # Ctrl+Q was answered: closing asks nothing more
        self.session: Session | None = None
        #: The baseline profile every Start takes (None: each session fits its own).
        self.profile: Profile | None = None
        self.history = history
        self.own_process = own_process
        #: The selected source's class (None: it failed to load).
        self._source_cls: type[Source] | None = None
        self._wire()

        self.timer = QTimer(self)
        self.timer.setInterval(REFRESH_MS)
        self.timer.timeout.connect(self.refresh)
        self._starting = False
        #: A session whose worker did not stop when the window shut down (not waited again).
        self._given_up: Session | None = None
        #: When a worker this window asked to stop is reported as stuck (None: not asked).
        self._stop_deadline: float | None = None
        self._stopping_seen = False  # the controls were last set for a stopping worker
        #: The session being built in the background (Start), polled by the load timer.
        self._builder: SessionBuilder | None = None
        self._pending_schedule: Any = None
        self._load_timer = QTimer(self)
        self._load_timer.setInterval(100)
        self._load_timer.timeout.connect(self._poll_loading)
        #: Frees a stopped session's memory (``idt_desk_widgets.memory``).
        self.collector = Collector(self)

        #: Keyboard shortcuts (``idt_desk_widgets.keys.SHORTCUTS``) by method name.
        self.shortcuts = install_shortcuts(self)
        self.source_panel.set_speed(speed)
        self.select_source(source, settings or {})
        #: Following runs another program writes (``idt_desk_widgets.following``): it sets
        #: ``watch_folder`` and ``watch`` (a folder's newest run), ``fleet`` (a sweep's table).
        self.following = Following(self)
        self.following.setup(watch_folder, (settings or {}).get("path"), fleet, fleet_location)

    def _wire(self) -> None:
        """Connect the panels' signals to the window's slots (session commands)."""
        source, pipeline, switches, record = (self.source_panel, self.pipeline_panel,
                                              self.switches, self.record_panel)
        source.source_chosen.connect(lambda name: self.select_source(name, {}))
        source.recording_chosen.connect(self.use_recorded_speed)
        source.start_requested.connect(lambda: self.start_session(background=True, ask=True))
        source.pause_toggled.connect(self._pause_toggled)
        source.stop_requested.connect(lambda: self.stop_session())
        source.reset_requested.connect(self.reset_session)
        source.speed_chosen.connect(self._speed_changed)
        pipeline.apply_requested.connect(self._apply_symbols)
        pipeline.calibrate_requested.connect(self._calibrate_baseline)
        pipeline.profile_load_requested.connect(self._load_profile_dialog)
        pipeline.profile_save_requested.connect(self._save_profile_dialog)
        pipeline.profile_clear_requested.connect(lambda: self.load_profile(None))
        switches.perturb_toggled.connect(self._perturb_toggled)
        switches.modulate_toggled.connect(self._modulate_toggled)
        switches.auto_toggled.connect(self._auto_toggled)
        record.record_toggled.connect(self._record_toggled)
        record.export_requested.connect(self._export_clicked)
        record.export_done.connect(self._update_buttons)
        record.figure_path_chosen.connect(self.save_figure)
        record.note_added.connect(self._add_note)
        self.alarms.recalibrate.connect(self._recalibrate)

    # -- source selection -------------------------------------------------------------------

    @property
    def source_class(self) -> type[Source] | None:
        """The selected source's class (None: none loaded)."""
        return self._source_cls

    @property
    def starting(self) -> bool:
        """A session is being built (Start pressed, its source still loading)."""
        return self._starting

    def select_source(self, name: str, settings: dict[str, Any]) -> None:
        """Select source ``name`` with ``settings``: every panel shows what it declares."""
        if not self.source_panel.has(name):
            self.show_error(f"no source named {name!r}")
            return
        cls = self._source_cls = self.source_panel.select(name, settings)
        if cls is None:
            self.plots.show_hint("This source failed to load: choose another one.")
            return
        self.show_source(cls)
        shown = None if self.session is None else self.session.snapshot(limit=1)
        if shown is not None and shown.source != cls.name and not self.session.running \
                and not self._starting:
            # Another source chosen: the last session's curves, lights and symbols are not
            # what the panels now describe. They go; the session stays for Export until Start.
            self.clear_panels()
            self.agency.reset()
            self.statusBar().showMessage(
                f"the last session ({shown.source}) is kept for Export until Start", 8000)
            shown = None
        if shown is None or not shown.n_windows:
            self.plots.show_hint(idle_hint(cls, profile=self.profile))
        self._update_buttons()
        self.controls_scroll.fit_width()

    def use_recorded_speed(self, path: str | Path) -> None:
        """Select the speed the recording at ``path`` was made at (a replay's default)."""
        try:
            speed = recorded_speed(path)
        except RecordingError:
            return  # not a recording: Start says why
        self.source_panel.set_speed(speed)
        self.statusBar().showMessage(
            f"speed {self.source_panel.speed_text(speed)}: the speed it was recorded at", 6000)

    # -- session control --------------------------------------------------------------------

    def start_session(self, schedule: Any = None, background: bool = False,
                      ask: bool = False) -> bool:
        """Build a session from the panels and start it; False (with a message) on bad input.

        ``schedule`` holds (transition, command, arguments) applied exactly then, as
        :meth:`idt_desk.live.session.Session.schedule` does, or is a function of the built
        source giving them (``idt-desk gui --perturb`` for a source that is slow to load:
        times in seconds become transitions at the rate it resolves). ``background``: build
        the source on a thread of its own (:class:`~idt_desk_widgets.loading.SessionBuilder`)
        while the window stays live and says how long it has been loading; **Cancel** (the Stop
        button) gives the build up. Start, Ctrl+Return and ``gui --start`` build so; True
        then means the build began. ``ask`` (Start and Ctrl+Return): a stopped session that
        is not recorded is replaced only once the user says so (Cancel, the default, keeps
        it).
        """
        if self.session is not None and self.session.stopping:
            self.statusBar().showMessage("the last session is still stopping: Start once it "
                                         "has", 5000)
            return False
        if self.session is not None and self.session.running:
            return True
        if self._starting:
            return False  # a Start (or a timer) while the source is still being built
        if ask and not self._may_discard("start"):
            return False
        self.hide_error()
        cls, form = self._source_cls, self.source_panel.settings_form
        if cls is None or form is None:
            self.show_error("choose a source that loads")
            return False
        try:
            settings = form.values()
        except (ValueError, KeyError) as exc:
            self.show_error(f"Cannot start {cls.label}: {exc}")
            return False
        # A replay re-runs the recording's own pipeline.
        config = {"speed": self.source_panel.speed_combo.currentData(),
                  **({} if cls.replays else self.pipeline_panel.settings())}
        if self.profile is not None:  # a replay too: its rows judged by the profile
            # The detector, budget and baseline are the profile's (its thresholds are fitted
            # to them): the panel's boxes for them are not given.
            config = {k: v for k, v in config.items() if k not in FIXED}
            config["profile"] = self.profile.setting()
        record = self.record_panel.new_record_path(cls.name) \
            if self.record_panel.record_button.isChecked() else None
        self._starting = True
        if self.session is not None:
            # The old session is being replaced (asked above if it was not on disk): its
            # curves and words go now, not once the new source has loaded and calibrated.
            self.clear_panels()
            self.agency.reset()
        self.plots.show_hint(f"Loading {cls.label}…")
        self.status_line.say(f"loading {cls.label}…")
        if background:
            self._builder = SessionBuilder(cls, settings, config, record, self.own_process)
            self._pending_schedule = schedule
            self._update_buttons()
            self._load_timer.start()
            return True
        try:
            # Paint, but take no clicks: a Start or Stop pressed while the source is built
            # would run inside this one (the guard above refuses what a timer sends).
            QApplication.processEvents(QEventLoop.ProcessEventsFlag.ExcludeUserInputEvents)
            try:
                session = build_session(cls, settings, config, record, self.own_process)
            except (ValueError, KeyError, OSError, RecordingError) as exc:
                self.show_error(f"Cannot start {cls.label}: {exc}")
                self._idle_after_start()
                return False
            return self._start_built(session, schedule, record)
        finally:
            self._starting = False

    def _poll_loading(self) -> None:
        """The load timer's slot: say how long the build takes; start what it built."""
        builder = self._builder
        if builder is None:
            self._load_timer.stop()
            return
        cls = self._source_cls
        label = cls.label if cls is not None else "the source"
        if not builder.done:
            took = time.monotonic() - builder.started
            self.plots.show_hint(f"Loading {label}… {took:.0f} s<br><small>The window stays "
                                 f"live; <b>Cancel</b> gives the loading up.</small>")
            return
        self._load_timer.stop()
        self._builder = None
        self._starting = False
        if builder.session is None:
            exc = builder.error
            what = str(exc) if isinstance(exc, ValueError | KeyError | OSError |
                                          RecordingError) else f"{type(exc).__name__}: {exc}"
            self.show_error(f"Cannot start {label}: {what}")
            self._idle_after_start()
            return
        self._start_built(builder.session, self._pending_schedule, builder.record)

    def cancel_loading(self) -> None:
        """Give up the source being built in the background (its thread closes it)."""
        builder, self._builder = self._builder, None
        if builder is None:
            return
        builder.cancel()
        self._load_timer.stop()
        self._starting = False
        self.statusBar().showMessage("loading cancelled", 8000)
        self._idle_after_start()

    def _idle_after_start(self) -> None:
        """A start that did not happen: the plots and status say what they said before."""
        if self.session is None or not self.session.snapshot(limit=1).n_windows:
            self.plots.show_hint(idle_hint(self._source_cls, profile=self.profile))
        self.status_line.say("idle — press Start")
        self._update_buttons()

    def _start_built(self, session: Session, schedule: list[tuple[int, str, dict]] | None,
                     record: Path | None) -> bool:
        """Start a built session: the panels show what its source resolved."""
        cls, source = self._source_cls, session.source
        label = cls.label if cls is not None else source.label
        try:
            if callable(schedule):
                schedule = schedule(source)
            for at, kind, args in schedule or []:
                session.schedule(at, kind, **args)
        except (ValueError, KeyError) as exc:  # InputError is a ValueError
            session.close()
            self.show_error(f"Cannot start {label}: {exc}")
            self._idle_after_start()
            return False
        # Show what the source resolved (the RL source's default policy, say).
        if self.source_panel.settings_form is not None:
            self.source_panel.settings_form.set_values(source.config)
        self._drop_session()
        self.session = session
        if record is not None:
            self.record_panel.recording_started(record)
            self._update_buttons()
        else:  # an earlier session's "recorded: …" would read as this one's
            self.record_panel.show_not_recording()
        if source.notice:
            self.show_error(f"Note: {source.notice}")
        self.show_built(cls, session)
        self.error_shown = None
        self.switches.release_all()
        self.source_panel.pause_button.setChecked(False)
        self.status_line.reset_fps()
        self.plots.show_hint(f"Starting {label}…")
        self.session.start()
        if self.switches.auto_check.isChecked():
            self._auto_toggled(True)
        self.timer.start()
        self._update_buttons()
        return True

    #: How long Stop waits for the worker before the window goes on without it (seconds).
    STOP_GRACE = 0.2
    #: After this long (seconds) a stopping worker is reported as stuck.
    STOP_TIMEOUT = 10.0

    def stop_session(self, wait: bool = False) -> None:
        """Stop the running session (or the loading); its plots stay for inspection.

        The worker ends at its next chunk boundary (milliseconds; a source inside a long
        step, a model's reply, takes that step's time). The window stays live meanwhile and
        says so; :meth:`refresh` settles the controls once the worker has ended. ``wait``:
        block until it has (Reset, following a new run).
        """
        if self._builder is not None:
            self.cancel_loading()
            return
        s = self.session
        if s is None:
            return
        if s.stopping and not wait:
            return  # asked already: refresh watches it
        if not wait and s.running:
            s.request_stop()
            if not s.wait(self.STOP_GRACE):
                self._stop_deadline = time.monotonic() + self.STOP_TIMEOUT
                self._update_buttons()
                self.refresh()
                return
        try:
            s.stop()
        except RuntimeError as exc:
            self.show_error(str(exc))
        self.refresh()
        self._session_ended()

    def _session_ended(self) -> None:
        """The worker is gone (stopped, finished or failed): settle the controls."""
        self.timer.stop()
        self._stop_deadline, self._stopping_seen = None, False
        self.status_line.stop_fps()
        if self.session is not None and not self.session.snapshot(limit=1).n_windows:
            self.plots.show_hint(idle_hint(self._source_cls, stopped=True, profile=self.profile))
        self.record_panel.recording_ended()
        self._update_buttons()
        self.collector.soon()

    def _drop_session(self) -> None:
        """Forget the (stopped) session; what it held is freed by the next collection."""
        if self.session is not None:
            self.session.close()  # a session's process ends (a thread's has already)
            self.session = None
            self.collector.soon()

    def reset_session(self) -> None:
        """Stop, forget the session and clear the plots (asked first when not recorded)."""
        if not self._may_discard("reset"):
            return
        self.stop_session(wait=True)
        self._drop_session()
        self.clear_panels()
        self.plots.show_hint(idle_hint(self._source_cls, profile=self.profile))
        self.agency.reset()
        self.hide_error()
        self.status_line.say("idle — press Start")
        self.status_line.rates.setText("")
        self._update_buttons()

    def shutdown(self) -> None:
        """Stop timers and the worker thread (on close and on application quit)."""
        self.timer.stop()
        if self.watch is not None:
            self.watch.stop()
        if getattr(self, "fleet", None) is not None:
            self.fleet.shutdown()
        self.collector.stop()
        self.cancel_loading()
        session = self.session
        # Once per session: the window's close, the application's aboutToQuit and the end
        # of run_gui each shut down, and a worker that cannot stop was waited for three
        # times over (a dialogue's SIGTERM mid-turn took 32 s).
        if session is not None and session.running and session is not self._given_up:
            try:
                session.stop()
            except RuntimeError as exc:
                # A worker inside a long numba compile cannot be interrupted; it is a daemon
                # thread and ends with the process.
                self._given_up = session
                print(f"idt-desk: {exc}", file=sys.stderr)
        if session is not None and not session.running:
            session.close()  # a session's process ends with its window
        if self.view is not None and hasattr(self.view, "close_view"):
            self.view.close_view()  # a live view's render thread (the cheetah's)

    def may_quit(self) -> bool:
        """Whether the window may close: asked when its session is not recorded."""
        return self._may_discard("quit")

    def _may_discard(self, action: str) -> bool:
        """Whether the session's plots and log may go (``keys.may_discard``'s ``action``).

        Asked unless a recording, or an export of the session as it stands, keeps them.
        """
        s = self.session
        return s is None or may_discard(self, s.snapshot(limit=1).n_windows,
                                        len(self.events.events),
                                        recorded=self.record_panel.kept(s), action=action,
                                        partly=s.recording_path is not None)

    def close_without_asking(self) -> None:
        """Close the window as a confirmed quit does (a script or a bench that is done)."""
        self._quit_confirmed = True
        self.close()

    def quit_asking(self) -> None:
        """Ctrl+Q: close the window, once the user says so if the session is not recorded."""
        if self.may_quit():
            self.close_without_asking()

    def closeEvent(self, event: Any) -> None:
        """Join the worker before the window goes (the close button asks as Ctrl+Q does)."""
        if event.spontaneous() and not self._quit_confirmed and \
                not self.may_quit():
            event.ignore()
            return
        self.shutdown()
        super().closeEvent(event)

    def _update_buttons(self) -> None:
        """Every panel enables what the session's state allows."""
        loading = self._builder is not None
        # While a source loads, Stop cancels the loading; nothing else changes the session.
        running = loading or (self.session is not None and self.session.running)
        # A stopping worker scores its last windows: nothing but waiting is left to do.
        stopping = self.session is not None and self.session.stopping
        self.source_panel.set_state(loading, running, stopping, self._source_cls is not None)
        live = running and not loading and not stopping
        self.switches.set_live(live)
        self.pipeline_panel.set_live(live)
        self.record_panel.set_state(loading, stopping, self.session is not None)

    # -- keyboard shortcuts (idt_desk_widgets.keys) ------------------------------------------

    def toggle_running(self) -> None:
        """Start the session (building it in the background), or stop it or its loading."""
        if self._builder is not None or (self.session is not None and self.session.running):
            self.stop_session()
        elif self.source_panel.start_button.isEnabled():
            self.start_session(background=True, ask=True)

    def toggle_frozen(self) -> None:
        """Freeze the plots' view, or follow the data again."""
        self.navigator.freeze_button.click()

    def toggle_recording(self) -> None:
        """Record, or stop recording (armed before Start)."""
        self.record_panel.record_button.click()

    def save_plots(self) -> None:
        """Save the plots as a PNG (asks where)."""
        self.record_panel.ask_figure_path("png")

    # -- the panels' requests ---------------------------------------------------------------

    def _running(self) -> bool:
        """Whether a session runs (the panels' commands act on it only then)."""
        return self.session is not None and self.session.running

    def _pause_toggled(self, on: bool) -> None:
        if self.session is None:
            return
        if on:
            self.session.pause()
        else:
            self.session.resume()
        self.source_panel.show_paused(on)

    def _speed_changed(self, speed: float | None) -> None:
        if self._running():
            self.session.set_speed(speed)

    def _perturb_toggled(self, name: str, on: bool) -> None:
        button = self.switches.perturb_buttons[name]
        if not self._running():
            return
        try:
            params = self.switches.perturb_forms[name].values()
            impulse = on and self.is_impulse(name, params)
            self.session.perturb(name, params, on=on)
        except (ValueError, KeyError) as exc:
            self.show_error(f"{name}: {exc}")
            if on:
                set_quietly(button, False)
            return
        if impulse:
            # A one-shot impulse (a kick with period 0) is an event, not a state: the button
            # does not stay pressed.
            set_quietly(button, False)

    def is_impulse(self, name: str, params: dict[str, Any]) -> bool:
        """Whether switching perturbation ``name`` on with ``params`` is a one-shot impulse."""
        return self._source_cls is not None and \
            self._source_cls.perturbation(name).is_impulse(params)

    def _impulse_now(self, name: str, params: Any) -> bool:
        """Whether an active switch is a one-shot impulse (an undeclared one, a replay's: no)."""
        try:
            return self.is_impulse(name, params or {})
        except (KeyError, ValueError, TypeError):
            return False

    def _recalibrate(self) -> None:
        """Re-symbolise from the data that follows with the current pipeline (the notice)."""
        if not self._running():
            return
        warning = self.session.snapshot(1).out_of_range_warning or {}
        if (warning.get("recheck") or {}).get("verdict") == "shift" and not may_recalibrate(
                self, recheck_text(warning["recheck"])):
            return
        try:
            self.session.reconfigure()
        except ValueError as exc:
            self.show_error(str(exc))
        else:
            self.statusBar().showMessage("re-calibrating the symbols from the data that "
                                         "follows, then a new baseline", 8000)

    def _modulate_toggled(self, name: str, on: bool) -> None:
        if not self._running():
            return
        try:
            self.session.modulate(name, self.switches.modulate_forms[name].values(), on=on)
        except (ValueError, KeyError) as exc:
            self.show_error(f"{name}: {exc}")

    def _auto_toggled(self, on: bool) -> None:
        if not self._running() or not self.switches.modulate_buttons:
            return
        self.session.set_auto(self.switches.auto_settings() if on else None)

    def _apply_symbols(self, settings: dict[str, Any]) -> None:
        if not self._running():
            return
        try:
            self.session.reconfigure(**settings)
        except ValueError as exc:
            self.show_error(str(exc))

    def _calibrate_baseline(self, windows: int) -> None:
        """A new baseline of ``windows``, or of the length the calibration asked for if longer.

        A baseline called too short must not be followed by another as short.
        """
        if self._running():
            det = self.session.snapshot(limit=1).detector or {}
            spin = self.pipeline_panel.baseline_spin
            need = min(int(det.get("needed_windows") or 0), spin.maximum())
            if det.get("too_short") and need > windows:
                windows = need
                spin.setValue(windows)
            self.session.calibrate_baseline(windows)

    def _load_profile_dialog(self) -> None:
        path, _ = QFileDialog.getOpenFileName(
            self, "Load a baseline profile", str(self.record_panel.folder),
            "Baseline profiles (*.json);;All files (*)")
        if path:
            self.load_profile(path)

    def load_profile(self, path: str | Path | None) -> bool:
        """Take the baseline profile at ``path`` for every later Start (None: none).

        A file that cannot be used is said in the banner, in one line; the profile in use
        stays. A session running goes on as it started: the profile applies from the next
        Start.
        """
        if path is None:
            self.profile = None
        else:
            try:
                self.profile = Profile.read(path)
            except ProfileError as exc:
                self.show_error(str(exc))
                return False
            self.hide_error()
        self.pipeline_panel.show_profile(self.profile)
        if self.plots.hint.isVisible() and not self._running():  # what the next Start does
            self.plots.show_hint(idle_hint(self._source_cls, profile=self.profile))
        if self._running():
            self.statusBar().showMessage("the baseline profile applies from the next Start",
                                         8000)
        return True

    def _save_profile_dialog(self) -> None:
        if not self._running():
            self.show_error("Save baseline: start a session and let its baseline complete")
            return
        path, _ = QFileDialog.getSaveFileName(
            self, "Save the baseline as a profile",
            str(self.record_panel.folder / f"{self.session.source.name}.profile.json"),
            "Baseline profiles (*.json)")
        if path:
            self.save_profile(path)

    def save_profile(self, path: str | Path) -> bool:
        """Save what the running session fitted as a baseline profile at ``path``."""
        if not self._running():
            self.show_error("Save baseline: start a session and let its baseline complete")
            return False
        try:
            saved = self.session.save_baseline(path)
        except (ProfileError, OSError) as exc:
            self.show_error(f"Save baseline: {exc}")
            return False
        self.statusBar().showMessage(f"saved {saved.describe()}", 10000)
        return True

    def _add_note(self, text: str) -> None:
        if self._running():
            self.session.note(text)
            self.record_panel.note_edit.clear()

    def follow_new_run(self, run: Path) -> bool:
        """A new run started in the watched folder: follow it (:class:`.following.Following`)."""
        return self.following.new_run(run)

    def open_run(self, location: str) -> bool:
        """Follow the run at ``location`` chosen in the fleet (:class:`.following.Following`)."""
        return self.following.open_run(location)

    def show_fleet(self) -> None:
        """Back to the watched folder's runs (:class:`.following.Following`)."""
        self.following.show_fleet()

    # -- recording and export ---------------------------------------------------------------

    def _record_toggled(self, on: bool) -> None:
        if not self._running():
            self.record_panel.show_armed(on)
            return
        if on:
            path = self.record_panel.new_record_path(
                self._source_cls.name if self._source_cls else "session")
            snap = self.session.snapshot(limit=1)
            self.session.start_recording(path)
            self.record_panel.recording_started(path)
            if snap.n_transitions and snap.tokenizer is None:
                # Mid-session: the recording calibrates its own symbols and baseline (so it
                # replays on its own), and the alarm waits for them: said at the click.
                need = snap.calibration[1] + snap.baseline_progress[1] * int(
                    snap.preset.get("stride") or 1)
                left = eta_text(need, snap.loop_rate)
                self.statusBar().showMessage(
                    "Recording from here: the recording calibrates its own symbols and "
                    "baseline from its first windows, so it replays on its own; the alarm "
                    f"waits for them{f' ({left} at the loop’s rate)' if left else ''}.",
                    15_000)
        else:
            self.session.stop_recording()
            self.record_panel.show_record_size(recorded=True)
        self._update_buttons()

    def export_last_recording(self, fmt: str, out: str | Path | None = None) -> list[Path]:
        """Export the last recording, or the session's windows and events (as ``fmt``).

        See :meth:`~idt_desk_widgets.recording.RecordPanel.export`.
        """
        return self.record_panel.export(self.session, fmt, out)

    def _export_clicked(self, fmt: str) -> None:
        """Export CSV / Parquet: ask where, then write off the GUI thread with progress."""
        out = self.record_panel.ask_export_path(self.session, fmt)
        if out is not None:
            self.record_panel.start_export(self.session, fmt, out)

    def save_figure(self, path: str | Path) -> None:
        """Save the plots with the chosen scale and, if ticked, the title line."""
        panel = self.record_panel
        title = figure_title(self.session) if panel.figure_title.isChecked() else None
        self.plots.export(str(path), scale=float(panel.figure_scale.currentData()),
                          title=title or None)

    # -- the timer --------------------------------------------------------------------------

    def refresh(self) -> None:
        """Pull a snapshot from the session and redraw (the GUI timer's slot)."""
        if self.session is None:
            return
        # Asked before the snapshot: a session that ends while this frame is drawn gets one
        # more, which shows its end (its last transitions, "stopped", the writer's end).
        running = self.session.running
        snap: Snapshot = self.session.snapshot(limit=self.history)
        behind = snap.n_windows - self.plots.history.total
        if behind > len(snap.windows["t"]):
            # More new windows than a refresh copies (a stalled frame at max speed): copy all
            # of them, or the whole history would have a hole.
            snap = self.session.snapshot(limit=behind + self.history)
        self.plots.update_snapshot(snap)
        new_events = self.session.events_since(len(self.events.events))
        self.events.add_events(new_events)
        for ev in new_events:
            if ev.get("kind") == "baseline_overlap":
                name = str(ev.get("name"))
                self.show_error(f"Note: {overlap_text(self.events.names.get(name, name), ev)}. "
                                "Perturb once the baseline is set, or press Calibrate "
                                "baseline now once the perturbation is over.")
        self.alarms.update_snapshot(snap, stopping=self.session.stopping)
        self.agency.update_snapshot(snap)
        if not self.returns.isHidden():
            self.returns.update_info(snap.info)
        # Buttons follow the loop's state (scheduled perturbations, auto modulation). A one-shot
        # impulse is on for the one step that applies it: a snapshot of that step must not
        # press its button (one did, in CI: the next frame released it too late for a check).
        active = {n: p for n, p in snap.active_perturbations.items()
                  if not self._impulse_now(n, p)}
        self.switches.follow(active, snap.active_modulations)
        if self.view is not None and snap.info:
            self.view.update_info(snap.info)
        self.status_line.count_frame(self.timer, max_speed=not snap.speed)
        self.status_line.show_snapshot(snap, running=self.session.running,
                                       stopping=self.session.stopping)
        if snap.recording is not None:
            self.record_panel.show_record_size()
        self.show_source_problem(snap)
        if not running:
            self._session_ended()
            return
        if self.session.stopping != self._stopping_seen:  # asked, or at a replay's end
            self._stopping_seen = self.session.stopping
            self._update_buttons()
        if self._stop_deadline is not None and time.monotonic() > self._stop_deadline and \
                self._given_up is not self.session:
            self._given_up = self.session
            self.show_error(f"The session's worker did not stop within "
                            f"{self.STOP_TIMEOUT:.0f} s; it ends with the program.")
