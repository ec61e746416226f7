"""The sidecar's listeners: a Unix socket, or a loopback TCP port for a shim on Java 11-15 that must first send
the secret the shim put in the sidecar's environment (``KTS_SIDECAR_TOKEN``)."""

from __future__ import annotations

import hmac
import logging
import os
import socket
import socketserver
from typing import Any, Protocol

from rsm.jvm.sidecar_streams import recv_exact

__all__ = ["TOKEN_BYTES", "TOKEN_ENV", "ConnectionHandler", "LoopbackTcpServer", "UnixSocketServer", "token_from_env"]

log = logging.getLogger(__name__)


class ConnectionHandler(Protocol):
    """What a listener hands each accepted connection to (``rsm.jvm.sidecar.Sidecar``)."""

    def handle_connection(self, sock: socket.socket) -> None: ...


class UnixSocketServer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    """The Unix socket listener: one thread per connection, each handed to the sidecar."""

    daemon_threads = True
    block_on_close = False
    request_queue_size = 128
    sidecar: ConnectionHandler

    def finish_request(self, request: Any, client_address: Any) -> None:
        self.sidecar.handle_connection(request)


TOKEN_ENV = "KTS_SIDECAR_TOKEN"
TOKEN_BYTES = 32  # SidecarSockets.TOKEN_BYTES


class LoopbackTcpServer(socketserver.ThreadingMixIn, socketserver.TCPServer):
    """The loopback listener for a shim on Java 11-15, which has no Unix socket channels (``--tcp``): every
    connection must first send the secret the shim put in our environment, or it is closed unanswered."""

    daemon_threads = True
    block_on_close = False
    request_queue_size = 128
    allow_reuse_address = False
    sidecar: ConnectionHandler
    token: bytes

    def finish_request(self, request: Any, client_address: Any) -> None:
        request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        request.settimeout(10)
        try:
            got = recv_exact(request, TOKEN_BYTES)
        except OSError:
            return
        request.settimeout(None)
        if got is None or not hmac.compare_digest(got, self.token):
            log.warning("a connection to the sidecar's loopback port without the shim's secret was closed")
            return
        self.sidecar.handle_connection(request)


def token_from_env() -> bytes | None:
    """The shim's secret (hex in ``KTS_SIDECAR_TOKEN``), removed from the environment once read."""
    raw = os.environ.pop(TOKEN_ENV, "")
    try:
        token = bytes.fromhex(raw)
    except ValueError:
        return None
    return token if len(token) == TOKEN_BYTES else None
