"""Every run under a folder, on this machine or a server's: ``idt-desk runs`` and the fleet.

A run is a folder holding a recording's ``config.json``. :class:`RunIndex` finds them all
under a root (recursively; a run's own folder is not searched further) and keeps, for each,
what it last read, so a refresh costs a stat of each folder and of each run's
``status.json`` (:mod:`idt_desk.recordings.status`), and opens only the files that changed:
the status files of runs being written, and the new lines of ``events.jsonl`` of a run
written before status files existed (folded by the same :class:`RunStatus`). A whole
``transitions.csv`` is never read.

The files are reached through a :class:`Files` (this machine's :class:`LocalFiles`, or a
server's over SFTP, :mod:`idt_desk.recordings.remote`). A link that leads outside the root
is not followed. What goes wrong with one run (a path that vanished, an unreadable or
malformed status file, a broken events line) is that run's ``error``, in one line; the
others are listed as usual.

    >>> import tempfile, idt_desk
    >>> root = tempfile.mkdtemp()
    >>> with idt_desk.Recorder(f"{root}/a", ["x"], ["u"], window=20, stride=10) as rec:
    ...     rec.add([[0.0]] * 50, [[0.0]] * 50, [[0.0]] * 50)
    >>> [(r["path"], r["state"], r["transitions"]) for r in RunIndex(root).refresh()]
    [('a', 'ended', 50)]
"""

from __future__ import annotations

import fnmatch
import json
import os
import posixpath
import stat as stat_mod
import time
from dataclasses import dataclass, field
from typing import Any, Protocol

from idt_desk.recordings.status import STATUS_FILE, RunStatus
from idt_desk.words import ago_text

__all__ = ["COLUMNS", "Files", "LocalFiles", "OneByOne", "RunIndex", "open_files", "root_problem",
           "row_line", "select"]

#: The keys of a listed run (``idt-desk runs --json``), in the table's order.
COLUMNS = ("path", "state", "transitions", "windows", "baseline", "alarms", "last_alarm",
           "severity", "cost", "active", "error")


class Files(Protocol):
    """What :class:`RunIndex` and a followed recording need of a file system.

    Paths are POSIX strings. The ``*_many`` forms take a list and answer in its order; a
    server's files answer them in one go (requests pipelined over one connection), so a
    refresh of 1,000 runs costs a few round trips, not thousands.
    """

    root: str

    def listdir(self, path: str) -> list[tuple[str, str, float]]:
        """Entries of ``path``: (name, "dir" or "file", modification time).

        Links are resolved; those leading outside the root are left out.
        """

    def stat(self, path: str) -> tuple[float, int] | None:
        """(modification time, size) of a file or folder, or None when it is not there."""

    def read(self, path: str, offset: int = 0, size: int = -1) -> bytes:
        """A regular file's bytes from ``offset`` on, at most ``size`` (all: -1).

        Anything but a regular file (a FIFO, a device) raises OSError, never waited on.
        """

    def location(self, path: str) -> str:
        """What names ``path`` for a reader elsewhere: a local path, or an ``ssh://`` URL."""

    def outside(self, paths: list[str]) -> list[str]:
        """Those of ``paths`` that are links leading out of their own folder."""

    def stat_many(self, paths: list[str]) -> list[tuple[float, int] | None]:
        """:meth:`stat` of each path."""

    def listdir_many(self, paths: list[str]) -> list[list[tuple[str, str, float]] | OSError]:
        """:meth:`listdir` of each path; a folder that cannot be listed gives its OSError."""

    def read_many(self, paths: list[str]) -> list[bytes | OSError]:
        """:meth:`read` of each whole file; one that cannot be read gives its OSError."""


class OneByOne:
    """The ``*_many`` forms of :class:`Files` as a loop over the single ones."""

    def stat_many(self, paths: list[str]) -> list[tuple[float, int] | None]:
        """See :meth:`Files.stat_many`."""
        return [self.stat(p) for p in paths]  # type: ignore[attr-defined]

    def listdir_many(self, paths: list[str]) -> list[list[tuple[str, str, float]] | OSError]:
        """See :meth:`Files.listdir_many`."""
        return [_or_error(self.listdir, p) for p in paths]  # type: ignore[attr-defined]

    def read_many(self, paths: list[str]) -> list[bytes | OSError]:
        """See :meth:`Files.read_many`."""
        return [_or_error(self.read, p) for p in paths]  # type: ignore[attr-defined]


def _or_error(fn: Any, path: str) -> Any:
    try:
        return fn(path)
    except OSError as exc:
        return exc


class LocalFiles(OneByOne):
    """The files under ``root`` on this machine."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = os.path.abspath(os.fspath(root))
        self._real = os.path.realpath(self.root)

    def listdir(self, path: str) -> list[tuple[str, str, float]]:
        """See :meth:`Files.listdir`."""
        out = []
        with os.scandir(path) as it:
            for e in it:
                try:
                    if e.is_symlink():
                        real = os.path.realpath(e.path)
                        if os.path.commonpath([real, self._real]) != self._real:
                            continue  # a link leading outside the root: not followed
                    st = e.stat()
                except (OSError, ValueError):
                    continue
                kind = "dir" if stat_mod.S_ISDIR(st.st_mode) else "file"
                out.append((e.name, kind, st.st_mtime))
        return out

    def location(self, path: str) -> str:
        """See :meth:`Files.location`."""
        return path

    def outside(self, paths: list[str]) -> list[str]:
        """See :meth:`Files.outside`."""
        return [p for p in paths if os.path.islink(p) and os.path.commonpath(
            [os.path.realpath(p), os.path.realpath(os.path.dirname(p))])
            != os.path.realpath(os.path.dirname(p))]

    def stat(self, path: str) -> tuple[float, int] | None:
        """See :meth:`Files.stat`."""
        try:
            st = os.stat(path)
        except OSError:
            return None
        return st.st_mtime, st.st_size

    def read(self, path: str, offset: int = 0, size: int = -1) -> bytes:
        """See :meth:`Files.read`."""
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        with open(fd, "rb") as f:
            if not stat_mod.S_ISREG(os.fstat(fd).st_mode):
                raise OSError(f"{path}: not a regular file")
            f.seek(offset)
            return f.read(size)


def open_files(location: str | os.PathLike[str]) -> Files:
    """The files at ``location``: a local path, or ``ssh://[user@]host[:port]/path``."""
    text = os.fspath(location)
    if isinstance(text, str) and text.startswith("ssh://"):
        from idt_desk.recordings.remote import SFTPFiles

        return SFTPFiles(text)
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
    n_transitions: int | None = None
    n_windows: int | None = None
    max_i: int = 0
    error: str | None = None
    active: float | None = None


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
    """

    def __init__(self, location: str | os.PathLike[str] | Files, silence: float = 10.0,
                 idle: float = 5.0) -> None:
        self.files = location if hasattr(location, "listdir") else open_files(location)
        self.silence, self.idle = float(silence), float(idle)
        self._dirs: dict[str, tuple[float, list[str], bool]] = {}
        self._runs: dict[str, _Run] = {}
        #: Files opened by the latest refresh (status files, events, configs).
        self.opened = 0

    def refresh(self, now: float | None = None) -> list[dict[str, Any]]:
        """Every run as a row (:data:`COLUMNS`): alarmed first, then the latest active.

        Raises
        ------
        OSError
            The root itself cannot be listed (it vanished, or the server went away).
        """
        now = time.time() if now is None else now
        self.opened = 0
        runs = self._find(self.files.root)
        for gone in set(self._runs) - set(runs):
            del self._runs[gone]
        self._update(runs)
        rows = [self._row(path, self._runs[path], now) for path in runs]
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
        time moved.
        """
        found: list[str] = []
        level: list[str] = [top]
        seen: set[str] = set()
        while level:
            level = [d for d in dict.fromkeys(level) if d not in seen]
            seen.update(level)
            stale = [(d, st) for d, st in zip(level, self.files.stat_many(level), strict=True)
                     if st is None or self._dirs.get(d, (None,))[0] != st[0]]
            listings = self.files.listdir_many([d for d, _ in stale])
            for (d, st), entries in zip(stale, listings, strict=True):
                if isinstance(entries, OSError):
                    if d == top:
                        raise entries
                    self._dirs.pop(d, None)
                    continue
                is_run = any(n == "config.json" and k == "file" for n, k, _ in entries)
                subdirs = sorted(posixpath.join(d, n) for n, k, _ in entries
                                 if k == "dir" and not n.startswith("."))
                self._dirs[d] = (st[0] if st else 0.0, subdirs, is_run)
            below: list[str] = []
            for d in level:
                if d in self._dirs:
                    _, subdirs, is_run = self._dirs[d]
                    if is_run:
                        found.append(d)  # a run's own folder is not searched further
                    else:
                        below.extend(subdirs)
            level = below
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
                    run.error = f"events.jsonl: {_one_line(exc)}"
            elif st != run.key:
                changed.append((path, st))
            else:
                run.active = run.status.beat_wall or run.status.rows_wall
        self.opened += len(changed)
        datas = self.files.read_many([posixpath.join(p, STATUS_FILE) for p, _ in changed])
        for (path, st), data in zip(changed, datas, strict=True):
            run = self._runs[path]
            try:
                if isinstance(data, OSError):
                    raise data
                status = RunStatus.from_json(json.loads(data))
            except FileNotFoundError:
                run.error = "vanished while being read"
            except (OSError, ValueError, UnicodeDecodeError) as exc:
                run.error = f"{STATUS_FILE}: {_one_line(exc)}"
            else:
                run.status, run.key, run.legacy = status, st, False
                run.active = status.beat_wall or status.rows_wall

    def _fold_events(self, path: str, run: _Run) -> None:
        """A run without a status file: its config, and its events' new whole lines."""
        if not run.legacy:
            run.legacy, run.status, run.offset = True, RunStatus(), 0
        cfg = self.files.stat(posixpath.join(path, "config.json"))
        if cfg is not None and cfg != run.config_key:
            self.opened += 1
            config = json.loads(self.files.read(posixpath.join(path, "config.json")) or b"{}")
            if not isinstance(config, dict):
                raise ValueError("config.json: not a JSON object")
            run.config_key, run.complete = cfg, config.get("complete") is True
            run.n_transitions, run.n_windows = (
                n if isinstance(n, int) and not isinstance(n, bool) else None
                for n in (config.get("n_transitions"), config.get("n_windows")))
        ev = self.files.stat(posixpath.join(path, "events.jsonl"))
        beat = self.files.stat(posixpath.join(path, "transitions.csv"))
        run.active = max((x[0] for x in (ev, beat, cfg) if x is not None), default=None)
        if ev is None or ev[1] <= run.offset:
            return
        self.opened += 1
        data = self.files.read(posixpath.join(path, "events.jsonl"), run.offset)
        whole = data[:data.rfind(b"\n") + 1]  # a half-written last line waits for its end
        bad = 0
        for line in whole.splitlines():
            try:
                event = json.loads(line)
            except ValueError:
                bad += 1
                continue
            if isinstance(event, dict):
                run.status.fold(event)
                if isinstance(event.get("i"), int):
                    run.max_i = max(run.max_i, event["i"])
        run.offset += len(whole)
        if bad:
            run.error = f"events.jsonl: {bad} unreadable line{'s' if bad > 1 else ''} skipped"

    def _row(self, path: str, run: _Run, now: float) -> dict[str, Any]:
        st = run.status
        rel = posixpath.relpath(path, self.files.root) if path != self.files.root else "."
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
                "last_alarm": st.last_alarm, "severity": st.severity, "cost": st.cost,
                "active": run.active, "error": run.error or st.error}


def root_problem(location: str | os.PathLike[str], exc: OSError) -> str:
    """Why the root of a listing cannot be listed, in one line."""
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
    parts = [row["path"], row["state"], f"{row['transitions']:,} transitions",
             f"{'?' if row['windows'] is None else format(row['windows'], ',')} windows",
             f"baseline {row['baseline']}",
             f"{row['alarms']} alarm{'s' if row['alarms'] != 1 else ''}"]
    if row["last_alarm"] is not None:
        parts.append(f"last at {row['last_alarm']:,.1f} s")
    parts += [x for x in (row["severity"], row["cost"] and f"cost {row['cost']}") if x]
    if row["active"] is not None:
        parts.append(f"active {ago_text(now - row['active'])}")
    if row["error"]:
        parts.append(f"error: {row['error']}")
    return "  ".join(parts)


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__
