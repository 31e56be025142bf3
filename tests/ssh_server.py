"""An SSH server on 127.0.0.1 for the tests that read a server's runs (asyncssh's own)."""

from __future__ import annotations

import asyncio
import threading
from types import SimpleNamespace

import asyncssh
import pytest


@pytest.fixture(scope="module")
def sshd():
    """A server with a host key and one client key of its own.

    ``.port``; ``.options`` (``asyncssh.connect`` keywords trusting it and holding the key);
    ``.known_line`` (its known_hosts line) and ``.client_key``.
    """
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    host_key = asyncssh.generate_private_key("ssh-ed25519")
    client_key = asyncssh.generate_private_key("ssh-ed25519")
    authorized = asyncssh.import_authorized_keys(client_key.export_public_key().decode())

    async def listen():
        return await asyncssh.listen("127.0.0.1", 0, server_host_keys=[host_key],
                                     authorized_client_keys=authorized, sftp_factory=True)

    server = asyncio.run_coroutine_threadsafe(listen(), loop).result()
    port = server.sockets[0].getsockname()[1]
    known = f"[127.0.0.1]:{port} {host_key.export_public_key().decode()}"
    yield SimpleNamespace(
        port=port, known_line=known, client_key=client_key,
        options={"known_hosts": asyncssh.import_known_hosts(known),
                 "client_keys": [client_key], "agent_path": None})
    server.close()
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
