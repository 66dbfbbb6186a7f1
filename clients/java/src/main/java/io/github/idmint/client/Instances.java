package io.github.idmint.client;

import java.io.IOException;
import java.io.InputStream;
import java.net.ConnectException;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpConnectTimeoutException;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;

/**
 * Instances sends range requests and give-backs to idmint instances over the HTTP JSON API: to the
 * one that answered last, then to the next. It is safe for concurrent use.
 */
final class Instances {
    /** Bounds the body read from an instance. */
    private static final int MAX_REPLY = 64 << 10;

    private final List<String> bases; // without a trailing slash
    private final HttpClient http;
    private final String token; // null: none
    private final Duration attemptTimeout;
    /** The index in bases of the instance that answered last. */
    private final AtomicInteger preferred = new AtomicInteger();
    /** Range requests sent: attempts, not loads; one counter for all of a client's instances. */
    final AtomicLong requests;
    /** Set when the client left the region under these instances: nothing more is sent. */
    private volatile boolean stopped;

    Instances(List<String> bases, HttpClient http, String token, Duration attemptTimeout, AtomicLong requests) {
        this.bases = List.copyOf(bases);
        this.http = http;
        this.token = token;
        this.attemptTimeout = attemptTimeout;
        this.requests = requests;
    }

    /** Stops every send: each throws an IOException from then on, without reaching an instance. */
    void stop() {
        stopped = true;
    }

    /**
     * Reports whether an instance answers GET /id/live with 200: the process is up and reachable.
     * Whether the region grants is for a load to tell.
     */
    boolean live() throws InterruptedException {
        for (String base : bases) {
            HttpRequest.Builder b = HttpRequest.newBuilder(URI.create(base + PATH_LIVE)).timeout(attemptTimeout).GET();
            try {
                HttpResponse<Void> resp = http.send(b.build(), HttpResponse.BodyHandlers.discarding());
                if (resp.statusCode() == 200) {
                    return true;
                }
            } catch (IOException e) {
                // the next one
            }
        }
        return false;
    }

    /** Answers 200 while an instance's process is up. */
    private static final String PATH_LIVE = "/id/live";

    /**
     * Round is every instance asked once, without an answer that settles the request: the last
     * failure, and the longest Retry-After among the answers.
     */
    static final class RoundFailed extends Exception {
        private static final long serialVersionUID = 1L;
        final long retryAfterMillis;
        final ApiError lastAnswer; // null: no instance answered

        RoundFailed(Exception last, long retryAfterMillis, ApiError lastAnswer) {
            super(last.getMessage(), last);
            this.retryAfterMillis = retryAfterMillis;
            this.lastAnswer = lastAnswer;
        }
    }

    /**
     * Sends req to every instance once, starting with the one that answered last, and returns the
     * first range granted. It throws ApiError for an answer that settles the request (see
     * ApiError.settled), and RoundFailed when no instance gave one: then the request may or may not
     * have been granted, and is sent again under the same ID.
     */
    Grant grant(Request req, long floor) throws ApiError, RoundFailed, InterruptedException {
        int n = bases.size();
        int start = preferred.get();
        byte[] body = Wire.segmentRequest(req, floor);
        Exception last = null;
        ApiError lastAnswer = null;
        long retryAfter = 0;
        for (int i = 0; i < n; i++) {
            int u = (start + i) % n;
            String url = bases.get(u) + Wire.PATH_SEGMENTS;
            requests.incrementAndGet();
            try {
                // The request is idempotent by its request ID; the holder key goes in the body only.
                Grant g = Wire.grant(post(url, body, req.id()));
                if (!g.requestId().equals(req.id()) || !g.tag().equals(req.tag()) || g.first() < 1 || g.last() < g.first()) {
                    throw new IOException(String.format("idmint %s answered request %s for \"%s\" with request %s for \"%s\", range [%d, %d]",
                            url, req.id(), req.tag(), g.requestId(), g.tag(), g.first(), g.last()));
                }
                preferred.set(u);
                return g;
            } catch (ApiError e) {
                if (e.settled()) {
                    preferred.set(u);
                    throw e;
                }
                last = e;
                lastAnswer = e;
                retryAfter = Math.max(retryAfter, e.retryAfterMillis);
            } catch (IOException e) {
                last = e;
            }
        }
        throw new RoundFailed(last, retryAfter, lastAnswer);
    }

    /**
     * Gives back [first, last], the unused tail of req's range, and returns whether the instance took
     * it back. It moves on to the next instance only when the give-back certainly did not reach the
     * last one (no connection, or an instance shutting down): one that may have been applied is never
     * sent twice.
     */
    boolean giveBack(Request req, long first, long last) throws ApiError, IOException, InterruptedException {
        int n = bases.size();
        int start = preferred.get();
        byte[] body = Wire.giveBackRequest(req, first, last);
        for (int i = 0;; i++) {
            String url = bases.get((start + i) % n) + Wire.PATH_GIVE_BACK;
            try {
                return Wire.givenBack(post(url, body, null));
            } catch (ApiError e) {
                if (!"shutting_down".equals(e.code) || i + 1 >= n) {
                    throw e;
                }
            } catch (ConnectException | HttpConnectTimeoutException e) {
                if (i + 1 >= n) {
                    throw e;
                }
            }
        }
    }

    /**
     * Posts body as JSON to url within one attempt timeout and returns the body of a 200 reply; any
     * other reply is an ApiError.
     */
    private byte[] post(String url, byte[] body, String idempotencyKey) throws ApiError, IOException, InterruptedException {
        if (stopped) {
            throw new IOException("idmint " + url + ": not sent: the client left the region under this request");
        }
        HttpRequest.Builder b = HttpRequest.newBuilder(URI.create(url))
                .timeout(attemptTimeout)
                .header("Content-Type", "application/json")
                .header("Accept", "application/json")
                .POST(HttpRequest.BodyPublishers.ofByteArray(body));
        if (token != null) {
            b.header("Authorization", "Bearer " + token);
        }
        if (idempotencyKey != null) {
            b.header("Idempotency-Key", idempotencyKey);
        }
        HttpResponse<InputStream> resp = http.send(b.build(), HttpResponse.BodyHandlers.ofInputStream());
        byte[] data;
        try (InputStream in = resp.body()) {
            data = in.readNBytes(MAX_REPLY + 1);
        }
        if (data.length > MAX_REPLY) {
            throw new IOException("reply of " + url + " is over " + MAX_REPLY + " bytes");
        }
        if (resp.statusCode() != 200) {
            String[] e = Wire.error(resp.statusCode(), data);
            throw new ApiError(url, resp.statusCode(), e[0], e[1], retryAfterMillis(resp));
        }
        return data;
    }

    /** Returns a reply's Retry-After (seconds) in milliseconds, 0 when absent or not a number. */
    private static long retryAfterMillis(HttpResponse<?> resp) {
        String v = resp.headers().firstValue("Retry-After").orElse("");
        try {
            long s = Long.parseLong(v.trim());
            return s > 0 ? Math.min(s, 3600) * 1000 : 0;
        } catch (NumberFormatException e) {
            return 0;
        }
    }
}
