package io.github.idmint.client;

import static org.junit.jupiter.api.Assertions.assertEquals;

import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;

/** The step policy gives the Go client's sizes (segment.StepPolicy). */
class StepPolicyTest {
    private static final long PERIOD = TimeUnit.MINUTES.toNanos(15);
    private static final long SECOND = TimeUnit.SECONDS.toNanos(1);

    @Test
    void next() {
        // Idle: halves, never below the tag's step.
        assertEquals(1000, StepPolicy.next(1000, 0, PERIOD, 1000, 0, SECOND, 0, false));
        assertEquals(2000, StepPolicy.next(1000, 0, PERIOD, 4000, 0, SECOND, 0, false));
        // Busy: at most 4x up, 16x when callers waited, never past max_step.
        assertEquals(4000, StepPolicy.next(1000, 0, PERIOD, 1000, 1_000_000, SECOND, 0, false));
        assertEquals(16000, StepPolicy.next(1000, 0, PERIOD, 1000, 1_000_000, SECOND, 0, true));
        assertEquals(5000, StepPolicy.next(1000, 5000, PERIOD, 4000, 1_000_000, SECOND, 0, false));
        assertEquals(StepPolicy.DEFAULT_MAX_STEP, StepPolicy.next(1000, 0, PERIOD, 900_000, 10_000_000, SECOND, 0, false));
        // The range covers four load latencies at the observed rate: 1,000,000/s for 4 x 100ms.
        assertEquals(400_000, StepPolicy.next(1000, 0, PERIOD, 1000, 1_000_000, SECOND, SECOND / 10, false));
        // Slow: the rate over the period, at most halving.
        assertEquals(2000, StepPolicy.next(1000, 0, PERIOD, 4000, 1, SECOND, 0, false));
    }
}
