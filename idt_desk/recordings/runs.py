"""Every run under a folder, on this machine or a server's: ``idt-desk runs`` and the fleet.

A run is a folder holding a recording's ``config.json``. :class:`RunIndex` finds them all
under a root (recursively; a run's own folder is not searched further) and keeps, for each,
what it last read, so a refresh costs a stat of each folder and of each run's
``status.json`` (:mod:`idt_desk.recordings.status`), and opens only the files that changed:
the status files of runs being written, and the new lines of ``events.jsonl`` of a run
written before status files existed (folded by the same :class:`RunStatus`). A whole
transitions file is never read.

The files are reached through a :class:`~idt_desk.recordings.fs.Files` (this machine's, or
a server's over SFTP, :mod:`idt_desk.recordings.remote`): nothing outside the root is
opened, and a folder reached twice (a link loop) is listed once. What goes wrong with one
run (a path that vanished, an unreadable or malformed status file, a broken events line) is
that run's ``error``, in one line; the others are listed as usual.

    >>> import tempfile, idt_desk
    >>> root = tempfile.mkdtemp()
    >>> with idt_desk.Recorder(f"{root}/a", ["x"], ["u"], window=20, stride=10) as rec:
    ...     rec.add([[0.0]] * 50, [[0.0]] * 50, [[0.0]] * 50)
    >>> [(r["path"], r["state"], r["transitions"]) for r in RunIndex(root).refresh()]
    [('a', 'ended', 50)]
"""

from __future__ import annotations

import fnmatch
import os
import posixpath
import time
from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Any

from idt_desk.errors import InputError
from idt_desk.recordings.files import HEAD_BYTES, TRANSITIONS, nonblank_lines, parse_json
from idt_desk.recordings.fs import CONFIG_BYTES, Files, LocalFiles, Outside, refuse_system_root
from idt_desk.recordings.status import STATUS_FILE, RunStatus
from idt_desk.words import ago_text, shown

__all__ = ["COLUMNS", "EVENTS_BYTES", "MAX_DEPTH", "STATUS_BYTES", "RunIndex", "open_files",
           "root_problem", "row_line", "select"]

#: The keys of a listed run (``idt-desk runs --json``), in the table's order.
COLUMNS = ("path", "state", "transitions", "windows", "baseline", "alarms", "last_alarm",
           "severity", "changed", "cost", "regime", "active", "error")


def open_files(location: str | os.PathLike[str], missing_ok: bool = False) -> Files:
    """The files at ``location``: a local path, or ``ssh://[user@]host[:port]/path``.

    ``missing_ok``: a folder that does not exist yet is taken (listed once it does).

    Raises
    ------
    InputError
        An empty path (it would mean the working folder, unsaid) or the whole file system
        (``/``, or ``/proc``, ``/sys``, ``/dev``: a listing would crawl the machine), locally
        or on a server; or a server that cannot be reached (see
        :class:`~idt_desk.recordings.remote.SFTPFiles`).
    """
    text = os.fspath(location)
    if isinstance(text, str) and text.startswith("ssh://"):
        from idt_desk.recordings.remote import SFTPFiles

        return SFTPFiles(text, missing_ok=missing_ok)
    if not str(text).strip():
        raise InputError("an empty path: give the folder of your runs (. for this one)")
    refuse_system_root(os.path.realpath(text), str(text))
    return LocalFiles(text)


@dataclass
class _Run:
    """What was last read of one run."""

    status: RunStatus = field(default_factory=RunStatus)
    key: tuple[float, int] | None = None  # status.json's (mtime, size) when read
    legacy: bool = False
    offset: int = 0  # events.jsonl bytes folded (legacy runs)
    config_key: tuple[float, int] | None = None
    complete: bool = False
    table: str = TRANSITIONS[1]  # the transitions file its config's format names
    n_transitions: int | None = None
    n_windows: int | None = None
    max_i: int = 0
    error: str | None = None
    active: float | None = None
    events_stuck: str | None = None  # why events.jsonl is read no further
    gone: bool = False  # deleted since it was found: not listed


#: The most bytes of a status file read (a writer's is under 1 KiB): a larger one is refused.
STATUS_BYTES = 64 << 10
#: The most bytes of a legacy run's events.jsonl read a refresh; a line longer than this
#: ends the reading of that file (said in the run's error), never re-read at each refresh.
EVENTS_BYTES = HEAD_BYTES
#: Folders deeper than this under the root are not searched (said in :attr:`RunIndex.notes`).
MAX_DEPTH = 16


class RunIndex:
    """The runs under ``location`` and their state, refreshed cheaply (see the module).

    Parameters
    ----------
    location
        A folder (or one run), local or ``ssh://``; or a :class:`Files`.
    silence
        Seconds without a heartbeat after which an open run is ``stopped responding``.
    idle
        Seconds without new rows after which a run still beating is ``idle``.

    Raises
    ------
    InputError
        The location is refused (see :func:`open_files`).
    """

    def __init__(self, location: str | os.PathLike[str] | Files, silence: float = 10.0,
                 idle: float = 5.0, wait: bool = False) -> None:
        self.files = location if hasattr(location, "listdir") else open_files(location, wait)
        #: A root that does not exist (yet, or any more) lists no run and says so in
        #: :attr:`notes`, instead of failing (``idt-desk watch`` waits for a sweep's folder).
        self.wait = bool(wait)
        self.silence, self.idle = float(silence), float(idle)
        self._dirs: dict[str, tuple[float, list[tuple[str, Hashable]], bool, int]] = {}
        self._runs: dict[str, _Run] = {}
        self._unlisted: dict[str, str] = {}
        #: Files opened by the latest refresh (status files, events, configs).
        self.opened = 0
        #: What the latest refresh left out and why, a line each (links leading outside
        #: the root, folders too deep, a folder reached twice).
        self.notes: list[str] = []

    def refresh(self, now: float | None = None) -> list[dict[str, Any]]:
        """Every run as a row (:data:`COLUMNS`): alarmed first, then the latest active.

        A folder that cannot be listed (no permission, a name too long to open) is a row of
        its own, state ``error``: never silently missing.

        Raises
        ------
        OSError
            The root itself cannot be listed (it vanished, unless :attr:`wait`; or the
            server went away).
        """
        now = time.time() if now is None else now
        self.opened = 0
        self.notes = []
        try:
            runs = self._find(self.files.root)
        except FileNotFoundError:
            if not self.wait:
                raise
            self.notes = [f"{shown(self.files.location(self.files.root), 300)}: no such folder "
                          "yet; waiting for it"]
            self._runs.clear()
            return []
        for gone in set(self._runs) - set(runs):
            del self._runs[gone]
        self._update(runs)
        rows = [self._row(path, self._runs[path], now) for path in runs
                if not self._runs[path].gone]
        rows += [self._unlisted_row(path, why) for path, why in self._unlisted.items()]
        rows.sort(key=lambda r: (r["alarms"] == 0 and r["state"] != "error",
                                 -(r["active"] or 0.0), r["path"]))
        return rows

    def location(self, row: dict[str, Any]) -> str:
        """Where a listed run is, to follow it: a local path or an ``ssh://`` URL."""
        root = self.files.root
        return self.files.location(root if row["path"] == "." else
                                   posixpath.join(root, row["path"]))

    def close(self) -> None:
        """Let the files go (a server's connection is closed)."""
        close = getattr(self.files, "close", None)
        if close is not None:
            close()

    def _find(self, top: str) -> list[str]:
        """Run folders under ``top``, a level at a time.

        One batch of stats a level, and one of listings of the folders whose modification
        time moved. A folder is visited once, by its identity (:attr:`Entry.key`), however
        many links lead to it.
        """
        found: list[str] = []
        level: list[tuple[str, Hashable]] = [(top, self.files.root_key())]
        seen: set[Hashable] = set()
        self._unlisted = {}
        twice = depth = outside = 0
        while level:
            fresh = []
            for d, key in level:
                if key in seen:
                    twice += 1
                    continue
                seen.add(key)
                fresh.append(d)
            stale = [(d, st) for d, st in zip(fresh, self.files.stat_many(fresh), strict=True)
                     if st is None or self._dirs.get(d, (None,))[0] != st[0]]
            listings = self.files.listdir_many([d for d, _ in stale])
            for (d, st), entries in zip(stale, listings, strict=True):
                if isinstance(entries, OSError):
                    if d == top:
                        raise entries
                    self._dirs.pop(d, None)
                    if not isinstance(entries, FileNotFoundError):  # not deleted: say so
                        self._unlisted[d] = _one_line(entries)
                    continue
                is_run = any(e.name == "config.json" and e.kind == "file" for e in entries)
                subdirs = sorted((posixpath.join(d, e.name), e.key) for e in entries
                                 if e.kind == "dir" and not e.name.startswith("."))
                n_out = sum(e.kind == "outside" for e in entries)
                self._dirs[d] = (st[0] if st else 0.0, subdirs, is_run, n_out)
            below: list[tuple[str, Hashable]] = []
            for d in fresh:
                if d in self._dirs:
                    _, subdirs, is_run, n_out = self._dirs[d]
                    outside += n_out
                    if is_run:
                        found.append(d)  # a run's own folder is not searched further
                    else:
                        below.extend(subdirs)
            depth += 1
            if below and depth > MAX_DEPTH:
                self.notes.append(f"{len(below):,} folder{'s' if len(below) != 1 else ''} "
                                  f"deeper than {MAX_DEPTH} levels not searched")
                break
            level = below
        if outside:
            self.notes.insert(0, f"{outside} link{'s' if outside != 1 else ''} leading "
                              "outside the folder not followed")
        if twice:
            self.notes.append(f"{twice} link{'s' if twice != 1 else ''} to a folder already "
                              "listed (a loop, or two ways to one folder) listed once")
        return found

    def _update(self, paths: list[str]) -> None:
        """Each run's status: the status files that changed read in one batch."""
        names = [posixpath.join(p, STATUS_FILE) for p in paths]
        changed = []
        for path, st in zip(paths, self.files.stat_many(names), strict=True):
            run = self._runs.setdefault(path, _Run())
            run.error = None
            if st is None:
                try:
                    self._fold_events(path, run)
                except FileNotFoundError:
                    run.error = "vanished while being read"
                except (OSError, ValueError, UnicodeDecodeError) as exc:
                    run.error = _one_line(exc)
            elif st[1] > STATUS_BYTES:
                run.error = (f"{STATUS_FILE}: {st[1]:,} bytes, more than a status file holds "
                             f"({STATUS_BYTES // 1024} KiB): not read")
                run.key = None
            elif st != run.key:
                changed.append((path, st))
            else:
                run.active = run.status.beat_wall or run.status.rows_wall
        self.opened += len(changed)
        datas = self.files.read_many([posixpath.join(p, STATUS_FILE) for p, _ in changed],
                                     STATUS_BYTES + 1)
        for (path, st), data in zip(changed, datas, strict=True):
            run = self._runs[path]
            try:
                if isinstance(data, OSError):
                    raise data
                if len(data) > STATUS_BYTES:
                    raise ValueError(f"more than {STATUS_BYTES // 1024} KiB: not read")
                status = RunStatus.from_json(parse_json(data, "JSON"))
            except FileNotFoundError:
                run.error = "vanished while being read"
            except Outside as exc:
                run.error = str(exc)
                run.key = None
            except (OSError, ValueError, UnicodeDecodeError) as exc:
                run.error = f"{STATUS_FILE}: {_one_line(exc)}"
                run.key = None
            else:
                run.status, run.key, run.legacy = status, st, False
                run.active = status.beat_wall or status.rows_wall

    def _fold_events(self, path: str, run: _Run) -> None:
        """A run without a status file: its config, and its events' new whole lines."""
        if not run.legacy:
            run.legacy, run.status, run.offset = True, RunStatus(), 0
        cfg = self.files.stat(posixpath.join(path, "config.json"))
        if cfg is None:
            run.gone = True  # deleted since it was found (or being replaced): not a run now
            return
        run.gone = False
        if cfg != run.config_key:
            self.opened += 1
            if cfg[1] > CONFIG_BYTES:
                raise ValueError(f"config.json: {cfg[1]:,} bytes, more than a recording's "
                                 f"config holds ({CONFIG_BYTES >> 20} MiB): not read")
            raw = self.files.read(posixpath.join(path, "config.json"), 0, CONFIG_BYTES)
            config = parse_json(raw or b"{}", "config.json")
            if not isinstance(config, dict):
                raise ValueError("config.json: not a JSON object")
            run.config_key, run.complete = cfg, config.get("complete") is True
            version = config.get("format_version")
            run.table = TRANSITIONS.get(version, TRANSITIONS[1]) if type(version) is int \
                else TRANSITIONS[1]
            run.n_transitions, run.n_windows = (
                n if isinstance(n, int) and not isinstance(n, bool) and 0 <= n < 10**15
                else None for n in (config.get("n_transitions"), config.get("n_windows")))
        ev = self.files.stat(posixpath.join(path, "events.jsonl"))
        beat = self.files.stat(posixpath.join(path, run.table))
        run.active = max((x[0] for x in (ev, beat, cfg) if x is not None), default=None)
        if run.events_stuck is not None:
            run.error = run.events_stuck
            return
        if ev is None or ev[1] <= run.offset:
            return
        self.opened += 1
        bad = 0
        while True:  # a chunk at a time: a long finished run is read whole, a MiB at a time
            try:
                data = self.files.read(posixpath.join(path, "events.jsonl"), run.offset,
                                       EVENTS_BYTES)
            except Outside as exc:
                run.events_stuck = str(exc)
                raise ValueError(run.events_stuck) from None
            whole = data[:data.rfind(b"\n") + 1]  # a half-written last line waits its end
            if not whole and len(data) >= EVENTS_BYTES:
                run.events_stuck = (f"events.jsonl: a line longer than {EVENTS_BYTES >> 20} "
                                    f"MiB at byte {run.offset:,}: not an events file; read "
                                    "no further")
                run.error = run.events_stuck
                return
            for _at, line in nonblank_lines(whole):
                try:
                    event = parse_json(line, "events.jsonl")
                except ValueError:
                    bad += 1
                    continue
                if isinstance(event, dict):
                    run.status.fold(event)
                    i = event.get("i")
                    if isinstance(i, int) and not isinstance(i, bool) and 0 <= i < 10**15:
                        run.max_i = max(run.max_i, i)
            run.offset += len(whole)
            if len(data) < EVENTS_BYTES:
                break
        if bad:
            run.error = f"events.jsonl: {bad} unreadable line{'s' if bad > 1 else ''} skipped"

    def _rel(self, path: str) -> str:
        return posixpath.relpath(path, self.files.root) if path != self.files.root else "."

    def _unlisted_row(self, path: str, why: str) -> dict[str, Any]:
        """A folder that could not be listed: a row saying so (it may hold runs)."""
        row = dict.fromkeys(COLUMNS)
        row.update(path=self._rel(path), state="error", transitions=0, baseline="—",
                   alarms=0, error=f"this folder cannot be listed: {why}")
        return row

    def _row(self, path: str, run: _Run, now: float) -> dict[str, Any]:
        st = run.status
        rel = self._rel(path)
        if run.legacy:
            ended = run.complete or st.ended
            transitions = run.n_transitions if run.complete and run.n_transitions is not None \
                else run.max_i
            windows = run.n_windows if run.complete else None
        else:
            ended, transitions, windows = st.ended, st.transitions, st.windows
        beat = st.beat_wall if not run.legacy else run.active
        if run.error is not None and run.key is None and not run.legacy:
            state = "error"
        elif st.error:
            state = "error"
        elif ended:
            state = "ended"
        elif beat is None or now - beat > self.silence:
            state = "stopped responding"
        elif not run.legacy and st.rows_wall is not None and now - st.rows_wall > self.idle:
            state = "idle"
        else:
            state = "writing"
        return {"path": rel, "state": state, "transitions": int(transitions or 0),
                "windows": windows, "baseline": st.baseline_text(), "alarms": st.alarms,
                "last_alarm": st.last_alarm, "severity": st.severity, "changed": st.changed,
                "cost": st.cost,
                "regime": st.regime,
                "active": run.active, "error": run.error or st.error}


def root_problem(location: str | os.PathLike[str], exc: OSError) -> str:
    """Why the root of a listing cannot be listed, in one line."""
    location = shown(os.fspath(location))
    if isinstance(exc, FileNotFoundError):
        return f"{location}: no such folder"
    if isinstance(exc, NotADirectoryError):
        return f"{location}: not a folder"
    return f"{location}: cannot list it: {exc.strerror or exc}"


def select(rows: list[dict[str, Any]], pattern: str | None = None,
           active_within: float | None = None, now: float | None = None
           ) -> list[dict[str, Any]]:
    """Rows whose path matches ``pattern`` (a glob) and active within that many seconds."""
    now = time.time() if now is None else now
    return [r for r in rows
            if (pattern is None or fnmatch.fnmatch(r["path"], pattern))
            and (active_within is None or (r["active"] is not None
                                           and now - r["active"] <= active_within))]


def row_line(row: dict[str, Any], now: float | None = None) -> str:
    """One run in one line, as ``idt-desk runs`` prints it."""
    now = time.time() if now is None else now
    parts = [shown(row["path"]), row["state"], f"{row['transitions']:,} transitions",
             f"{'?' if row['windows'] is None else format(row['windows'], ',')} windows",
             f"baseline {row['baseline']}",
             f"{row['alarms']} alarm{'s' if row['alarms'] != 1 else ''}"]
    if row["last_alarm"] is not None:
        parts.append(f"last at {row['last_alarm']:,.1f} s")
    parts += [shown(x) for x in (row["severity"], row["changed"] and f"changed: {row['changed']}",
                                 row["cost"] and f"cost {row['cost']}") if x]
    if row["regime"] not in (None, "", "resolved"):  # a window the estimator cannot read
        parts.append(f"estimator {row['regime']}")
    if row["active"] is not None:
        parts.append(f"active {ago_text(now - row['active'])}")
    if row["error"]:
        parts.append(f"error: {shown(row['error'])}")
    return "  ".join(parts)


def _one_line(exc: BaseException) -> str:
    return shown(" ".join(str(exc).split()) or type(exc).__name__, 300)
