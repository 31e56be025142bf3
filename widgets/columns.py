"""The main window's three columns: the controls, the plots over the event log, the side.

:class:`ControlColumn` scrolls the control panels and keeps itself as wide as they need;
:class:`CentreSplit` shares the centre's height between the plots and the event log (which
keeps the height the user dragged it to, and folds to its title line on a short window
until the user opens or folds it); :class:`SideColumn` scrolls the alarm, agency and system
panels rather than squeezing them on a small screen.
"""

from __future__ import annotations

from collections.abc import Sequence

from idt_desk_widgets.events import EventLog
from PySide6.QtCore import QEvent, QObject, Qt
from PySide6.QtWidgets import QGroupBox, QScrollArea, QSplitter, QVBoxLayout, QWidget

__all__ = ["CentreSplit", "ControlColumn", "SideColumn"]


class ControlColumn(QScrollArea):
    """The left column: ``panels`` one under the other, scrolled vertically."""

    #: The column's least width (pixels).
    MIN_WIDTH = 360

    def __init__(self, panels: Sequence[QWidget], parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("controls_scroll")
        controls = QWidget(self)
        layout = QVBoxLayout(controls)
        for panel in panels:
            layout.addWidget(panel)
        layout.addStretch(1)
        self.setWidget(controls)
        self.setWidgetResizable(True)
        self.setMinimumWidth(self.MIN_WIDTH)

    def fit_width(self) -> None:
        """Keep the column at least as wide as its content: no horizontal scrolling."""
        inner = self.widget()
        inner.layout().activate()
        need = (inner.minimumSizeHint().width() + self.verticalScrollBar().sizeHint().width()
                + 2 * self.frameWidth())
        self.setMinimumWidth(max(self.MIN_WIDTH, need))


class CentreSplit(QSplitter):
    """A vertical splitter of ``graphs`` over ``events``; its handle drags the log larger.

    The window calls :meth:`window_resized` from its ``resizeEvent`` and :meth:`fit` from
    its ``showEvent``.
    """

    #: Below this window height the event log starts folded (the plots keep the height).
    FOLDED_BELOW = 820

    def __init__(self, graphs: QWidget, events: EventLog, parent: QWidget | None = None
                 ) -> None:
        super().__init__(Qt.Orientation.Vertical, parent)
        self.events = events
        self.addWidget(graphs)
        self.addWidget(events)
        self.setStretchFactor(0, 1)
        self.setCollapsible(0, False)
        self.setCollapsible(1, False)
        #: The event log's height when open (the user's, once they drag the handle).
        self.events_height = 150
        # Folded on a short window (the plots need the height) until the user decides.
        self._events_chosen = False
        events.toggle.toggled.connect(lambda _on: setattr(self, "_events_chosen", True))
        self.splitterMoved.connect(self._event_log_dragged)
        events.folded.connect(lambda _f: self.fit())

    def window_resized(self, height: int) -> None:
        """Fold the event log on a short window, unless the user has opened or folded it."""
        if not self._events_chosen:
            self.events.set_expanded(height >= self.FOLDED_BELOW)
        self.fit()

    def fit(self) -> None:
        """The plots take the centre's height but the event log's (its title line, folded).

        QSplitter leaves a pane's height beyond its maximum empty, so the shares are set here.
        """
        total = sum(self.sizes())
        if not self.isVisible() or total < 200:
            return  # not laid out yet: showEvent comes back
        if self.events.expanded:
            mine = max(min(self.events_height, total // 2), 90)
        else:
            mine = self.events.maximumHeight()
        if self.sizes()[1] != mine:
            self.setSizes([total - mine, mine])

    def _event_log_dragged(self, _pos: int, _index: int) -> None:
        if self.events.expanded:
            self.events_height = self.sizes()[1]


class SideColumn(QScrollArea):
    """The right column: ``panels`` (alarms, agency) over the "System" box, scrolled.

    ``view_layout`` holds the system's view (``idt_desk_widgets.views``), which the window
    replaces for each source.
    """

    def __init__(self, panels: Sequence[QWidget], parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("right_scroll")
        right = QWidget(self)
        layout = QVBoxLayout(right)
        for panel in panels:
            layout.addWidget(panel)
        self.view_box = QGroupBox("System", right)
        self.view_layout = QVBoxLayout(self.view_box)
        layout.addWidget(self.view_box, 1)
        self.setWidget(right)
        self.setWidgetResizable(True)
        self.setFrameShape(QScrollArea.Shape.NoFrame)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setMinimumWidth(self.MIN_WIDTH)
        # Whatever its panels come to need (the agency table once it fills, a source's view),
        # the column grows to it: with no horizontal scroll bar, content wider than the
        # column was cut off at its right edge (the alarm tiles squashed, their text clipped).
        right.installEventFilter(self)

    #: The column's least width (pixels).
    MIN_WIDTH = 300

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        """Refit the width whenever the panels' layout asks for room."""
        if watched is self.widget() and event.type() == QEvent.Type.LayoutRequest:
            self.fit_width()
        return super().eventFilter(watched, event)

    def fit_width(self) -> None:
        """At least as wide as the panels' least width (and :data:`MIN_WIDTH`)."""
        need = (self.widget().minimumSizeHint().width()
                + self.verticalScrollBar().sizeHint().width() + 2 * self.frameWidth())
        if max(self.MIN_WIDTH, need) != self.minimumWidth():
            self.setMinimumWidth(max(self.MIN_WIDTH, need))
