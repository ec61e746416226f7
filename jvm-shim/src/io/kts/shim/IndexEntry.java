package io.kts.shim;

import java.io.IOException;

/**
 * An index entry of a fetchIndex reply or of a next-segment frame: the index's bytes, or, for one the segment
 * does not have, the not-found message to throw when the broker asks for it.
 */
final class IndexEntry {
    private final String type;
    private final byte[] data;
    private final String notFound;

    IndexEntry(String type, byte[] data, String notFound) {
        this.type = type;
        this.data = data;
        this.notFound = notFound;
    }

    String type() {
        return type;
    }

    byte[] data() {
        return data;
    }

    String notFound() {
        return notFound;
    }

    static IndexEntry read(Wire.FrameSource in) throws IOException {
        String type = in.readStr16();
        int n = in.readInt();
        if (n >= 0) return new IndexEntry(type, in.readBytes(n), null);
        if (n == -1) {
            return new IndexEntry(type, null,
                    SidecarTransport.remoteError("fetchIndex(" + type + ")", in.readByte(), in).getMessage());
        }
        throw new IOException("protocol error: index entry " + type + " has length " + n);
    }
}
