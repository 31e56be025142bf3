"""An SSH server on 127.0.0.1 for the tests that read a server's runs (asyncssh's own)."""

from __future__ import annotations

import asyncio
import os
import socket
import threading
import time
from types import SimpleNamespace
from typing import ClassVar

import asyncssh
import pytest


class _LoggingSFTP(asyncssh.SFTPServer):
    """The server's SFTP, noting the real path of every file a client opens (``opened``)."""

    opened: ClassVar[list[str]] = []

    def open(self, path, pflags, attrs):
        _LoggingSFTP.opened.append(os.path.realpath(os.fsdecode(self.map_path(path))))
        return super().open(path, pflags, attrs)


@pytest.fixture(scope="module")
def sshd():
    """A server with a host key and one client key of its own.

    ``.port``; ``.port6`` (the same server on ``[::1]``); ``.options`` (``asyncssh.connect``
    keywords trusting it and holding the key); ``.known_line`` (its known_hosts line) and
    ``.client_key``; ``.opened``: the real path of every file its SFTP opened, in order.
    """
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    host_key = asyncssh.generate_private_key("ssh-ed25519")
    client_key = asyncssh.generate_private_key("ssh-ed25519")
    authorized = asyncssh.import_authorized_keys(client_key.export_public_key().decode())

    async def listen(host):
        return await asyncssh.listen(host, 0, server_host_keys=[host_key],
                                     authorized_client_keys=authorized,
                                     sftp_factory=_LoggingSFTP)

    server = asyncio.run_coroutine_threadsafe(listen("127.0.0.1"), loop).result()
    server6 = asyncio.run_coroutine_threadsafe(listen("::1"), loop).result()
    port = server.sockets[0].getsockname()[1]
    port6 = server6.sockets[0].getsockname()[1]
    public = host_key.export_public_key().decode()
    known = f"[127.0.0.1]:{port} {public}[::1]:{port6} {public}"
    yield SimpleNamespace(
        port=port, port6=port6, known_line=known, client_key=client_key,
        opened=_LoggingSFTP.opened, public=public,
        options={"known_hosts": asyncssh.import_known_hosts(known),
                 "client_keys": [client_key], "agent_path": None})
    async def close():  # on the server's own loop: asyncio's servers are not thread-safe
        server.close()
        server6.close()

    asyncio.run_coroutine_threadsafe(close(), loop).result(timeout=5)
    loop.call_soon_threadsafe(loop.stop)


@pytest.fixture
def ssh_home(sshd, tmp_path, monkeypatch):
    """A user's OpenSSH setup for the server: HOME/.ssh with its key and known_hosts.

    What a user has, so code that takes no options (``idt-desk watch ssh://…``) connects as
    it would for them; the agent is turned off. Yields the server's port.
    """
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "known_hosts").write_text(sshd.known_line)
    sshd.client_key.write_private_key(str(home / ".ssh" / "id_ed25519"))
    (home / ".ssh" / "id_ed25519").chmod(0o600)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
    return sshd.port


class Proxy:
    """A TCP relay to the server that can stop relaying: a server frozen mid-session.

    ``port``: where clients connect; :meth:`freeze` keeps the connections open but lets no
    byte through either way (as a stopped sshd process does); :meth:`thaw` lets them through
    again; :meth:`drop` is an outage (connections closed and refused), :meth:`restore` its
    end.
    """

    def __init__(self, target: int) -> None:
        self.target = target
        self.frozen = threading.Event()
        self.down = threading.Event()
        self._stop = threading.Event()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.2)
        self.port = self._listener.getsockname()[1]
        self._socks: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                continue
            if self.down.is_set():  # the server is away: a connection is refused at once
                client.close()
                continue
            server = socket.create_connection(("127.0.0.1", self.target))
            self._socks += [client, server]
            for a, b in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, a: socket.socket, b: socket.socket) -> None:
        a.settimeout(0.2)
        while not self._stop.is_set():
            if self.frozen.is_set():
                time.sleep(0.05)
                continue
            try:
                data = a.recv(65536)
            except TimeoutError:
                continue
            except OSError:
                break
            if not data:
                break
            while self.frozen.is_set() and not self._stop.is_set():
                time.sleep(0.05)  # frozen with the bytes in hand: they never arrive
            try:
                b.sendall(data)
            except OSError:
                break

    def drop(self) -> None:
        """An outage: every connection closed, new ones refused until :meth:`restore`."""
        self.down.set()
        socks, self._socks = self._socks, []
        for sock in socks:
            try:
                sock.close()
            except OSError:
                pass

    def restore(self) -> None:
        """The server is back: connections are relayed again."""
        self.down.clear()

    def freeze(self) -> None:
        """Relay nothing from now on (the connections stay open)."""
        self.frozen.set()

    def close(self) -> None:
        """Stop relaying and close every connection."""
        self._stop.set()
        for s in [self._listener, *self._socks]:
            try:
                s.close()
            except OSError:
                pass


@pytest.fixture
def proxy(sshd):
    """A :class:`Proxy` to the test server; its known_hosts entry is the server's key."""
    relay = Proxy(sshd.port)
    relay.options = dict(sshd.options, known_hosts=asyncssh.import_known_hosts(
        f"[127.0.0.1]:{relay.port} {sshd.public}"))
    yield relay
    relay.close()
