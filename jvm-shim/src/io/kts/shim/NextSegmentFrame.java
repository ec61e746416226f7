package io.kts.shim;

import java.io.IOException;
import java.nio.BufferUnderflowException;
import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.List;

/** The frame a stream sends when it goes on into the partition's next segment: its name and its indexes. */
final class NextSegmentFrame {
    final String segment;
    final List<IndexEntry> indexes;

    private NextSegmentFrame(String segment, List<IndexEntry> indexes) {
        this.segment = segment;
        this.indexes = indexes;
    }

    /** Reads one frame, length first; anything short, long or malformed is a protocol error. */
    static NextSegmentFrame read(Wire.FrameSource in) throws IOException {
        int n = in.readInt();
        if (!Wire.isNextSegmentFrameLength(n)) {
            throw new IOException("protocol error: a next-segment frame of " + n + " bytes");
        }
        ByteBuffer b = ByteBuffer.wrap(in.readBytes(n));
        Wire.FrameSource frame = Wire.frameOf(b);
        String next;
        List<IndexEntry> entries = new ArrayList<>(3);
        try {
            next = frame.readStr16();
            int count = frame.readByte() & 0xFF;
            for (int i = 0; i < count; i++) entries.add(IndexEntry.read(frame));
        } catch (BufferUnderflowException | NegativeArraySizeException e) {
            throw new IOException("protocol error: a next-segment frame shorter than its contents", e);
        }
        if (b.hasRemaining()) {
            throw new IOException("protocol error: " + b.remaining() + " bytes left in a next-segment frame");
        }
        return new NextSegmentFrame(next, entries);
    }
}
