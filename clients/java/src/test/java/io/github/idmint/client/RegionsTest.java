package io.github.idmint.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import java.io.IOException;
import java.net.InetAddress;
import java.net.ServerSocket;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.UUID;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.function.BooleanSupplier;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * A client of two regions against real {@code idmint serve} processes, each region its own
 * PostgreSQL database claimed with {@code idmint region claim} before the tag is created (as
 * clients/go/regions_test.go does): region a owns IDs 1 to 10^15, b the 10^15 after. The
 * PostgreSQL server is the test harness's (make test-java runs Maven under testkit/cmd/withpostgres,
 * which sets IDMINT_TEST_DATABASE_URL); each test makes databases of its own on it.
 */
class RegionsTest {
    private static final String TAG = "order";
    private static final long B_START = 1_000_000_000_000_000L;

    @TempDir
    Path dir;

    /** Returns the region whose share holds id. */
    private static String regionOf(long id) {
        return id > B_START ? "b" : "a";
    }

    private static String server() {
        String url = System.getenv("IDMINT_TEST_DATABASE_URL");
        Assumptions.assumeTrue(url != null && !url.isEmpty(),
                "IDMINT_TEST_DATABASE_URL unset: run under testkit/cmd/withpostgres (make test-java does)");
        return url;
    }

    private static String psql(String url, String sql) throws IOException, InterruptedException {
        Process p = new ProcessBuilder("psql", url, "-X", "-q", "-At", "-F", ",", "-v", "ON_ERROR_STOP=1", "-c", sql)
                .redirectErrorStream(true).start();
        String out = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
        if (!p.waitFor(1, TimeUnit.MINUTES) || p.exitValue() != 0) {
            throw new IOException("psql " + sql + ": " + out);
        }
        return out.trim();
    }

    private static int freePort() throws IOException {
        try (ServerSocket s = new ServerSocket(0, 1, InetAddress.getLoopbackAddress())) {
            return s.getLocalPort();
        }
    }

    /** One region: a database and its idmint serve processes on fixed ports. */
    final class TestRegion implements AutoCloseable {
        final String name;
        final String url;
        final int[] ports;
        final List<IdmintServer> procs = new ArrayList<>();
        int runs;

        /** Makes a database claimed as region name of regions, the tag starting at start, and n processes. */
        TestRegion(String name, String regions, long start, int n) throws Exception {
            String base = server();
            String db = "r" + name + "_" + UUID.randomUUID().toString().replace("-", "").substring(0, 12);
            psql(base, "CREATE DATABASE " + db);
            int q = base.indexOf('?');
            int slash = base.lastIndexOf('/', q < 0 ? base.length() : q);
            this.url = base.substring(0, slash + 1) + db + (q < 0 ? "" : base.substring(q));
            this.name = name;
            IdmintServer.run("migrate", "--database-url", url);
            IdmintServer.run("region", "claim", "--database-url", url, "--name", name, "--regions", regions,
                    "--block", Long.toString(B_START));
            IdmintServer.run("tag", "create", TAG, "--step", "100", "--max-step", "100", "--start", Long.toString(start),
                    "--database-url", url);
            ports = new int[n];
            for (int i = 0; i < n; i++) {
                ports[i] = freePort();
            }
            start();
        }

        String[] urls() {
            return Arrays.stream(ports).mapToObj(p -> "http://127.0.0.1:" + p).toArray(String[]::new);
        }

        void start() throws Exception {
            runs++;
            for (int i = 0; i < ports.length; i++) {
                String inst = name + "-" + i + "-" + runs;
                procs.add(IdmintServer.startOn(dir.resolve(inst + ".log"), url, "127.0.0.1:" + ports[i],
                        "--region", name, "--instance", inst, "--access-log=false", "--prune-after", "0"));
            }
        }

        /** SIGKILLs the region's processes. */
        void kill() throws InterruptedException {
            for (IdmintServer p : procs) {
                p.kill();
            }
            procs.clear();
        }

        /** Returns the region's segment log of the tag: request ID → {first, last}. */
        Map<String, long[]> segmentLog() throws Exception {
            Map<String, long[]> out = new HashMap<>();
            String rows = psql(url, "SELECT request_id::text, first_id, last_id FROM idmint_segments WHERE biz_tag = '" + TAG + "'");
            for (String row : rows.split("\n")) {
                if (!row.isBlank()) {
                    String[] f = row.split(",");
                    out.put(f[0], new long[] {Long.parseLong(f[1]), Long.parseLong(f[2])});
                }
            }
            return out;
        }

        /** Returns the tag's max_id in the region's database. */
        long maxId() throws Exception {
            return Long.parseLong(psql(url, "SELECT max_id FROM idmint_tags WHERE biz_tag = '" + TAG + "'"));
        }

        @Override
        public void close() throws InterruptedException {
            kill();
        }
    }

    /** Workers taking IDs from one client, each ID with when it was handed out. */
    static final class Load {
        final List<Thread> workers = new ArrayList<>();
        final AtomicLong attempts = new AtomicLong();
        final List<Exception> failed = new ArrayList<>();
        final List<long[]> taken = new ArrayList<>(); // {id, nanoTime}
        volatile boolean stop;

        Load(IdmintClient c, int n) {
            for (int w = 0; w < n; w++) {
                Thread t = new Thread(() -> {
                    while (!stop) {
                        attempts.incrementAndGet();
                        try {
                            long id = c.next(TAG);
                            synchronized (this) {
                                taken.add(new long[] {id, System.nanoTime()});
                            }
                        } catch (RuntimeException e) {
                            synchronized (this) {
                                failed.add(e);
                            }
                        }
                        try {
                            Thread.sleep(0, 200_000);
                        } catch (InterruptedException e) {
                            return;
                        }
                    }
                }, "load-" + w);
                t.start();
                workers.add(t);
            }
        }

        void halt() throws InterruptedException {
            stop = true;
            for (Thread t : workers) {
                t.join();
            }
        }

        synchronized int count() {
            return taken.size();
        }

        /** Returns when the first ID of region name was handed out at or after since, or -1. */
        synchronized long firstFrom(String name, long since) {
            for (long[] t : taken) {
                if (t[1] - since >= 0 && regionOf(t[0]).equals(name)) {
                    return t[1];
                }
            }
            return -1;
        }

        synchronized long[] ids() {
            return taken.stream().mapToLong(t -> t[0]).sorted().toArray();
        }

        synchronized List<Exception> failures() {
            return new ArrayList<>(failed);
        }
    }

    private static void eventually(String what, long seconds, BooleanSupplier ok, java.util.function.Supplier<String> state)
            throws InterruptedException {
        long end = System.nanoTime() + TimeUnit.SECONDS.toNanos(seconds);
        while (!ok.getAsBoolean()) {
            if (System.nanoTime() - end > 0) {
                fail("timed out waiting for " + what + ": " + state.get());
            }
            Thread.sleep(10);
        }
    }

    /** Waits until c serves from region name and handed out an ID of it since since; returns how long after since (ms). */
    private static long waitServing(IdmintClient c, Load l, String name, long since) throws InterruptedException {
        eventually("the client to serve from region " + name, 30,
                () -> c.stats().region().equals(name) && l.firstFrom(name, since) >= 0, () -> c.stats().toString());
        return TimeUnit.NANOSECONDS.toMillis(l.firstFrom(name, since) - since);
    }

    private static IdmintClient client(String[] a, String[] b) {
        return IdmintClient.builder()
                .region("a", a)
                .region("b", b)
                .attemptTimeout(Duration.ofMillis(300))
                .waitTimeout(Duration.ofSeconds(1))
                .probe(Duration.ofMillis(50), Duration.ofMillis(500))
                .build();
    }

    private static int duplicates(long[] sorted) {
        int d = 0;
        for (int i = 1; i < sorted.length; i++) {
            if (sorted[i] == sorted[i - 1]) {
                d++;
            }
        }
        return d;
    }

    /**
     * Fails unless every ID handed out lies in a range of the segment log of the region whose share
     * holds it, and no request ID is in both regions' logs: no grant, lookup or resend crossed a region.
     */
    private static void requireNoCrossing(long[] ids, TestRegion a, TestRegion b) throws Exception {
        Map<String, Map<String, long[]>> logs = Map.of("a", a.segmentLog(), "b", b.segmentLog());
        for (String id : logs.get("a").keySet()) {
            assertTrue(!logs.get("b").containsKey(id), "request " + id + " is in both regions' segment logs: a request crossed a region");
        }
        for (var e : logs.entrySet()) {
            List<long[]> ranges = new ArrayList<>(e.getValue().values());
            ranges.sort((x, y) -> Long.compare(x[0], y[0]));
            for (long id : ids) {
                if (!regionOf(id).equals(e.getKey())) {
                    continue;
                }
                boolean in = false;
                for (long[] r : ranges) {
                    if (r[0] <= id && id <= r[1]) {
                        in = true;
                        break;
                    }
                }
                assertTrue(in, "id " + id + " (region " + e.getKey() + "'s share) is in no range of its segment log");
            }
        }
    }

    /**
     * Fails unless r's ranges follow one another from its tag's start: none starts past the end of
     * those before it, as one would if a floor claimed from another region's share had raised r's
     * max_id.
     */
    private static void requireNoLeap(TestRegion r, long start) throws Exception {
        List<long[]> ranges = new ArrayList<>(r.segmentLog().values());
        ranges.sort((x, y) -> Long.compare(x[0], y[0]));
        long end = start - 1;
        for (long[] g : ranges) {
            assertTrue(g[0] <= end + 1, "region " + r.name + ": range [" + g[0] + ", " + g[1] + "] starts past " + end
                    + ", the end of its ranges before it: its max_id leapt");
            end = Math.max(end, g[1]);
        }
    }

    /**
     * Home's processes SIGKILLed under load, then started again: the client serves from b within its
     * wait, returns home once home grants, and hands out no ID twice; every ID it handed out is in
     * its region's segment log, and no request is in both.
     */
    @Test
    void failoverAndReturn() throws Exception {
        try (TestRegion a = new TestRegion("a", "a,b", 1, 2); TestRegion b = new TestRegion("b", "a,b", B_START + 1, 1)) {
            IdmintClient c = client(a.urls(), b.urls());
            Load l = new Load(c, 4);
            try {
                waitServing(c, l, "a", System.nanoTime() - TimeUnit.MINUTES.toNanos(1));
                eventually("ids from a", 30, () -> l.count() > 1000, () -> c.stats().toString());
                long killed = System.nanoTime();
                a.kill();
                long failover = waitServing(c, l, "b", killed);
                long restored = System.nanoTime();
                a.start();
                long back = waitServing(c, l, "a", restored);
                Thread.sleep(200);
                l.halt();
                IdmintClient.Stats st = c.stats();
                c.close();

                long[] ids = l.ids();
                assertEquals(0, duplicates(ids), "DUPLICATE ids");
                assertEquals(List.of(), l.failures(), "calls failed: the client should have served them from b within their wait");
                assertTrue(st.failovers() >= 1 && st.returns() >= 1, "failovers and returns: " + st);
                requireNoCrossing(ids, a, b);
                requireNoLeap(a, 1);
                requireNoLeap(b, B_START + 1);
                System.out.printf("failover: %d ids, 0 duplicates, 0 failed of %d calls; first id from b %dms after the kill (wait 1s); "
                        + "from a again %dms after its processes were started; %s%n", ids.length, l.attempts.get(), failover, back, st.regions());
            } finally {
                l.halt();
                c.close();
            }
        }
    }

    /**
     * A grant commits in home, its reply is lost (the proxy drops every reply and home's /id/live),
     * then home's process dies. The client serves from b; the requests whose reply was lost are
     * given up, never looked up nor sent in b: after home is restored, their ranges in home's
     * segment log hold no ID the client handed out, and they are counted.
     */
    @Test
    void lostReplyIsAbandoned() throws Exception {
        try (TestRegion a = new TestRegion("a", "a,b", 1, 1); TestRegion b = new TestRegion("b", "a,b", B_START + 1, 1);
                Proxy proxy = new Proxy(a.ports[0])) {
            IdmintClient c = client(new String[] {proxy.url()}, b.urls());
            Load l = new Load(c, 2);
            try {
                waitServing(c, l, "a", System.nanoTime() - TimeUnit.MINUTES.toNanos(1));
                eventually("ids from a", 30, () -> l.count() > 500, () -> c.stats().toString());
                proxy.deadLive(true);
                proxy.policy(n -> Proxy.Action.DROP_REPLY);
                long cut = System.nanoTime();
                long failover = waitServing(c, l, "b", cut);
                Set<String> lost = new HashSet<>();
                for (Proxy.Exchange e : proxy.grants()) {
                    if (e.action() == Proxy.Action.DROP_REPLY && e.status() == 200) {
                        lost.add(e.requestId());
                    }
                }
                a.kill();
                long restored = System.nanoTime();
                a.start();
                proxy.policy(n -> Proxy.Action.FORWARD);
                proxy.deadLive(false);
                long back = waitServing(c, l, "a", restored);
                l.halt();
                IdmintClient.Stats st = c.stats();
                c.close();

                long[] ids = l.ids();
                assertEquals(0, duplicates(ids), "DUPLICATE ids");
                requireNoCrossing(ids, a, b);
                Map<String, long[]> log = a.segmentLog();
                int committed = 0;
                for (String id : lost) {
                    long[] r = log.get(id);
                    if (r == null) {
                        continue;
                    }
                    committed++;
                    for (long x : ids) {
                        if (r[0] <= x && x <= r[1]) {
                            fail("request " + id + ": its reply was lost in a, which was then left; yet id " + x + " of its range ["
                                    + r[0] + ", " + r[1] + "] was handed out");
                        }
                    }
                }
                assertTrue(committed > 0, "none of the " + lost.size() + " requests whose reply was lost committed in a: the test proved nothing");
                assertTrue(st.regions().get(0).abandoned() >= 1, "region a: no request abandoned: " + st.regions());
                System.out.printf("lost reply: %d ids, 0 duplicates; %d requests lost their reply in a (%d committed there, none served); "
                        + "first id from b %dms after the cut; home again %dms after its restart; %s%n",
                        ids.length, lost.size(), committed, failover, back, st.regions());
            } finally {
                l.halt();
                c.close();
            }
        }
    }

    /**
     * Region b's database was claimed with the regions in another order (b,a), so that it owns the
     * same blocks as a. The client serves from a; a's process dies, and the first range from b is
     * refused: no ID of b is handed out, every later call fails at once with
     * SharesOverlapException (never UnavailableException), also once a is back. The negative
     * control is b's segment log: the refused range holds IDs the client handed out from a, which
     * served would have been duplicates.
     */
    @Test
    void overlappingSharesAreRefused() throws Exception {
        try (TestRegion a = new TestRegion("a", "a,b", 1, 1); TestRegion b = new TestRegion("b", "b,a", 1, 1)) {
            IdmintClient c = client(a.urls(), b.urls());
            try {
                Set<Long> seen = new HashSet<>();
                for (int i = 0; i < 250; i++) {
                    assertTrue(seen.add(c.next(TAG)), "DUPLICATE id");
                }
                a.kill();
                IdmintException first = assertThrows(IdmintException.class, () -> {
                    for (int i = 0; i < 1000; i++) {
                        assertTrue(seen.add(c.next(TAG)), "DUPLICATE id");
                    }
                });
                assertInstanceOf(SharesOverlapException.class, first, "the first range from b: " + first);
                for (int i = 0; i < 5; i++) {
                    long t0 = System.nanoTime();
                    IdmintException e = assertThrows(IdmintException.class, () -> c.next(TAG));
                    long ms = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - t0);
                    assertInstanceOf(SharesOverlapException.class, e);
                    assertTrue(ms < 100, "a call took " + ms + "ms: it should fail at once");
                }
                a.start();
                Thread.sleep(1000); // several probes' time
                assertInstanceOf(SharesOverlapException.class, assertThrows(IdmintException.class, () -> c.nextN(TAG, 3)),
                        "after a is back");
                IdmintClient.Stats st = c.stats();
                assertTrue(st.overlap() != null, "stats without the conflict: " + st);
                assertEquals(0, st.returns(), "returned home after the conflict");

                // The negative control: b granted a range that holds IDs handed out from a.
                int clash = 0;
                for (long[] r : b.segmentLog().values()) {
                    for (long id : seen) {
                        if (r[0] <= id && id <= r[1]) {
                            clash++;
                        }
                    }
                }
                assertTrue(clash > 0, "b's ranges hold no id handed out from a: the conflict was not one, the test proved nothing");
                for (long id : seen) {
                    assertEquals("a", regionOf(id));
                }
                System.out.printf("overlap: %d ids from a; b's refused range holds %d of them; %s%n", seen.size(), clash, st.overlap());
            } finally {
                c.close();
            }
        }
    }

    /**
     * A region's URLs that reach another region's instances: the first range, whose share names the
     * other region, is refused (a gap), and every call fails with SharesOverlapException.
     */
    @Test
    void anotherRegionsInstancesAreRefused() throws Exception {
        try (TestRegion a = new TestRegion("a", "a,b", 1, 1); TestRegion b = new TestRegion("b", "a,b", B_START + 1, 1)) {
            IdmintClient c = client(b.urls(), a.urls()); // swapped
            try {
                IdmintException e = assertThrows(IdmintException.class, () -> c.next(TAG));
                assertInstanceOf(SharesOverlapException.class, e, "a range from b's instances served as a's: " + e);
                assertTrue(e.getMessage().contains("answered with the share of region \"b\""), e.getMessage());
                assertInstanceOf(SharesOverlapException.class, assertThrows(IdmintException.class, () -> c.next(TAG)));
                assertEquals(1, b.segmentLog().size(), "b granted the one range refused");
            } finally {
                c.close();
            }
        }
    }

    /**
     * Each range goes back to the region that granted it: the client moves to b (home killed),
     * returns home (b's tails go back to b), and closes (home's go back home); the tail of tag user,
     * in the stint at home left as down, is a counted gap, never sent to b.
     */
    @Test
    void tailsGoBackToTheirRegion() throws Exception {
        try (TestRegion a = new TestRegion("a", "a,b", 1, 1); TestRegion b = new TestRegion("b", "a,b", B_START + 1, 1)) {
            IdmintServer.run("tag", "create", "user", "--step", "100", "--max-step", "100", "--database-url", a.url);
            IdmintClient c = client(a.urls(), b.urls());
            Load l = null;
            try {
                c.next("user"); // its range stays in home's buffer when the client leaves home: a gap
                l = new Load(c, 1);
                Load load = l;
                waitServing(c, l, "a", System.nanoTime() - TimeUnit.MINUTES.toNanos(1));
                long killed = System.nanoTime();
                a.kill();
                waitServing(c, l, "b", killed);
                long restored = System.nanoTime();
                a.start();
                waitServing(c, l, "a", restored);
                l.halt();
                c.close();
                IdmintClient.Stats st = c.stats();

                Map<String, Long> highest = new HashMap<>();
                for (long id : load.ids()) {
                    highest.merge(regionOf(id), id, Math::max);
                }
                assertEquals(highest.get("a"), a.maxId(), "region a's max_id: its tails did not all go back to it");
                assertEquals(highest.get("b"), b.maxId(), "region b's max_id: its tails did not all go back to it");
                assertTrue(st.regions().get(0).gap() >= 99, "region a: gap below the 99 ids of tag user left in its buffer: " + st.regions());
                System.out.printf("give-back: max_id a %d, b %d = the highest handed out from each; %s%n", a.maxId(), b.maxId(), st.regions());
            } finally {
                if (l != null) {
                    l.halt();
                }
                c.close();
            }
        }
    }
}
