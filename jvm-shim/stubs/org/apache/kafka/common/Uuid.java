package org.apache.kafka.common;

import java.nio.ByteBuffer;
import java.util.Base64;
import java.util.UUID;

/** Compile-time/test stub of kafka-clients' Uuid (same descriptors; toString is base64url without padding). */
public class Uuid implements Comparable<Uuid> {
    public static final Uuid ZERO_UUID = new Uuid(0L, 0L);
    public static final Uuid ONE_UUID = new Uuid(0L, 1L);
    public static final Uuid METADATA_TOPIC_ID = ONE_UUID;

    private final long mostSignificantBits;
    private final long leastSignificantBits;

    public Uuid(long mostSigBits, long leastSigBits) {
        this.mostSignificantBits = mostSigBits;
        this.leastSignificantBits = leastSigBits;
    }

    public static Uuid randomUuid() {
        while (true) {
            UUID u = UUID.randomUUID();
            Uuid id = new Uuid(u.getMostSignificantBits(), u.getLeastSignificantBits());
            if (!id.equals(ZERO_UUID) && !id.equals(ONE_UUID) && !id.toString().startsWith("-")) {
                return id;
            }
        }
    }

    public long getMostSignificantBits() {
        return mostSignificantBits;
    }

    public long getLeastSignificantBits() {
        return leastSignificantBits;
    }

    @Override
    public boolean equals(Object obj) {
        if (!(obj instanceof Uuid)) return false;
        Uuid o = (Uuid) obj;
        return o.mostSignificantBits == mostSignificantBits && o.leastSignificantBits == leastSignificantBits;
    }

    @Override
    public int hashCode() {
        long x = mostSignificantBits ^ leastSignificantBits;
        return (int) (x >> 32) ^ (int) x;
    }

    @Override
    public String toString() {
        ByteBuffer bb = ByteBuffer.allocate(16);
        bb.putLong(mostSignificantBits).putLong(leastSignificantBits);
        return Base64.getUrlEncoder().withoutPadding().encodeToString(bb.array());
    }

    public static Uuid fromString(String str) {
        byte[] raw = Base64.getUrlDecoder().decode(str);
        if (raw.length != 16) throw new IllegalArgumentException("Invalid Uuid " + str);
        ByteBuffer bb = ByteBuffer.wrap(raw);
        return new Uuid(bb.getLong(), bb.getLong());
    }

    @Override
    public int compareTo(Uuid other) {
        int c = Long.compare(mostSignificantBits, other.mostSignificantBits);
        return c != 0 ? c : Long.compare(leastSignificantBits, other.leastSignificantBits);
    }
}
