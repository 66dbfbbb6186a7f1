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
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
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
    private static final Pattern TAG = Pattern.compile("[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}");

    private final TagBuffer.Settings settings;
    private final Instances instances;
    private final ExecutorService loads;
    /** Bounds the tags remembered as unknown; past it a new one is not remembered (nor given a buffer). */
    private static final int MAX_UNKNOWN = 10_000;

    private final Map<String, TagBuffer> buffers = new ConcurrentHashMap<>();
    /** Tags the instances do not know, until when (System.nanoTime) they are answered from memory. */
    private final Map<String, Long> unknown = new ConcurrentHashMap<>();
    private final ExecutorService http;
    private volatile boolean closed;

    private IdmintClient(Builder b, HttpClient client, ExecutorService http, ExecutorService loads) {
        this.settings = b.settings();
        this.instances = new Instances(b.urls, client, b.token, b.attemptTimeout());
        this.http = http;
        this.loads = loads;
    }

    /** Returns a builder of a client. */
    public static Builder builder() {
        return new Builder();
    }

    /**
     * Returns the next ID of tag. In steady state it is one atomic add; it waits only when both
     * ranges of the tag are empty, at most the wait timeout without a range.
     *
     * @throws RefusedException the instances refused the request (final: do not retry)
     * @throws UnavailableException no ID could be had in time (retry after a pause)
     * @throws ClientClosedException the client was closed
     */
    public long next(String tag) {
        TagBuffer b = buffers.get(tag);
        if (b == null) {
            b = buffer(tag);
        }
        try {
            return b.next();
        } catch (UnknownTagException e) {
            throw forget(tag, b, e);
        }
    }

    /**
     * Returns n IDs of tag, increasing (consecutive within a range). On an error the IDs already
     * taken for the call are not handed out: a gap, never a duplicate.
     */
    public long[] nextN(String tag, int n) {
        if (n < 1) {
            throw new IllegalArgumentException("count " + n + ": must be at least 1");
        }
        TagBuffer b = buffers.get(tag);
        if (b == null) {
            b = buffer(tag);
        }
        long[] out = new long[n];
        try {
            b.nextN(out);
        } catch (UnknownTagException e) {
            throw forget(tag, b, e);
        }
        return out;
    }

    /**
     * Drops the buffer of a tag the instances do not know, when it never held a range, and remembers
     * the tag as unknown for a while instead: made-up tags leave no buffer behind. Returns e.
     */
    private UnknownTagException forget(String tag, TagBuffer b, UnknownTagException e) {
        if (b.stats().loads() == 0 && buffers.remove(tag, b)) {
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

    private TagBuffer buffer(String tag) {
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
        TagBuffer b = buffers.computeIfAbsent(tag, t -> new TagBuffer(t, settings, instances, loads));
        if (closed) {
            // close may have gone over the buffers before this one was added.
            b.close();
            throw new ClientClosedException(tag);
        }
        return b;
    }

    /** Stats is a snapshot of a client: range requests sent (retries included) and each tag's buffer. */
    public record Stats(long requests, List<TagStats> tags) {}

    /**
     * TagStats is a snapshot of one tag's buffer: IDs handed out, ranges loaded, ranges recovered
     * after a lost reply, the size of the last range and the highest ID granted.
     */
    public record TagStats(String tag, long issued, long loads, long recovered, long step, long highest) {}

    /** Returns a snapshot of the client. */
    public Stats stats() {
        List<TagStats> tags = new ArrayList<>();
        for (TagBuffer b : buffers.values()) {
            tags.add(b.stats());
        }
        tags.sort((x, y) -> x.tag().compareTo(y.tag()));
        return new Stats(instances.requests.get(), tags);
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
        if (closed) {
            return;
        }
        closed = true;
        List<Thread> closing = new ArrayList<>();
        for (TagBuffer b : buffers.values()) {
            // Tags close side by side: each may wait for a load in flight.
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
            for (String u : urls) {
                for (String part : u.split(",")) {
                    if (!part.isBlank()) {
                        this.urls.add(part.trim());
                    }
                }
            }
            return this;
        }

        /** Adds base URLs of idmint instances (see {@link #urls(String...)}). */
        public Builder urls(List<String> urls) {
            return urls(urls.toArray(new String[0]));
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
            this.retryMin = positive(min, "retry min");
            this.retryMax = positive(max, "retry max");
            if (max.compareTo(min) < 0) {
                throw new IllegalArgumentException("retry: max " + max + " is below min " + min);
            }
            return this;
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
            if (urls.isEmpty()) {
                throw new IllegalArgumentException("idmint client: no URLs");
            }
            List<String> bases = new ArrayList<>();
            for (String raw : urls) {
                URI u;
                try {
                    u = URI.create(raw);
                } catch (IllegalArgumentException e) {
                    throw new IllegalArgumentException("idmint client: URL \"" + raw + "\": want http(s)://host[:port]", e);
                }
                if (!("http".equals(u.getScheme()) || "https".equals(u.getScheme())) || u.getHost() == null) {
                    throw new IllegalArgumentException("idmint client: URL \"" + raw + "\": want http(s)://host[:port]");
                }
                bases.add(raw.replaceAll("/+$", ""));
            }
            urls.clear();
            urls.addAll(bases);
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
            IdmintClient c = new IdmintClient(this, hb.build(), http, loads);
            for (String tag : preload) {
                try {
                    TagBuffer b = c.buffers.get(tag);
                    b = b != null ? b : c.buffer(tag);
                    try {
                        b.ready();
                    } catch (UnknownTagException e) {
                        throw c.forget(tag, b, e);
                    }
                } catch (RuntimeException e) {
                    c.close();
                    throw e;
                }
            }
            return c;
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
