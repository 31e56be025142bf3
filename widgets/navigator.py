"""The navigator: the strip above the metric plots that says what their time axis follows.

Whole history or the latest N seconds / turns, and Freeze / Follow; it drives a
:class:`~idt_desk_widgets.plots.MetricPlots` and shows when a drag or a wheel turn froze it.
"""

from __future__ import annotations

from typing import Any, ClassVar

from idt_desk_widgets.plots import MetricPlots
from PySide6.QtWidgets import (
    QComboBox,
    QDoubleSpinBox,
    QHBoxLayout,
    QPushButton,
    QToolButton,
    QWidget,
)

__all__ = ["PlotNavigator"]


class PlotNavigator(QWidget):
    """Above the plots: follow the whole history or the latest N, freeze or follow.

    On its right, a toggle shows or hides the plot of the physics' residual (the twin's).

    Drives a :class:`MetricPlots` (``set_follow``, ``freeze``) and shows when it froze itself
    (``frozenChanged``: a drag or a wheel turn on a plot). The values under the cursor go to
    the window's status bar (``cursorChanged``), which is as wide as the window.
    """

    #: Default span of "latest" (seconds, turns).
    SPANS: ClassVar[dict[str, float]] = {"s": 60.0, "turns": 20.0}

    def __init__(self, plots: MetricPlots, parent: Any = None) -> None:
        super().__init__(parent)
        self.setObjectName("plot_navigator")
        self.plots = plots
        lay = QHBoxLayout(self)
        lay.setContentsMargins(4, 2, 4, 0)
        lay.setSpacing(6)
        self.mode = QComboBox(self)
        self.mode.addItem("Whole history", "all")
        self.mode.addItem("Latest", "latest")
        self.mode.setToolTip("What the time axis follows: the whole session (older windows "
                             "drawn merged: each group's lowest and highest values), or the "
                             "latest span")
        self.span = QDoubleSpinBox(self)
        self.span.setRange(1.0, 1e7)
        self.span.setDecimals(0)
        self.span.setToolTip("The span 'Latest' shows")
        self.span.setMinimumWidth(72)  # seven digits, not the range's eight: 1,024 px fit
        self.freeze_button = QPushButton("Freeze", self)
        self.freeze_button.setMinimumWidth(64)  # the style's 80 px minimum
        self.freeze_button.setCheckable(True)
        self.freeze_button.setToolTip(
            "Hold the view while the loop runs (a drag or a wheel turn on the plots freezes "
            "it too); press again to follow the data (Ctrl+F)")
        self.twin_button = QToolButton(self)  # narrower than a push button: 1,024 px fit
        self.twin_button.setText("Residual")
        self.twin_button.setCheckable(True)
        self.twin_button.setChecked(True)
        self.twin_button.setToolTip(
            "Show the plot of the physics' residual (S' against what the loop's own model, "
            "its twin, predicts) where the source declares a twin; press to hide it")
        for w in (self.mode, self.span, self.freeze_button):
            lay.addWidget(w)
        lay.addStretch(1)
        lay.addWidget(self.twin_button)
        self.twin_button.toggled.connect(lambda on: plots.set_twin_hidden(not on))
        self.set_unit("s")
        self.mode.currentIndexChanged.connect(self._apply)
        self.span.valueChanged.connect(self._apply)
        self.freeze_button.toggled.connect(self._freeze_toggled)
        plots.frozenChanged.connect(self._frozen)

    def set_unit(self, unit: str) -> None:
        """Seconds ("s") or turns: the span's suffix and its default."""
        self.span.blockSignals(True)
        self.span.setSuffix(f" {unit}")
        self.span.setValue(self.SPANS.get(unit, 60.0))
        self.span.blockSignals(False)
        self.span.setEnabled(self.mode.currentData() == "latest")
        self.plots.span = self.span.value()

    def _apply(self, *_args: Any) -> None:
        mode = self.mode.currentData()
        self.span.setEnabled(mode == "latest")
        self.plots.set_follow(mode, self.span.value())

    def _freeze_toggled(self, on: bool) -> None:
        self.plots.freeze(on)

    def _frozen(self, on: bool) -> None:
        self.freeze_button.blockSignals(True)
        self.freeze_button.setChecked(on)
        self.freeze_button.blockSignals(False)
        self.freeze_button.setText("Follow" if on else "Freeze")
        self.freeze_button.setToolTip(
            "Frozen: press to follow the data again (Ctrl+F)" if on else
            "Hold the view while the loop runs (a drag or a wheel turn on the plots freezes "
            "it too); press again to follow the data (Ctrl+F)")
