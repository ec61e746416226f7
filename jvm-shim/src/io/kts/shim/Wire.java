package io.kts.shim;

import java.io.ByteArrayOutputStream;
import java.io.DataOutputStream;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.lang.reflect.Method;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.LinkedHashMap;
import java.util.Map;
import org.apache.kafka.common.TopicIdPartition;
import org.apache.kafka.server.log.remote.storage.RemoteLogSegmentMetadata;

/**
 * Byte layouts shared with rsm/jvm/codec.py. Kept in one place so the sidecar protocol and the in-process
 * bridge cannot drift apart: metadata is always this big-endian record, whichever transport carries it.
 *
 * <p>Every op code and frame kind of the sidecar protocol is declared here, each with the same name and value as
 * in rsm/jvm/codec.py (docs/architecture.md lays them out in one table): requests {@code u32 length | u8 op |
 * payload} ({@code OP_*}); replies that start with a status ({@code STATUS_*}); the frames of a fetch's stream
 * ({@link #STREAM_END}, an inline piece of {@code n > 0} bytes, {@link #STREAM_ERROR}, {@link #PIECE_SHARED},
 * {@link #STREAM_NEXT_SEGMENT}); and what the shim sends back on a shared-memory stream ({@link #PIECE_ACK},
 * {@link #STREAM_RESUMED}, or a whole {@link #OP_CANCEL_STREAM} request).
 */
final class Wire {
    static final int METADATA_VERSION = 1;

    static final byte OP_COPY = 1;
    static final byte OP_FETCH = 2;
    /**
     * Reply: status, u8 n, then n entries {@code u16 + type name, i32 length, bytes}, the index asked for first.
     * Asked for the offset, time or transaction index, the sidecar adds the other two (see {@link IndexesAhead});
     * length -1 there means the segment has no such index, and an error frame (status, type, message) follows.
     */
    static final byte OP_FETCH_INDEX = 3;
    static final byte OP_DELETE = 4;
    static final byte OP_PING = 5;
    static final byte OP_SHUTDOWN = 6;
    /** No reply: "this connection has the sidecar's shared-memory region mapped" (sent once, on connect). */
    static final byte OP_SHARED_MEMORY_MAPPED = 7;
    /** Reply: status, i32 n, n bytes of metrics lines ({@link MetricsBeans#parse}). */
    static final byte OP_METRICS = 8;
    /**
     * No reply: sent in place of an acknowledgement when the broker closes a shared-memory stream early. The
     * sidecar stops, ends the stream with its usual end frame, and the connection serves the next request.
     */
    static final byte OP_CANCEL_STREAM = 9;
    /**
     * Reply: status. Sent when the shim gives up on a copy (a timeout, a broken connection), with the copy's
     * metadata blob and an i32 of milliseconds the sidecar may wait for the copy to stop. OK means the copy stopped
     * and every object of its segment is removed.
     */
    static final byte OP_CANCEL_COPY = 10;

    /** Stream frame: the stream is over. */
    static final int STREAM_END = 0;
    /** Stream frame: an error ends the stream (u8 status, u16 + type, i32 + message follow). */
    static final int STREAM_ERROR = -1;
    /** Stream frame: the next piece is in the shared-memory region (i64 offset, i32 length follow). */
    static final int PIECE_SHARED = -2;
    /** Sent back for each shared-memory piece once it was copied out: the sidecar may reuse its buffer. */
    static final byte PIECE_ACK = 1;
    /**
     * Sent like an acknowledgement, no reply: a new broker fetch of the same segment goes on reading this kept
     * stream, from the i32 position that follows (so the sidecar's fetch metrics count it).
     */
    static final byte STREAM_RESUMED = 2;
    /**
     * Stream frame in place of the end frame of an open-ended fetch that reached its segment's end: i32 n and n
     * bytes follow (u16 + the partition's next segment's id, u8 count, that many index entries laid out as in an
     * {@link #OP_FETCH_INDEX} reply), then that segment's pieces from position 0 (see
     * {@link SidecarTransport#nextSegment}).
     */
    static final int STREAM_NEXT_SEGMENT = -3;
    /** The largest next-segment frame: three indexes of at most 1 MiB each (INDEX_AHEAD_MAX_BYTES), and names. */
    static final int NEXT_SEGMENT_MAX_BYTES = 3 * (1 << 20) + 4096;

    /** Whether {@code n}, read as a next-segment frame's length, is one the sidecar can send. */
    static boolean isNextSegmentFrameLength(int n) {
        return n >= 0 && n <= NEXT_SEGMENT_MAX_BYTES;
    }

    static final byte STATUS_OK = 0;
    static final byte STATUS_NOT_FOUND = 1;
    static final byte STATUS_ERROR = 2;
    /** A transient failure (throttling, timeout, 5xx): {@link KafkaErrors#retriable}. */
    static final byte STATUS_RETRIABLE = 3;

    /** Kafka 4.0 added isTxnIdxEmpty(); looked up reflectively so one jar works on 3.6+ brokers. */
    private static final Method TXN_IDX_EMPTY = findTxnIdxEmpty();

    private Wire() {
    }

    /** What sidecar frames are read from: a connection ({@link Conn}), or a frame already read whole. */
    interface FrameSource {
        byte readByte() throws IOException;

        int readInt() throws IOException;

        byte[] readBytes(int n) throws IOException;

        String readStr16() throws IOException;

        /** A string of i32 length, null for length -1. */
        String readStr32() throws IOException;
    }

    /** A frame read whole, as a {@link FrameSource}; reading past its end throws BufferUnderflowException. */
    static FrameSource frameOf(ByteBuffer b) {
        return new FrameSource() {
            @Override
            public byte readByte() {
                return b.get();
            }

            @Override
            public int readInt() {
                return b.getInt();
            }

            @Override
            public byte[] readBytes(int n) {
                byte[] out = new byte[n];
                b.get(out);
                return out;
            }

            @Override
            public String readStr16() {
                return new String(readBytes(b.getShort() & 0xFFFF), StandardCharsets.UTF_8);
            }

            @Override
            public String readStr32() {
                int n = b.getInt();
                return n < 0 ? null : new String(readBytes(n), StandardCharsets.UTF_8);
            }
        };
    }

    private static Method findTxnIdxEmpty() {
        try {
            return RemoteLogSegmentMetadata.class.getMethod("isTxnIdxEmpty");
        } catch (NoSuchMethodException | SecurityException e) {
            return null;
        }
    }

    static byte[] encodeMetadata(RemoteLogSegmentMetadata m) {
        try {
            ByteArrayOutputStream bos = new ByteArrayOutputStream(160);
            DataOutputStream out = new DataOutputStream(bos);
            TopicIdPartition tip = m.remoteLogSegmentId().topicIdPartition();
            out.writeByte(METADATA_VERSION);
            writeStr(out, tip.topicId().toString());
            writeStr(out, tip.topic());
            out.writeInt(tip.partition());
            writeStr(out, m.remoteLogSegmentId().id().toString());
            out.writeLong(m.startOffset());
            out.writeLong(m.endOffset());
            out.writeLong(m.maxTimestampMs());
            out.writeInt(m.brokerId());
            out.writeLong(m.eventTimestampMs());
            out.writeInt(m.segmentSizeInBytes());
            out.writeByte(m.state() == null ? 0 : m.state().id());
            out.writeByte(txnIdxEmpty(m) ? 1 : 0);
            byte[] custom = m.customMetadata() != null && m.customMetadata().isPresent()
                    ? m.customMetadata().get().value() : null;
            writeBlob(out, custom);
            Map<Integer, Long> epochs = m.segmentLeaderEpochs();
            out.writeInt(epochs == null ? 0 : epochs.size());
            if (epochs != null) {
                for (Map.Entry<Integer, Long> e : epochs.entrySet()) {
                    out.writeInt(e.getKey());
                    out.writeLong(e.getValue());
                }
            }
            out.flush();
            return bos.toByteArray();
        } catch (IOException e) {
            throw new UncheckedIOException(e);  // ByteArrayOutputStream does not throw
        }
    }

    private static boolean txnIdxEmpty(RemoteLogSegmentMetadata m) {
        if (TXN_IDX_EMPTY == null) return false;
        try {
            return (Boolean) TXN_IDX_EMPTY.invoke(m);
        } catch (ReflectiveOperationException | RuntimeException e) {
            return false;
        }
    }

    static void writeStr(DataOutputStream out, String s) throws IOException {
        byte[] b = s.getBytes(StandardCharsets.UTF_8);
        if (b.length > 0xFFFF) throw new IOException("string too long for the wire: " + b.length + " bytes");
        out.writeShort(b.length);
        out.write(b);
    }

    static void writeBlob(DataOutputStream out, byte[] b) throws IOException {
        if (b == null) {
            out.writeInt(-1);
        } else {
            out.writeInt(b.length);
            out.write(b);
        }
    }

    /** Copies the remaining bytes without moving the caller's buffer position. */
    static byte[] bytesOf(ByteBuffer buf) {
        if (buf == null) return new byte[0];
        ByteBuffer dup = buf.duplicate();
        byte[] out = new byte[dup.remaining()];
        dup.get(out);
        return out;
    }

    /**
     * The broker hands configure() a Map of Objects (mostly Strings from server.properties). Python gets strings
     * only, untouched; Kafka's Password type prints "[hidden]" from toString(), so its value() is used instead.
     */
    static Map<String, String> stringify(Map<String, ?> configs) {
        Map<String, String> out = new LinkedHashMap<>();
        if (configs == null) return out;
        for (Map.Entry<String, ?> e : configs.entrySet()) {
            Object v = e.getValue();
            if (e.getKey() == null || v == null) continue;
            out.put(e.getKey(), stringValue(v));
        }
        return out;
    }

    private static String stringValue(Object v) {
        if (v instanceof String) return (String) v;
        if (v instanceof Class) return ((Class<?>) v).getName();
        if (v instanceof Iterable) {
            StringBuilder sb = new StringBuilder();
            for (Object o : (Iterable<?>) v) {
                if (sb.length() > 0) sb.append(',');
                sb.append(stringValue(o));
            }
            return sb.toString();
        }
        if (v.getClass().getName().equals("org.apache.kafka.common.config.types.Password")) {
            try {
                return String.valueOf(v.getClass().getMethod("value").invoke(v));
            } catch (ReflectiveOperationException e) {
                return v.toString();
            }
        }
        return v.toString();
    }

    static byte[] encodeConfig(Map<String, String> config) {
        try {
            ByteArrayOutputStream bos = new ByteArrayOutputStream();
            DataOutputStream out = new DataOutputStream(bos);
            out.writeInt(config.size());
            for (Map.Entry<String, String> e : config.entrySet()) {
                writeBlob(out, e.getKey().getBytes(StandardCharsets.UTF_8));
                writeBlob(out, e.getValue().getBytes(StandardCharsets.UTF_8));
            }
            out.flush();
            return bos.toByteArray();
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    /** Never null, always names the failure's type: Kafka logs these messages and operators grep them. */
    static String describe(Throwable t) {
        if (t == null) return "unknown error";
        String msg = t.getMessage();
        String type = t.getClass().getSimpleName();
        return msg == null || msg.isEmpty() ? type : type + ": " + msg;
    }

    static String pythonError(String type, String message) {
        if (message == null || message.isEmpty()) return type == null || type.isEmpty() ? "Python error" : type;
        return type == null || type.isEmpty() ? message : type + ": " + message;
    }

    /** A request frame: {@code u32 len | u8 op | body}. */
    static ByteBuffer request(byte op, Body body) {
        try {
            ByteArrayOutputStream bos = new ByteArrayOutputStream(256);
            DataOutputStream out = new DataOutputStream(bos);
            out.writeInt(0);
            out.writeByte(op);
            body.write(out);
            out.flush();
            ByteBuffer buf = ByteBuffer.wrap(bos.toByteArray());
            buf.putInt(0, buf.capacity() - 4);
            return buf;
        } catch (IOException e) {
            throw new UncheckedIOException(e);  // ByteArrayOutputStream does not throw
        }
    }

    /** Writes a request's body. */
    @FunctionalInterface
    interface Body {
        void write(DataOutputStream out) throws IOException;
    }
}
