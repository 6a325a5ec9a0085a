"""A TCP relay to the test database that a test can make stop answering, or restart.

A database that stops answering without closing its connections (a network partition, a
failover that moves the address, a frozen server) is not a refused connection: every
statement and every connection attempt waits on the driver's timeouts. `Relay.silence()`
makes this one accept connections and forward nothing, either way, from then on;
`Relay.cut()` drops every connection and refuses new ones until `restore()`, as a restart does.
"""

from __future__ import annotations

import contextlib
import select
import socket
import threading
from collections.abc import Iterator


class Relay:
    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.silent = threading.Event()
        # Connections accepted and left unanswered: each is one attempt that waited out its
        # connect timeout.
        self.unanswered = 0
        self.down = threading.Event()
        self._marker: bytes | None = None
        self._closed = threading.Event()
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        threading.Thread(target=self._accept, name="relay-accept", daemon=True).start()

    def silence(self) -> None:
        """Stop answering: open connections hang, new ones are accepted and hang too."""
        self.silent.set()

    def silence_after(self, marker: bytes) -> None:
        """Stop answering right after passing on a client packet that contains `marker`: a
        cut at one point of a conversation (the server runs that statement, its reply is
        lost, and its session stays open on the server)."""
        self._marker = marker

    def cut(self) -> None:
        """Drop every open connection and refuse new ones until restore(): a restart."""
        self.down.set()
        with self._lock:
            sockets, self._sockets = self._sockets, []
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.close()

    def restore(self) -> None:
        self.down.clear()

    def close(self) -> None:
        with self._lock:
            self._closed.set()
            sockets, self._sockets = [self._listener, *self._sockets], []
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.close()

    def _keep(self, sock: socket.socket) -> bool:
        """Keep `sock` for close(); once closed, close it at once (an accept or a connect
        racing close() left an unclosed socket, which the suite's warnings make an error)."""
        with self._lock:
            if not self._closed.is_set():
                self._sockets.append(sock)
                return True
        with contextlib.suppress(OSError):
            sock.close()
        return False

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            if self.down.is_set():
                client.close()  # refused, as by a server that is restarting
                continue
            if not self._keep(client):
                return
            if self.silent.is_set():
                self.unanswered += 1
                continue  # accepted, never answered
            try:
                server = socket.create_connection(self.target, timeout=5)
            except OSError:
                client.close()
                continue
            if not self._keep(server):
                return
            threading.Thread(
                target=self._pump, args=(client, server), name="relay-pump", daemon=True
            ).start()

    def _pump(self, client: socket.socket, server: socket.socket) -> None:
        peers = {client: server, server: client}
        with contextlib.suppress(OSError, ValueError):
            while not self._closed.is_set():
                readable, _, _ = select.select(list(peers), [], [], 0.1)
                if self.silent.is_set():
                    continue  # the bytes stay unread: both sides wait
                for sock in readable:
                    if self.silent.is_set():
                        break
                    data = sock.recv(65536)
                    if not data:
                        return
                    peers[sock].sendall(data)
                    if sock is client and self._marker is not None and self._marker in data:
                        self._marker = None
                        self.silent.set()


@contextlib.contextmanager
def relay_to_test_database() -> Iterator[Relay]:
    """Relay to the server of the test database (PostgreSQL or MariaDB/MySQL)."""
    from django.db import connection

    settings = connection.settings_dict
    port = int(settings["PORT"] or (5432 if connection.vendor == "postgresql" else 3306))
    relay = Relay((settings["HOST"] or "127.0.0.1", port))
    try:
        yield relay
    finally:
        relay.close()
