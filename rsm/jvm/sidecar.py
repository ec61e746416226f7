"""The Python side of the JVM shim's sidecar transport: ``python -m rsm.jvm.sidecar --socket PATH``.

The broker's shim (``io.kts.shim.PythonRemoteStorageManager``) starts this process in ``configure()``, writes
the configuration map to its stdin and keeps stdin open. The sidecar:

* configures one ``RemoteStorageManager`` and prints ``READY`` (or ``IMPORT-ERROR``/``CONFIG-ERROR`` with the
  reason, which the shim turns into a configure-time error naming the interpreter);
* serves the framed protocol of ``SidecarTransport.java`` on a Unix socket, one thread per connection (the
  manager's I/O, zstd and AES release the GIL, so broker reader threads overlap);
* exits when stdin reaches EOF (the broker closed the shim or died, even by kill -9) or on a shutdown frame;
* ignores SIGTERM and SIGINT: systemd and Ctrl-C signal the broker's whole process group, and the broker's
  shutdown hook still needs the sidecar until it has called ``close()``.

Copy requests carry file paths (the sidecar reads the segment files itself) and the leader-epoch bytes
inline; fetches stream back piece by piece so the broker can stop reading at any point
(``rsm.jvm.sidecar_streams``), through the shared-memory region (``rsm.jvm.shared_region``) where the shim
mapped it. The protocol's op codes and frames are in ``rsm.jvm.codec``, and what this process asks of its
manager beyond KIP-405 in ``rsm.jvm.seams``. The listeners are ``rsm.jvm.sidecar_listeners``; the OOM score and
the allocator setting ``rsm.jvm.process_memory``.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import signal
import socket
import socketserver
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any, BinaryIO

from rsm._version import __version__
from rsm.jvm import codec as wire
from rsm.jvm import startup_check
from rsm.jvm.copy_cancel import CopyCancels
from rsm.jvm.process_memory import return_large_buffers, set_oom_score_adj
from rsm.jvm.seams import ManagerCapabilities
from rsm.jvm.shared_region import SharedRegion, SharedRegionBuffers
from rsm.jvm.sidecar_listeners import TOKEN_BYTES, TOKEN_ENV, LoopbackTcpServer, UnixSocketServer, token_from_env
from rsm.jvm.sidecar_streams import CHUNK, SidecarStreams, index_bytes, log_failure, recv_exact, send_parts
from rsm.metadata import BROKER_INDEX_SET, IndexType, LogSegmentData, RemoteLogSegmentMetadata
from rsm.metrics.sidecar_health import SidecarHealth
from rsm.metrics.snapshot import to_lines

log = logging.getLogger(__name__)


class Sidecar:
    """Answers the shim's requests with the manager that ``capabilities`` describes; one instance per process.
    ``region`` is the shared memory the manager decodes into, when there is one."""

    def __init__(
        self, capabilities: ManagerCapabilities, region: SharedRegion | None = None, health: SidecarHealth | None = None
    ) -> None:
        self.capabilities = capabilities
        self.manager = capabilities.manager
        self.region = region
        self.health = health or SidecarHealth()
        self.stop = threading.Event()
        self.streams = SidecarStreams(capabilities)
        self.copies = CopyCancels(self.manager.delete_log_segment_data)

    # -- requests ---------------------------------------------------------------------------------------------

    def handle_connection(self, sock: socket.socket) -> None:
        buf = bytearray(CHUNK)
        view = memoryview(buf)
        shared = False  # does the shim on this connection read our region?
        try:
            while not self.stop.is_set():
                hdr = recv_exact(sock, wire.REQUEST_HEADER.size)
                if hdr is None:
                    return
                length, op = wire.REQUEST_HEADER.unpack(hdr)
                body = recv_exact(sock, length - 1) if length > 1 else b""
                if body is None:
                    return
                if op == wire.OP_SHARED_MEMORY_MAPPED:
                    shared = self.region is not None
                    continue
                if op == wire.OP_CANCEL_STREAM:
                    continue  # the stream it was meant for had already ended: nothing to stop
                self.dispatch(sock, op, body, view, shared)
                self.health.replied()
        except (BrokenPipeError, ConnectionResetError, ConnectionAbortedError):
            return  # the shim closed a stream early or the broker went away: nothing to answer
        except wire.WireError as e:
            log.error("protocol error from the shim, dropping the connection: %s", e)

    def dispatch(self, sock: socket.socket, op: int, body: bytes, view: memoryview, shared: bool = False) -> None:
        r = wire.Reader(body)
        if op == wire.OP_FETCH:
            meta = wire.decode_metadata(r.blob() or b"")
            start, end = r.i32(), r.i32()
            self.streams.serve(
                sock,
                view,
                lambda: self.manager.fetch_log_segment(meta, start, None if end < 0 else end),
                "fetch",
                shared,
                self.streams.resume_counter(meta),
                meta if end < 0 else None,
            )
        elif op == wire.OP_FETCH_INDEX:
            meta = wire.decode_metadata(r.blob() or b"")
            self._indexes(sock, meta, wire.index_type(r.str16()))
        elif op == wire.OP_COPY:
            meta = wire.decode_metadata(r.blob() or b"")
            seg, off, tim, txn, snap = r.str16(), r.str16(), r.str16(), r.str16(), r.str16()
            epochs = r.blob() or b""
            data = LogSegmentData(
                log_segment=Path(seg),
                offset_index=Path(off),
                time_index=Path(tim),
                transaction_index=Path(txn) if txn else None,
                producer_snapshot_index=Path(snap),
                leader_epoch_index=epochs,
            )
            try:
                custom = self.copies.run(meta, lambda cancelled: self.capabilities.copy(meta, data, cancelled))
            except Exception as e:
                log_failure("copy", e)
                sock.sendall(wire.error_frame(e))
                return
            blob = wire.I32.pack(-1) if custom is None else wire.I32.pack(len(custom)) + bytes(custom)
            sock.sendall(b"\x00" + blob)
        elif op == wire.OP_CANCEL_COPY:
            meta = wire.decode_metadata(r.blob() or b"")
            wait_s = r.i32() / 1000
            try:
                self.copies.cancel(meta, wait_s)
            except Exception as e:
                log_failure("cancel of a copy", e)
                sock.sendall(wire.error_frame(e))
                return
            log.warning(
                "copy of %s cancelled by the shim (it gave up waiting); its objects are removed", meta.describe()
            )
            sock.sendall(b"\x00")
        elif op == wire.OP_DELETE:
            meta = wire.decode_metadata(r.blob() or b"")
            try:
                self.manager.delete_log_segment_data(meta)
            except Exception as e:
                log_failure("delete", e)
                sock.sendall(wire.error_frame(e))
                return
            sock.sendall(b"\x00")
        elif op == wire.OP_METRICS:
            try:
                lines = to_lines(self.capabilities.metrics_rows())
            except Exception as e:
                log_failure("metrics", e)
                sock.sendall(wire.error_frame(e))
                return
            sock.sendall(b"\x00" + wire.I32.pack(len(lines)) + lines)
        elif op == wire.OP_PING:
            sock.sendall(b"\x00")
        elif op == wire.OP_SHUTDOWN:
            sock.sendall(b"\x00")
            self.stop.set()
        else:
            raise wire.WireError(f"unknown op {op}")

    def _indexes(self, sock: socket.socket, meta: RemoteLogSegmentMetadata, asked: IndexType) -> None:
        """The index asked for and, when it is one of the three the broker's remote index cache fetches one after
        the other for every new segment, the other two (see ``BROKER_INDEX_SET``): the shim holds those for
        the broker's next two calls, which then cost no round trip. An index the segment does not have travels
        as its not-found error; any other failure of an index not asked for leaves it out, so that the broker's
        own request for it meets the error."""
        try:
            parts = [wire.index_entry(asked, index_bytes(self.manager.fetch_index, meta, asked))]
        except Exception as e:
            log_failure("fetch_index", e)
            sock.sendall(wire.error_frame(e))
            return
        if asked in BROKER_INDEX_SET:
            parts += self.streams.indexes_along(meta, [kind for kind in BROKER_INDEX_SET if kind is not asked])
        send_parts(sock, [bytes([wire.STATUS_OK, len(parts)]), *parts])


def _read_exact(stream: BinaryIO, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = stream.read(n - len(data))
        if not chunk:
            raise EOFError("stdin closed before the configuration was complete")
        data += chunk
    return data


def read_config(stream: BinaryIO) -> dict[str, str]:
    """The map ``Wire.encodeConfig`` wrote: i32 count, then (i32 len, key, i32 len, value) pairs."""
    (count,) = wire.I32.unpack(_read_exact(stream, 4))
    parts = [wire.I32.pack(count)]
    for _ in range(count * 2):
        (n,) = wire.I32.unpack(_read_exact(stream, 4))
        parts.append(wire.I32.pack(n) + _read_exact(stream, max(n, 0)))
    return wire.decode_config(b"".join(parts))


def _watch_stdin(stream: BinaryIO, stop: threading.Event) -> None:
    """The shim keeps our stdin open for its lifetime: EOF means close() was called or the broker died."""
    try:
        while stream.read(65536):
            pass
    except OSError:
        pass
    log.info("stdin closed by the broker: shutting down")
    stop.set()


def _say(line: str) -> None:
    """Handshake lines for the shim on stdout (everything else goes to stderr)."""
    sys.stdout.write(line.replace("\n", " | ") + "\n")
    sys.stdout.flush()


def _start_prometheus(capabilities: ManagerCapabilities, health: SidecarHealth) -> Any:
    """The optional Prometheus endpoint (``metrics.prometheus.port`` on ``metrics.prometheus.host``): the
    manager's metrics and the sidecar's own row; its address is logged."""
    port = capabilities.setting("metrics.prometheus.port")
    if port is None:
        return None
    host = capabilities.setting("metrics.prometheus.host") or "127.0.0.1"
    from rsm.metrics.prometheus import serve

    try:
        server, _thread = serve(lambda: capabilities.metrics_rows() + health.rows(), int(port), host)
    except OSError as e:  # a taken port must not stop tiering: say so loudly and go on without the endpoint
        log.error("metrics.prometheus.port=%s: cannot listen on %s:%s: %s", port, host, port, e)
        return None
    log.info("Prometheus metrics on http://%s:%d/metrics", host, server.server_port)
    return server


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rsm.jvm.sidecar", description=__doc__.split("\n\n")[0])
    parser.add_argument("--socket", required=True, help="Unix socket path to listen on")
    parser.add_argument("--parent-pid", type=int, default=0, help="pid of the broker (for log lines)")
    parser.add_argument("--starts", type=int, default=1, help="sidecars the shim started so far, this one included")
    parser.add_argument("--restart-failures", type=int, default=0, help="restarts of the shim that failed so far")
    parser.add_argument(
        "--tcp",
        action="store_true",
        help=f"listen on a loopback TCP port instead of --socket (shims on Java 11-15); needs ${TOKEN_ENV}",
    )
    args = parser.parse_args(argv)

    return_large_buffers()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, signal.SIG_IGN)
    stdin = sys.stdin.buffer
    token = token_from_env() if args.tcp else None
    if args.tcp and token is None:
        _say(f"CONFIG-ERROR --tcp needs the shim's {TOKEN_BYTES}-byte secret, hex, in ${TOKEN_ENV}")
        return 4
    try:
        config = read_config(stdin)
    except (EOFError, wire.WireError) as e:
        _say(f"CONFIG-ERROR cannot read the configuration from stdin: {e}")
        return 4

    from rsm.jvm.config import CONFIG_DEF, SHARED_DIR_KEY, unknown_shim_keys, version_skew

    level = str(config.get("python.log.level", "INFO")).upper()
    logging.basicConfig(
        level=getattr(logging, level, logging.INFO), stream=sys.stderr, format="%(levelname)s %(name)s: %(message)s"
    )
    try:
        settings = CONFIG_DEF.parse(config)
    except ValueError as e:
        _say(f"CONFIG-ERROR {type(e).__name__}: {e}")
        return 4
    unknown = unknown_shim_keys(config)
    if unknown:
        _say(f"CONFIG-ERROR ConfigException: {'; '.join(unknown)}")
        return 4
    skew = version_skew(config)
    if skew is not None:
        _say(f"CONFIG-ERROR {skew}")  # a shim of any release reports a CONFIG-ERROR line in full
        return 4
    set_oom_score_adj(settings["jvm.sidecar.oom.score.adj"])
    spec = settings["python.manager.class"]
    try:
        cls = wire.load_manager_class(spec)
    except BaseException as e:
        _say(
            f"IMPORT-ERROR {sys.executable} (Python {sys.version.split()[0]}) could not import the manager "
            f"{spec}: {type(e).__name__}: {e}"
        )
        return 3
    manager = cls()
    capabilities = ManagerCapabilities.of(manager)
    shm_dir = Path(settings[SHARED_DIR_KEY])
    try:
        startup_check.check(config, settings["jvm.sidecar.shared.memory.bytes"], args.parent_pid, cls, shm_dir)
    except ValueError as e:
        _say(f"CONFIG-ERROR {type(e).__name__}: {e}")
        return 4
    # The region goes in before configure(), which builds the read path on it (for a manager that takes one).
    shared = SharedRegionBuffers(settings["jvm.sidecar.shared.memory.bytes"], shm_dir)
    if capabilities.chunk_buffers is not None:
        capabilities.chunk_buffers.use_chunk_buffers(shared)
    try:
        manager.configure(config)
    except Exception as e:
        shared.discard()
        _say(f"CONFIG-ERROR {type(e).__name__}: {e}")
        return 4

    region = shared.region
    health = SidecarHealth(max(1, args.starts), max(0, args.restart_failures))
    prometheus = _start_prometheus(capabilities, health)
    sidecar = Sidecar(capabilities, region, health)
    path = args.socket
    server: UnixSocketServer | LoopbackTcpServer
    if token is not None:
        server = LoopbackTcpServer(("127.0.0.1", 0), socketserver.BaseRequestHandler, bind_and_activate=True)
        server.token = token
        where = f"127.0.0.1:{server.server_address[1]}"
    else:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        old_umask = os.umask(0o077)  # only the broker's user may talk to the sidecar
        try:
            server = UnixSocketServer(path, socketserver.BaseRequestHandler, bind_and_activate=True)
        finally:
            os.umask(old_umask)
        where = path
    server.sidecar = sidecar
    threading.Thread(target=_watch_stdin, args=(stdin, sidecar.stop), name="stdin-watch", daemon=True).start()
    serving = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.2}, name="accept", daemon=True)
    serving.start()
    log.info(
        "sidecar ready: pid %d (broker pid %d), Python %s, manager %s, socket %s",
        os.getpid(),
        args.parent_pid,
        sys.version.split()[0],
        spec,
        where,
    )
    ready = f"READY {os.getpid()} version={__version__}" + (f" shm={region.path}" if region is not None else "")
    _say(ready + (f" tcp={server.server_address[1]}" if token is not None else ""))
    sidecar.stop.wait()

    server.shutdown()
    server.server_close()
    if prometheus is not None:
        prometheus.shutdown()
        prometheus.server_close()
    if region is not None:
        region.unlink()
    if token is None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
    closer = threading.Thread(target=manager.close, name="manager-close", daemon=True)
    closer.start()
    closer.join(30)
    log.info("sidecar stopped")
    logging.shutdown()
    sys.stdout.flush()
    os._exit(0)  # connection threads may still be blocked in the manager; they must not delay the exit


if __name__ == "__main__":
    # ``python -m`` runs this file as ``__main__``: run the importable module instead, as the shim does, so
    # that its log lines carry the logger name ``rsm.jvm.sidecar`` and not ``__main__``.
    from rsm.jvm import sidecar as _importable

    sys.exit(_importable.main())
