package org.apache.kafka.server.log.remote.storage;

/** Compile-time/test stub of Kafka's RemoteLogSegmentState. */
public enum RemoteLogSegmentState {
    COPY_SEGMENT_STARTED((byte) 0),
    COPY_SEGMENT_FINISHED((byte) 1),
    DELETE_SEGMENT_STARTED((byte) 2),
    DELETE_SEGMENT_FINISHED((byte) 3);

    private final byte id;

    RemoteLogSegmentState(byte id) {
        this.id = id;
    }

    public byte id() {
        return id;
    }

    public static RemoteLogSegmentState forId(byte id) {
        for (RemoteLogSegmentState s : values()) {
            if (s.id == id) return s;
        }
        throw new IllegalArgumentException("id " + id);
    }

    public static boolean isValidTransition(RemoteLogSegmentState srcState, RemoteLogSegmentState targetState) {
        return srcState == null ? targetState == COPY_SEGMENT_STARTED : targetState.id > srcState.id;
    }
}
