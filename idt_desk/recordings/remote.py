"""A server's recordings over SSH: ``ssh://[user@]host[:port]/path`` for ``runs`` and ``watch``.

Files are read over SFTP with asyncssh (a kept, pure-Python SSH library with both the client
and a server the tests start on 127.0.0.1; the system ``ssh`` would need a process per file
and a parser for ``ls``). Nothing is installed or started on the server: only its sshd's SFTP
subsystem is used, and files are read from a byte offset (a growing ``events.jsonl`` is
tailed, never read again whole). The user's OpenSSH setup is asyncssh's default and is
honoured: ``~/.ssh/config`` (host aliases, users, ports, identity files), the keys in
``~/.ssh`` and the agent (``SSH_AUTH_SOCK``), and ``~/.ssh/known_hosts``: a server whose
host key is not there is refused, never accepted silently. Only JSON and CSV text crosses
the connection; nothing is unpickled.

Nothing outside the URL's folder is opened: a file is read only when its real path (the
server resolves the links) is under the folder and it is a regular file there, checked at each
read (a link swapped in after a listing is refused all the same). A server that stops
answering is found out by a keepalive (:data:`KEEPALIVE_S` seconds, :data:`KEEPALIVE_COUNT`
misses) and every request gives up after :data:`REQUEST_TIMEOUT` seconds, saying so in one
line; closing never waits on the network.

The calls are synchronous: an event loop in a thread of its own runs them.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import os
import posixpath
import stat as stat_mod
import threading
import time
from collections.abc import Hashable
from typing import Any
from urllib.parse import quote, unquote, urlsplit

from idt_desk.errors import InputError
from idt_desk.recordings.fs import Entry, outside_error, refuse_system_root, within
from idt_desk.words import shown

__all__ = ["SFTPFiles", "parse_ssh_url"]

#: Seconds to connect (TCP, key exchange, authentication) before giving up.
CONNECT_TIMEOUT = 15.0

#: Seconds a reconnection (after a lost connection) tries before it gives up: a server that
#: accepts but never answers (stopped) holds each look no longer than this.
RECONNECT_TIMEOUT = 5.0

#: Seconds after a failed reconnection before the next is tried.
RETRY_S = 2.0

#: Seconds between keepalive requests to the server, and how many may go unanswered before
#: the connection counts as lost (a server frozen mid-listing is found out in about 6 s).
KEEPALIVE_S = 2.0
KEEPALIVE_COUNT = 3

#: Seconds any one call (a batch of requests) may take before it gives up, in one line.
REQUEST_TIMEOUT = 30.0

#: Requests a batch keeps in flight on the connection (SFTP pipelines them: 1,000 stats
#: cost about 1,000 / IN_FLIGHT round trips, not 1,000).
IN_FLIGHT = 64


def parse_ssh_url(url: str) -> tuple[str | None, str, int | None, str]:
    """(user, host, port, path) of ``ssh://[user@]host[:port]/path``.

    Raises
    ------
    InputError
        Not such a URL (the message says what is missing or malformed).
    """
    where = shown(url, 120)
    try:
        parts = urlsplit(url)
        port, host = parts.port, parts.hostname
    except ValueError as exc:
        if "port" in str(exc).lower():
            raise InputError(f"{where}: the port must be a number from 1 to 65535") from None
        raise InputError(f"{where}: not an ssh:// URL ({exc}); give "
                         "ssh://[user@]host[:port]/path (an IPv6 host in brackets)") from None
    if parts.scheme != "ssh" or not host:
        raise InputError(f"{where}: give ssh://[user@]host[:port]/path")
    if port == 0:
        raise InputError(f"{where}: the port must be a number from 1 to 65535")
    if parts.query or parts.fragment:
        raise InputError(f"{where}: no ?query or #fragment in an ssh:// path")
    if len(host) > 253 or not all(c.isprintable() and c not in " /\\" for c in host):
        raise InputError(f"{where}: not a host name")
    try:
        host.encode("idna")
    except UnicodeError:
        if ":" not in host:  # an IPv6 address is no name to encode
            raise InputError(f"{where}: not a host name (a label over 63 characters, or "
                             "characters a host name cannot hold)") from None
    user = unquote(parts.username, errors="strict") if parts.username else None
    if user is not None and not (user.isprintable() and user.strip() == user and user):
        raise InputError(f"{where}: the user name holds characters no login can have")
    path = unquote(parts.path, errors="surrogateescape")
    return user, host, port, path


def _check_ssh_files() -> None:
    """~/.ssh/config and known_hosts must be regular files: a FIFO would block the connect."""
    for name in ("config", "known_hosts"):
        path = os.path.join(os.path.expanduser("~"), ".ssh", name)
        try:
            mode = os.stat(path).st_mode
        except OSError:
            continue  # not there: asyncssh does without it
        if not stat_mod.S_ISREG(mode):
            raise InputError(f"{path}: not a regular file (a FIFO or a device would be waited "
                             "on): make it a file or move it away")


class _LostWrites(logging.Filter):
    """asyncio's "socket.send() raised exception." after a connection is lost.

    asyncio logs it for every write to a transport whose peer went away (seventeen lines
    after one outage, seen on a followed run); the loss itself is said once, in one line,
    by this module (``ConnectionError``, the follower's note). Nothing else is filtered.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        return record.getMessage() != "socket.send() raised exception."


logging.getLogger("asyncio").addFilter(_LostWrites())


class _Failed:
    """A path's own error, returned among a batch's results (not raised)."""

    __slots__ = ("error",)

    def __init__(self, error: OSError) -> None:
        self.error = error


class Interrupted(ConnectionError):
    """A call ended by :meth:`SFTPFiles.interrupt` or :meth:`SFTPFiles.close`."""


class SFTPFiles:
    """The files under an ``ssh://`` URL's path (:class:`idt_desk.recordings.fs.Files`).

    ``missing_ok``: a path that does not exist yet is taken (a sweep about to start there);
    ``options``: extra ``asyncssh.connect`` keyword arguments (tests pass their own
    ``known_hosts`` and key; a user's come from their OpenSSH files).

    Raises
    ------
    InputError
        The connection failed, in one line: the host's key is unknown or changed, no key
        was accepted, the host cannot be reached, or the path is not a folder there.
    """

    def __init__(self, url: str, *, missing_ok: bool = False, **options: Any) -> None:
        try:
            import asyncssh
        except ImportError:
            raise InputError(f"{url}: reading a server's runs needs asyncssh: pip install "
                             "'idt-desk[remote]'") from None
        self._asyncssh = asyncssh
        self.url = url
        user, host, port, path = parse_ssh_url(url)
        if path in ("", "/"):
            raise InputError(f"{shown(url, 120)}: give the folder of the runs on the server "
                             "(ssh://host/path; a listing of / would crawl the whole machine)")
        if not options:
            _check_ssh_files()  # the user's own OpenSSH files are read
        #: The calls under way (cancelled at close, so no thread waits on a dead server).
        self._pending: set[concurrent.futures.Future] = set()
        self._closed = self._interrupted = False
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True,
                                        name=f"idt-sftp {host}")
        self._thread.start()
        kw: dict[str, Any] = {"connect_timeout": CONNECT_TIMEOUT,
                              "keepalive_interval": KEEPALIVE_S,
                              "keepalive_count_max": KEEPALIVE_COUNT, **options}
        if user:
            kw["username"] = user
        if port:
            kw["port"] = port
        netloc = (f"[{host}]" if ":" in host else host) + (f":{port}" if port else "")
        where = shown(f"ssh://{netloc}", 300)
        #: The URL's ``ssh://[user@]host[:port]`` (a path appended names a file there).
        self.prefix = f"ssh://{quote(user, safe='') + '@' if user else ''}{netloc}"
        self._host, self._kw = host, kw
        #: Why the connection was lost (None: it is up); the next call connects again.
        self._lost: str | None = None
        #: No reconnection is tried before this (monotonic): a failed one waits RETRY_S.
        self._retry_at = 0.0
        try:
            self._conn, self._sftp = asyncio.run_coroutine_threadsafe(
                self._connect(host, kw), self._loop).result()
        except asyncssh.HostKeyNotVerifiable as exc:
            self.close()
            raise InputError(f"{where}: refused: the server's host key is not trusted "
                             f"({_reason(exc)}); check it and add it to ~/.ssh/known_hosts "
                             "(connect once with ssh)") from None
        except asyncssh.PermissionDenied:
            self.close()
            raise InputError(f"{where}: refused: the server accepted none of your keys "
                             "(~/.ssh, the agent, or IdentityFile in ~/.ssh/config)") from None
        except (OSError, asyncssh.Error, TimeoutError, UnicodeError, ValueError) as exc:
            self.close()
            raise InputError(f"{where}: cannot connect: {_reason(exc)}") from None
        if path == "/~" or path.startswith("/~/"):
            path = path[3:] or "."  # ssh://host/~/runs: under the user's home there
        try:
            try:
                self.root = self._call(self._sftp.realpath(path))
            except self._asyncssh.SFTPNoSuchFile:
                if not missing_ok:
                    raise
                # Not there yet (a sweep about to start): its path, from the home folder
                # where relative; listed once it exists.
                home = self._call(self._sftp.realpath("."))
                self.root = posixpath.normpath(posixpath.join(home, path))
            refuse_system_root(self.root, url)
            if not self._call(self._sftp.isdir(self.root)) and not (
                    missing_ok and not self._call(self._sftp.exists(self.root))):
                raise InputError(f"{where}{shown(path)}: not a folder on the server")
        except self._asyncssh.SFTPError as exc:
            self.close()
            raise InputError(f"{where}{shown(path)}: {_reason(exc)}") from None
        except ConnectionError as exc:
            self.close()
            raise InputError(f"{where}: {exc}") from None
        except InputError:
            self.close()
            raise

    async def _connect(self, host: str, kw: dict[str, Any]) -> tuple[Any, Any]:
        conn = await self._asyncssh.connect(host, **kw)
        # A file name that is not UTF-8 is kept as its bytes (surrogate escapes), never a
        # reason to refuse the folder holding it.
        return conn, await conn.start_sftp_client(path_errors="surrogateescape")

    def _call(self, coro: Any) -> Any:
        """Run ``coro`` on the connection's loop; a lost connection is connected again.

        Raises
        ------
        ConnectionError
            The connection was lost or the server stopped answering (said in one line; the
            next call connects again), or it is closed.
        """
        if self._closed or not self._loop.is_running():
            coro.close()
            raise ConnectionError("the connection to the server is closed")
        if self._interrupted:
            coro.close()
            raise Interrupted("the read was interrupted (the session stopped)")
        if self._lost is not None:
            if time.monotonic() < self._retry_at:  # tried a moment ago: not again yet
                coro.close()
                raise ConnectionError(f"the connection to the server was lost ({self._lost})")
            try:
                self._conn, self._sftp = self._wait(self._connect(
                    self._host, {**self._kw, "connect_timeout": min(
                        RECONNECT_TIMEOUT, float(self._kw.get("connect_timeout",
                                                              RECONNECT_TIMEOUT)))}))
            except (OSError, self._asyncssh.Error, TimeoutError) as exc:
                coro.close()
                # One try a RETRY_S at most: a poll's several reads (and a status line's)
                # must not each wait out a reconnection to a server that is gone.
                self._retry_at = time.monotonic() + RETRY_S
                raise ConnectionError(f"the connection to the server was lost ({self._lost}); "
                                      f"connecting again failed: {_reason(exc)}") from None
            self._lost = None
        try:
            return self._wait(coro)
        except Interrupted:
            raise  # asked for: the connection is fine
        except TimeoutError:
            self._lost = f"no answer in {REQUEST_TIMEOUT:g} s"
            self._abort()
            raise ConnectionError(f"the server did not answer in {REQUEST_TIMEOUT:g} s; it is "
                                  "connected again at the next look") from None
        except (ConnectionError, self._asyncssh.DisconnectError, self._asyncssh.SFTPNoConnection,
                self._asyncssh.SFTPConnectionLost) as exc:
            self._lost = _reason(exc)
            self._abort()
            raise ConnectionError(f"the connection to the server was lost ({self._lost}); "
                                  "it is connected again at the next look") from None

    def _wait(self, coro: Any) -> Any:
        """``coro``'s result, waited on at most :data:`REQUEST_TIMEOUT` s; close cancels it."""
        future = asyncio.run_coroutine_threadsafe(
            asyncio.wait_for(coro, REQUEST_TIMEOUT), self._loop)
        self._pending.add(future)
        if self._interrupted:  # interrupted between the check and now
            future.cancel()
        try:
            return future.result()
        except concurrent.futures.CancelledError:
            raise Interrupted("the read was interrupted (the session stopped, or the "
                              "connection closed)") from None
        finally:
            self._pending.discard(future)

    def _abort(self) -> None:
        """Drop the connection now (no goodbye to a server that does not answer)."""
        conn = getattr(self, "_conn", None)
        if conn is not None and self._loop.is_running():
            self._loop.call_soon_threadsafe(conn.abort)

    def root_key(self) -> Hashable:
        """See :meth:`idt_desk.recordings.fs.Files.root_key`: the root's real path."""
        return self.root

    def listdir(self, path: str) -> list[Entry]:
        """See :meth:`idt_desk.recordings.fs.Files.listdir`."""
        return self._call(self._listdir(path))

    def location(self, path: str) -> str:
        """See :meth:`idt_desk.recordings.fs.Files.location`: the path's URL."""
        return self.prefix + quote(path, errors="surrogateescape")

    def stat_many(self, paths: list[str]) -> list[tuple[float, int] | None]:
        """See :meth:`idt_desk.recordings.fs.Files.stat_many`: pipelined."""
        return self._call(self._many(self._stat, paths))

    def listdir_many(self, paths: list[str]) -> list[list[Entry] | OSError]:
        """See :meth:`idt_desk.recordings.fs.Files.listdir_many`: pipelined."""
        return self._call(self._many(self._listdir, paths))

    def read_many(self, paths: list[str], size: int = -1) -> list[bytes | OSError]:
        """See :meth:`idt_desk.recordings.fs.Files.read_many`: pipelined."""
        return self._call(self._many(self._read, paths, 0, size))

    async def _many(self, fn: Any, paths: list[str], *args: Any) -> list[Any]:
        """``fn`` of each path, at most :data:`IN_FLIGHT` requests in flight at once."""
        gate = asyncio.Semaphore(IN_FLIGHT)

        async def one(path: str) -> Any:
            async with gate:
                try:
                    return await fn(path, *args)
                except ConnectionError:
                    raise  # the whole batch fails: the connection is gone
                except OSError as exc:
                    return _Failed(exc)  # this path's own error, returned as its result

        # Every request's outcome is retrieved, raised ones too: a frozen server failed 64
        # of them at once, and each unretrieved one printed "Task exception was never
        # retrieved" with its traceback after the listing's one line.
        results = await asyncio.gather(*(one(p) for p in paths), return_exceptions=True)
        for r in results:
            if isinstance(r, BaseException):
                raise r
        return [r.error if isinstance(r, _Failed) else r for r in results]

    async def _listdir(self, path: str) -> list[Entry]:
        a = self._asyncssh
        try:
            names = await self._sftp.readdir(path)
            real = self.root if path == self.root else await self._sftp.realpath(path)
        except a.SFTPError as exc:
            raise self._error(exc) from None
        out = []
        for n in names:
            if n.filename in (".", ".."):
                continue
            attrs, full = n.attrs, posixpath.join(path, n.filename)
            key: Hashable = posixpath.join(real, n.filename)
            try:
                if attrs.type == a.FILEXFER_TYPE_SYMLINK:
                    key = await self._sftp.realpath(full)
                    if not within(key, self.root):
                        out.append(Entry(n.filename, "outside", 0.0, None))
                        continue  # a link leading outside the root: not followed
                    attrs = await self._sftp.stat(full)
            except a.SFTPError as exc:
                if self._gone(exc):
                    raise ConnectionError(_reason(exc)) from None
                continue
            kind = "dir" if attrs.type == a.FILEXFER_TYPE_DIRECTORY else "file"
            out.append(Entry(n.filename, kind, float(attrs.mtime or 0), key))
        return out

    def stat(self, path: str) -> tuple[float, int] | None:
        """See :meth:`idt_desk.recordings.fs.Files.stat`."""
        return self._call(self._stat(path))

    async def _stat(self, path: str) -> tuple[float, int] | None:
        a = self._asyncssh
        try:
            attrs = await self._sftp.lstat(path)
            if attrs.type == a.FILEXFER_TYPE_SYMLINK and \
                    within(await self._sftp.realpath(path), self.root):
                attrs = await self._sftp.stat(path)  # inside: its target's (outside: its own)
        except self._asyncssh.SFTPError as exc:
            if self._gone(exc):
                raise ConnectionError(_reason(exc)) from None
            return None
        # Whole seconds over SFTP v3: the size tells a rewrite within a second apart.
        return float(attrs.mtime or 0), int(attrs.size or 0)

    def read(self, path: str, offset: int = 0, size: int = -1) -> bytes:
        """See :meth:`idt_desk.recordings.fs.Files.read`."""
        return self._call(self._read(path, offset, size))

    async def _read(self, path: str, offset: int, size: int = -1) -> bytes:
        a = self._asyncssh
        try:
            real = await self._sftp.realpath(path)
            if not within(real, self.root):
                raise outside_error(path, self.root)
            # lstat of the real path: a link put there since it was resolved is refused;
            # checked before opening: the server's sftp-server would block on a FIFO.
            attrs = await self._sftp.lstat(real)
            if attrs.type == a.FILEXFER_TYPE_SYMLINK:
                raise outside_error(path, self.root)
            if attrs.type != a.FILEXFER_TYPE_REGULAR:
                raise OSError(f"{shown(path)}: not a regular file")
            async with self._sftp.open(real, "rb") as f:
                return await f.read(size, offset)
        except a.SFTPNoSuchFile:
            raise FileNotFoundError(path) from None
        except a.SFTPError as exc:
            raise self._error(exc) from None

    def _gone(self, exc: BaseException) -> bool:
        """Whether an SFTP error says the connection itself is gone."""
        a = self._asyncssh
        return isinstance(exc, (a.SFTPNoConnection, a.SFTPConnectionLost))

    def _error(self, exc: BaseException) -> OSError:
        """An SFTP error as this module raises it.

        ConnectionError when the link is gone; FileNotFoundError when the path is not there
        (as a local listing says it).
        """
        if self._gone(exc):
            return ConnectionError(_reason(exc))
        if isinstance(exc, self._asyncssh.SFTPNoSuchFile):
            return FileNotFoundError(_reason(exc))
        return OSError(_reason(exc))

    def interrupt(self) -> None:
        """End the calls under way in other threads now, and refuse any more at once.

        Each raises :class:`Interrupted` (a ConnectionError): a session asked to stop reads
        nothing more from the server, whatever the server does.
        """
        self._interrupted = True
        for future in list(self._pending):
            future.cancel()

    def close(self) -> None:
        """Close the connection and its thread, never waiting on the server.

        Calls under way in other threads end at once (ConnectionError: closed).
        """
        self._closed = True
        self.interrupt()
        conn, self._conn = getattr(self, "_conn", None), None
        if self._loop.is_running():
            if conn is not None:
                self._loop.call_soon_threadsafe(conn.abort)
            self._loop.call_soon_threadsafe(self._loop.stop)
            if threading.current_thread() is not self._thread:
                self._thread.join(timeout=1.0)


def _reason(exc: BaseException) -> str:
    text = getattr(exc, "reason", None) or str(exc) or type(exc).__name__
    return shown(" ".join(str(text).split()), 300)
