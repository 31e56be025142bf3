"""The files a listing or a follower reads, here or on a server, never outside their root.

:class:`Files` is what :class:`~idt_desk.recordings.runs.RunIndex` and
:class:`~idt_desk.recordings.tail.RecordingTail` read through: this machine's
(:class:`LocalFiles`) or a server's over SFTP (:mod:`idt_desk.recordings.remote`). A watched
folder holds other people's files, so every implementation keeps the same promises: nothing
outside the root is opened (a file's real path is checked at open time), nothing but a
regular file is read (a FIFO is never waited on), and a folder's entries carry its identity
so a link loop is walked once.
"""

from __future__ import annotations

import errno
import os
import posixpath
import stat as stat_mod
from collections.abc import Hashable
from typing import Any, NamedTuple, Protocol

from idt_desk.errors import InputError
from idt_desk.recordings.files import HEAD_BYTES
from idt_desk.words import shown

__all__ = ["CONFIG_BYTES", "SYSTEM_ROOTS", "Entry", "Files", "LocalFiles", "OneByOne",
           "Outside", "outside_error", "refuse_system_root", "within"]

#: The most bytes of a config.json read (a writer's is a few KiB).
CONFIG_BYTES = HEAD_BYTES


class Entry(NamedTuple):
    """One entry of a listed folder.

    ``key`` names the folder an entry of kind "dir" really is (this machine's device and
    inode, a server's real path): two links to one folder give one key, so a listing that
    meets a folder twice (a link to ``.``, two links to one folder) lists it once.
    """

    name: str
    kind: str  # "dir", "file", or "outside": a link leading outside the root (not followed)
    mtime: float
    key: Hashable


class Outside(PermissionError):
    """A file or folder reached through a link that leads outside the root: never opened."""


def outside_error(path: str, root: str) -> Outside:
    """The one line that refuses ``path``: a link leading outside ``root``."""
    rel = posixpath.relpath(path, root) if within(path, root) else path
    return Outside(f"{shown(rel)}: a link leading outside {shown(root)}: not followed")


def within(real: str, root: str) -> bool:
    """Whether the resolved path ``real`` is ``root`` or under it (POSIX strings)."""
    return real == root or real.startswith(root.rstrip("/") + "/")


class Files(Protocol):
    """What :class:`RunIndex` and a followed recording need of a file system.

    Paths are POSIX strings. Nothing outside :attr:`root` is ever opened: a file is read only
    when its real path (links resolved) is under the root and it is a regular file there,
    checked as it is opened (a link swapped in after a listing is refused all the same).
    The ``*_many`` forms take a list and answer in its order; a server's files answer them in
    one go (requests pipelined over one connection), so a refresh of 1,000 runs costs a few
    round trips, not thousands.
    """

    root: str

    def root_key(self) -> Hashable:
        """The root folder's :attr:`Entry.key`."""

    def listdir(self, path: str) -> list[Entry]:
        """Entries of ``path``.

        Links are resolved; those leading outside the root are of kind "outside" (never
        looked at further).
        """

    def stat(self, path: str) -> tuple[float, int] | None:
        """(modification time, size) of a file or folder, or None when it is not there.

        A link leading outside the root is the link's own (its target is never looked at).
        """

    def read(self, path: str, offset: int = 0, size: int = -1) -> bytes:
        """A regular file's bytes from ``offset`` on, at most ``size`` (all: -1).

        Raises
        ------
        Outside
            Its real path is not under the root (a link leading out).
        OSError
            Anything but a regular file (a FIFO, a device; never waited on), or unreadable.
        """

    def location(self, path: str) -> str:
        """What names ``path`` for a reader elsewhere: a local path, or an ``ssh://`` URL."""

    def stat_many(self, paths: list[str]) -> list[tuple[float, int] | None]:
        """:meth:`stat` of each path."""

    def listdir_many(self, paths: list[str]) -> list[list[Entry] | OSError]:
        """:meth:`listdir` of each path; a folder that cannot be listed gives its OSError."""

    def read_many(self, paths: list[str], size: int = -1) -> list[bytes | OSError]:
        """:meth:`read` of each file, at most ``size`` bytes.

        One that cannot be read gives its OSError.
        """


class OneByOne:
    """The ``*_many`` forms of :class:`Files` as a loop over the single ones."""

    def stat_many(self, paths: list[str]) -> list[tuple[float, int] | None]:
        """See :meth:`Files.stat_many`."""
        return [self.stat(p) for p in paths]  # type: ignore[attr-defined]

    def listdir_many(self, paths: list[str]) -> list[list[Entry] | OSError]:
        """See :meth:`Files.listdir_many`."""
        return [_or_error(self.listdir, p) for p in paths]  # type: ignore[attr-defined]

    def read_many(self, paths: list[str], size: int = -1) -> list[bytes | OSError]:
        """See :meth:`Files.read_many`."""
        return [_or_error(self.read, p, 0, size) for p in paths]  # type: ignore[attr-defined]


def _or_error(fn: Any, *args: Any) -> Any:
    try:
        return fn(*args)
    except OSError as exc:
        return exc


class LocalFiles(OneByOne):
    """The files under ``root`` on this machine.

    A file is opened by its real path, checked to be under the root, with ``O_NOFOLLOW``
    (a link put in its place after the check is refused, not followed) and ``O_NONBLOCK``
    (a FIFO is refused, never waited on).
    """

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = os.path.abspath(os.fspath(root))
        self._real = os.path.realpath(self.root)

    def root_key(self) -> Hashable:
        """See :meth:`Files.root_key`."""
        st = os.stat(self._real)
        return st.st_dev, st.st_ino

    def listdir(self, path: str) -> list[Entry]:
        """See :meth:`Files.listdir`."""
        out = []
        with os.scandir(path) as it:
            for e in it:
                try:
                    if e.is_symlink() and not within(os.path.realpath(e.path), self._real):
                        out.append(Entry(e.name, "outside", 0.0, None))
                        continue  # a link leading outside the root: not followed
                    st = e.stat()
                except FileNotFoundError:
                    continue  # deleted since the folder was read
                except (OSError, ValueError):
                    if _is_dir(e):  # a path too long to look at: listed as that folder's error
                        out.append(Entry(e.name, "dir", 0.0, ("unlooked", e.path)))
                    continue
                kind = "dir" if stat_mod.S_ISDIR(st.st_mode) else "file"
                out.append(Entry(e.name, kind, st.st_mtime, (st.st_dev, st.st_ino)))
        return out

    def location(self, path: str) -> str:
        """See :meth:`Files.location`."""
        return path

    def stat(self, path: str) -> tuple[float, int] | None:
        """See :meth:`Files.stat`."""
        try:
            st = os.lstat(path)
            if stat_mod.S_ISLNK(st.st_mode) and within(os.path.realpath(path), self._real):
                st = os.stat(path)
        except OSError:
            return None
        return st.st_mtime, st.st_size

    def read(self, path: str, offset: int = 0, size: int = -1) -> bytes:
        """See :meth:`Files.read`."""
        real = os.path.realpath(path)
        if not within(real, self._real):
            raise outside_error(path, self.root)
        try:
            fd = os.open(real, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError as exc:
            if exc.errno == errno.ELOOP:  # made a link since it was resolved
                raise outside_error(path, self.root) from None
            raise
        with open(fd, "rb") as f:
            # What was opened, not what was checked: a folder on the way swapped for a link
            # between the check and the open (O_NOFOLLOW guards the last name only) would
            # open a file outside the root (10 of 20,000 listings under such a race did).
            if not within(_opened_path(fd, real), self._real):
                raise outside_error(path, self.root)
            if not stat_mod.S_ISREG(os.fstat(fd).st_mode):
                raise OSError(f"{shown(path)}: not a regular file")
            f.seek(offset)
            return f.read(size)


def _opened_path(fd: int, checked: str) -> str:
    """Where the open file ``fd`` really is (Linux: its /proc entry), else ``checked``.

    Elsewhere the file's identity is compared with the checked path's once more instead: a
    swap after that look is a race no portable call closes.
    """
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        st, now = os.fstat(fd), os.stat(checked, follow_symlinks=False)
        return checked if (st.st_dev, st.st_ino) == (now.st_dev, now.st_ino) else ""


def _is_dir(entry: os.DirEntry) -> bool:
    try:
        return entry.is_dir(follow_symlinks=False)
    except OSError:
        return False


#: Folders a listing refuses to crawl: the file system's root and its virtual trees (and
#: everything under /proc and /sys; under /dev, a tmpfs such as /dev/shm may hold runs).
SYSTEM_ROOTS = ("/", "/proc", "/sys", "/dev")


def refuse_system_root(real: str, given: str) -> None:
    """Refuse a listing of the whole file system, here or on a server (``real``: resolved)."""
    if real in SYSTEM_ROOTS or real.startswith(("/proc/", "/sys/")):
        raise InputError(f"{shown(given)}: refused: a listing there would crawl the whole "
                         "machine (and /proc links back to /); give the folder of your runs")
