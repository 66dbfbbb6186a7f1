package io.github.idmint.client;

import java.security.SecureRandom;
import java.util.Base64;

/**
 * Request is one range request of a tag. Its ID (a UUIDv7) and holder key (32 random bytes in
 * unpadded base64url) are chosen before the first attempt, and every retry, to any instance, sends
 * the same ones, so that the range is granted once; the give-back of the range's tail carries the
 * key too.
 */
record Request(String id, String holderKey, String tag, long size, long sinceNanos) {
    private static final SecureRandom RANDOM = new SecureRandom();

    /** Returns a new request for size IDs of tag (0: the tag's step). */
    static Request fresh(String tag, long size) {
        return new Request(uuid7(System.currentTimeMillis()), newHolderKey(), tag, size, System.nanoTime());
    }

    /** Returns a UUIDv7 (RFC 9562): 48 bits of Unix milliseconds, then random bits. */
    static String uuid7(long unixMillis) {
        byte[] b = new byte[16];
        RANDOM.nextBytes(b);
        for (int i = 0; i < 6; i++) {
            b[i] = (byte) (unixMillis >>> (40 - 8 * i));
        }
        b[6] = (byte) ((b[6] & 0x0f) | 0x70); // version 7
        b[8] = (byte) ((b[8] & 0x3f) | 0x80); // variant 10
        StringBuilder s = new StringBuilder(36);
        for (int i = 0; i < 16; i++) {
            if (i == 4 || i == 6 || i == 8 || i == 10) {
                s.append('-');
            }
            s.append(Character.forDigit((b[i] >> 4) & 0xf, 16)).append(Character.forDigit(b[i] & 0xf, 16));
        }
        return s.toString();
    }

    /** Leaves the holder key out: it is a secret, never logged. */
    @Override
    public String toString() {
        return "Request[id=" + id + ", tag=" + tag + ", size=" + size + "]";
    }

    private static String newHolderKey() {
        byte[] b = new byte[32];
        RANDOM.nextBytes(b);
        return Base64.getUrlEncoder().withoutPadding().encodeToString(b);
    }
}
