"""The fleet: every run under a watched folder in one table, alarmed runs first, kept live.

``idt-desk watch FOLDER`` on a folder of several runs (or on ``ssh://host/path``) shows
:class:`FleetView` in the window's centre: one row a run (``idt-desk runs``'s columns, from
:class:`~idt_desk.recordings.runs.RunIndex`), alarmed runs first and then the most recently
active, refreshed every :attr:`FleetView.REFRESH_MS` on a thread of its own (a server's
listing never holds the window up), filtered by a glob on the path (the command line's
``--filter``, :func:`~idt_desk.recordings.runs.select`) and sorted by any column's header.
Double-clicking a run (or Return on it) asks the window to follow it (``open_run``; the
table marks it ▶); the window's **◀ All runs** button comes back here.
"""

from __future__ import annotations

import html
import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from idt_desk_widgets.forms import ElidedLabel
from PySide6.QtCore import (
    QAbstractTableModel,
    QModelIndex,
    QSortFilterProxyModel,
    Qt,
    QTimer,
    Signal,
)
from PySide6.QtGui import QBrush, QColor, QCursor, QFont
from PySide6.QtWidgets import (
    QAbstractItemView,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QTableView,
    QVBoxLayout,
    QWidget,
)

from idt_desk.errors import InputError
from idt_desk.recordings.runs import RunIndex, root_problem, select
from idt_desk.words import ago_text, shown

__all__ = ["FleetModel", "FleetView"]

#: (key, header, tooltip) of the table's columns, in order.
SHOWN = (
    ("path", "Run", "the run's folder under the watched one"),
    ("state", "State", "writing, idle (beating, no new rows), ended, stopped responding "
                       "(no heartbeat for --silence s) or error"),
    ("alarms", "Alarms", "alarms raised so far"),
    ("last_alarm", "Last alarm", "the latest alarm, in the loop's seconds"),
    ("severity", "Severity", "the latest detection's largest move"),
    ("changed", "What changed", "the latest alarm's class of change, as its twin named it: "
                                "sensor, actuator, force, dynamics or unknown"),
    ("cost", "Cost", "the return a perturbation cost"),
    ("baseline", "Baseline", "calibrating, gathering n/N, armed or too short"),
    ("regime", "Estimator", "the estimator's regime in the latest window: resolved, sparse, "
                            "saturated (blind: fewer bins, a grouped preset or a longer "
                            "window) or cycle (an exact cycle: a change shows as leaving it)"),
    ("transitions", "Transitions", "transitions written"),
    ("windows", "Windows", "windows computed"),
    ("active", "Active", "when the writer last wrote or beat"),
    ("error", "Error", "what is wrong with this run's files, in one line"),
)

#: Row colours by what a row says: alarmed, error, stopped responding.
_TINT = {"alarm": "#fde2e2", "error": "#f1f1f1", "stopped responding": "#fff4d6"}


class FleetModel(QAbstractTableModel):
    """The rows of a listing (``RunIndex.refresh``), shown as :data:`SHOWN`.

    Display text for people; ``Qt.UserRole`` a value to sort by (numbers as numbers, the
    listing's own order for the path, so an unsorted table keeps alarmed runs first).
    """

    def __init__(self, parent: Any = None) -> None:
        super().__init__(parent)
        self.rows: list[dict[str, Any]] = []
        self.now = time.time()
        #: The path of the run the window follows (marked ▶), or None.
        self.followed: str | None = None

    def set_rows(self, rows: list[dict[str, Any]], now: float) -> None:
        """Show ``rows`` (in the listing's order).

        The same runs in the same order only change their cells (the view keeps its
        selection and scroll, and redraws what it shows); others reset the table.
        """
        if [r["path"] for r in rows] == [r["path"] for r in self.rows]:
            self.rows, self.now = rows, now
            if rows:
                self.dataChanged.emit(self.index(0, 0),
                                      self.index(len(rows) - 1, len(SHOWN) - 1))
            return
        self.beginResetModel()
        self.rows, self.now = rows, now
        self.endResetModel()

    def rowCount(self, parent: QModelIndex = QModelIndex()) -> int:  # noqa: B008
        """Runs shown."""
        return 0 if parent.isValid() else len(self.rows)

    def columnCount(self, parent: QModelIndex = QModelIndex()) -> int:  # noqa: B008
        """Columns shown."""
        return 0 if parent.isValid() else len(SHOWN)

    def headerData(self, section: int, orientation: Qt.Orientation,
                   role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        """Column names and their tooltips."""
        if orientation != Qt.Orientation.Horizontal or not 0 <= section < len(SHOWN):
            return None
        if role == Qt.ItemDataRole.DisplayRole:
            return SHOWN[section][1]
        if role == Qt.ItemDataRole.ToolTipRole:
            return SHOWN[section][2]
        return None

    def data(self, index: QModelIndex, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        """A cell's text, sort key, colour or alignment."""
        if not index.isValid():
            return None
        row, key = self.rows[index.row()], SHOWN[index.column()][0]
        value = row.get(key)
        if role == Qt.ItemDataRole.DisplayRole:
            if key == "path" and value == self.followed:
                return f"▶ {shown(value)}"
            return self._text(key, value)
        if role == Qt.ItemDataRole.UserRole:
            if key == "path":
                return index.row()
            if key == "active":
                return -(value or 0.0)
            return value if isinstance(value, (int, float)) else -1 if value is None \
                else str(value)
        if role == Qt.ItemDataRole.ToolTipRole:  # rich text, escaped: a file's text is no markup
            err = row.get("error")
            return f"<qt>{html.escape(shown(err, 2000))}</qt>" if err else None
        if role == Qt.ItemDataRole.BackgroundRole:
            tint = _TINT.get("alarm") if row["alarms"] else _TINT.get(row["state"])
            return QBrush(QColor(tint)) if tint else None
        if role == Qt.ItemDataRole.FontRole and row["state"] == "writing":
            font = QFont()
            font.setBold(True)
            return font
        if role == Qt.ItemDataRole.TextAlignmentRole and key in (
                "alarms", "last_alarm", "transitions", "windows"):
            return int(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        return None

    def _text(self, key: str, value: Any) -> str:
        if value is None:
            return ""
        if key == "last_alarm":
            return f"{value:,.1f} s"
        if key == "active":
            return ago_text(self.now - value)
        if isinstance(value, int):
            return f"{value:,}"
        return shown(value)  # a name holding a newline or ESC is shown escaped


class FleetView(QWidget):
    """The watched folder's runs, refreshed live (see the module).

    Parameters
    ----------
    index
        The listing to show and refresh (its files: this machine's or a server's).
    location
        The watched folder as the user gave it (shown in the title).
    """

    #: A run to follow: its location (a local path or an ``ssh://`` URL).
    open_run = Signal(str)
    #: The listing was shown afresh: its summary in one line.
    listed = Signal(str)

    #: How often the listing is refreshed (ms).
    REFRESH_MS = 2000

    def __init__(self, index: RunIndex, location: str, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.index, self.location = index, location
        self.title = ElidedLabel(f"Runs in {shown(location)}", self)
        self.title.setTextFormat(Qt.TextFormat.PlainText)
        self.title.setStyleSheet("font-weight: 600;")
        self.filter = QLineEdit(self)
        self.filter.setPlaceholderText("filter: a glob on the path, e.g. sweep*/seed-1*")
        self.filter.setClearButtonEnabled(True)
        self.filter.setMinimumWidth(300)
        self.filter.textChanged.connect(lambda _text: self._show())
        self.summary = QLabel("reading the runs …", self)
        self.summary.setTextFormat(Qt.TextFormat.PlainText)  # it may quote a file's text
        self.summary.setWordWrap(True)  # the listing's notes may be long: never a wider window
        self.summary.setObjectName("fleetSummary")
        self.model = FleetModel(self)
        self.proxy = QSortFilterProxyModel(self)
        self.proxy.setSourceModel(self.model)
        self.proxy.setSortRole(Qt.ItemDataRole.UserRole)
        self.table = QTableView(self)
        self.table.setModel(self.proxy)
        self.table.setSortingEnabled(True)
        self.table.sortByColumn(0, Qt.SortOrder.AscendingOrder)  # the listing's own order
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.verticalHeader().hide()
        self.table.verticalHeader().setDefaultSectionSize(self.fontMetrics().height() + 8)
        self.table.setAlternatingRowColors(False)
        self.table.setWordWrap(False)
        header = self.table.horizontalHeader()
        # Fitted to the first rows once they come (then the user's): fitting every column
        # to 1,000 rows at each refresh took 0.8 s of the GUI thread.
        header.setSectionResizeMode(QHeaderView.ResizeMode.Interactive)
        header.setResizeContentsPrecision(200)
        header.setStretchLastSection(True)
        self._fitted = False
        self._fitted_outage = False  # the columns were last fitted during an outage
        self.table.doubleClicked.connect(self._open)
        self.table.activated.connect(self._open)
        self.hint = QLabel("Double-click a run (or Return) to follow it; a header sorts by its "
                           "column (Run: alarmed first, then the latest active).", self)
        self.hint.setStyleSheet("color: #666;")
        self.hint.setWordWrap(True)  # a narrow screen wraps it, never a wider window
        top = QHBoxLayout()
        top.addWidget(self.title, 1)
        top.addWidget(self.filter)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(6, 6, 6, 6)
        lay.addLayout(top)
        lay.addWidget(self.summary)
        lay.addWidget(self.table, 1)
        lay.addWidget(self.hint)

        self.rows: list[dict[str, Any]] = []
        #: The latest refresh's error (the root could not be listed), or None.
        self.problem: str | None = None
        #: Refreshes finished (the tests wait on it).
        self.refreshes = 0
        self._took = 0.0
        self._at = 0.0
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="idt-fleet")
        self._future: Future | None = None
        self._poll = QTimer(self)
        self._poll.setInterval(50)
        self._poll.timeout.connect(self._collect)
        self.timer = QTimer(self)
        self.timer.setInterval(self.REFRESH_MS)
        self.timer.timeout.connect(self.refresh)

    def start(self) -> None:
        """List now, then every :attr:`REFRESH_MS`."""
        self.refresh()
        self.timer.start()

    def refresh(self) -> None:
        """Start a refresh on the listing's thread (none while one is under way)."""
        if self._future is not None:
            return
        self._future = self._pool.submit(self._list)
        self._poll.start()

    def _list(self) -> tuple[list[dict[str, Any]] | None, str | None, float]:
        t0 = time.perf_counter()
        try:
            rows, problem = self.index.refresh(), None
        except OSError as exc:
            rows, problem = None, root_problem(self.location, exc)
        except InputError as exc:
            rows, problem = None, str(exc)
        return rows, problem, time.perf_counter() - t0

    def _collect(self) -> None:
        future = self._future
        if future is None or not future.done():
            return
        self._future = None
        self._poll.stop()
        try:
            rows, self.problem, self._took = future.result()
        except Exception as exc:  # a listing must never take the window down
            rows, self.problem = None, f"{self.location}: {type(exc).__name__}: {exc}"
        if rows is not None:
            self.rows = rows
        self._at = time.time()
        self.refreshes += 1
        self._show()

    def _show(self) -> None:
        """Fill the table with the rows the filter keeps; say what the listing holds."""
        now = time.time()
        pattern = self.filter.text().strip() or None
        shown = select(self.rows, pattern, None, now)
        if self.problem is not None:  # an outage: what the rows say is as last seen
            shown = [{**r, "state": f"{r['state']} (last seen)"} for r in shown]
        under = self.pointer_on_table()
        # Rows never move under the pointer (a double-click follows the run it aimed at):
        # while it is on the table, runs keep their places and new ones go last.
        self.proxy.setDynamicSortFilter(not under)
        if under and self.model.rows:
            place = {r["path"]: k for k, r in enumerate(self.model.rows)}
            shown = sorted(shown, key=lambda r: place.get(r["path"], len(place)))
        selected = self.selected()
        paths = [r["path"] for r in self.model.rows]
        self.model.set_rows(shown, now)
        if shown and (not self._fitted or [r["path"] for r in shown] != paths
                      or self._fitted_outage != (self.problem is not None)):
            # A new run's name, or an outage's "(last seen)", is never cut short.
            self.table.resizeColumnsToContents()
            self._fitted, self._fitted_outage = True, self.problem is not None
        if selected is not None:
            for r, row in enumerate(shown):
                if row["path"] == selected:
                    self.table.selectRow(self.proxy.mapFromSource(
                        self.model.index(r, 0)).row())
        n = len(self.rows)
        alarmed = sum(1 for r in self.rows if r["alarms"])
        writing = sum(1 for r in self.rows if r["state"] in ("writing", "idle"))
        text = (f"{n:,} run{'s' if n != 1 else ''} · {alarmed} alarmed · {writing} being "
                f"written" + (f" · {len(shown):,} shown" if pattern else "")
                + f" — refreshed every {self.REFRESH_MS / 1000:g} s (the last took "
                f"{self._took:.2f} s)" + "".join(f" · {note}" for note in self.index.notes))
        if not n and self.problem is None:
            text = (f"no run in {self.location} yet (a run is a folder with a recording's "
                    "config.json); a run that starts there appears here")
        if self.problem is not None:
            text = f"{self.problem} — the list shows the last good look"
            self.summary.setStyleSheet("color: #8a1c1c;")
        else:
            self.summary.setStyleSheet("")
        self.summary.setText(text)
        self.listed.emit(text)

    def pointer_on_table(self) -> bool:
        """Whether the mouse pointer is over the table's rows."""
        port = self.table.viewport()
        return port.isVisible() and port.rect().contains(port.mapFromGlobal(QCursor.pos()))

    def selected(self) -> str | None:
        """The selected run's path (under the folder), or None."""
        rows = self.table.selectionModel().selectedRows()
        if not rows:
            return None
        src = self.proxy.mapToSource(rows[0])
        return self.model.rows[src.row()]["path"] if src.isValid() else None

    def _open(self, index: QModelIndex) -> None:
        src = self.proxy.mapToSource(index)
        if src.isValid():
            row = self.model.rows[src.row()]
            self.model.followed = row["path"]  # marked ▶ from now on
            self.model.dataChanged.emit(self.model.index(src.row(), 0),
                                        self.model.index(src.row(), 0))
            self.table.resizeColumnToContents(0)  # room for the mark
            self.open_run.emit(self.index.location(row))

    def shutdown(self) -> None:
        """Stop refreshing and let the listing go (a server's connection is closed).

        Never waits on the network: a refresh under way against a server that stopped
        answering is cancelled by the close (its thread ends at once).
        """
        self.timer.stop()
        self._poll.stop()
        self.index.close()
        self._pool.shutdown(wait=False, cancel_futures=True)


def bench_fleet(counts: tuple[int, ...] = (100, 1000), ssh: str | None = None,
                refreshes: int = 5, say: Any = print) -> list[dict[str, Any]]:
    """The table in the window over ``counts`` runs, local and over ``ssh``: the figures.

    For each count: runs built as ``idt-desk bench runs`` builds them (3 of them open and
    beating), the window opened on them; the first listing's time in the window, then
    ``refreshes`` refreshes, each timed from the request to the table showing it (what a user
    waits for), against the listing alone (``RunIndex.refresh`` without the window) timed in
    the same run. Returns one dict a count and place.
    """
    from idt_desk_widgets.main_window import MainWindow
    from PySide6.QtWidgets import QApplication

    from idt_desk.cli.bench_runs import fleets

    app = QApplication.instance() or QApplication(["idt-desk"])

    def until(done: Any, limit: float = 120.0) -> None:
        deadline = time.monotonic() + limit
        while not done():
            if time.monotonic() > deadline:
                raise RuntimeError("bench fleet: the table did not refresh in time")
            app.processEvents()
            time.sleep(0.002)

    say(f"{'runs':>6} {'where':>6} {'first s':>8} {'window refresh s':>17} "
        f"{'listing alone s':>16} {'window/alone':>13}")
    out = []
    for _n, where, location, _root in fleets(counts, ssh):
        t0 = time.perf_counter()
        win = MainWindow(source="replay", settings={"path": "", "follow": True},
                         speed=None, fleet=RunIndex(location),
                         fleet_location=location)
        win.show()
        view = win.fleet
        assert view is not None
        until(lambda v=view: v.refreshes >= 1)
        first = time.perf_counter() - t0
        shown = []
        for _ in range(refreshes):
            k = view.refreshes
            t0 = time.perf_counter()
            view.refresh()
            until(lambda v=view, k=k: v.refreshes > k)
            shown.append(time.perf_counter() - t0)
        rows = view.proxy.rowCount()
        win.close_without_asking()
        alone_index = RunIndex(location)
        alone_index.refresh()
        alone = []
        for _ in range(refreshes):
            t0 = time.perf_counter()
            alone_index.refresh()
            alone.append(time.perf_counter() - t0)
        alone_index.close()
        med, base = sorted(shown)[len(shown) // 2], sorted(alone)[len(alone) // 2]
        say(f"{rows:>6} {where:>6} {first:>8.2f} {med:>17.3f} {base:>16.3f} "
            f"{med / base:>13.1f}")
        out.append({"runs": rows, "where": where, "first": first,
                    "refresh": med, "alone": base})
    say("(medians of the refreshes; 'window refresh': from the request to the table showing "
        "it, the listing on the table's thread)")
    return out
