"""The main window's frame: its panels laid out, and a source's declarations shown in them.

:class:`WindowFrame` is the ``QMainWindow`` that
:class:`~idt_desk_widgets.main_window.MainWindow` extends. It builds the panels and lays
them out in three columns (:mod:`.columns`): the control panels on the left, the plots
over the event log in the centre under an error banner, the alarms, agency and the system's
view on the right, the status line below. It shows what a source class declares in every
panel (:meth:`WindowFrame.show_source`) and what a built session's source resolved
(:meth:`WindowFrame.show_built`), and keeps the window on the screen
(:meth:`WindowFrame.fit_to_screen`). It runs no session: the main window wires the panels
to one.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from idt_desk_widgets.agency import AgencyPanel
from idt_desk_widgets.alarms import AlarmPanel
from idt_desk_widgets.columns import CentreSplit, ControlColumn, SideColumn
from idt_desk_widgets.events import EventLog
from idt_desk_widgets.forms import ElidedLabel, WheelGuard
from idt_desk_widgets.navigator import PlotNavigator
from idt_desk_widgets.pipeline_panel import PipelinePanel
from idt_desk_widgets.plots import MetricPlots
from idt_desk_widgets.recording import RecordPanel
from idt_desk_widgets.returns_plot import ReturnPlot
from idt_desk_widgets.source_panel import SourcePanel
from idt_desk_widgets.status import StatusLine
from idt_desk_widgets.switches import SwitchPanel, declared
from idt_desk_widgets.views import make_view
from PySide6.QtWidgets import (
    QApplication,
    QHBoxLayout,
    QLabel,
    QMainWindow,
    QPushButton,
    QSplitter,
    QStackedWidget,
    QVBoxLayout,
    QWidget,
)

from idt_desk.live.plugins import SourceLoadError
from idt_desk.live.session import Session
from idt_desk.live.snapshot import Snapshot

__all__ = ["WindowFrame"]


class WindowFrame(QMainWindow):
    """The window's panels in three columns, the banner and the status line; no session.

    Parameters
    ----------
    record_dir
        The folder new recordings are created in (the recording panel's).
    """

    #: The window's size when the screen has room for it.
    DEFAULT_SIZE = (1400, 900)
    #: Room kept for the window manager's title bar and borders (pixels).
    FRAME_ROOM = (16, 40)

    def __init__(self, record_dir: Path) -> None:
        super().__init__()
        self.setWindowTitle("IDT Desk — Information Digital Twin")
        self.resize(*self.DEFAULT_SIZE)
        self.plots = MetricPlots(self)
        self.navigator = PlotNavigator(self.plots, self)
        self.returns = ReturnPlot(self)
        self.returns.hide()
        self.events = EventLog(self)
        self.events.selected.connect(self.plots.centre_on)
        self.alarms = AlarmPanel(self)
        self.agency = AgencyPanel(self)
        #: The system's view (``idt_desk_widgets.views``) of the selected source.
        self.view: QWidget | None = None
        self._view_name = ""

        self.source_panel = SourcePanel(self)
        self.pipeline_panel = PipelinePanel(self)
        self.switches = SwitchPanel(self)
        self.record_panel = RecordPanel(record_dir, self)
        # Perturbations right under the source: the first thing a new user is sent to, seen
        # at 1366×768 without scrolling (under the pipeline's settings it was not).
        self.controls_scroll = ControlColumn(
            (self.source_panel, self.switches, self.pipeline_panel, self.record_panel), self)
        # Scrolling the panel must never change a setting under the pointer (the guard
        # filters the application's events: every panel's boxes, built now or later).
        self._wheel_guard = WheelGuard.install(self)

        self.banner = QLabel("", self)
        #: What the banner says of the source's error or pause (None: nothing).
        self.error_shown: str | None = None
        self.banner.setObjectName("banner")
        self.banner.setWordWrap(True)
        self.banner.setStyleSheet("QLabel { background: #fde7e7; color: #8a1c1c; padding: 6px; }")
        self.banner.hide()
        graphs = QWidget(self)
        gl = QVBoxLayout(graphs)
        gl.setContentsMargins(0, 0, 0, 0)
        gl.setSpacing(0)
        gl.addWidget(self.navigator)
        gl.addWidget(self.plots, 1)
        gl.addWidget(self.returns)
        # The event log under the plots; its handle drags it larger, or shut.
        self.centre_split = CentreSplit(graphs, self.events, self)
        # Watching a folder of runs: back from the followed run to them (shown then only).
        self.back_bar = QWidget(self)
        bl = QHBoxLayout(self.back_bar)
        bl.setContentsMargins(4, 2, 4, 2)
        self.back_button = QPushButton("◀ All runs", self.back_bar)
        self.back_button.setToolTip("Back to the table of the watched folder's runs (Alt+Left); "
                                    "the followed run goes on being followed")
        self.back_label = ElidedLabel("", self.back_bar)
        bl.addWidget(self.back_button)
        bl.addWidget(self.back_label, 1)
        self.back_bar.hide()
        centre = QWidget(self)
        cl = QVBoxLayout(centre)
        cl.setContentsMargins(0, 0, 0, 0)
        cl.addWidget(self.back_bar)
        cl.addWidget(self.banner)
        cl.addWidget(self.centre_split, 1)
        #: The centre: the plots page, and the fleet's table when a folder of runs is watched.
        self.centre_stack = QStackedWidget(self)
        self.centre_stack.addWidget(centre)
        self.right_scroll = SideColumn((self.alarms, self.agency), self)

        self.main_split = QSplitter(self)
        for column in (self.controls_scroll, self.centre_stack, self.right_scroll):
            self.main_split.addWidget(column)
        self.main_split.setStretchFactor(1, 1)
        self.main_split.setSizes([380, 720, 320])
        self.setCentralWidget(self.main_split)
        self.status_line = StatusLine(self.statusBar())
        self._wire_panels()

    def _wire_panels(self) -> None:
        """Connect the panels to one another and to the banner and status bar."""
        self.events.folder = lambda: self.record_panel.folder
        self.source_panel.folder = lambda: self.record_panel.folder
        self.source_panel.focus_after = self.plots
        self.source_panel.error.connect(self.show_error)
        self.plots.cursorChanged.connect(
            lambda text: self.statusBar().showMessage(text) if text
            else self.statusBar().clearMessage())
        for panel in (self.events, self.record_panel):
            panel.message.connect(
                lambda text: self.show_error(text) if text.startswith("Export failed")
                else self.statusBar().showMessage(text, 8000))

    # -- a source's declarations ------------------------------------------------------------

    def show_source(self, cls: Any) -> None:
        """Every panel shows what source class ``cls`` declares (before any session)."""
        self.pipeline_panel.use_presets(cls.presets)
        self.switches.build(cls)
        has_reward = bool(cls.has_reward)
        self.set_metric_path(cls, cls.metric_path, has_reward)
        self.returns.setVisible(has_reward)
        self.returns.clear_data()
        # Before Start only the class is known: a source declaring modulations has an action
        # channel whatever its env; a replay's recording decides once it runs.
        self.agency.set_passive(
            None if cls.replays else not (cls.action_names or cls.modulations))
        self.declare_switches(cls)
        self.alarms.set_reward_visible(has_reward)
        self.set_view(cls.view)

    def show_built(self, cls: Any, session: Session) -> None:
        """Every panel shows what a built ``session``'s source resolved, and starts empty.

        ``cls``: the selected source class (a replay's recording decides its metric path,
        reward, view and switches).
        """
        source = session.source
        if source.metric_path != cls.metric_path or \
                source.has_reward != bool(cls.has_reward):
            # A replay is what its recording holds: a dialogue's turns, an agent's reward.
            self.set_metric_path(cls, source.metric_path, source.has_reward)
            self.returns.setVisible(source.has_reward)
            self.alarms.set_reward_visible(source.has_reward)
        self.pipeline_panel.show_pipeline(session)
        if source.view != self._view_name:
            self.set_view(source.view)  # a replay draws what it replays
        if cls.replays:
            self.switches.build_modulations(cls, source)  # a recorded agent or a passive loop
        recorded = source.recorded_source
        entry = self.source_panel.entries.get(recorded) \
            if recorded and recorded != cls.name else None
        if entry is not None:
            try:
                # A replay names its bands as the recorded source did ("Sensor noise").
                self.declare_switches(entry.load())
            except SourceLoadError:
                pass  # the raw names, then
        self.clear_panels()
        self.agency.set_passive(source.passive)
        if self.view is not None and hasattr(self.view, "reset"):
            self.view.reset()

    def declare_switches(self, cls: Any) -> None:
        """Name ``cls``'s perturbations and modulations in the plots, alarms and event log.

        For a replay, ``cls`` is the recorded source's class: its switches are what the
        replay draws.
        """
        names, options = declared(cls)
        self.alarms.names = names
        self.events.names = names
        self.plots.set_source(names, **options)

    def set_metric_path(self, cls: Any, path: str, has_reward: bool) -> None:
        """Symbol settings and a time axis, or token metrics and a turn axis (a dialogue).

        ``cls``: the selected source class, whose defaults the pipeline panel shows.
        """
        turns = path == "turns"
        self.plots.x_label = "turn" if turns else "loop time (s)"
        self.source_panel.set_turns(turns)
        self.navigator.set_unit("turns" if turns else "s")
        self.events.set_turns(turns)
        self.pipeline_panel.set_metric_path(turns, cls)
        self.plots.set_reward_visible(has_reward)

    def set_view(self, name: str) -> None:
        """Show the system's view ``name`` (``idt_desk_widgets.views``) in the right column."""
        self._view_name = name
        if self.view is not None:
            if hasattr(self.view, "close_view"):
                self.view.close_view()  # stop its render thread, free its renderer
            self.view.setParent(None)
            self.view.deleteLater()
        self.view = make_view(name, self.right_scroll.view_box)
        self.right_scroll.view_layout.addWidget(self.view)

    def clear_panels(self) -> None:
        """Empty the plots, the event log and the alarms (a new session, or Reset)."""
        self.plots.clear_data()
        self.returns.clear_data()
        self.events.clear()
        self.alarms.reset()

    # -- errors -----------------------------------------------------------------------------

    def show_error(self, text: str) -> None:
        """Show a message in the red banner above the plots (never a traceback dialog)."""
        self.banner.setText(text)
        self.banner.show()

    def hide_error(self) -> None:
        """Hide the banner."""
        self.banner.hide()

    def show_source_problem(self, snap: Snapshot) -> None:
        """The banner says once why the source stopped or paused the loop.

        It clears once the loop runs again (:attr:`error_shown`: what it says now, or None).
        """
        if snap.error and snap.error != self.error_shown:
            self.error_shown = snap.error
            self.show_error(f"The source stopped with an error: {snap.error}")
        if snap.paused_reason and snap.paused_reason != self.error_shown:
            # The source paused the loop (a dialogue's server failed): say why, offer Resume.
            self.error_shown = snap.paused_reason
            self.show_error(f"Paused: {snap.paused_reason}. Nothing is lost; press Resume to "
                            "carry on.")
            if not self.source_panel.pause_button.isChecked():
                self.source_panel.show_paused(True, quietly=True)
        elif not snap.paused_reason and self.error_shown and not snap.error \
                and snap.state == "running":
            self.error_shown = None
            self.hide_error()

    # -- the window's size ------------------------------------------------------------------

    def fit_to_screen(self, available: Any = None) -> None:
        """Keep the whole window inside the screen's available geometry.

        ``available``: a ``QRect``; None: that of the screen the window is on. A size or
        position that does not fit (the 1400×900 default on a 1366×768 or 1024×700 screen, a
        remembered one from a larger screen) is shrunk and moved inside, and the three
        columns share the width so that the alarm column keeps its width.
        """
        if available is None:
            screen = self.screen() or QApplication.primaryScreen()
            if screen is None:
                return
            available = screen.availableGeometry()
        room_w, room_h = self.FRAME_ROOM
        w = max(min(self.width(), available.width() - room_w), 200)
        h = max(min(self.height(), available.height() - room_h), 200)
        if (w, h) != (self.width(), self.height()):
            self.resize(w, h)
        x = min(max(self.x(), available.x()), available.x() + available.width() - w - room_w)
        y = min(max(self.y(), available.y()), available.y() + available.height() - h - room_h)
        self.move(max(x, available.x()), max(y, available.y()))
        left, right = self.controls_scroll.minimumWidth(), self.right_scroll.minimumWidth()
        if w < self.DEFAULT_SIZE[0]:  # narrower than the default: the centre gives way
            extra = max(w - left - right, 0)
            self.main_split.setSizes([left + min(extra // 8, 20), max(extra - extra // 8, 0),
                                      right])

    def resizeEvent(self, event: Any) -> None:
        """Fold the event log on a short window, unless the user has opened or folded it."""
        super().resizeEvent(event)
        self.centre_split.window_resized(self.height())

    def showEvent(self, event: Any) -> None:
        """Give the event log its height once the splitter has one to share."""
        super().showEvent(event)
        self.centre_split.fit()
