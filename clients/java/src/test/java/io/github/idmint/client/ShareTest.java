package io.github.idmint.client;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;

import com.fasterxml.jackson.databind.ObjectMapper;
import io.github.idmint.client.Share.Epoch;
import java.util.ArrayList;
import java.util.List;
import org.junit.jupiter.api.Test;

/** The share arithmetic, on the cases of the Go module's wire/share_test.go and region/region_test.go. */
class ShareTest {
    private static final long TOP = Long.MAX_VALUE;

    private static Share shareOf(List<Epoch> epochs, int k, int slot, int slots) {
        List<Epoch> own = new ArrayList<>();
        for (Epoch e : epochs) {
            own.add(new Epoch(e.from(), e.to(), e.block(), e.regions(), k));
        }
        return new Share(epochs.get(0).regions().get(k), own, slot, slots);
    }

    private static Epoch epoch(long from, long to, long block, String... regions) {
        return new Epoch(from, to, block, List.of(regions), 0);
    }

    @Test
    void nextOwned() {
        List<Epoch> epochs = List.of(epoch(1, 10_001, 1000, "eu", "us", "ap"), epoch(10_001, 0, 500, "eu", "us"));
        Object[][] cases = {
            {"eu from nothing", 0, 0L, new long[] {1, 1000}},
            {"eu inside its block", 0, 499L, new long[] {500, 1000}},
            {"eu skips us and ap", 0, 1000L, new long[] {3001, 4000}},
            {"us from nothing", 1, 0L, new long[] {1001, 2000}},
            {"ap's block clipped by the fence", 2, 8000L, new long[] {8001, 9000}},
            {"ap past its last block", 2, 9000L, null},
            {"eu's last block of epoch 1 then epoch 2", 0, 9999L, new long[] {10_000, 10_000}},
            {"eu into epoch 2", 0, 10_000L, new long[] {10_001, 10_500}},
            {"us into epoch 2", 1, 9000L, new long[] {10_501, 11_000}},
        };
        for (Object[] c : cases) {
            int k = (Integer) c[1];
            Share s = shareOf(k == 2 ? epochs.subList(0, 1) : epochs, k, k, 3); // ap retired: only the fenced epoch
            assertArrayEquals((long[]) c[3], s.nextOwned((Long) c[2]), (String) c[0]);
        }
    }

    @Test
    void noOverflowAtTheTop() {
        List<Epoch> epochs = List.of(epoch(TOP - 2500, 0, 1000, "eu", "us"));
        Share eu = shareOf(epochs, 0, 0, 2);
        Share us = shareOf(epochs, 1, 1, 2);
        assertNull(us.nextOwned(TOP - 10), "us above its last block");
        assertArrayEquals(new long[] {TOP - 9, TOP}, eu.nextOwned(TOP - 10), "eu's last block");
        assertNull(eu.nextOwned(TOP), "an ID above 2^63-1");
        assertEquals(true, eu.ownsRange(TOP - 9, TOP));
        assertEquals(false, us.ownsRange(TOP - 9, TOP));
        assertNull(eu.checkRange(TOP - 9, TOP, us));
        assertNotNull(us.checkRange(TOP - 9, TOP, eu));
    }

    @Test
    void compatible() {
        List<Epoch> open = List.of(epoch(1, 0, 1000, "eu", "us"));
        List<Epoch> fenced = List.of(epoch(1, 5001, 1000, "eu", "us"), epoch(5001, 0, 1000, "eu", "us", "ap"));
        Share ap = new Share("ap", List.of(new Epoch(5001, 0, 1000, List.of("eu", "us", "ap"), 2)), 2, 4);
        Object[][] cases = {
            {"two regions of one epoch", shareOf(open, 0, 0, 4), shareOf(open, 1, 1, 4), true},
            {"one fenced, the other not yet", shareOf(fenced.subList(0, 1), 0, 0, 4), shareOf(open, 1, 1, 4), true},
            {"after a split", shareOf(fenced, 0, 0, 4), ap, true},
            {"a new region beside an unfenced one", shareOf(open, 0, 0, 4), ap, false},
            {"the same index", shareOf(open, 0, 0, 4), new Share("xx", shareOf(open, 0, 0, 4).epochs(), 1, 4), false},
            {"the same name", shareOf(open, 0, 0, 4), shareOf(open, 0, 1, 4), false},
            {"another block", shareOf(open, 0, 0, 4), new Share("us", List.of(new Epoch(1, 0, 999, List.of("eu", "us"), 1)), 1, 4), false},
            {"the same worker slot", shareOf(open, 0, 1, 4), shareOf(open, 1, 1, 4), false},
            {"another slot count", shareOf(open, 0, 0, 4), new Share("us", shareOf(open, 1, 1, 4).epochs(), 1, 2), false},
        };
        for (Object[] c : cases) {
            Share a = (Share) c[1];
            Share b = (Share) c[2];
            boolean ok = (Boolean) c[3];
            assertEquals(ok, a.compatible(b) == null, c[0] + ": " + a.compatible(b));
            assertEquals(ok, b.compatible(a) == null, c[0] + " (swapped): " + b.compatible(a));
        }
    }

    private static final long BLOCK = 1000;
    private static final long X = 10_001; // a cycle start of two regions above 1

    private static Share old(String name, int index, int slot) {
        return new Share(name, List.of(new Epoch(1, 0, BLOCK, List.of("eu", "us"), index)), slot, 8);
    }

    /** s after `region split --add ap` at X: fenced, then the epoch of three regions above. */
    private static Share split(Share s, int index) {
        return new Share(s.name(), List.of(s.epochs().get(0).fencedAt(X), new Epoch(X, 0, BLOCK, List.of("eu", "us", "ap"), index)),
                s.workerSlot(), s.workerSlots());
    }

    @Test
    void checkRange() {
        Share eu = old("eu", 0, 0);
        Share us = old("us", 1, 1);
        Share twin = old("ap", 0, 1); // claimed with eu's index and us's worker slot
        Share otherBlock = new Share("us", List.of(new Epoch(1, 0, 500, List.of("eu", "us"), 1)), 1, 8);
        Object[][] cases = {
            {"its own block, compatible", us, 1001L, 1500L, eu, true},
            {"a whole block", us, 1001L, 2000L, eu, true},
            {"not its block", us, 1L, 100L, eu, false},
            {"crosses its block's end", us, 1901L, 2100L, eu, false},
            {"empty", us, 0L, 0L, eu, false},
            {"the same index", twin, 1L, 100L, eu, false},
            {"another block size", otherBlock, 501L, 600L, eu, false},
            {"split, the other read before it", split(us, 1), X + BLOCK, X + BLOCK + 9, eu, true},
            {"split, read before the other's", us, 1001L, 1500L, split(eu, 0), true},
            {"above the split the other shows, in the old scheme", us, X + BLOCK, X + BLOCK + 9, split(eu, 0), false},
            {"split, the other read before it, its own old epoch", split(us, 1), 3001L, 3100L, eu, true},
            {"the same worker slot, a split apart", us, 1001L, 1500L, split(twin, 2), false},
        };
        for (Object[] c : cases) {
            String err = ((Share) c[1]).checkRange((Long) c[2], (Long) c[3], (Share) c[4]);
            assertEquals((Boolean) c[5], err == null, c[0] + ": " + err);
        }
    }

    @Test
    void fromJson() throws Exception {
        String json = "{\"name\":\"b\",\"epochs\":[{\"from\":\"1\",\"to\":\"0\",\"block\":\"1000000000000000\","
                + "\"regions\":[\"a\",\"b\"],\"index\":1}],\"worker_slot\":1,\"worker_slots\":2}";
        Share s = Share.fromJson(new ObjectMapper().readTree(json));
        assertEquals(new Share("b", List.of(new Epoch(1, 0, 1_000_000_000_000_000L, List.of("a", "b"), 1)), 1, 2), s);
        assertEquals(true, s.ownsRange(1_000_000_000_000_001L, 1_000_000_000_000_100L));
        assertNull(Share.fromJson(new ObjectMapper().readTree("{}").get("region")));
    }
}
