package io.github.idmint.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentLinkedQueue;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/** Ranges granted exactly once by a real idmint serve: across threads and clients, and through lost replies. */
class ExactlyOnceTest {
    @TempDir
    Path dir;

    /**
     * Two clients of four threads each take IDs with next and nextN from a tag of tiny ranges (a load
     * every few dozen IDs): every ID is handed out once, and each thread's IDs increase.
     */
    @Test
    void consecutiveUniqueRangesAcrossThreads() throws Exception {
        IdmintServer.createTag(dir, "order", 10, 200);
        try (IdmintServer server = IdmintServer.start(dir);
                IdmintClient a = IdmintClient.builder().urls(server.url()).build();
                IdmintClient b = IdmintClient.builder().urls(server.url()).build()) {
            int perThread = 3000;
            ConcurrentLinkedQueue<long[]> taken = new ConcurrentLinkedQueue<>();
            ConcurrentLinkedQueue<Throwable> failures = new ConcurrentLinkedQueue<>();
            List<Thread> threads = new ArrayList<>();
            for (int t = 0; t < 8; t++) {
                IdmintClient c = t % 2 == 0 ? a : b;
                boolean batches = t % 4 < 2;
                threads.add(new Thread(() -> {
                    long[] mine = new long[perThread];
                    try {
                        for (int i = 0; i < perThread;) {
                            if (batches && i + 7 <= perThread) {
                                long[] ids = c.nextN("order", 7);
                                System.arraycopy(ids, 0, mine, i, 7);
                                i += 7;
                            } else {
                                mine[i++] = c.next("order");
                            }
                        }
                    } catch (Throwable e) {
                        failures.add(e);
                    }
                    taken.add(mine);
                }));
            }
            threads.forEach(Thread::start);
            for (Thread t : threads) {
                t.join(60_000);
            }
            assertTrue(failures.isEmpty(), () -> "calls failed: " + failures);
            assertEquals(8, taken.size());
            long[] all = taken.stream().flatMapToLong(Arrays::stream).sorted().toArray();
            assertEquals(8 * perThread, all.length);
            for (int i = 1; i < all.length; i++) {
                assertTrue(all[i] != all[i - 1], "id " + all[i] + " handed out twice");
            }
            for (long[] mine : taken) {
                for (int i = 1; i < mine.length; i++) {
                    assertTrue(mine[i] > mine[i - 1], "a thread's ids went back: " + mine[i - 1] + " then " + mine[i]);
                }
            }
            assertTrue(all[0] >= 1);
            long loads = a.stats().tags().get(0).loads() + b.stats().tags().get(0).loads();
            assertTrue(loads >= 8 * perThread / 200, "tiny ranges: at least one load per 200 ids, got " + loads);
        }
    }

    /**
     * A tag starved by a tiny max_step (5 IDs a range) under sixteen threads: the waiters are served
     * in turn from the ranges that arrive, so no call fails while ranges keep arriving.
     */
    @Test
    void starvedTagServesWaitersInTurn() throws Exception {
        IdmintServer.createTag(dir, "tiny", 1, 5);
        try (IdmintServer server = IdmintServer.start(dir);
                IdmintClient c = IdmintClient.builder().urls(server.url()).build()) {
            int perThread = 100;
            long[][] ids = new long[16][perThread];
            ConcurrentLinkedQueue<Throwable> failures = new ConcurrentLinkedQueue<>();
            List<Thread> threads = new ArrayList<>();
            for (long[] mine : ids) {
                threads.add(new Thread(() -> {
                    try {
                        for (int i = 0; i < perThread; i++) {
                            mine[i] = c.next("tiny");
                        }
                    } catch (Throwable e) {
                        failures.add(e);
                    }
                }));
            }
            threads.forEach(Thread::start);
            for (Thread t : threads) {
                t.join(120_000);
            }
            assertTrue(failures.isEmpty(), () -> "calls failed: " + failures);
            long[] all = Arrays.stream(ids).flatMapToLong(Arrays::stream).sorted().toArray();
            assertEquals(16 * perThread, Arrays.stream(all).distinct().count(), "every id once");
        }
    }

    /**
     * The reply to the first range request is lost after the instance granted it: the client sends
     * the same request ID again and serves that very range, recovered, not a second one.
     */
    @Test
    void lostReplyRecoveredUnderTheSameRequestId() throws Exception {
        IdmintServer.createTag(dir, "order", 100, 100);
        try (IdmintServer server = IdmintServer.start(dir); Proxy proxy = new Proxy(server.port())) {
            proxy.policy(n -> n == 0 ? Proxy.Action.DROP_REPLY : Proxy.Action.FORWARD);
            long first;
            try (IdmintClient c = IdmintClient.builder().urls(proxy.url()).build()) {
                first = c.next("order");
                assertEquals(1, c.stats().tags().get(0).recovered());
            }
            List<Proxy.Exchange> grants = proxy.grants();
            Proxy.Exchange lost = grants.get(0);
            Proxy.Exchange retry = grants.get(1);
            assertEquals(Proxy.Action.DROP_REPLY, lost.action());
            assertEquals(200, lost.status(), "the instance granted the lost request: " + lost.reply());
            assertEquals(lost.requestId(), retry.requestId(), "the retry carries the lost request's ID");
            assertEquals(Proxy.field(lost.body(), "holder_key"), Proxy.field(retry.body(), "holder_key"));
            assertEquals("true", retry.replyField("recovered"));
            assertEquals(lost.replyField("first"), retry.replyField("first"));
            assertEquals(lost.replyField("last"), retry.replyField("last"));
            assertEquals(Long.parseLong(lost.replyField("first")), first, "the client serves the lost range");
        }
    }

    /**
     * Four threads take IDs through a proxy that loses every third reply after the instance granted
     * it: every ID is unique, and every lost range was received again under its request ID.
     */
    @Test
    void lostRepliesUnderLoad() throws Exception {
        IdmintServer.createTag(dir, "order", 50, 50);
        try (IdmintServer server = IdmintServer.start(dir); Proxy proxy = new Proxy(server.port())) {
            proxy.policy(n -> n % 3 == 1 ? Proxy.Action.DROP_REPLY : Proxy.Action.FORWARD);
            int perThread = 1000;
            long[][] ids = new long[4][perThread];
            ConcurrentLinkedQueue<Throwable> failures = new ConcurrentLinkedQueue<>();
            try (IdmintClient c = IdmintClient.builder().urls(proxy.url()).waitTimeout(Duration.ofSeconds(5)).build()) {
                List<Thread> threads = new ArrayList<>();
                for (int t = 0; t < 4; t++) {
                    long[] mine = ids[t];
                    threads.add(new Thread(() -> {
                        try {
                            for (int i = 0; i < perThread; i++) {
                                mine[i] = c.next("order");
                            }
                        } catch (Throwable e) {
                            failures.add(e);
                        }
                    }));
                }
                threads.forEach(Thread::start);
                for (Thread t : threads) {
                    t.join(120_000);
                }
            }
            assertTrue(failures.isEmpty(), () -> "calls failed: " + failures);
            long[] all = Arrays.stream(ids).flatMapToLong(Arrays::stream).sorted().toArray();
            for (int i = 1; i < all.length; i++) {
                assertTrue(all[i] != all[i - 1], "id " + all[i] + " handed out twice");
            }
            Map<String, Proxy.Exchange> received = new HashMap<>();
            List<Proxy.Exchange> lost = new ArrayList<>();
            for (Proxy.Exchange e : proxy.grants()) {
                if (e.status() != 200) {
                    continue;
                }
                if (e.action() == Proxy.Action.DROP_REPLY) {
                    lost.add(e);
                } else {
                    received.put(e.requestId(), e);
                }
            }
            assertTrue(lost.size() >= 10, "replies lost: " + lost.size());
            for (Proxy.Exchange l : lost) {
                Proxy.Exchange r = received.get(l.requestId());
                assertNotNull(r, "the range of lost request " + l.requestId() + " was never received");
                assertEquals(l.replyField("first"), r.replyField("first"));
                assertEquals("true", r.replyField("recovered"));
            }
        }
    }

    /**
     * 503s are retried under the same request ID, honouring Retry-After, until an instance grants it.
     */
    @Test
    void unavailableRetriedUnderTheSameRequestId() throws Exception {
        IdmintServer.createTag(dir, "order", 100, 100);
        try (IdmintServer server = IdmintServer.start(dir); Proxy proxy = new Proxy(server.port())) {
            proxy.policy(n -> n < 2 ? Proxy.Action.ANSWER_503 : Proxy.Action.FORWARD);
            try (IdmintClient c = IdmintClient.builder().urls(proxy.url()).waitTimeout(Duration.ofSeconds(8)).build()) {
                assertEquals(1, c.next("order"));
            }
            List<Proxy.Exchange> grants = proxy.grants();
            assertEquals(Proxy.Action.ANSWER_503, grants.get(0).action());
            assertEquals(Proxy.Action.ANSWER_503, grants.get(1).action());
            assertEquals(200, grants.get(2).status());
            assertEquals(grants.get(0).requestId(), grants.get(2).requestId());
            assertEquals(grants.get(0).requestId(), grants.get(1).requestId());
        }
    }
}
