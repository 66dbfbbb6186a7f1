package io.github.idmint.client.conformance;

import io.github.idmint.client.IdmintClient;
import io.github.idmint.client.IdmintException;
import io.github.idmint.client.UnavailableException;
import java.io.BufferedOutputStream;
import java.io.IOException;
import java.io.OutputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;

/**
 * Main is the Java client's conformance program (clients/java/conformance): it takes --count IDs of
 * --tag from --threads threads through one client, prints each ID on its own line to stdout, closes
 * the client (giving back the unused tails), and exits 0 only if every call succeeded. A call that
 * throws UnavailableException is retried, as an application would, for at most 30 seconds; a
 * refusal fails the run at once. A summary with the rate goes to stderr.
 */
public final class Main {
    private Main() {}

    public static void main(String[] args) {
        int rc;
        try {
            rc = run(args, System.out, System.err);
        } catch (IllegalArgumentException e) {
            System.err.println("conformance: " + e.getMessage());
            System.err.println("usage: conformance --url URL [--url URL…] --tag TAG --count N [--threads N] [--token T] [--ca PEM] [--cert PEM --key PEM]");
            rc = 2;
        }
        System.exit(rc);
    }

    static int run(String[] args, OutputStream stdout, PrintStream stderr) {
        List<String> urls = new ArrayList<>();
        String tag = null;
        String token = System.getenv("IDMINT_TOKEN");
        String ca = null;
        String cert = null;
        String key = null;
        long count = -1;
        int threads = 1;
        for (int i = 0; i < args.length; i++) {
            String a = args[i];
            String name = a;
            String value = null;
            int eq = a.indexOf('=');
            if (a.startsWith("--") && eq > 0) {
                name = a.substring(0, eq);
                value = a.substring(eq + 1);
            }
            if (name.equals("-h") || name.equals("--help")) {
                throw new IllegalArgumentException("help");
            }
            if (value == null) {
                if (i + 1 >= args.length) {
                    throw new IllegalArgumentException(name + ": wants a value");
                }
                value = args[++i];
            }
            switch (name) {
                case "--url" -> urls.add(value);
                case "--tag" -> tag = value;
                case "--count" -> count = number(name, value);
                case "--threads" -> threads = (int) number(name, value);
                case "--token" -> token = value;
                case "--ca" -> ca = value;
                case "--cert" -> cert = value;
                case "--key" -> key = value;
                default -> throw new IllegalArgumentException("unknown flag " + name);
            }
        }
        if (urls.isEmpty() || tag == null || count < 0 || threads < 1) {
            throw new IllegalArgumentException("--url, --tag and --count are required; --threads at least 1");
        }
        IdmintClient client = IdmintClient.builder()
                .urls(urls)
                .token(token)
                .tls(ca, cert, key)
                .build();
        long[][] ids = new long[threads][];
        int[] taken = new int[threads];
        AtomicReference<Throwable> failure = new AtomicReference<>();
        AtomicLong retried = new AtomicLong();
        List<Thread> workers = new ArrayList<>();
        long start = System.nanoTime();
        for (int w = 0; w < threads; w++) {
            int share = (int) (count / threads + (w < count % threads ? 1 : 0));
            long[] mine = new long[share];
            ids[w] = mine;
            int me = w;
            String t = tag;
            Thread th = new Thread(() -> {
                for (int i = 0; i < mine.length && failure.get() == null; i++) {
                    try {
                        mine[i] = next(client, t, retried);
                        taken[me] = i + 1;
                    } catch (RuntimeException | InterruptedException e) {
                        failure.compareAndSet(null, e);
                        return;
                    }
                }
            }, "conformance-" + w);
            workers.add(th);
            th.start();
        }
        for (Thread th : workers) {
            try {
                th.join();
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                failure.compareAndSet(null, e);
            }
        }
        double seconds = (System.nanoTime() - start) / 1e9;
        IdmintClient.Stats stats = client.stats();
        client.close();
        long got = 0;
        for (int n : taken) {
            got += n;
        }
        Throwable err = failure.get();
        try {
            // The IDs taken before a failure are handed out too: a checker counts them.
            print(ids, taken, stdout);
        } catch (IOException e) {
            stderr.println("conformance: write: " + e.getMessage());
            return 1;
        }
        stderr.printf("conformance: java: %d ids of %s from %d threads in %.3fs: %.0f ids/s, %d range requests, %d calls retried after unavailable%n",
                got, tag, threads, seconds, got / seconds, stats.requests(), retried.get());
        if (err != null) {
            String code = err instanceof IdmintException ie && ie.code() != null ? " (" + ie.code() + ")" : "";
            stderr.println("conformance: FAILED: " + err.getClass().getSimpleName() + code + ": " + err.getMessage());
            return 1;
        }
        return 0;
    }

    /** How long one ID may be retried after UnavailableException, as an application would. */
    private static final long RETRY_FOR_NANOS = TimeUnit.SECONDS.toNanos(30);

    /**
     * Returns the next ID, retrying an UnavailableException (worth a retry after a pause, as while an
     * instance is killed) for at most 30 seconds; refusals and the rest fail at once.
     */
    private static long next(IdmintClient client, String tag, AtomicLong retried) throws InterruptedException {
        long until = System.nanoTime() + RETRY_FOR_NANOS;
        for (;;) {
            try {
                return client.next(tag);
            } catch (UnavailableException e) {
                if (System.nanoTime() - until > 0) {
                    throw e;
                }
                retried.incrementAndGet();
                Thread.sleep(Math.max(e.retryAfter().toMillis(), 50));
            }
        }
    }

    private static long number(String flag, String v) {
        try {
            long n = Long.parseLong(v);
            if (n < 0 || n > Integer.MAX_VALUE) {
                throw new IllegalArgumentException(flag + " " + v + ": want 0 to " + Integer.MAX_VALUE);
            }
            return n;
        } catch (NumberFormatException e) {
            throw new IllegalArgumentException(flag + " " + v + ": want a whole number");
        }
    }

    private static void print(long[][] ids, int[] taken, OutputStream out) throws IOException {
        BufferedOutputStream b = new BufferedOutputStream(out, 1 << 16);
        StringBuilder s = new StringBuilder(1 << 16);
        for (int w = 0; w < ids.length; w++) {
            for (int i = 0; i < taken[w]; i++) {
                long id = ids[w][i];
                s.append(id).append('\n');
                if (s.length() > (1 << 15)) {
                    b.write(s.toString().getBytes(StandardCharsets.US_ASCII));
                    s.setLength(0);
                }
            }
        }
        b.write(s.toString().getBytes(StandardCharsets.US_ASCII));
        b.flush();
    }
}
