package io.github.idmint.client;

import java.io.IOException;
import java.net.URI;
import java.net.http.HttpClient;
import java.nio.file.Path;
import java.security.GeneralSecurityException;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.ThreadFactory;
import java.util.concurrent.ThreadLocalRandom;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import java.util.function.Function;
import java.util.regex.Pattern;
import javax.net.ssl.SSLContext;
import javax.net.ssl.SSLParameters;

/**
 * IdmintClient hands out unique IDs of many tags inside your process, at the speed of an atomic add,
 * from ranges that idmint instances grant it through {@code POST /v1/segments}. Per tag it keeps a
 * double buffer: the next range is fetched in the background once a share of the current one is
 * used, sized from the observed rate between the tag's {@code step} and {@code max_step}.
 *
 * <pre>{@code
 * try (IdmintClient ids = IdmintClient.builder()
 *         .urls("http://idmint-1:8080", "http://idmint-2:8080")
 *         .token(System.getenv("IDMINT_TOKEN"))
 *         .build()) {
 *     long id = ids.next("order");
 *     long[] batch = ids.nextN("order", 100);
 * } // close gives back the unused tail of each tag's newest range
 * }</pre>
 *
 * <p>Each range is granted exactly once: a range request carries a request ID (a UUIDv7) and a
 * holder key chosen before its first attempt and reused on every retry, to any instance, so a lost
 * reply comes back as the same range; the floor (the highest ID granted to the tag here) makes a
 * database that went back in time grant above it. Refusals ({@link RefusedException}: 400, 401,
 * 403, 404) are final and cost one request; 503, 429 and transport errors are retried with bounded,
 * jittered backoff that honours Retry-After, until {@link UnavailableException}.
 *
 * <p>It is safe for concurrent use. {@link #close()} stops the background loads and gives back the
 * unused tail of each tag's newest range.
 */
public final class IdmintClient implements AutoCloseable {
    private static final System.Logger LOG = System.getLogger("io.github.idmint.client");
    private static final Pattern TAG = Pattern.compile("[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}");

    private final TagBuffer.Settings settings;
    private final HttpClient httpClient;
    private final String token;
    private final Duration attemptTimeout;
    private final ExecutorService loads;
    /** Bounds the tags remembered as unknown; past it a new one is not remembered (nor given a buffer). */
    private static final int MAX_UNKNOWN = 10_000;

    /** The regions in order of preference: home first. One unnamed region for a list of URLs. */
    private final List<Region> regions;
    /** Range requests sent, over every stint. */
    private final AtomicLong requests = new AtomicLong();
    /** The stint serving: the region the client hands out IDs from now. */
    private volatile Stint serving;
    /** The conflict of the regions' shares, once seen: sticky, every call throws it. */
    private volatile SharesOverlapException overlap;
    /** The share each region sent with its last range served (by index); guarded by this. */
    private final Share[] shares;
    private final AtomicLong failovers = new AtomicLong();
    private final AtomicLong returns = new AtomicLong();
    private final Duration probeMin;
    private final Duration probeMax;
    /** The thread probing home while the client serves from another region; guarded by this. */
    private Thread probe;
    /** Closes the stints left, in the background. */
    private final ExecutorService background;

    /** Tags the instances do not know, until when (System.nanoTime) they are answered from memory. */
    private final Map<String, Long> unknown = new ConcurrentHashMap<>();
    private final ExecutorService http;
    private volatile boolean closed;

    private IdmintClient(Builder b, List<Region> regions, HttpClient client, ExecutorService http, ExecutorService loads) {
        this.settings = b.settings();
        this.httpClient = client;
        this.token = b.token;
        this.attemptTimeout = b.attemptTimeout();
        this.regions = List.copyOf(regions);
        this.shares = new Share[regions.size()];
        this.probeMin = b.probeMin;
        this.probeMax = b.probeMax;
        this.http = http;
        this.loads = loads;
        this.background = Executors.newCachedThreadPool(Builder.daemons("idmint-region-"));
        this.serving = newStint(this.regions.get(0));
    }

    /** Returns a builder of a client. */
    public static Builder builder() {
        return new Builder();
    }

    private Stint newStint(Region r) {
        return new Stint(r, new Instances(r.urls, httpClient, token, attemptTimeout, requests), this);
    }

    /**
     * Returns the next ID of tag. In steady state it is one atomic add; it waits only when both
     * ranges of the tag are empty, at most the wait timeout without a range. With several regions
     * it moves to the next region when the one it serves from cannot grant within the wait.
     *
     * @throws RefusedException the instances refused the request (final: do not retry)
     * @throws UnavailableException no ID could be had in time (retry after a pause)
     * @throws SharesOverlapException two regions' shares may overlap: no ID is handed out any more
     * @throws ClientClosedException the client was closed
     */
    public long next(String tag) {
        return inRegions(tag, TagBuffer::next);
    }

    /**
     * Returns n IDs of tag, increasing (consecutive within a range). On an error the IDs already
     * taken for the call are not handed out: a gap, never a duplicate.
     */
    public long[] nextN(String tag, int n) {
        if (n < 1) {
            throw new IllegalArgumentException("count " + n + ": must be at least 1");
        }
        return inRegions(tag, b -> {
            long[] out = new long[n];
            b.nextN(out);
            return out;
        });
    }

    /**
     * Runs f on tag's buffer in the stint serving, and again in the stint serving then when the
     * client moves (at most once per region).
     */
    private <T> T inRegions(String tag, Function<TagBuffer, T> f) {
        for (int attempt = 0;; attempt++) {
            Stint st = serving;
            if (overlap != null) {
                throw overlap.again(tag);
            }
            TagBuffer b = st.buffers.get(tag);
            try {
                if (b == null) {
                    b = buffer(st, tag);
                }
                return f.apply(b);
            } catch (UnknownTagException e) {
                throw forget(st, tag, b, e);
            } catch (IdmintException e) {
                if (!again(st, e, attempt)) {
                    throw overlap != null ? overlap.again(tag) : e;
                }
            }
        }
    }

    /**
     * Reports whether a call that failed with e in st tries again in the stint serving now: when the
     * client left st meanwhile, or when e says that st's region could not grant within the caller's
     * wait, which makes the client leave it (at most once per region). A refusal never moves it.
     */
    private boolean again(Stint st, IdmintException e, int attempt) {
        if (regions.size() == 1 || closed || overlap != null) {
            return false;
        }
        if (serving == st) {
            if (!(e instanceof UnavailableException)) {
                return false;
            }
            leave(st, e);
        }
        return serving != st && attempt + 1 < regions.size();
    }

    /**
     * Drops the buffer of a tag the instances do not know, when it never held a range, and remembers
     * the tag as unknown for a while instead: made-up tags leave no buffer behind. Returns e.
     */
    private UnknownTagException forget(Stint st, String tag, TagBuffer b, UnknownTagException e) {
        if (b != null && b.stats().loads() == 0 && st.buffers.remove(tag, b)) {
            long now = System.nanoTime();
            if (unknown.size() >= MAX_UNKNOWN) {
                unknown.values().removeIf(until -> until - now <= 0);
            }
            if (unknown.size() < MAX_UNKNOWN) {
                unknown.put(tag, now + TagBuffer.UNKNOWN_TTL_NANOS);
            }
            try {
                loads.execute(b::close);
            } catch (RuntimeException closing) {
                // the client is closing: its close closes no dropped buffer, and this one holds no range
            }
        }
        return e;
    }

    private TagBuffer buffer(Stint st, String tag) {
        if (closed) {
            throw new ClientClosedException(tag);
        }
        if (tag == null || !TAG.matcher(tag).matches()) {
            String shown = tag == null ? "null" : tag.length() > 80 ? tag.substring(0, 80) + "…" : tag;
            throw new InvalidTagException("invalid biz_tag: \"" + shown
                    + "\": want 1-64 of [A-Za-z0-9_.:-], starting with a letter or digit", 0, "invalid_biz_tag", tag);
        }
        Long until = unknown.get(tag);
        if (until != null) {
            if (until - System.nanoTime() > 0) {
                throw new UnknownTagException("unknown biz_tag: \"" + tag + "\" (answered from memory)", 404, "unknown_tag", tag);
            }
            unknown.remove(tag, until);
        }
        TagBuffer b = st.buffers.computeIfAbsent(tag, t -> new TagBuffer(t, settings, st, loads));
        if (closed || st.closed) {
            // close may have gone over the buffers before this one was added.
            b.close();
            throw new ClientClosedException(tag);
        }
        return b;
    }

    /**
     * Loads tag's first range, as a call waits for it (in the next region when the one serving
     * cannot grant), without handing out an ID.
     */
    private void preload(String tag) {
        inRegions(tag, b -> {
            b.ready();
            return null;
        });
    }

    /**
     * Called when every instance of st's region failed one request while a tag's buffer there has
     * nothing to hand out: callers wait on a region that cannot grant, and the client leaves it.
     */
    void cannotGrant(Stint st, Exception why) {
        if (regions.size() > 1) {
            leave(st, why);
        }
    }

    /**
     * Moves the client from st, which could not grant, to the next region in order of preference
     * (after the last, the first), unless it left st already. st is closed in the background as
     * down: nothing more is sent to its region under it.
     */
    private synchronized void leave(Stint st, Exception why) {
        if (closed || overlap != null || serving != st) {
            return;
        }
        Region next = regions.get((st.region.index + 1) % regions.size());
        st.markDown();
        st.region.left.incrementAndGet();
        failovers.incrementAndGet();
        LOG.log(System.Logger.Level.WARNING, String.format(
                "idmint: MOVED to another region: this one could not grant within the wait; its unsettled requests are given up (gaps if they committed), never sent elsewhere: from=%s to=%s: %s",
                st.region.name, next.name, why.getMessage()));
        switchTo(newStint(next));
        if (next.index != 0 && probe == null) {
            probe = new Thread(this::probeHome, "idmint-probe-home");
            probe.setDaemon(true);
            probe.start();
        }
    }

    /** Makes st the stint serving and closes the one before in the background. Holds this. */
    private void switchTo(Stint st) {
        Stint old = serving;
        serving = st;
        closeInBackground(old);
    }

    private void closeInBackground(Stint st) {
        try {
            background.execute(() -> closeStint(st));
        } catch (RuntimeException e) {
            closeStint(st); // the client is closing
        }
    }

    /**
     * Closes st's buffers side by side (each may wait for a load in flight): a stint that is not
     * down gives its tails back to its own region; a down one sends nothing.
     */
    private static void closeStint(Stint st) {
        st.closed = true;
        List<Thread> closing = new ArrayList<>();
        for (TagBuffer b : st.buffers.values()) {
            Thread t = new Thread(b::close, "idmint-close");
            t.start();
            closing.add(t);
        }
        for (Thread t : closing) {
            try {
                t.join();
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                break;
            }
        }
    }

    /**
     * Runs while the client serves from a region other than home: with backoff from probeMin to
     * probeMax (doubling, jittered), it checks that an instance of home is live (GET /id/live), then
     * loads each tag's first range in a new stint at home, and moves back home once every tag has
     * one. A probe that fails costs no range: the stint's ranges are given back to home.
     */
    private void probeHome() {
        long pause = probeMin.toNanos();
        for (;;) {
            long sleep = pause / 2 + ThreadLocalRandom.current().nextLong(pause / 2 + 1);
            try {
                TimeUnit.NANOSECONDS.sleep(sleep);
                if (tryReturn()) {
                    return;
                }
            } catch (InterruptedException e) {
                synchronized (this) {
                    probe = null;
                }
                return;
            }
            pause = Math.min(2 * pause, probeMax.toNanos());
        }
    }

    /** Makes one probe of home and moves there if it can grant; reports whether the probing is over. */
    private boolean tryReturn() throws InterruptedException {
        Region home = regions.get(0);
        synchronized (this) {
            if (closed || overlap != null || serving.region == home) {
                probe = null;
                return true;
            }
        }
        if (!newStint(home).instances.live()) {
            return false;
        }
        Stint away = serving;
        Stint st = newStint(home);
        boolean ready = true;
        for (String tag : away.buffers.keySet()) {
            try {
                buffer(st, tag).ready();
            } catch (IdmintException e) {
                LOG.log(System.Logger.Level.INFO, String.format("idmint: home region live but not granting yet: region=%s biz_tag=%s: %s",
                        home.name, tag, e.getMessage()));
                ready = false;
                break;
            }
        }
        synchronized (this) {
            if (closed || overlap != null || serving.region == home) {
                probe = null;
                closeInBackground(st);
                return true;
            }
            if (!ready) {
                closeInBackground(st);
                return false;
            }
            String from = serving.region.name;
            switchTo(st);
            returns.incrementAndGet();
            probe = null;
            LOG.log(System.Logger.Level.WARNING, String.format("idmint: RETURNED to the home region: it grants again: from=%s to=%s",
                    from, home.name));
            return true;
        }
    }

    /**
     * Returns null when r's range of g can be served, else the conflict (sticky): with one region
     * there is nothing to compare; with several, the reply must carry r's own share (named as the
     * client names r) that owns the range, and the range must hold no ID another region's share may
     * grant (Share.checkRange). Checking and recording are one step, so that two regions answering
     * at once cannot each be checked before the other is known.
     */
    String checkShare(Region r, Grant g) {
        if (regions.size() == 1) {
            return null;
        }
        String err = null;
        synchronized (this) {
            if (overlap != null) {
                return overlap.getMessage();
            }
            Share s = g.region();
            if (s == null) {
                err = "region \"" + r.name + "\" answered a range without a share: its database has none and may grant any id";
            } else if (!s.name().equals(r.name)) {
                err = "region \"" + r.name + "\" answered with the share of region \"" + s.name()
                        + "\": its URLs reach another region's instances";
            } else if (!s.ownsRange(g.first(), g.last())) {
                err = "region \"" + r.name + "\" granted [" + g.first() + ", " + g.last() + "], outside its share " + s.epochs();
            } else {
                for (Region o : regions) {
                    Share other = shares[o.index];
                    if (o != r && other != null) {
                        String e = s.checkRange(g.first(), g.last(), other);
                        if (e != null) {
                            err = "region \"" + r.name + "\"'s range [" + g.first() + ", " + g.last() + "] against region \""
                                    + o.name + "\"'s share: " + e;
                            break;
                        }
                    }
                }
            }
            if (err == null) {
                shares[r.index] = s;
                return null;
            }
            refuseAll(new SharesOverlapException(err, g.tag()));
        }
        return err;
    }

    /**
     * Makes the client hand out nothing more once its regions' shares conflict: every call throws
     * the conflict from now on, and the stint serving is closed, its tails given back to its own
     * region. Holds this.
     */
    private void refuseAll(SharesOverlapException e) {
        if (closed || overlap != null) {
            return;
        }
        overlap = e;
        LOG.log(System.Logger.Level.ERROR, "idmint: REFUSING every call: two regions' shares may overlap; no id is handed out until the shares are fixed and the client is made again: "
                + e.getMessage());
        closeInBackground(serving);
    }

    /**
     * Stats is a snapshot of a client: range requests sent (retries included), the buffers of the
     * tags in the stint serving, the region served from now (the empty name for one list of URLs),
     * the moves away from a region that could not grant (failovers) and back home (returns), each
     * region's counts, and the shares' conflict (null while none was seen).
     */
    public record Stats(long requests, List<TagStats> tags, String region, long failovers, long returns,
            List<RegionStats> regions, String overlap) {}

    /**
     * TagStats is a snapshot of one tag's buffer: IDs handed out, ranges loaded, ranges recovered
     * after a lost reply, the size of the last range and the highest ID granted.
     */
    public record TagStats(String tag, long issued, long loads, long recovered, long step, long highest) {}

    /**
     * RegionStats is a snapshot of one region: whether the client serves from it now; the moves away
     * from it because it could not grant within the wait (left); the requests given up as ambiguous
     * when it was left (abandoned: each one's range, if it committed, is a gap, found in the region's
     * segment log by its request ID); and the IDs it granted to the client that were neither handed
     * out nor given back (gap).
     */
    public record RegionStats(String name, boolean serving, long left, long abandoned, long gap) {}

    /** Returns a snapshot of the client. */
    public Stats stats() {
        Stint st = serving;
        List<TagStats> tags = new ArrayList<>();
        for (TagBuffer b : st.buffers.values()) {
            tags.add(b.stats());
        }
        tags.sort((x, y) -> x.tag().compareTo(y.tag()));
        List<RegionStats> rs = new ArrayList<>();
        for (Region r : regions) {
            rs.add(new RegionStats(r.name, r == st.region, r.left.get(), r.abandoned.get(), r.gap.get()));
        }
        SharesOverlapException o = overlap;
        return new Stats(requests.get(), tags, st.region.name, failovers.get(), returns.get(), rs,
                o == null ? null : o.getMessage());
    }

    /**
     * Closes the client: stops background loads and gives back, for each tag, the unused tail of its
     * newest range (and the range before it when the two touch), when nobody was granted anything
     * after it; the other unused IDs are a gap, logged. Calls afterwards throw
     * {@link ClientClosedException}. A give-back that fails leaves its IDs a gap and is logged;
     * close itself does not throw.
     */
    @Override
    public void close() {
        Stint st;
        synchronized (this) {
            if (closed) {
                return;
            }
            closed = true;
            st = serving;
            if (probe != null) {
                probe.interrupt();
            }
        }
        closeStint(st);
        background.shutdown();
        try {
            background.awaitTermination(settings.attemptTimeout().toMillis() * 4 + 4000, TimeUnit.MILLISECONDS);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
        loads.shutdown();
        try {
            loads.awaitTermination(settings.attemptTimeout().toMillis() * 2, TimeUnit.MILLISECONDS);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
        http.shutdown();
    }

    /** Builder configures an IdmintClient. Unset settings take the defaults named. */
    public static final class Builder {
        private final List<String> urls = new ArrayList<>();
        /** The regions named, in order of preference: {name, urls}. */
        private final List<Map.Entry<String, List<String>>> regions = new ArrayList<>();
        private Duration probeMin = Duration.ofMillis(250);
        private Duration probeMax = Duration.ofSeconds(10);
        private final List<String> preload = new ArrayList<>();
        private String token;
        private SSLContext ssl;
        private Path ca;
        private Path cert;
        private Path key;
        private Duration waitTimeout = Duration.ofSeconds(2);
        private Duration maxWait;
        private Duration attemptTimeout;
        private Duration loadTimeout = Duration.ofSeconds(10);
        private Duration connectTimeout = Duration.ofSeconds(2);
        private Duration retryMin = Duration.ofMillis(20);
        private Duration retryMax = Duration.ofSeconds(1);
        private Duration period = Duration.ofMinutes(15);
        private double threshold = 0.1;

        private Builder() {}

        /**
         * Adds base URLs of idmint instances ({@code http://host:8080}); each may be a comma-separated
         * list. A range request goes to the one that answered last, and to the next when it fails.
         */
        public Builder urls(String... urls) {
            this.urls.addAll(split(urls));
            return this;
        }

        /** Returns the URLs of urls, each of which may be a comma-separated list. */
        private static List<String> split(String... urls) {
            List<String> out = new ArrayList<>();
            for (String u : urls == null ? new String[0] : urls) {
                for (String part : u == null ? new String[0] : u.split(",")) {
                    if (!part.isBlank()) {
                        out.add(part.trim());
                    }
                }
            }
            return out;
        }

        /** Adds base URLs of idmint instances (see {@link #urls(String...)}). */
        public Builder urls(List<String> urls) {
            return urls(urls.toArray(new String[0]));
        }

        /**
         * Adds a region: idmint instances that share a database, whose share of every tag's ID
         * space is disjoint from the other regions' (docs/regions.md). Regions are added in order of
         * preference, home first; the name is the region's as claimed ({@code idmint region claim
         * --name}), and each URL may be a comma-separated list. The client serves from one region at
         * a time, moves to the next when it cannot grant within the wait, probes home meanwhile and
         * returns there; it checks every range against the regions' shares. Regions cannot be
         * combined with {@link #urls}.
         */
        public Builder region(String name, String... urls) {
            regions.add(Map.entry(name == null ? "" : name, split(urls)));
            return this;
        }

        /**
         * Sets the bounds of the pause between probes of home while the client serves from another
         * region (defaults 250ms and 10s): it doubles from min to max, jittered.
         */
        public Builder probe(Duration min, Duration max) {
            bounds(min, max, "probe");
            this.probeMin = min;
            this.probeMax = max;
            return this;
        }

        /**
         * Sets the bearer token sent with every request, for instances serving {@code --auth token}
         * (scope {@code ids} or {@code ids:TAG}). It is never logged nor put in an exception. Null or
         * empty: none.
         */
        public Builder token(String token) {
            this.token = token == null || token.isEmpty() ? null : token;
            return this;
        }

        /**
         * Sets TLS from PEM files for https:// URLs: the CA bundle to trust (null: the system's), and
         * a client certificate with its key (both null: none) for instances serving
         * {@code --tls-client-ca}.
         */
        public Builder tls(Path caPem, Path certPem, Path keyPem) {
            this.ca = caPem;
            this.cert = certPem;
            this.key = keyPem;
            return this;
        }

        /** Sets TLS from PEM file names (see {@link #tls(Path, Path, Path)}); null or empty: none. */
        public Builder tls(String caPem, String certPem, String keyPem) {
            return tls(path(caPem), path(certPem), path(keyPem));
        }

        private static Path path(String s) {
            return s == null || s.isEmpty() ? null : Path.of(s);
        }

        /** Sets the SSLContext of https:// connections; it cannot be combined with {@link #tls}. */
        public Builder sslContext(SSLContext ctx) {
            this.ssl = ctx;
            return this;
        }

        /** Names tags whose first range build loads, so that the first IDs need no round trip. */
        public Builder tags(String... tags) {
            preload.addAll(Arrays.asList(tags));
            return this;
        }

        /** Sets how long a call waits for a range when both ranges are empty (default 2s). */
        public Builder waitTimeout(Duration d) {
            this.waitTimeout = positive(d, "waitTimeout");
            return this;
        }

        /** Sets how long a call waits in all while ranges arrive and go to others (default 4x waitTimeout). */
        public Builder maxWait(Duration d) {
            this.maxWait = positive(d, "maxWait");
            return this;
        }

        /** Sets the bound of one HTTP request (default half of waitTimeout); it must be below waitTimeout. */
        public Builder attemptTimeout(Duration d) {
            this.attemptTimeout = positive(d, "attemptTimeout");
            return this;
        }

        /** Sets how long one background load retries before it gives up (default 10s). */
        public Builder loadTimeout(Duration d) {
            this.loadTimeout = positive(d, "loadTimeout");
            return this;
        }

        /** Sets the bound of opening a connection (default 2s). */
        public Builder connectTimeout(Duration d) {
            this.connectTimeout = positive(d, "connectTimeout");
            return this;
        }

        /** Sets the bounds of the pause between attempts of a load (defaults 20ms and 1s), with full jitter. */
        public Builder retry(Duration min, Duration max) {
            bounds(min, max, "retry");
            this.retryMin = min;
            this.retryMax = max;
            return this;
        }

        /** Checks that min and max are positive, max not below min. */
        private static void bounds(Duration min, Duration max, String what) {
            positive(min, what + " min");
            positive(max, what + " max");
            if (max.compareTo(min) < 0) {
                throw new IllegalArgumentException(what + ": max " + max + " is below min " + min);
            }
        }

        /** Sets the target life of one range, which the dynamic step aims for (default 15m). */
        public Builder period(Duration d) {
            this.period = positive(d, "period");
            return this;
        }

        /** Sets the used share of a range that starts fetching the next one (default 0.1). */
        public Builder prefetchThreshold(double t) {
            if (!(t > 0 && t < 1)) {
                throw new IllegalArgumentException("prefetchThreshold " + t + ": want 0 < t < 1");
            }
            this.threshold = t;
            return this;
        }

        private static Duration positive(Duration d, String what) {
            if (d == null || d.isNegative() || d.isZero()) {
                throw new IllegalArgumentException(what + ": want a positive duration, got " + d);
            }
            return d;
        }

        private Duration attemptTimeout() {
            return attemptTimeout != null ? attemptTimeout : waitTimeout.dividedBy(2);
        }

        private TagBuffer.Settings settings() {
            Duration mw = maxWait != null ? maxWait : waitTimeout.multipliedBy(4);
            return new TagBuffer.Settings(waitTimeout, mw, loadTimeout, attemptTimeout(), retryMin, retryMax,
                    Duration.ofMillis(100), Duration.ofSeconds(5), period, threshold);
        }

        /**
         * Returns the client. With {@link #tags} it loads the first range of each and fails if one
         * cannot be loaded; otherwise it sends nothing until the first call.
         *
         * @throws IllegalArgumentException settings that cannot work (no URL, a bad URL, an attempt
         *     timeout not below the wait timeout, unreadable TLS files)
         */
        public IdmintClient build() {
            if (!urls.isEmpty() && !regions.isEmpty()) {
                throw new IllegalArgumentException("idmint client: both URLs and regions: give the URLs of each region in its region");
            }
            if (urls.isEmpty() && regions.isEmpty()) {
                throw new IllegalArgumentException("idmint client: no URLs");
            }
            List<Region> rs = new ArrayList<>();
            if (regions.isEmpty()) {
                rs.add(new Region("", 0, bases(urls)));
            }
            for (Map.Entry<String, List<String>> r : regions) {
                if (r.getKey().isEmpty()) {
                    throw new IllegalArgumentException("idmint client: region " + (rs.size() + 1) + ": no name");
                }
                if (r.getValue().isEmpty()) {
                    throw new IllegalArgumentException("idmint client: region \"" + r.getKey() + "\": no URLs");
                }
                for (Region o : rs) {
                    if (o.name.equals(r.getKey())) {
                        throw new IllegalArgumentException("idmint client: region \"" + r.getKey() + "\" named twice");
                    }
                }
                rs.add(new Region(r.getKey(), rs.size(), bases(r.getValue())));
            }
            if (attemptTimeout != null && attemptTimeout.compareTo(waitTimeout) >= 0) {
                throw new IllegalArgumentException("idmint client: attemptTimeout " + attemptTimeout
                        + " must be below waitTimeout " + waitTimeout + ", or a slow reply times out the callers waiting for it");
            }
            if (ssl != null && (ca != null || cert != null || key != null)) {
                throw new IllegalArgumentException("idmint client: sslContext and tls are both set");
            }
            SSLContext ctx = ssl;
            if (ctx == null && (ca != null || cert != null || key != null)) {
                try {
                    ctx = Tls.sslContext(ca, cert, key);
                } catch (IOException | GeneralSecurityException e) {
                    throw new IllegalArgumentException("idmint client: TLS: " + e.getMessage(), e);
                }
            }
            ExecutorService loads = Executors.newCachedThreadPool(daemons("idmint-load-"));
            ExecutorService http = Executors.newCachedThreadPool(daemons("idmint-http-"));
            HttpClient.Builder hb = HttpClient.newBuilder()
                    .version(HttpClient.Version.HTTP_1_1)
                    .connectTimeout(connectTimeout)
                    .followRedirects(HttpClient.Redirect.NEVER)
                    .executor(http);
            if (ctx != null) {
                SSLParameters params = ctx.getDefaultSSLParameters();
                params.setProtocols(new String[] {"TLSv1.3", "TLSv1.2"});
                hb.sslContext(ctx).sslParameters(params);
            }
            IdmintClient c = new IdmintClient(this, rs, hb.build(), http, loads);
            for (String tag : preload) {
                try {
                    c.preload(tag);
                } catch (RuntimeException e) {
                    c.close();
                    throw e;
                }
            }
            return c;
        }

        /** Returns the base URLs of raw, checked, without a trailing slash. */
        private static List<String> bases(List<String> raw) {
            List<String> bases = new ArrayList<>();
            for (String r : raw) {
                URI u;
                try {
                    u = URI.create(r);
                } catch (IllegalArgumentException e) {
                    throw new IllegalArgumentException("idmint client: URL \"" + r + "\": want http(s)://host[:port]", e);
                }
                if (!("http".equals(u.getScheme()) || "https".equals(u.getScheme())) || u.getHost() == null) {
                    throw new IllegalArgumentException("idmint client: URL \"" + r + "\": want http(s)://host[:port]");
                }
                bases.add(r.replaceAll("/+$", ""));
            }
            return bases;
        }

        private static ThreadFactory daemons(String prefix) {
            AtomicInteger n = new AtomicInteger();
            return r -> {
                Thread t = new Thread(r, prefix + n.incrementAndGet());
                t.setDaemon(true);
                return t;
            };
        }
    }
}
