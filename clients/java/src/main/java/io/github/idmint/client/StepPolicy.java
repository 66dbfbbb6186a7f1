package io.github.idmint.client;

/**
 * StepPolicy sizes the next range so that it lasts about a period at the rate observed, bounded by
 * the tag's step and max_step: the Go module's segment.StepPolicy, the same numbers. The size moves
 * at most 4x up (16x when callers waited on an empty buffer: the rate seen then is only what the
 * ranges allowed) and 2x down per load, and covers four load latencies at the observed rate (at most
 * one second of it), so that the next range lands before the current one runs out.
 */
final class StepPolicy {
    /** Bounds one range when the tag sets no max_step. */
    static final long DEFAULT_MAX_STEP = 1_000_000;

    private static final double GROWTH = 4;
    private static final double STARVED_GROWTH = 16;
    private static final long COVER_FACTOR = 4;
    private static final long MAX_COVER_NANOS = 1_000_000_000L;

    private StepPolicy() {}

    /**
     * Returns the size of the next range given the last one's, the IDs used in elapsedNanos since the
     * last load started, the last load's latency, and whether callers waited.
     */
    static long next(long min, long max, long periodNanos, long last, long used, long elapsedNanos, long latencyNanos,
            boolean starved) {
        long lo = Math.max(min, 1);
        long hi = max <= 0 ? DEFAULT_MAX_STEP : max;
        hi = Math.max(hi, lo);
        if (last < lo) {
            last = lo;
        }
        if (used <= 0 || elapsedNanos <= 0 || periodNanos <= 0) {
            return clamp(last / 2, lo, hi);
        }
        double rate = (double) used / elapsedNanos; // IDs per nanosecond
        double want = Math.min(rate * periodNanos, hi);
        double up = (starved ? STARVED_GROWTH : GROWTH) * last;
        double cover = rate * COVER_FACTOR * Math.min(latencyNanos, MAX_COVER_NANOS / COVER_FACTOR);
        up = Math.min(Math.max(up, cover), hi);
        long next = clamp(saturate(Math.ceil(Math.min(want, up)), hi), last / 2, hi);
        return clamp(next, lo, hi);
    }

    /** Converts f (at most hi) to a long, hi when f reaches it. */
    private static long saturate(double f, long hi) {
        return f >= (double) hi ? hi : (long) f;
    }

    private static long clamp(long v, long lo, long hi) {
        return Math.min(Math.max(v, lo), hi);
    }
}
