package io.kts.shim;

import java.io.IOException;
import java.io.InputStream;
import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Method;
import java.lang.reflect.UndeclaredThrowableException;
import java.nio.ByteBuffer;
import java.util.Map;
import org.apache.kafka.server.log.remote.storage.RemoteStorageException;

/**
 * Calls the Python manager living in this JVM's process (broker started by {@code kts kafka-server-start}).
 * Everything goes through reflection on the bridge's interfaces, because they may come from another class
 * loader than this class; the cost is a few tens of nanoseconds per call.
 */
final class InProcessTransport implements Transport {
    private final Object session;
    private final Method copy;
    private final Method fetch;
    private final Method fetchIndex;
    private final Method delete;
    private final Method close;
    private final Method scratch;
    private final Method metrics;
    private final ThreadLocal<ByteBuffer> scratchOfThread = new ThreadLocal<>();
    private volatile Method chunkNext;
    private volatile Method chunkClose;

    private InProcessTransport(Object session) throws ReflectiveOperationException {
        this.session = session;
        Class<?> api = interfaceNamed(session.getClass(), PythonSession.class.getName());
        copy = api.getMethod("copy", byte[].class, String.class, String.class, String.class, String.class,
                String.class, byte[].class);
        fetch = api.getMethod("fetch", byte[].class, int.class, int.class);
        fetchIndex = api.getMethod("fetchIndex", byte[].class);
        delete = api.getMethod("delete", byte[].class);
        close = api.getMethod("close");
        scratch = api.getMethod("scratch");
        metrics = api.getMethod("metrics");
    }

    static InProcessTransport open(Object bridge, Map<String, String> config) {
        try {
            Class<?> api = interfaceNamed(bridge.getClass(), PythonBridge.class.getName());
            Object session = invoke(api.getMethod("open", Map.class), bridge, "configure", config);
            if (session == null) throw new IllegalStateException("the Python bridge returned no session");
            return new InProcessTransport(session);
        } catch (RemoteStorageException e) {
            throw new IllegalStateException("kafka-tiered-storage: the Python RemoteStorageManager failed to"
                    + " configure: " + e.getMessage(), e);
        } catch (ReflectiveOperationException e) {
            throw new IllegalStateException("kafka-tiered-storage: the registered Python bridge does not implement "
                    + PythonBridge.class.getName() + ": " + Wire.describe(e), e);
        }
    }

    private static Class<?> interfaceNamed(Class<?> cls, String name) throws NoSuchMethodException {
        for (Class<?> c = cls; c != null; c = c.getSuperclass()) {
            for (Class<?> i : c.getInterfaces()) {
                if (i.getName().equals(name)) return i;
            }
        }
        throw new NoSuchMethodException(cls.getName() + " does not implement " + name);
    }

    /**
     * Unwraps reflection and maps anything that is not already a RemoteStorageException (a JPype
     * PyExceptionProxy has a null message, "Proxy called during shutdown" is a RuntimeException) to one with a
     * message, so the broker never sees UndeclaredThrowableException or a null message.
     */
    private static Object invoke(Method m, Object target, String op, Object... args) throws RemoteStorageException {
        try {
            return m.invoke(target, args);
        } catch (InvocationTargetException e) {
            Throwable t = e.getCause();
            while ((t instanceof UndeclaredThrowableException || t instanceof InvocationTargetException)
                    && t.getCause() != null) {
                t = t.getCause();
            }
            if (t instanceof RemoteStorageException) {
                RemoteStorageException r = (RemoteStorageException) t;
                if (r.getMessage() != null) throw r;
                throw new RemoteStorageException(op + ": " + Wire.describe(r), r);
            }
            if (t instanceof Error && !(t instanceof LinkageError)) throw (Error) t;
            throw new RemoteStorageException(op + " failed in Python: " + Wire.describe(t), t);
        } catch (IllegalAccessException e) {
            throw new RemoteStorageException(op + ": cannot call the Python bridge: " + Wire.describe(e), e);
        }
    }

    @Override
    public String name() {
        return "in-process";
    }

    @Override
    public byte[] copy(byte[] metadata, String logSegment, String offsetIndex, String timeIndex,
                       String transactionIndex, String producerSnapshot, byte[] leaderEpochs)
            throws RemoteStorageException {
        return (byte[]) invoke(copy, session, "copyLogSegmentData", metadata, logSegment, offsetIndex, timeIndex,
                transactionIndex, producerSnapshot, leaderEpochs);
    }

    @Override
    public InputStream fetch(byte[] metadata, String segment, int startPosition, int endPosition)
            throws RemoteStorageException {
        return stream(invoke(fetch, session, "fetchLogSegment", metadata, startPosition, endPosition),
                "fetchLogSegment");
    }

    @Override
    public InputStream fetchIndex(byte[] metadata, String segment, String indexType) throws RemoteStorageException {
        String op = "fetchIndex(" + indexType + ")";
        byte[] name = indexType.getBytes(java.nio.charset.StandardCharsets.US_ASCII);
        byte[] request = new byte[1 + name.length + metadata.length];
        request[0] = (byte) name.length;
        System.arraycopy(name, 0, request, 1, name.length);
        System.arraycopy(metadata, 0, request, 1 + name.length, metadata.length);
        return stream(invoke(fetchIndex, session, op, (Object) request), op);
    }

    private InputStream stream(Object result, String op) throws RemoteStorageException {
        if (result == null) return InputStream.nullInputStream();
        if (result instanceof Number) {  // small: copied out of this thread's scratch buffer right away
            long tagged = ((Number) result).longValue();
            int id = (int) (tagged >>> 32);
            int n = (int) tagged;
            ByteBuffer buf = scratchOfThread.get();
            if (buf == null || scratchId(buf) != id) {
                buf = (ByteBuffer) invoke(scratch, session, op);
                scratchOfThread.set(buf);
            }
            if (scratchId(buf) != id || n < 0 || n > buf.capacity() - 8) {
                throw new RemoteStorageException(op + ": the Python bridge answered " + n + " bytes in scratch buffer "
                        + id + ", but this thread's scratch buffer is " + scratchId(buf) + " with "
                        + (buf.capacity() - 8) + " bytes");
            }
            byte[] copy = new byte[n];
            buf.duplicate().position(0).get(copy, 0, n);  // absolute bulk get(int, byte[], ..) is Java 13+
            return new java.io.ByteArrayInputStream(copy);
        }
        if (result instanceof ByteBuffer) return new BufferStream(((ByteBuffer) result).duplicate());
        if (result instanceof byte[]) return new java.io.ByteArrayInputStream((byte[]) result);
        return new ChunkStream(result, op);
    }

    private static int scratchId(ByteBuffer buf) {
        return (int) buf.getLong(buf.capacity() - 8);
    }

    /** All bytes in one direct buffer over Python memory (kept alive by the buffer object itself). */
    private static final class BufferStream extends InputStream {
        private final ByteBuffer buf;

        BufferStream(ByteBuffer buf) {
            this.buf = buf;
        }

        @Override
        public int read() {
            return buf.hasRemaining() ? buf.get() & 0xFF : -1;
        }

        @Override
        public int read(byte[] b, int off, int len) {
            java.util.Objects.checkFromIndexSize(off, len, b.length);
            if (len == 0) return 0;
            if (!buf.hasRemaining()) return -1;
            int k = Math.min(len, buf.remaining());
            buf.get(b, off, k);
            return k;
        }

        @Override
        public int available() {
            return buf.remaining();
        }
    }

    @Override
    public byte[] metrics() throws RemoteStorageException {
        return (byte[]) invoke(metrics, session, "metrics");
    }

    @Override
    public void delete(byte[] metadata) throws RemoteStorageException {
        invoke(delete, session, "deleteLogSegmentData", metadata);
    }

    @Override
    public void close() {
        try {
            invoke(close, session, "close");
        } catch (RemoteStorageException e) {
            System.getLogger("io.kts.shim").log(System.Logger.Level.WARNING,
                    "closing the Python RemoteStorageManager failed: {0}", e.getMessage());
        }
    }

    private void resolveChunkMethods(Object chunks) throws RemoteStorageException {
        if (chunkNext != null) return;
        try {
            Class<?> api = interfaceNamed(chunks.getClass(), PythonChunks.class.getName());
            chunkClose = api.getMethod("close");
            chunkNext = api.getMethod("next");
        } catch (NoSuchMethodException e) {
            throw new RemoteStorageException("the Python bridge returned a stream of the wrong type: "
                    + Wire.describe(e), e);
        }
    }

    /** Copies out of Python-owned memory, one piece per crossing; a piece is dropped before the next is asked for. */
    private final class ChunkStream extends InputStream {
        private final Object chunks;
        private final String op;
        private ByteBuffer buf;
        private boolean eof;
        private boolean closed;

        ChunkStream(Object chunks, String op) throws RemoteStorageException {
            if (chunks == null) throw new RemoteStorageException(op + ": the Python bridge returned no stream");
            resolveChunkMethods(chunks);
            this.chunks = chunks;
            this.op = op;
        }

        @Override
        public int read() throws IOException {
            byte[] one = new byte[1];
            return read(one, 0, 1) < 0 ? -1 : one[0] & 0xFF;
        }

        @Override
        public int read(byte[] b, int off, int len) throws IOException {
            if (closed) throw new IOException(op + ": stream is closed");
            java.util.Objects.checkFromIndexSize(off, len, b.length);
            if (eof) return -1;
            if (len == 0) return 0;
            try {
                while (buf == null || !buf.hasRemaining()) {
                    buf = null;
                    ByteBuffer next = (ByteBuffer) invoke(chunkNext, chunks, op);
                    if (next == null) {
                        eof = true;
                        return -1;
                    }
                    buf = next;
                }
            } catch (RemoteStorageException e) {
                eof = true;
                throw new IOException(e.getMessage(), e);
            }
            int k = Math.min(len, buf.remaining());
            buf.get(b, off, k);
            return k;
        }

        @Override
        public int available() {
            return buf == null || closed ? 0 : buf.remaining();
        }

        @Override
        public void close() {
            if (closed) return;
            closed = true;
            buf = null;
            try {
                invoke(chunkClose, chunks, op);
            } catch (RemoteStorageException e) {
                // closing a read stream has nothing useful to report
            }
        }
    }
}
