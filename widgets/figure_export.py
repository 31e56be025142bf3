"""Saving a plot view as a figure: a PNG at any scale, or an SVG, with a title strip above.

Used by the metric plots' Save plots PNG… / SVG… (:meth:`.plots.MetricPlots.export`).
"""

from __future__ import annotations

from PySide6.QtCore import QMargins, QRect, QRectF, Qt
from PySide6.QtGui import QColor, QFont, QFontMetrics, QImage, QPainter
from PySide6.QtSvg import QSvgGenerator
from PySide6.QtWidgets import QGraphicsView

__all__ = ["save_figure"]


def save_figure(view: QGraphicsView, path: str, scale: float, title: str | None) -> None:
    """Draw ``view`` into a PNG or an SVG file (by the file's extension).

    ``scale`` multiplies a PNG's pixels; ``title``, when given, is written, wrapped, in a
    strip above the view. The view itself is left as it was.
    """

    def strip(width: int, k: float) -> tuple[QFont, int]:
        font = QFont(view.font())
        font.setPointSizeF(9.0 * k)
        if not title:
            return font, 0
        rect = QFontMetrics(font).boundingRect(
            QRect(0, 0, width - int(16 * k), 10_000), int(Qt.TextFlag.TextWordWrap), title)
        return font, rect.height() + int(10 * k)

    def write_title(painter: QPainter, width: int, k: float, height: int,
                    font: QFont) -> None:
        painter.setFont(font)
        painter.setPen(QColor(32, 33, 36))
        painter.drawText(QRect(int(8 * k), 0, width - int(16 * k), height),
                         int(Qt.AlignmentFlag.AlignVCenter | Qt.TextFlag.TextWordWrap),
                         title)

    if str(path).lower().endswith(".svg"):
        # Qt's own SVG painter: pyqtgraph 0.14's SVGExporter fails on the closed paths
        # Qt 6.11 writes ("Z"; pyqtgraph issue #3495).
        font, top = strip(view.width(), 1.0)
        gen = QSvgGenerator()
        gen.setFileName(str(path))
        gen.setSize(view.size().grownBy(QMargins(0, top, 0, 0)))
        gen.setViewBox(QRect(0, 0, view.width(), view.height() + top))
        gen.setTitle(title or "IDT Desk metrics")
        painter = QPainter(gen)
        if top:
            write_title(painter, view.width(), 1.0, top, font)
            painter.translate(0, top)
        view.render(painter)
        painter.end()
        return
    # The view drawn into a rectangle ``scale`` times its size: text, legend, markers and
    # axes all grow and stay sharp (pyqtgraph's ImageExporter enlarged the plots but left
    # the legend at screen size).
    width, height = round(view.width() * scale), round(view.height() * scale)
    font, top = strip(width, scale)
    image = QImage(width, height + top, QImage.Format.Format_ARGB32)
    image.fill(QColor("white"))
    painter = QPainter(image)
    painter.setRenderHint(QPainter.RenderHint.Antialiasing)
    painter.setRenderHint(QPainter.RenderHint.TextAntialiasing)
    if top:
        write_title(painter, width, scale, top, font)
    QGraphicsView.render(view, painter, QRectF(0, top, width, height),
                         view.viewport().rect())
    painter.end()
    if not image.save(str(path)):
        raise OSError(f"cannot write {path}")
