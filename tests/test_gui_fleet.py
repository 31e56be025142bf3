"""The fleet in the window: a watched folder's runs in one table, and a run followed from it.

``idt-desk watch FOLDER`` on several runs (or on ``ssh://``) opens on
:class:`~idt_desk_widgets.fleet.FleetView`: alarmed runs first, a new run within one
refresh, filtered and sorted; a double-click follows a run and **◀ All runs** comes back.
"""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("pytestqt")

from idt_desk_widgets.fleet import SHOWN
from idt_desk_widgets.main_window import MainWindow
from PySide6.QtCore import Qt

import idt_desk
from idt_desk.recordings.runs import RunIndex
from tests.run_trees import alarmed_run

PATH = [k for k, *_ in SHOWN].index("path")


def _real_run(path, n: int = 3000, seed: int = 0) -> None:
    """A run a follower can rebuild (idt_desk.Recorder: its pipeline is in its events)."""
    rng = np.random.default_rng(seed)
    x = np.cumsum(rng.normal(size=(n + 1, 2)), axis=0) * 0.01
    with idt_desk.Recorder(path, ["x", "v"], ["u"], rate=100.0, window=100, stride=20,
                           calibration_windows=5, baseline_windows=20) as rec:
        rec.add(x[:-1], rng.normal(size=(n, 1)), x[1:])


def _paths(view) -> list[str]:
    """The table's path column, top to bottom, as shown."""
    return [view.proxy.index(r, PATH).data() for r in range(view.proxy.rowCount())]


def _refreshed(qtbot, view) -> None:
    """One refresh of the table, asked now and waited for."""
    seen = view.refreshes
    view.refresh()
    qtbot.waitUntil(lambda: view.refreshes > seen, timeout=10_000)


def _window(qtbot, tmp_path, location):
    w = MainWindow(source="replay", settings={"path": "", "follow": True}, speed=None,
                   record_dir=tmp_path / "recordings", fleet=RunIndex(location),
                   fleet_location=str(location))
    qtbot.addWidget(w)
    w.show()
    qtbot.waitUntil(lambda: w.fleet.refreshes >= 1, timeout=20_000)
    return w


def test_the_table_puts_alarmed_runs_first_and_shows_a_new_run_at_the_next_refresh(
        qtbot, tmp_path):
    root = tmp_path / "sweep"
    for j in range(6):
        _real_run(root / "quiet" / f"seed-{j}", n=600, seed=j)
    alarmed_run(root / "loud" / "a", 1)
    alarmed_run(root / "loud" / "b", 3)
    w = _window(qtbot, tmp_path, root)
    try:
        view = w.fleet
        assert w.centre_stack.currentWidget() is view  # the window opens on the table
        assert set(_paths(view)[:2]) == {"loud/a", "loud/b"}
        assert len(_paths(view)) == 8
        assert "8 runs · 2 alarmed" in view.summary.text()
        # A run that starts now is listed at the next refresh (every REFRESH_MS).
        seen = view.refreshes
        _real_run(root / "late", n=600)
        qtbot.waitUntil(lambda: view.refreshes >= seen + 1, timeout=10_000)
        view.refresh()
        qtbot.waitUntil(lambda: "late" in _paths(view), timeout=10_000)
        # The filter is the command line's glob on the path.
        view.filter.setText("quiet/*")
        assert _paths(view) and all(p.startswith("quiet/") for p in _paths(view))
        assert "6 shown" in view.summary.text()
        view.filter.setText("")
        # A header sorts by its column: by transitions, descending, the alarmed runs (100
        # transitions each, the others 600) go last.
        col = [k for k, *_ in SHOWN].index("transitions")
        view.table.sortByColumn(col, Qt.SortOrder.DescendingOrder)
        assert set(_paths(view)[-2:]) == {"loud/a", "loud/b"}
    finally:
        w.close()


def test_a_double_click_follows_the_run_and_back_returns_to_the_table(qtbot, tmp_path):
    root = tmp_path / "sweep"
    _real_run(root / "one", seed=1)
    _real_run(root / "two", seed=2)
    w = _window(qtbot, tmp_path, root)
    try:
        view = w.fleet
        # The table alone: no source's settings beside it (the side columns are a run's).
        assert not w.controls_scroll.isVisible() and not w.right_scroll.isVisible()
        row = _paths(view).index("two")
        view.table.doubleClicked.emit(view.proxy.index(row, 0))
        assert w.centre_stack.currentIndex() == 0 and w.back_bar.isVisible()
        assert w.controls_scroll.isVisible() and w.right_scroll.isVisible()
        qtbot.waitUntil(lambda: w.session is not None and not w.session.running
                        and w.session.snapshot(1).n_transitions == 3000, timeout=60_000)
        assert w.session.source.config["path"] == str(root / "two")
        assert w.session.error is None
        w.back_button.click()
        assert w.centre_stack.currentWidget() is view and not w.controls_scroll.isVisible()
        assert "▶ two" in _paths(view)  # the followed run is marked
        # The other one, then: the first session is replaced.
        old = w.session
        row = _paths(view).index("one")
        view.table.doubleClicked.emit(view.proxy.index(row, 0))
        qtbot.waitUntil(lambda: w.session is not old and w.session is not None
                        and w.session.snapshot(1).n_transitions == 3000, timeout=60_000)
        assert w.session.source.config["path"] == str(root / "one")
        w.shortcuts["show_fleet"].activated.emit()  # Alt+Left
        assert w.centre_stack.currentWidget() is view
    finally:
        w.close()


def test_a_servers_runs_are_listed_and_followed_over_ssh(qtbot, tmp_path, ssh_home):
    root = tmp_path / "sweep"
    _real_run(root / "one", seed=1)
    alarmed_run(root / "two", 2)
    url = f"ssh://127.0.0.1:{ssh_home}{root}"
    w = _window(qtbot, tmp_path, url)
    try:
        view = w.fleet
        assert _paths(view) == ["two", "one"] and view.problem is None
        view.table.doubleClicked.emit(view.proxy.index(1, 0))
        qtbot.waitUntil(lambda: w.session is not None and not w.session.running
                        and w.session.snapshot(1).n_transitions == 3000, timeout=60_000)
        assert w.session.source.config["path"] == f"{url}/one"
        assert w.session.error is None
    finally:
        w.close()


def test_a_folder_that_vanishes_is_said_in_one_line_and_the_last_look_stays(qtbot, tmp_path):
    import shutil

    root = tmp_path / "sweep"
    alarmed_run(root / "a", 1)
    alarmed_run(root / "b", 0)
    w = _window(qtbot, tmp_path, root)
    try:
        view = w.fleet
        shutil.rmtree(root)
        _refreshed(qtbot, view)
        assert view.problem == f"{root}: no such folder"
        assert "\n" not in view.summary.text() and "the last good look" in view.summary.text()
        assert len(_paths(view)) == 2
        # What each row says is as last seen (its state is not known now).
        state = [k for k, *_ in SHOWN].index("state")
        assert all(view.proxy.index(r, state).data().endswith("(last seen)") for r in range(2))
    finally:
        w.close()


def test_bench_fleet_times_the_table_against_the_listing_alone(qtbot):
    from idt_desk_widgets.fleet import bench_fleet

    lines = []
    out = bench_fleet((10,), refreshes=2, say=lines.append)
    assert [r["runs"] for r in out] == [13]  # 10 ended and 3 open
    assert all(r["refresh"] > 0 and r["alone"] > 0 for r in out)
    assert "window/alone" in lines[0] and lines[1].split()[:2] == ["13", "local"]


def test_rows_stay_in_place_under_the_pointer_and_names_are_never_cut(qtbot, tmp_path,
                                                                      monkeypatch):
    """A refresh that would re-sort the table leaves the rows where they are while the
    pointer is on it (a double-click follows the run it aimed at), and re-sorts once it
    leaves; a longer name that appears later gets a wide enough column."""
    root = tmp_path / "sweep"
    alarmed_run(root / "a", 0)
    alarmed_run(root / "b", 0)
    w = _window(qtbot, tmp_path, root)
    try:
        view = w.fleet
        before = _paths(view)
        on = [True]
        monkeypatch.setattr(view, "pointer_on_table", lambda: on[0])
        loud = "c"  # an alarmed run: the listing puts it first
        alarmed_run(root / loud, 2)
        long = "ppo-lr0.0003-gamma0.99-seed-12345/" + "x" * 40
        alarmed_run(root / long, 0)
        _refreshed(qtbot, view)
        assert _paths(view)[:2] == before  # new ones go last
        assert set(_paths(view)[2:]) == {loud, long}
        width = view.table.columnWidth(PATH)
        assert width >= view.table.fontMetrics().horizontalAdvance(long)
        on[0] = False  # the pointer left: the listing's order again
        _refreshed(qtbot, view)
        assert _paths(view)[0] == loud
    finally:
        w.close()


@pytest.mark.parametrize("fleet", [False, True])
def test_no_text_widens_the_window_past_a_small_screen(qtbot, tmp_path, fleet):
    """Whatever a label is made to say (an error line, a server's path, a run's name: one
    unbreakable 300-character word), the window's least width stays within 1,024 px."""
    from PySide6.QtWidgets import QLabel

    if fleet:
        w = _window(qtbot, tmp_path, tmp_path)
    else:
        w = MainWindow(source="pendulum", settings={}, speed=50.0)
        qtbot.addWidget(w)
        w.show()
    try:
        w.resize(1024, 700)
        word = "ssh://host/" + "x" * 290
        wide = []
        for label in w.findChildren(QLabel):
            before = label.text()
            label.setText(word)
            label.updateGeometry()
            if w.minimumSizeHint().width() > 1024:
                wide.append(label.objectName() or before[:40])
            label.setText(before)
        w.show_error(word)
        w.statusBar().showMessage(word)
        assert not wide and w.minimumSizeHint().width() <= 1024, wide
    finally:
        w.close()
