package io.github.idmint.client;

import java.lang.System.Logger.Level;
import java.time.Duration;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.ThreadLocalRandom;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.locks.Condition;
import java.util.concurrent.locks.ReentrantLock;

/**
 * TagBuffer is one tag's double buffer: the range being served and the next one, fetched in the
 * background once a share of the current one is used (the Go module's segment.Buffer and the load
 * of segment.Set, over the range API). It is safe for concurrent use.
 *
 * <p>Exactly once: a load chooses its request (ID and holder key) before the first attempt and
 * sends the same one on every retry, to any instance, so a lost reply comes back as the same range
 * ({@code recovered}); a load that gives up while the request may have committed keeps it, and the
 * tag's next load resumes it. Every ID of a range is handed out at most once (one atomic add), and
 * a range at or below the highest ID granted to the tag here is refused, never served.
 */
final class TagBuffer {
    private static final System.Logger LOG = System.getLogger("io.github.idmint.client");

    /** Bounds the unsettled requests kept for the tag; past it the oldest is abandoned (logged). */
    private static final int MAX_PENDING = 8;
    /** Bounds the requests kept for the give-back: the current, the next and a late range. */
    private static final int KEPT_GRANTS = 4;
    /** How long a tag the instances do not know is answered from memory. */
    static final long UNKNOWN_TTL_NANOS = TimeUnit.SECONDS.toNanos(5);
    /** How long close waits for a load in flight to end by itself. */
    private static final long CLOSE_WAIT_NANOS = TimeUnit.SECONDS.toNanos(2);

    /** Logs a message formatted with String.format (never the holder key), if the level is on. */
    private static void log(Level level, String format, Object... args) {
        if (LOG.isLoggable(level)) {
            LOG.log(level, String.format(format, args));
        }
    }

    /** Settings every tag's buffer uses (see IdmintClient.Builder). */
    record Settings(Duration waitTimeout, Duration maxWait, Duration loadTimeout, Duration attemptTimeout,
            Duration retryMin, Duration retryMax, Duration minBackoff, Duration maxBackoff, Duration period,
            double threshold) {}

    /**
     * Span is a range being served. next is the next ID to hand out; it only grows, so every value
     * getAndIncrement returns is handed out at most once.
     */
    private static final class Span {
        final long first;
        final long last;
        /** The first ID whose take starts the next fetch. */
        final long prefetchAt;
        final AtomicLong next;

        Span(long first, long last, double threshold) {
            this.first = first;
            this.last = last;
            long size = last - first + 1;
            this.prefetchAt = first + Math.max((long) Math.ceil(size * threshold) - 1, 0);
            this.next = new AtomicLong(first);
        }

        long size() {
            return last - first + 1;
        }

        /** Returns how many IDs of the span were handed out. */
        long used() {
            long n = next.get();
            return n < first || n > last ? size() : n - first;
        }

        /**
         * Takes up to n consecutive IDs into out at off and returns how many (0: used up). It moves
         * next by compare-and-set, only by what it hands out, so no count can wrap it back into the
         * span.
         */
        int takeN(long[] out, int off, int n) {
            for (;;) {
                long start = next.get();
                if (start < first || start > last) {
                    return 0;
                }
                long end = n - 1 < last - start ? start + n - 1 : last;
                // end + 1 wraps only when end is Long.MAX_VALUE: used up.
                if (next.compareAndSet(start, end + 1)) {
                    int k = (int) (end - start + 1);
                    for (int i = 0; i < k; i++) {
                        out[off + i] = start + i;
                    }
                    return k;
                }
            }
        }

        /** Marks the span used up and returns its untouched tail, or null. */
        long[] exhaust() {
            long n = next.getAndSet(last == Long.MAX_VALUE ? Long.MIN_VALUE : last + 1);
            return n < first || n > last ? null : new long[] {n, last};
        }
    }

    /**
     * Waiter is a caller queued for IDs from the next ranges: a range that arrives serves the
     * waiters first, in turn, before anyone else can take from it. The lock holder that serves it
     * sets got and served, and takes it off the queue.
     */
    private static final class Waiter {
        final long[] out;
        final int off;
        final int n; // IDs wanted; 0 waits only for an ID to be there (ready)
        int got;
        boolean served;
        boolean queued = true;

        Waiter(long[] out, int off, int n) {
            this.out = out;
            this.off = off;
            this.n = n;
        }
    }

    /** A request and the last ID of the range it was granted: close gives back a tail with it. */
    private record Granted(Request req, long last) {}

    private final String tag;
    private final Settings cfg;
    private final Instances instances;
    /** The stint the buffer belongs to: its region's instances, floor and shares. */
    private final Stint stint;
    private final ExecutorService loads;

    /** The range being served; read without the lock on the fast path. */
    private volatile Span cur;
    /** True while crossing cur's prefetch point must start a load: no next range, no load in flight. */
    private volatile boolean wantLoad = true;
    /** Holds back new loads after a failure, on System.nanoTime. */
    private volatile long retryAt;

    /** Protects the fields below and switching cur. */
    private final ReentrantLock lock = new ReentrantLock();
    /** Signalled when a load ends and when the buffer closes. */
    private final Condition changed = lock.newCondition();
    private Span next;
    private boolean loading;
    private boolean closed;
    /** Set by close: a load in flight stops retrying. */
    private volatile boolean cancelled;
    /** The last load's error, null after a success. */
    private IdmintException lastErr;
    private long backoffNanos;
    /** The highest ID ever granted to the tag here: the floor sent, and the anti-rollback check. */
    private long highest;
    private long step; // size of the last range granted
    private long minStep;
    private long maxStep;
    private long rateAt = System.nanoTime(); // start of the rate window: when the last load started
    private long rateIds; // IDs issued at rateAt
    private boolean starved; // a caller waited on an empty buffer since rateAt
    private long retired; // IDs issued from ranges no longer current
    private long lastLatency;
    private long loadCount;
    private long recovered;
    /** Ranges granted after close began: nobody serves them. */
    private final List<long[]> late = new ArrayList<>();
    /** Unsettled requests, oldest first, resumed by the next loads. */
    private final ArrayDeque<Request> pending = new ArrayDeque<>();
    /** The requests of the last ranges granted, newest last. */
    private final ArrayDeque<Granted> grants = new ArrayDeque<>();
    /** The callers waiting for the next range, first come first. */
    private final ArrayDeque<Waiter> waiters = new ArrayDeque<>();

    TagBuffer(String tag, Settings cfg, Stint stint, ExecutorService loads) {
        this.tag = tag;
        this.cfg = cfg;
        this.stint = stint;
        this.instances = stint.instances;
        this.loads = loads;
        this.highest = stint.region.floor(tag);
    }

    /** Reports whether the buffer has nothing to hand out: no ID left in the current range, no next one. */
    boolean empty() {
        lock.lock();
        try {
            Span s = cur;
            return next == null && (s == null || s.used() >= s.size());
        } finally {
            lock.unlock();
        }
    }

    /** Returns the next ID. It waits only when both ranges are empty: at most waitTimeout without a range. */
    long next() {
        Span s = cur;
        if (s != null) {
            long id = s.next.getAndIncrement();
            if (id >= s.first && id <= s.last) {
                if (id >= s.prefetchAt && wantLoad) {
                    prefetch();
                }
                return id;
            }
        }
        long[] one = new long[1];
        takeSlow(one, 0, 1);
        return one[0];
    }

    /** Waits, as next does, until the buffer has an ID to hand out, loading the first range if needed. */
    void ready() {
        takeSlow(null, 0, 0);
    }

    /** Fills out with out.length IDs, increasing. */
    void nextN(long[] out) {
        int off = 0;
        while (off < out.length) {
            Span s = cur;
            int k = s == null ? 0 : s.takeN(out, off, out.length - off);
            if (k > 0) {
                if (out[off + k - 1] >= s.prefetchAt && wantLoad) {
                    prefetch();
                }
            } else {
                k = takeSlow(out, off, out.length - off);
            }
            off += k;
        }
    }

    private void prefetch() {
        if (System.nanoTime() - retryAt < 0) {
            return;
        }
        lock.lock();
        try {
            startLoadLocked();
        } finally {
            lock.unlock();
        }
    }

    /**
     * Takes up to n IDs into out at off, switching to the next range or waiting for a load, and
     * returns how many it took (at least 1; n == 0 only waits for an ID to be there). It waits waitTimeout for a range, again while ranges
     * arrive and go to others, maxWait in all.
     */
    private int takeSlow(long[] out, int off, int n) {
        long now = System.nanoTime();
        long deadline = now + cfg.waitTimeout().toNanos();
        long limit = now + Math.max(cfg.maxWait().toNanos(), cfg.waitTimeout().toNanos());
        boolean started = false; // this caller started the load in flight: it waits for it
        Waiter w = null; // queued for the next ranges once it must wait
        lock.lock();
        try {
            long seen = loadCount;
            for (;;) {
                if (w != null && w.served) {
                    return w.got;
                }
                if (closed) {
                    dequeueLocked(w);
                    throw new ClientClosedException(tag);
                }
                int k = takeLocked(out, off, n);
                if (k > 0) {
                    dequeueLocked(w);
                    return k;
                }
                if (!loading) {
                    try {
                        failFastLocked();
                        startLoadLocked();
                    } catch (RuntimeException e) {
                        dequeueLocked(w);
                        throw e;
                    }
                    started = true;
                } else if (lastErr != null && !started) {
                    // The last load failed and its retry is in flight: the caller that started it
                    // waits; the others fail fast instead of piling up.
                    dequeueLocked(w);
                    throw unavailable(Math.max(backoffNanos, cfg.minBackoff().toNanos()), lastErr);
                }
                if (w == null) {
                    w = new Waiter(out, off, n);
                    waiters.addLast(w);
                }
                starved = true;
                now = System.nanoTime();
                if (loadCount != seen) {
                    // Ranges arrived and went to the callers queued before: wait for the next one.
                    seen = loadCount;
                    deadline = now + cfg.waitTimeout().toNanos();
                }
                long wait = Math.min(deadline, limit) - now;
                if (wait <= 0) {
                    dequeueLocked(w);
                    String why = deadline - limit <= 0
                            ? "no range within " + cfg.waitTimeout().toMillis() + "ms"
                            : "no ids within " + cfg.maxWait().toMillis() + "ms: the ranges that arrived went to callers queued before";
                    throw new UnavailableException("tag \"" + tag + "\": " + why, 0, null, tag,
                            cfg.minBackoff(), lastErr);
                }
                try {
                    changed.awaitNanos(wait);
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                    if (w.served) {
                        return w.got; // those IDs are the caller's: handing them out beats a gap
                    }
                    dequeueLocked(w);
                    throw new UnavailableException("tag \"" + tag + "\": interrupted while waiting for a range", 0, null,
                            tag, Duration.ZERO, e);
                }
            }
        } finally {
            lock.unlock();
        }
    }

    /** Takes w, if queued, off the waiters. */
    private void dequeueLocked(Waiter w) {
        if (w != null && w.queued) {
            waiters.remove(w);
            w.queued = false;
        }
    }

    /**
     * Hands the waiters, first come first, their IDs from sp, a range not yet published: nobody else
     * can take from it yet. It stops at the first waiter sp cannot serve, which keeps its turn.
     */
    private void serveWaitersLocked(Span sp) {
        while (!waiters.isEmpty()) {
            Waiter w = waiters.peekFirst();
            if (w.n == 0) {
                if (sp.used() >= sp.size()) {
                    return;
                }
                w.got = 1;
            } else {
                int k = sp.takeN(w.out, w.off, w.n);
                if (k == 0) {
                    return;
                }
                w.got = k;
            }
            w.served = true;
            w.queued = false;
            waiters.pollFirst();
        }
    }

    /** Takes from the current range, switching to the next when it is used up; 0 when both are empty. */
    private int takeLocked(long[] out, int off, int n) {
        for (;;) {
            Span s = cur;
            if (n == 0 && s != null && s.used() < s.size()) {
                return 1; // ready: an ID to hand out
            }
            if (s != null && n > 0) {
                int k = s.takeN(out, off, n);
                if (k > 0) {
                    if (out[off + k - 1] >= s.prefetchAt && wantLoad && System.nanoTime() - retryAt >= 0) {
                        startLoadLocked();
                    }
                    return k;
                }
            }
            if (next == null) {
                return 0;
            }
            switchLocked();
        }
    }

    /** Retires the current range (used up) and serves the next. */
    private void switchLocked() {
        Span s = cur;
        if (s != null) {
            retired += s.size();
        }
        cur = next;
        next = null;
        wantLoad = !loading;
    }

    /** Throws the last load's error while its backoff runs, so that callers do not pile onto a failure. */
    private void failFastLocked() {
        if (lastErr == null) {
            return;
        }
        long wait = retryAt - System.nanoTime();
        if (wait > 0) {
            throw unavailable(wait, lastErr);
        }
    }

    /** Returns what a caller gets for a failed load: a refusal as it is, anything else as unavailable. */
    private IdmintException unavailable(long retryNanos, IdmintException err) {
        if (err instanceof RefusedException r) {
            return r.again();
        }
        return new UnavailableException("tag \"" + tag + "\": no ids available, retry in "
                + TimeUnit.NANOSECONDS.toMillis(retryNanos) + "ms: " + err.getMessage(), err.status(), err.code(), tag,
                Duration.ofNanos(retryNanos), err);
    }

    /** Starts a background load unless one is in flight, a next range is ready, or the buffer is closed. */
    private void startLoadLocked() {
        if (closed || loading || next != null) {
            wantLoad = false;
            return;
        }
        long size = nextSizeLocked();
        loading = true;
        wantLoad = false;
        try {
            loads.execute(() -> load(size));
        } catch (RuntimeException e) {
            loading = false;
            wantLoad = true;
            lastErr = new UnavailableException("tag \"" + tag + "\": cannot start a load: " + e, 0, null, tag,
                    cfg.minBackoff(), e);
            throw lastErr;
        }
    }

    /** Applies the step policy to the rate seen since the last load started. */
    private long nextSizeLocked() {
        long now = System.nanoTime();
        Span s = cur;
        long issued = retired + (s == null ? 0 : s.used());
        long size = 0; // the tag's own step, for the first load
        if (step > 0) {
            size = StepPolicy.next(minStep, maxStep, cfg.period().toNanos(), step, issued - rateIds, now - rateAt,
                    lastLatency, starved);
        }
        rateAt = now;
        rateIds = issued;
        starved = false;
        return size;
    }

    /** Runs one load on a thread of the client's executor and installs its result. */
    private void load(long size) {
        long start = System.nanoTime();
        Grant g = null;
        IdmintException err = null;
        try {
            g = fetch(size);
        } catch (IdmintException e) {
            err = e;
        } catch (RuntimeException e) {
            err = new UnavailableException("tag \"" + tag + "\": load failed: " + e, 0, null, tag, cfg.minBackoff(), e);
        }
        install(g, err, System.nanoTime() - start);
    }

    /**
     * Fetches one range: the request ID is chosen once, before the first attempt (or resumed from an
     * earlier load that gave up unsettled), and every retry reuses it. A success is ours; an answer
     * that settles the request (a refusal, an exhausted tag) ends the load; a request ID settled
     * without a range for us (not_holder, request_conflict, given_back) goes on with a new request;
     * anything else may hide a grant, and is sent again after a pause with full jitter (at least
     * the instance's Retry-After) until loadTimeout; then the request is kept for the next load.
     */
    private Grant fetch(long size) {
        long start = System.nanoTime();
        long deadline = start + cfg.loadTimeout().toNanos();
        Request req;
        boolean uncertain;
        lock.lock();
        try {
            req = pending.pollFirst();
            uncertain = req != null;
            if (req == null) {
                req = Request.fresh(tag, size);
            }
        } finally {
            lock.unlock();
        }
        Exception lastFailure = null;
        ApiError lastAnswer = null;
        long retryAfter = 0;
        boolean pause = false;
        for (int attempt = 0;; attempt++) {
            if (pause) {
                long backoff = Math.min(cfg.retryMin().toNanos() << Math.min(attempt, 16), cfg.retryMax().toNanos());
                long wait = Math.max(ThreadLocalRandom.current().nextLong(Math.max(backoff, 1)),
                        TimeUnit.MILLISECONDS.toNanos(retryAfter));
                if (cancelled || System.nanoTime() + wait - deadline > 0 || !sleep(wait)) {
                    if (uncertain) {
                        keep(req);
                        log(Level.WARNING, "idmint: segment allocation unsettled; a next load resumes it: biz_tag=%s request_id=%s",
                                tag, req.id());
                    }
                    String msg = "tag \"" + tag + "\": no instance granted a range (after " + attempt + " attempts"
                            + (lastFailure == null ? "" : ": " + lastFailure.getMessage()) + ")";
                    throw new UnavailableException(msg, lastAnswer == null ? 0 : lastAnswer.status,
                            lastAnswer == null ? null : lastAnswer.code, tag, cfg.minBackoff(), lastFailure);
                }
            }
            pause = true;
            if (stint.down()) {
                // The client left the region: nothing more is sent to it under this request, which
                // close gives up if it may have committed.
                if (uncertain) {
                    keep(req);
                }
                throw new UnavailableException("tag \"" + tag + "\": the client left region \"" + stint.region.name
                        + "\": nothing more is sent to it", 0, null, tag, cfg.minBackoff(), lastFailure);
            }
            Grant g;
            try {
                g = instances.grant(req, floor());
            } catch (ApiError e) {
                if (e.notOurs()) {
                    log(Level.WARNING, "idmint: request settled without a range for this client; going on with a new one: biz_tag=%s request_id=%s: %s",
                            tag, req.id(), e.getMessage());
                    req = Request.fresh(tag, size);
                    uncertain = false;
                    pause = false;
                    continue;
                }
                if (uncertain) {
                    keep(req); // an earlier attempt may have committed: keep its ID
                }
                throw e.toException(tag);
            } catch (Instances.RoundFailed e) {
                uncertain = true;
                lastFailure = e;
                lastAnswer = e.lastAnswer;
                retryAfter = e.retryAfterMillis;
                stint.roundFailed(this, e);
                continue;
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                keep(req);
                throw new UnavailableException("tag \"" + tag + "\": load interrupted", 0, null, tag, cfg.minBackoff(), e);
            }
            String conflict = stint.checkShare(g);
            if (conflict != null) {
                stint.region.gap.addAndGet(g.size());
                log(Level.ERROR, "idmint: REFUSED segment: the regions' shares may overlap; it is never served (a gap), nor is any id from now on: biz_tag=%s region=%s first=%s last=%s: %s",
                        tag, stint.region.name, g.first(), g.last(), conflict);
                throw new SharesOverlapException(conflict, tag);
            }
            if (g.recovered() && settledGap(g)) {
                log(Level.WARNING, "idmint: ABANDONED ids: granted to a request whose reply was lost, found only after the tag was granted more (a gap): biz_tag=%s first=%s last=%s",
                        tag, g.first(), g.last());
                req = Request.fresh(tag, size);
                uncertain = false;
                pause = false;
                continue;
            }
            granted(req, g);
            if (g.recovered()) {
                log(Level.INFO, "idmint: RECOVERED segment by request id after a lost reply: biz_tag=%s request_id=%s first=%s last=%s",
                        tag, req.id(), g.first(), g.last());
            }
            return g;
        }
    }

    /** Sleeps nanos, or less when close cancels the load; returns false if it was cancelled. */
    private boolean sleep(long nanos) {
        lock.lock();
        try {
            long left = nanos;
            while (left > 0 && !cancelled) {
                left = changed.awaitNanos(left);
            }
            return !cancelled;
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            return false;
        } finally {
            lock.unlock();
        }
    }

    private long floor() {
        lock.lock();
        try {
            return highest;
        } finally {
            lock.unlock();
        }
    }

    /** Adds req to the unsettled requests. */
    private void keep(Request req) {
        lock.lock();
        try {
            if (pending.size() >= MAX_PENDING) {
                Request dropped = pending.pollFirst();
                log(Level.WARNING, "idmint: ABANDONED request: too many unsettled requests for the tag; if it committed, its range is a gap (the segment log has it): biz_tag=%s request_id=%s",
                        tag, dropped.id());
            }
            pending.addLast(req);
        } finally {
            lock.unlock();
        }
    }

    /** Reports whether g, found again by its request ID, ends at or below the floor: the tag moved past it. */
    private boolean settledGap(Grant g) {
        lock.lock();
        try {
            return g.last() <= highest;
        } finally {
            lock.unlock();
        }
    }

    /** Keeps req for the give-back of g's tail. */
    private void granted(Request req, Grant g) {
        lock.lock();
        try {
            grants.addLast(new Granted(req, g.last()));
            while (grants.size() > KEPT_GRANTS) {
                grants.pollFirst();
            }
        } finally {
            lock.unlock();
        }
    }

    /** Records the outcome of a load and wakes the callers waiting for it. */
    private void install(Grant g, IdmintException err, long latency) {
        lock.lock();
        try {
            loading = false;
            lastLatency = latency;
            if (err == null && g.first() <= highest) {
                err = new UnavailableException(String.format(
                        "tag \"%s\": granted range [%d, %d] (request %s) is at or below ids already granted (%d): the database went back in time; refused",
                        tag, g.first(), g.last(), g.requestId(), highest), 503, "rolled_back", tag, cfg.minBackoff(), null);
                log(Level.ERROR, "idmint: REFUSED segment: %s", err.getMessage());
            }
            if (err != null) {
                failedLocked(err);
                return;
            }
            grantedLocked(g);
        } finally {
            changed.signalAll();
            lock.unlock();
        }
    }

    private void failedLocked(IdmintException err) {
        lastErr = err;
        backoffNanos = Math.min(Math.max(2 * backoffNanos, cfg.minBackoff().toNanos()), cfg.maxBackoff().toNanos());
        if (err instanceof UnknownTagException) {
            backoffNanos = Math.max(backoffNanos, UNKNOWN_TTL_NANOS); // answered from memory
        } else if (err instanceof UnavailableException u) {
            backoffNanos = Math.max(backoffNanos, Math.min(u.retryAfter().toNanos(), cfg.maxBackoff().toNanos()));
        }
        retryAt = System.nanoTime() + backoffNanos;
        wantLoad = !closed;
    }

    private void grantedLocked(Grant g) {
        highest = g.last();
        stint.region.raise(tag, highest);
        step = g.size();
        minStep = g.step();
        maxStep = g.maxStep();
        lastErr = null;
        backoffNanos = 0;
        retryAt = 0;
        loadCount++;
        if (g.recovered()) {
            recovered++;
        }
        if (closed) {
            late.add(new long[] {g.first(), g.last()});
            return;
        }
        Span sp = new Span(g.first(), g.last(), cfg.threshold());
        Span c = cur;
        next = sp;
        if (c == null || c.used() >= c.size()) {
            // The callers waiting for this range come first; the lock-free takers get what they
            // leave once it is published.
            serveWaitersLocked(sp);
            switchLocked();
            if (sp.next.get() > sp.prefetchAt) {
                // The waiters took the threshold, or all of it: the next load is due now.
                startLoadLocked();
            }
        } else {
            wantLoad = false;
        }
    }

    /**
     * Closes the buffer: stops its loads, then gives back what it can of the unused IDs, newest
     * first: the newest range's tail, and the range before it when the two touch, each with the
     * request of its grant (an instance takes it back only when nobody was granted anything since).
     * The rest is a gap, logged. Requests still unsettled are sent once more, to log what they were
     * granted. Returns the first give-back error, or null.
     *
     * <p>The buffer of a stint that is down (its region could not grant) sends nothing: its unused
     * IDs are a gap and its unsettled requests are given up, each counted and logged.
     */
    Exception close() {
        boolean down = stint.down();
        List<long[]> unused = new ArrayList<>();
        lock.lock();
        try {
            if (closed) {
                return null;
            }
            closed = true;
            wantLoad = false;
            Span s = cur;
            if (s != null) {
                long[] tail = s.exhaust();
                if (tail != null) {
                    unused.add(tail);
                }
            }
            if (next != null) {
                unused.add(new long[] {next.first, next.last});
            }
            changed.signalAll();
            // A load in flight that committed comes back with its range, which goes back too.
            long end = System.nanoTime() + (down ? 0 : CLOSE_WAIT_NANOS);
            while (loading && end - System.nanoTime() > 0) {
                changed.awaitNanos(end - System.nanoTime());
            }
            cancelled = true;
            changed.signalAll();
            end = System.nanoTime() + cfg.attemptTimeout().toNanos() * 2 + CLOSE_WAIT_NANOS;
            while (loading && end - System.nanoTime() > 0) {
                changed.awaitNanos(end - System.nanoTime());
            }
            unused.addAll(late);
            late.clear();
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        } finally {
            lock.unlock();
        }
        if (down) {
            abandonDown(unused);
            return null;
        }
        Exception err = giveBack(unused);
        settlePending();
        return err;
    }

    /** Takes the unsettled requests out of the buffer. */
    private List<Request> takePending() {
        lock.lock();
        try {
            List<Request> reqs = new ArrayList<>(pending);
            pending.clear();
            return reqs;
        } finally {
            lock.unlock();
        }
    }

    /** Counts and logs as gaps the unused ranges of a down stint, and gives up its unsettled requests. */
    private void abandonDown(List<long[]> unused) {
        for (long[] r : unused) {
            stint.region.gap.addAndGet(r[1] - r[0] + 1);
            log(Level.WARNING, "idmint: ABANDONED ids: the client left region %s, which could not grant; not given back (a gap): biz_tag=%s first=%s last=%s",
                    stint.region.name, tag, r[0], r[1]);
        }
        List<Request> reqs = takePending();
        for (Request req : reqs) {
            stint.region.abandoned.incrementAndGet();
            log(Level.WARNING, "idmint: ABANDONED request: its reply was lost and the client left region %s; it is never looked up nor sent elsewhere; if it committed, its range is a gap (the region's segment log has it): biz_tag=%s request_id=%s",
                    stint.region.name, tag, req.id());
        }
    }

    private Exception giveBack(List<long[]> unused) {
        Exception err = null;
        while (!unused.isEmpty()) {
            long[] r = unused.get(unused.size() - 1);
            Request req = requestOf(r[1]);
            if (req == null) {
                break;
            }
            boolean back;
            try {
                back = instances.giveBack(req, r[0], r[1]);
            } catch (Exception e) {
                if (e instanceof InterruptedException) {
                    Thread.currentThread().interrupt();
                }
                log(Level.WARNING, "idmint: could not give back unused ids; they stay a gap: biz_tag=%s first=%s last=%s: %s",
                        tag, r[0], r[1], e.getMessage());
                err = e;
                break;
            }
            if (!back) {
                log(Level.INFO, "idmint: did not give back unused ids: the tag was granted more since; they stay a gap: biz_tag=%s first=%s last=%s",
                        tag, r[0], r[1]);
                break;
            }
            log(Level.DEBUG, "idmint: gave back unused ids: biz_tag=%s first=%s last=%s", tag, r[0], r[1]);
            unused.remove(unused.size() - 1);
            if (unused.isEmpty() || unused.get(unused.size() - 1)[1] + 1 != r[0]) {
                break;
            }
        }
        for (long[] r : unused) {
            stint.region.gap.addAndGet(r[1] - r[0] + 1);
            log(Level.WARNING, "idmint: ABANDONED ids: granted but never handed out (a gap): biz_tag=%s first=%s last=%s",
                    tag, r[0], r[1]);
        }
        return err;
    }

    /** Returns the request granted the range that ends at last, or null. */
    private Request requestOf(long last) {
        lock.lock();
        try {
            for (Granted g : grants) {
                if (g.last() == last) {
                    return g.req();
                }
            }
            return null;
        } finally {
            lock.unlock();
        }
    }

    /**
     * Sends every unsettled request once more: a range committed for it is never served, and is
     * logged as a gap; one not reached is logged as an abandoned request, whose range the segment
     * log has if it committed after all.
     */
    private void settlePending() {
        List<Request> reqs = takePending();
        for (Request req : reqs) {
            try {
                Grant g = instances.grant(req, 0);
                stint.region.gap.addAndGet(g.size());
                log(Level.WARNING, "idmint: ABANDONED ids: granted to a request unsettled at close (a gap): biz_tag=%s request_id=%s first=%s last=%s",
                        tag, req.id(), g.first(), g.last());
            } catch (Exception e) {
                if (e instanceof InterruptedException) {
                    Thread.currentThread().interrupt();
                }
                log(Level.WARNING, "idmint: ABANDONED request: unsettled at close; if it committed, its range is a gap (the segment log has it): biz_tag=%s request_id=%s: %s",
                        tag, req.id(), e.getMessage());
            }
        }
    }

    /** Returns a snapshot of the buffer. */
    IdmintClient.TagStats stats() {
        lock.lock();
        try {
            Span s = cur;
            long issued = retired + (s == null ? 0 : s.used());
            return new IdmintClient.TagStats(tag, issued, loadCount, recovered, step, highest);
        } finally {
            lock.unlock();
        }
    }
}
