"""The in-process transport: the Python RemoteStorageManager called directly from broker threads via JPype.

``kts kafka-server-start`` starts the broker's JVM inside this Python process and calls :func:`install`
before ``kafka.Kafka.main``; the shim's ``configure()`` then finds the bridge in ``io.kts.shim.ShimRegistry``.
Measured pitfalls this module handles (see docs/broker.md and the bridge reference):

* every Java->Python call on a thread Python did not create would build and destroy a PyThreadState
  (~25-30 us, and ``threading.local`` is wiped); :func:`pin_thread_state` keeps one per broker thread;
* Python ``bytes`` -> ``byte[]`` conversion runs at 0.2-0.5 GB/s, so fetched data crosses as direct
  ByteBuffers over the pooled buffers the chunks were decoded into (zero copy; Java copies out at >10 GB/s,
  the same single copy a Python reader makes with ``readinto``);
* JPype ties the two garbage collectors together: every Java GC makes Python run a full collection (holding
  the GIL the broker's reader threads wait for), and Python memory that grows between Python collections makes
  it call ``System.gc()`` (a concurrent G1 cycle). Chunk buffers freshly allocated per chunk, each pinned by its
  direct ByteBuffer until a Java GC, fed both loops; :class:`InProcessBuffers` decodes into one region made
  once, each buffer wrapped once, and :func:`freeze_startup_objects` takes the objects of start-up out of
  every Python collection (profile and figures in docs/broker.md);
* a plain Python exception reaches Java as a message-less PyExceptionProxy, so every entry point maps errors
  to Kafka's RemoteResourceNotFoundException / RemoteStorageException with the Python type and message;
* JPype's own JVM shutdown hook disables proxies before the broker's hook runs; :func:`adopt_shutdown_hooks`
  moves the broker's hooks under JPype's so they still reach the plugin;
* once JPype's hook has told its native side that the JVM is going away, making the Python wrapper of a Java
  class Python has not met before crashes the process (SIGSEGV in ``TypeFactoryNative.newWrapper``);
  :func:`wrap_shutdown_classes` makes every wrapper the bridge may need while the JVM shuts down beforehand,
  and a call that fails after that point waits for the JVM's halt instead of raising (:func:`into_java`).

The helpers that deal with the JVM's collections, shutdown and exceptions live in ``rsm.jvm.inprocess_jvm``.
"""

from __future__ import annotations

import ctypes
import io
import itertools
import logging
import mmap
import struct
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from backends.base import readinto_some
from chunking.buffer_pool import ChunkBuffer, ChunkBufferPool
from rsm.errors import ConfigException
from rsm.fetch.chunk_cache import SuppliedBuffers
from rsm.fetch.stream import SegmentStream
from rsm.jvm import codec as wire
from rsm.jvm import startup_check
from rsm.jvm.config import version_skew
from rsm.jvm.inprocess_jvm import adopt_shutdown_hooks, freeze_startup_objects, into_java, wrap_shutdown_classes
from rsm.jvm.seams import ManagerCapabilities
from rsm.metadata import LogSegmentData
from rsm.metrics.snapshot import to_lines

log = logging.getLogger(__name__)

CHUNK = 1024 * 1024
SCRATCH = 64 * 1024  # results up to this size go through the calling thread's scratch buffer
_POOL_MAX = 64
_pinned = threading.local()
_defined: dict[str, Any] = {}


def pin_thread_state() -> None:
    """Keep this thread's PyThreadState alive between calls (one extra, never released PyGILState_Ensure)."""
    if not getattr(_pinned, "v", False):
        ctypes.pythonapi.PyGILState_Ensure()
        _pinned.v = True


class InProcessBuffers:
    """The in-process ``ChunkBufferSupply``: one anonymous mapping of ``jvm.inprocess.buffer.memory.bytes``, made
    when ``configure()`` asks for buffers of ``chunk.size``; the memory tier keeps at most half of it, as with the
    sidecar's shared memory. None for 0 bytes or less than two chunks: the manager then uses its own pool.

    Why not the plugin's own pool: that one allocates a fresh buffer whenever the memory tier keeps one and drops
    it when the tier evicts it. In the broker's process each of those costs page faults on its first write, a
    new direct ByteBuffer, and memory that stays allocated until the next Java GC lets go of that ByteBuffer;
    the growth makes JPype call ``System.gc()``. A region's buffers live as long as the plugin and are wrapped
    once. When all are out, the pool lends heap buffers, so a burst degrades to allocations, never to a failure.
    """

    def __init__(self, total_bytes: int) -> None:
        self.total_bytes = total_bytes
        self.region: mmap.mmap | None = None

    def chunk_buffers(self, buffer_size: int) -> SuppliedBuffers | None:
        buffers = self.total_bytes // buffer_size if buffer_size > 0 else 0
        if buffers < 2:
            return None
        self.region = mmap.mmap(-1, buffers * buffer_size)
        log.info("in-process transport: %d chunk buffers of %d bytes, made once", buffers, buffer_size)
        pool = ChunkBufferPool(buffer_size, max_idle=8, region=memoryview(self.region))
        return SuppliedBuffers(pool, max_cached_bytes=self.total_bytes // 2)


def default_manager_factory(config: Mapping[str, str]) -> Any:
    """Instantiate ``python.manager.class`` (default ``rsm:RemoteStorageManager``) and configure it, decoding into
    :class:`InProcessBuffers` when the manager takes a transport's buffers. First, as the sidecar does: refuse
    unknown ``jvm.*``/``python.*`` keys, and check that the buffers and what the manager holds fit under the
    container's memory limit beside the broker's heap (``startup_check.check_in_process``)."""
    from rsm.jvm.config import CONFIG_DEF, unknown_shim_keys

    settings = CONFIG_DEF.parse(dict(config))
    unknown = unknown_shim_keys(config)
    if unknown:
        raise ConfigException("; ".join(unknown))
    cls = wire.load_manager_class(settings["python.manager.class"])
    startup_check.check_in_process(config, settings["jvm.inprocess.buffer.memory.bytes"], cls)
    manager = cls()
    takes_buffers = ManagerCapabilities.of(manager).chunk_buffers
    if takes_buffers is not None:
        takes_buffers.use_chunk_buffers(InProcessBuffers(settings["jvm.inprocess.buffer.memory.bytes"]))
    manager.configure(dict(config))
    return manager


def define_bridge() -> dict[str, Any]:
    """Create the @JImplements classes (possible only once the JVM runs and the shim jar is on its class path)."""
    if _defined:
        return _defined
    import jpype
    import jpype.nio
    from jpype import JImplements, JOverride

    byte_array = jpype.JArray(jpype.JByte)  # building the array type costs ~9 us: once, not per call
    wrapped = wrap_shutdown_classes()
    log.debug("in-process transport: Python wrappers made before any shutdown: %s", ", ".join(wrapped))
    own_buffers = ChunkBufferPool(CHUNK, max_idle=_POOL_MAX)  # for streams that are not SegmentStreams

    def direct_buffer(buf: ChunkBuffer) -> Any:
        """The JVM's view of a pooled buffer, made once per buffer (JPype keeps the Python memory alive as long
        as the Java object lives; the pool keeps the buffer, so neither is freed under the other)."""
        jbuf = buf.handles.get("jpype")
        if jbuf is None:
            jbuf = jpype.nio.convertToDirectBuffer(buf.memory)
            buf.handles["jpype"] = jbuf
        return jbuf

    @JImplements("io.kts.shim.PythonChunks")
    class Chunks:
        """A lazy stream handed over piece by piece: each ``next()`` returns a direct ByteBuffer slice over the
        decoded chunk itself (no copy in Python); the memory stays untouched until the following call."""

        def __init__(self, stream: Any) -> None:
            self.stream = stream
            self.zero_copy = isinstance(stream, SegmentStream)
            self.own: ChunkBuffer | None = None
            self.done = False

        @JOverride
        def next(self) -> Any:
            pin_thread_state()
            if self.done:
                return None
            try:
                if self.zero_copy:
                    piece = self.stream.next_piece()
                    if piece is None:
                        self.done = True
                        return None
                    return direct_buffer(piece.buffer).slice(piece.offset, piece.length)
                if self.own is None:
                    self.own = own_buffers.take(CHUNK)
                n = readinto_some(self.stream, self.own.memory)
                if n <= 0:
                    self.done = True
                    return None
                return direct_buffer(self.own).slice(0, n)
            except Exception as e:
                raise into_java(e) from None

        @JOverride
        def close(self) -> None:
            pin_thread_state()
            self.done = True
            try:
                self.stream.close()
            except Exception:
                pass
            if self.own is not None:
                self.own.release()
                self.own = None

    scratch_of_thread = threading.local()
    scratch_ids = itertools.count(1)

    def scratch() -> tuple[memoryview, Any, int]:
        """This thread's scratch buffer, its JVM view and its id (kept across calls thanks to the pinned thread
        state). The id is also stored in the buffer's last 8 bytes, where the shim reads it: a length the shim
        gets tagged with another id than its cached buffer's makes it fetch the buffer again, never read the
        wrong memory."""
        entry = getattr(scratch_of_thread, "entry", None)
        if entry is None:
            memory = bytearray(SCRATCH + 8)
            ident = next(scratch_ids) & 0x7FFFFFFF
            struct.pack_into(">q", memory, SCRATCH, ident)
            entry = (memoryview(memory), jpype.nio.convertToDirectBuffer(memory), ident)
            scratch_of_thread.entry = entry
        return entry

    def result(stream: Any) -> Any:
        """Bytes Python already holds (indexes come as BytesIO) cross in the same call: small ones as a length
        into the caller's scratch buffer (making a byte[] or a fresh direct buffer costs 4-11 us, a slice
        assignment well under 1), larger ones as a direct buffer over the bytes. Streams go piece by piece."""
        if isinstance(stream, io.BytesIO):
            data = stream.getbuffer()
            n = len(data)
            if n == 0:
                return None
            if n <= SCRATCH:
                memory, _, ident = scratch()
                memory[:n] = data
                return (ident << 32) | n
            return jpype.nio.convertToDirectBuffer(bytearray(data))
        return Chunks(stream)

    @JImplements("io.kts.shim.PythonSession")
    class Session:
        def __init__(self, manager: Any) -> None:
            self.manager = manager
            self.capabilities = ManagerCapabilities.of(manager)

        @JOverride
        def scratch(self) -> Any:
            pin_thread_state()
            try:
                return scratch()[1]
            except Exception as e:
                raise into_java(e) from None

        @JOverride
        def copy(self, meta: Any, seg: Any, off: Any, tim: Any, txn: Any, snap: Any, epochs: Any) -> Any:
            pin_thread_state()
            try:
                m = wire.decode_metadata(bytes(meta))
                data = LogSegmentData(
                    log_segment=Path(str(seg)),
                    offset_index=Path(str(off)),
                    time_index=Path(str(tim)),
                    transaction_index=None if txn is None else Path(str(txn)),
                    producer_snapshot_index=Path(str(snap)),
                    leader_epoch_index=bytes(epochs),
                )
                custom = self.manager.copy_log_segment_data(m, data)
                return None if custom is None else byte_array(bytes(custom))
            except Exception as e:
                raise into_java(e) from None

        @JOverride
        def fetch(self, meta: Any, start: int, end: int) -> Any:
            pin_thread_state()
            try:
                m = wire.decode_metadata(bytes(meta))
                return result(self.manager.fetch_log_segment(m, int(start), None if end < 0 else int(end)))
            except Exception as e:
                raise into_java(e) from None

        @JOverride
        def fetchIndex(self, request: Any) -> Any:  # noqa: N802 - Java's name
            pin_thread_state()
            try:
                raw = bytes(request)
                n = raw[0]
                kind = wire.index_type(raw[1 : 1 + n])
                m = wire.decode_metadata(raw[1 + n :])
                return result(self.manager.fetch_index(m, kind))
            except Exception as e:
                raise into_java(e) from None

        @JOverride
        def delete(self, meta: Any) -> None:
            pin_thread_state()
            try:
                self.manager.delete_log_segment_data(wire.decode_metadata(bytes(meta)))
            except Exception as e:
                raise into_java(e) from None

        @JOverride
        def metrics(self) -> Any:
            pin_thread_state()
            try:
                return byte_array(to_lines(self.capabilities.metrics_rows()))
            except Exception as e:
                raise into_java(e) from None

        @JOverride
        def close(self) -> None:
            pin_thread_state()
            try:
                self.manager.close()
            except Exception as e:
                raise into_java(e) from None
            log.info("in-process transport: RemoteStorageManager closed")

    @JImplements("io.kts.shim.PythonBridge")
    class Bridge:
        def __init__(self, factory: Callable[[Mapping[str, str]], Any], adopt_hooks: bool) -> None:
            self.factory = factory
            self.adopt_hooks = adopt_hooks

        @JOverride
        def open(self, config: Any) -> Any:
            pin_thread_state()
            try:
                cfg = {str(e.getKey()): str(e.getValue()) for e in config.entrySet()}
                skew = version_skew(cfg)
                if skew is not None:
                    raise ConfigException(skew)
                if self.adopt_hooks:
                    # configure() runs during broker startup, after kafka.Kafka registered its shutdown hook
                    try:
                        moved = adopt_shutdown_hooks()
                        log.info("moved %d JVM shutdown hook(s) under JPype's so they can still call Python", moved)
                    except Exception as e:
                        log.warning(
                            "could not adopt JVM shutdown hooks (is --add-opens java.base/java.lang="
                            "ALL-UNNAMED set?): %s",
                            e,
                        )
                session = Session(self.factory(cfg))
                log.info("in-process transport: %d start-up objects left out of Python's GC", freeze_startup_objects())
                return session
            except Exception as e:
                raise into_java(e) from None

    _defined.update(Bridge=Bridge, Session=Session, Chunks=Chunks)
    return _defined


def install(factory: Callable[[Mapping[str, str]], Any] | None = None, *, adopt_hooks: bool = True) -> Any:
    """Register the bridge so shims configured from now on in this JVM use the in-process transport."""
    from jpype import JClass

    bridge = define_bridge()["Bridge"](factory or default_manager_factory, adopt_hooks)
    JClass("io.kts.shim.ShimRegistry").register(bridge)
    return bridge


def uninstall() -> None:
    from jpype import JClass

    JClass("io.kts.shim.ShimRegistry").clear()
