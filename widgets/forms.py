"""Forms generated from declared parameters (settings, perturbations, modulations)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from PySide6.QtCore import QCoreApplication, QEvent, QObject, QSize, Qt
from PySide6.QtGui import QPainter
from PySide6.QtWidgets import (
    QAbstractButton,
    QAbstractSpinBox,
    QApplication,
    QCheckBox,
    QComboBox,
    QDoubleSpinBox,
    QFormLayout,
    QLabel,
    QLineEdit,
    QScrollArea,
    QSpinBox,
    QWidget,
)

from idt_desk.live.source import Param
from idt_desk.settings import Setting

__all__ = ["ElidedLabel", "ParamForm", "WheelGuard", "compact_combo", "compact_form",
           "set_quietly", "setting_box", "spin"]


class WheelGuard(QObject):
    """Spin and combo boxes take the mouse wheel only once clicked into (focused).

    Qt's spin and combo boxes change their value under a wheel turn even without focus, so a
    researcher scrolling the side panel with the pointer over one silently changed a setting
    (a kick's Δω2 from −4 to −30). Installed on the application (:meth:`install`), this
    filter hands such a wheel event to the enclosing scroll area instead (the panel scrolls).

    The boxes get ``Qt.StrongFocus`` (a click or Tab focuses them, a wheel turn does not)
    when they are polished, before their first show: a real (spontaneous) wheel event gives
    a box with Qt's default ``WheelFocus`` the focus before any event filter sees it, and a
    focused box takes the wheel.
    """

    @classmethod
    def install(cls, parent: QObject) -> WheelGuard:
        """Filter the application's events; the boxes polished already get the policy now."""
        guard = cls(parent)
        app = QApplication.instance()
        # Widgets an earlier window let go (deleteLater) are deleted first: walking the
        # application's widgets while one of them was half destroyed crashed the process
        # (a segmentation fault in a test that opened a window after another closed).
        QApplication.sendPostedEvents(None, QEvent.Type.DeferredDelete)
        for widget in app.allWidgets():
            _no_wheel_focus(widget)
        app.installEventFilter(guard)
        return guard

    def eventFilter(self, obj: QObject, event: QEvent) -> bool:
        """Give a box its focus policy; redirect an unfocused box's wheel event."""
        kind = event.type()
        if kind == QEvent.Type.Polish:
            _no_wheel_focus(obj)
            return False
        if kind != QEvent.Type.Wheel:
            return False
        box = obj if isinstance(obj, QAbstractSpinBox | QComboBox) else None
        if box is None and isinstance(obj, QLineEdit) and isinstance(
                obj.parent(), QAbstractSpinBox | QComboBox):
            box = obj.parent()  # the editor inside a spin box
        if box is None:
            return False
        if box.hasFocus():
            return False
        area = box.parent()
        while area is not None and not isinstance(area, QScrollArea):
            area = area.parent()
        if area is not None:
            QCoreApplication.sendEvent(area.verticalScrollBar(), event)
        return True  # never the box's


def _no_wheel_focus(widget: QObject) -> None:
    """A spin or combo box is focused by a click or Tab, never by the wheel."""
    if isinstance(widget, QAbstractSpinBox | QComboBox) and \
            widget.focusPolicy() == Qt.FocusPolicy.WheelFocus:
        widget.setFocusPolicy(Qt.FocusPolicy.StrongFocus)


def set_quietly(button: QAbstractButton, on: bool) -> None:
    """Check or uncheck a toggle without firing its slot (the state changed elsewhere)."""
    button.blockSignals(True)
    button.setChecked(on)
    button.blockSignals(False)


def spin(lo: int, hi: int, value: int, parent: QWidget | None = None) -> QSpinBox:
    """An integer spin box from ``lo`` to ``hi`` showing ``value``."""
    s = QSpinBox(parent)
    s.setRange(lo, hi)
    s.setValue(value)
    return s


def setting_box(setting: Setting, value: float | None = None,
                parent: QWidget | None = None) -> QSpinBox | QDoubleSpinBox:
    """A box for a number of the settings table: its range, its grid, its help as tooltip.

    ``value``: what it shows first (None: the setting's default). An open lower bound (λ > 0)
    starts one step of its grid above it; a bound past what a box holds (2**31 − 1) is cut.
    """
    if setting.kind is int:
        box: QSpinBox | QDoubleSpinBox = QSpinBox(parent)
        box.setRange(int(setting.lo), int(min(setting.hi, 2**31 - 1)))
    else:
        box = QDoubleSpinBox(parent)
        box.setDecimals(setting.decimals)
        grid = 10.0 ** -setting.decimals
        box.setRange(setting.lo + (grid if setting.lo_open else 0.0), setting.hi)
        box.setSingleStep(10 * grid)
    box.setValue(setting.default if value is None else value)
    box.setToolTip(setting.describe())
    return box


def compact_form(layout: QFormLayout) -> QFormLayout:
    """A form that wraps a field under its label when the panel is too narrow for both.

    The left control panel must never need a horizontal scroll bar.
    """
    layout.setRowWrapPolicy(QFormLayout.RowWrapPolicy.WrapLongRows)
    layout.setFieldGrowthPolicy(QFormLayout.FieldGrowthPolicy.AllNonFixedFieldsGrow)
    return layout


class ElidedLabel(QLabel):
    """A one-line label that ends its text with "…" where its width is too short for it.

    ``text()`` stays the whole text, and the tooltip shows it while it is cut; the label asks
    for no width of its own (a status line must not widen the window, nor be clipped mid-word).
    """

    def minimumSizeHint(self) -> QSize:
        """No width of its own: the layout gives it what is left."""
        return QSize(0, super().minimumSizeHint().height())

    def setText(self, text: str) -> None:
        """Show ``text`` (cut to the width when too long)."""
        super().setText(text)
        self._tip()

    def resizeEvent(self, event: Any) -> None:
        """Cut anew for the new width."""
        super().resizeEvent(event)
        self._tip()

    def _shown(self) -> str:
        return self.fontMetrics().elidedText(self.text(), Qt.TextElideMode.ElideRight,
                                             self.contentsRect().width())

    def _tip(self) -> None:
        tip = self.text() if self._shown() != self.text() else ""
        if self.toolTip() != tip:
            self.setToolTip(tip)

    def paintEvent(self, event: Any) -> None:
        """Draw the text cut to the width."""
        QPainter(self).drawText(self.contentsRect(),
                                int(self.alignment() | Qt.AlignmentFlag.AlignVCenter),
                                self._shown())


def compact_combo(combo: QComboBox, chars: int = 12) -> QComboBox:
    """A combo box whose minimum width does not grow with its longest item."""
    combo.setSizeAdjustPolicy(
        QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
    combo.setMinimumContentsLength(chars)
    return combo


def _show_suggested(combo: QComboBox, value: str) -> None:
    """Show ``value`` in an editable list: its suggestion's label, or the text itself."""
    i = combo.findData(value)
    if i >= 0:
        combo.setCurrentIndex(i)
    else:
        combo.setEditText(value)


def _suggestion_chosen(combo: QComboBox, i: int, tip: str) -> None:
    edit = combo.lineEdit()
    if edit is not None:
        edit.setCursorPosition(0)
    item = combo.itemData(i, Qt.ItemDataRole.ToolTipRole) if i >= 0 else None
    combo.setToolTip(f"{item}\n\n{tip}" if item and tip else (item or tip))


def _suggested_value(combo: QComboBox) -> str:
    """The value an editable list holds: a suggestion's value for its label, else the text."""
    text = combo.currentText()
    i = combo.findText(text)
    return str(combo.itemData(i)) if i >= 0 and combo.itemData(i) is not None else text


def _editor(p: Param, parent: QWidget) -> QWidget:
    tip = " ".join(x for x in (p.help, f"[{p.unit}]" if p.unit else "") if x)
    if p.kind is bool:
        w = QCheckBox(parent)
        w.setChecked(bool(p.default))
    elif p.choices:
        w = compact_combo(QComboBox(parent))
        w.addItems(list(p.choices))
        w.setCurrentText(str(p.default))
    elif p.suggestions:  # an editable list: each line its label, any other text allowed
        w = compact_combo(QComboBox(parent))
        w.setEditable(True)
        w.setInsertPolicy(QComboBox.InsertPolicy.NoInsert)
        for i, s in enumerate(p.suggestions):
            w.addItem(s.label, s.value)
            w.setItemData(i, s.tip or s.value, Qt.ItemDataRole.ToolTipRole)
        # The list opens as wide as its longest label, whatever the narrow box's width.
        view = w.view()
        view.setMinimumWidth(view.sizeHintForColumn(0) + 2 * view.frameWidth() + 24)
        view.setTextElideMode(Qt.TextElideMode.ElideNone)
        # A chosen line reads from its start (the algorithm and seed), its card as the tip.
        w.currentIndexChanged.connect(lambda i, box=w, base=tip: _suggestion_chosen(box, i, base))
        _show_suggested(w, str(p.default))
        _suggestion_chosen(w, w.currentIndex(), tip)
    elif p.kind is int:
        w = QSpinBox(parent)
        w.setRange(int(p.minimum if p.minimum is not None else -(2**31) + 1),
                   int(p.maximum if p.maximum is not None else 2**31 - 1))
        w.setValue(int(p.default))
    elif p.kind is float:
        w = QDoubleSpinBox(parent)
        w.setDecimals(4)
        w.setRange(p.minimum if p.minimum is not None else -1e9,
                   p.maximum if p.maximum is not None else 1e9)
        # A notch moves the value by about a tenth of its own size (0.05 → 0.051, 2 → 2.1):
        # a fixed step from the range made one notch on a 0.05 default 0.1.
        w.setStepType(QAbstractSpinBox.StepType.AdaptiveDecimalStepType)
        w.setValue(float(p.default))
        if p.unit:
            w.setSuffix(f" {p.unit}")
    else:
        w = QLineEdit(str(p.default), parent)
    w.setObjectName(f"param_{p.name}")
    if tip and not p.suggestions:  # a list of suggestions sets its own
        w.setToolTip(tip)
    return w


class ParamForm(QWidget):
    """One labelled editor per declared :class:`~idt_desk.live.source.Param`."""

    def __init__(self, params: Sequence[Param], parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.params = tuple(params)
        layout = compact_form(QFormLayout(self))
        layout.setContentsMargins(0, 0, 0, 0)
        self.editors: dict[str, QWidget] = {}
        for p in self.params:
            ed = _editor(p, self)
            self.editors[p.name] = ed
            layout.addRow(p.label or p.name, ed)

    def values(self) -> dict[str, Any]:
        """Current values, validated by their declarations."""
        out: dict[str, Any] = {}
        for p in self.params:
            ed = self.editors[p.name]
            if isinstance(ed, QCheckBox):
                v: Any = ed.isChecked()
            elif isinstance(ed, QComboBox):
                v = _suggested_value(ed) if ed.isEditable() else ed.currentText()
            elif isinstance(ed, QSpinBox | QDoubleSpinBox):
                v = ed.value()
            else:
                v = ed.text()
            out[p.name] = p.validate(v)
        return out

    def set_values(self, values: dict[str, Any]) -> None:
        """Show the given values (unknown names are ignored)."""
        for name, v in values.items():
            ed = self.editors.get(name)
            if isinstance(ed, QCheckBox):
                ed.setChecked(bool(v))
            elif isinstance(ed, QComboBox) and ed.isEditable():
                _show_suggested(ed, str(v))
            elif isinstance(ed, QComboBox):
                ed.setCurrentText(str(v))
            elif isinstance(ed, QSpinBox):
                ed.setValue(int(v))
            elif isinstance(ed, QDoubleSpinBox):
                ed.setValue(float(v))
            elif isinstance(ed, QLineEdit):
                ed.setText(str(v))
