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

The calls are synchronous: an event loop in a thread of its own runs them.
"""

from __future__ import annotations

import asyncio
import posixpath
import threading
from typing import Any
from urllib.parse import quote, unquote, urlsplit

from idt_desk.errors import InputError

__all__ = ["SFTPFiles", "parse_ssh_url"]

#: Seconds to connect (TCP, key exchange, authentication) before giving up.
CONNECT_TIMEOUT = 15.0

#: Requests a batch keeps in flight on the connection (SFTP pipelines them: 1,000 stats
#: cost about 1,000 / IN_FLIGHT round trips, not 1,000).
IN_FLIGHT = 64


def parse_ssh_url(url: str) -> tuple[str | None, str, int | None, str]:
    """(user, host, port, path) of ``ssh://[user@]host[:port]/path``.

    Raises
    ------
    InputError
        Not such a URL (the message says what is missing).
    """
    parts = urlsplit(url)
    try:
        port = parts.port
    except ValueError:
        raise InputError(f"{url}: the port must be a number from 1 to 65535") from None
    if parts.scheme != "ssh" or not parts.hostname:
        raise InputError(f"{url}: give ssh://[user@]host[:port]/path")
    path = unquote(parts.path) or "/"
    if parts.query or parts.fragment:
        raise InputError(f"{url}: no ?query or #fragment in an ssh:// path")
    return (unquote(parts.username) if parts.username else None), parts.hostname, port, path


class SFTPFiles:
    """The files under an ``ssh://`` URL's path (:class:`idt_desk.recordings.runs.Files`).

    ``options``: extra ``asyncssh.connect`` keyword arguments (tests pass their own
    ``known_hosts`` and key; a user's come from their OpenSSH files).

    Raises
    ------
    InputError
        The connection failed, in one line: the host's key is unknown or changed, no key
        was accepted, the host cannot be reached, or the path is not a folder there.
    """

    def __init__(self, url: str, **options: Any) -> None:
        try:
            import asyncssh
        except ImportError:
            raise InputError(f"{url}: reading a server's runs needs asyncssh: pip install "
                             "'idt-desk[remote]'") from None
        self._asyncssh = asyncssh
        self.url = url
        user, host, port, path = parse_ssh_url(url)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True,
                                        name=f"idt-sftp {host}")
        self._thread.start()
        kw: dict[str, Any] = {"connect_timeout": CONNECT_TIMEOUT, **options}
        if user:
            kw["username"] = user
        if port:
            kw["port"] = port
        where = f"ssh://{host}{f':{port}' if port else ''}"
        #: The URL's ``ssh://[user@]host[:port]`` (a path appended names a file there).
        self.prefix = f"ssh://{f'{user}@' if user else ''}{host}{f':{port}' if port else ''}"
        self._host, self._kw = host, kw
        #: Why the connection was lost (None: it is up); the next call connects again.
        self._lost: str | None = None
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
        except (OSError, asyncssh.Error, TimeoutError) as exc:
            self.close()
            raise InputError(f"{where}: cannot connect: {_reason(exc)}") from None
        if path == "/~" or path.startswith("/~/"):
            path = path[3:] or "."  # ssh://host/~/runs: under the user's home there
        try:
            self.root = self._call(self._sftp.realpath(path))
            if not self._call(self._sftp.isdir(self.root)):
                raise InputError(f"{where}{path}: not a folder on the server")
        except self._asyncssh.SFTPError as exc:
            self.close()
            raise InputError(f"{where}{path}: {_reason(exc)}") from None
        except InputError:
            self.close()
            raise

    async def _connect(self, host: str, kw: dict[str, Any]) -> tuple[Any, Any]:
        conn = await self._asyncssh.connect(host, **kw)
        return conn, await conn.start_sftp_client()

    def _call(self, coro: Any) -> Any:
        """Run ``coro`` on the connection's loop; a lost connection is connected again.

        Raises
        ------
        ConnectionError
            The connection was lost (said in one line; the next call connects again), or
            it is closed.
        """
        if not self._loop.is_running():
            coro.close()
            raise ConnectionError("the connection to the server is closed")
        run = asyncio.run_coroutine_threadsafe
        if self._lost is not None:
            try:
                self._conn, self._sftp = run(self._connect(self._host, self._kw),
                                             self._loop).result()
            except (OSError, self._asyncssh.Error, TimeoutError) as exc:
                coro.close()
                raise ConnectionError(f"the connection to the server was lost ({self._lost}); "
                                      f"connecting again failed: {_reason(exc)}") from None
            self._lost = None
        try:
            return run(coro, self._loop).result()
        except (ConnectionError, self._asyncssh.DisconnectError, self._asyncssh.SFTPNoConnection,
                self._asyncssh.SFTPConnectionLost) as exc:
            self._lost = _reason(exc)
            raise ConnectionError(f"the connection to the server was lost ({self._lost}); "
                                  "it is connected again at the next look") from None

    def listdir(self, path: str) -> list[tuple[str, str, float]]:
        """See :meth:`idt_desk.recordings.runs.Files.listdir`."""
        return self._call(self._listdir(path))

    def location(self, path: str) -> str:
        """See :meth:`idt_desk.recordings.runs.Files.location`: the path's URL."""
        return self.prefix + quote(path)

    def outside(self, paths: list[str]) -> list[str]:
        """Those of ``paths`` that are links leading out of their own folder (pipelined).

        A recording's files must be its own: a link to a file elsewhere on the server would
        make a run read whatever file its author chose (as
        :func:`~idt_desk.recordings.checks.check_regular` refuses on this machine).
        """
        found = self._call(self._many(self._outside, paths))
        return [p for p, bad in zip(paths, found, strict=True) if bad is True]

    async def _outside(self, path: str) -> bool:
        try:
            if (await self._sftp.lstat(path)).type != self._asyncssh.FILEXFER_TYPE_SYMLINK:
                return False
            real = await self._sftp.realpath(path)
        except self._asyncssh.SFTPError as exc:
            if self._gone(exc):
                raise ConnectionError(_reason(exc)) from None
            return False  # not there (yet): nothing to refuse
        folder = posixpath.dirname(path).rstrip("/") + "/"
        return not real.startswith(folder)

    def stat_many(self, paths: list[str]) -> list[tuple[float, int] | None]:
        """See :meth:`idt_desk.recordings.runs.Files.stat_many`: pipelined."""
        return self._call(self._many(self._stat, paths))

    def listdir_many(self, paths: list[str]) -> list[list[tuple[str, str, float]] | OSError]:
        """See :meth:`idt_desk.recordings.runs.Files.listdir_many`: pipelined."""
        return self._call(self._many(self._listdir, paths))

    def read_many(self, paths: list[str]) -> list[bytes | OSError]:
        """See :meth:`idt_desk.recordings.runs.Files.read_many`: pipelined."""
        return self._call(self._many(self._read, paths, 0))

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
                    return exc

        return list(await asyncio.gather(*(one(p) for p in paths)))

    async def _listdir(self, path: str) -> list[tuple[str, str, float]]:
        a = self._asyncssh
        try:
            names = await self._sftp.readdir(path)
        except a.SFTPError as exc:
            raise self._error(exc) from None
        out = []
        for n in names:
            if n.filename in (".", ".."):
                continue
            attrs, full = n.attrs, posixpath.join(path, n.filename)
            try:
                if attrs.type == a.FILEXFER_TYPE_SYMLINK:
                    real = await self._sftp.realpath(full)
                    if real != self.root and not real.startswith(self.root.rstrip("/") + "/"):
                        continue  # a link leading outside the root: not followed
                    attrs = await self._sftp.stat(full)
            except a.SFTPError as exc:
                if self._gone(exc):
                    raise ConnectionError(_reason(exc)) from None
                continue
            kind = "dir" if attrs.type == a.FILEXFER_TYPE_DIRECTORY else "file"
            out.append((n.filename, kind, float(attrs.mtime or 0)))
        return out

    def stat(self, path: str) -> tuple[float, int] | None:
        """See :meth:`idt_desk.recordings.runs.Files.stat`."""
        return self._call(self._stat(path))

    async def _stat(self, path: str) -> tuple[float, int] | None:
        try:
            attrs = await self._sftp.stat(path)
        except self._asyncssh.SFTPError as exc:
            if self._gone(exc):
                raise ConnectionError(_reason(exc)) from None
            return None
        # Whole seconds over SFTP v3: the size tells a rewrite within a second apart.
        return float(attrs.mtime or 0), int(attrs.size or 0)

    def read(self, path: str, offset: int = 0, size: int = -1) -> bytes:
        """See :meth:`idt_desk.recordings.runs.Files.read`."""
        return self._call(self._read(path, offset, size))

    async def _read(self, path: str, offset: int, size: int = -1) -> bytes:
        a = self._asyncssh
        try:
            # Checked before opening: the server's sftp-server would block on a FIFO.
            if (await self._sftp.stat(path)).type != a.FILEXFER_TYPE_REGULAR:
                raise OSError(f"{path}: not a regular file")
            async with self._sftp.open(path, "rb") as f:
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
        """An SFTP error as this module raises it: ConnectionError when the link is gone."""
        return ConnectionError(_reason(exc)) if self._gone(exc) else OSError(_reason(exc))

    def close(self) -> None:
        """Close the connection and its thread."""
        conn = getattr(self, "_conn", None)
        if conn is not None:
            conn.close()
            try:
                self._call(conn.wait_closed())
            except Exception:  # closing what may already be gone
                pass
            self._conn = None
        if self._loop.is_running():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=5)


def _reason(exc: BaseException) -> str:
    text = getattr(exc, "reason", None) or str(exc) or type(exc).__name__
    return " ".join(str(text).split())
