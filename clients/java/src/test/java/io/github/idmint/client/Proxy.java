package io.github.idmint.client;

import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.InetAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;
import java.util.function.Function;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * Proxy is a small HTTP/1.1 proxy in front of an idmint instance on loopback: one request per
 * connection. For each request its policy decides to forward the reply, to drop it after the
 * instance answered (the instance committed; the client sees the connection closed), or to answer
 * itself without forwarding. It records every exchange.
 */
final class Proxy implements AutoCloseable {
    /** What the proxy does with one request. */
    enum Action { FORWARD, DROP_REPLY, ANSWER_503 }

    /** One request as the proxy saw it, and what happened to it. */
    record Exchange(String path, String requestId, String body, int status, String reply, Action action) {
        /** Returns the JSON string field of the reply, or null. */
        String replyField(String name) {
            return field(reply, name);
        }
    }

    private static final Pattern REQUEST_ID = Pattern.compile("\"request_id\":\"([^\"]+)\"");

    private final ServerSocket listener;
    private volatile int target;
    private final ExecutorService pool = Executors.newCachedThreadPool(r -> {
        Thread t = new Thread(r, "proxy");
        t.setDaemon(true);
        return t;
    });
    private final List<Exchange> exchanges = new ArrayList<>();
    private volatile Function<Integer, Action> policy = n -> Action.FORWARD;
    /** Set: GET /id/live is answered with a reset, as if the instance were down. */
    private volatile boolean deadLive;
    private int seen;

    Proxy(int targetPort) throws IOException {
        this.target = targetPort;
        this.listener = new ServerSocket(0, 50, InetAddress.getLoopbackAddress());
        pool.execute(this::accept);
    }

    /** Sends the next requests to another port. */
    void target(int port) {
        this.target = port;
    }

    /** Makes GET /id/live fail (a reset) while dead is set, and pass again when not. */
    void deadLive(boolean dead) {
        this.deadLive = dead;
    }

    /** Sets the policy: it gets the index of each range request (POST /v1/segments), from 0. */
    void policy(Function<Integer, Action> p) {
        this.policy = p;
    }

    String url() {
        return "http://127.0.0.1:" + listener.getLocalPort();
    }

    /** Returns the exchanges so far, in order. */
    synchronized List<Exchange> exchanges() {
        return new ArrayList<>(exchanges);
    }

    /** Returns the range requests (POST /v1/segments) so far, in order. */
    synchronized List<Exchange> grants() {
        return exchanges.stream().filter(e -> e.path.equals("/v1/segments")).toList();
    }

    private void accept() {
        while (!listener.isClosed()) {
            try {
                Socket c = listener.accept();
                pool.execute(() -> serve(c));
            } catch (IOException e) {
                return;
            }
        }
    }

    private void serve(Socket client) {
        try (client) {
            client.setSoTimeout(10_000);
            InputStream in = client.getInputStream();
            String head = readHead(in);
            if (head == null) {
                return;
            }
            String[] lines = head.split("\r\n");
            String path = lines[0].split(" ")[1];
            int length = 0;
            StringBuilder fwd = new StringBuilder(lines[0]).append("\r\n");
            for (int i = 1; i < lines.length; i++) {
                String l = lines[i].toLowerCase(Locale.ROOT);
                if (l.startsWith("content-length:")) {
                    length = Integer.parseInt(l.substring(15).trim());
                }
                if (!l.startsWith("connection:")) {
                    fwd.append(lines[i]).append("\r\n");
                }
            }
            fwd.append("Connection: close\r\n\r\n");
            byte[] body = in.readNBytes(length);
            String text = new String(body, StandardCharsets.UTF_8);
            Matcher m = REQUEST_ID.matcher(text);
            String requestId = m.find() ? m.group(1) : null;
            Action action = Action.FORWARD;
            if (path.equals("/v1/segments")) {
                int n;
                synchronized (this) {
                    n = seen++;
                }
                action = policy.apply(n);
            }
            OutputStream out = client.getOutputStream();
            if (path.equals("/id/live") && deadLive) {
                client.setSoLinger(true, 0);
                return;
            }
            if (action == Action.ANSWER_503) {
                String reply = "{\"error\":{\"code\":\"unavailable\",\"message\":\"proxy: try again\"}}";
                record(new Exchange(path, requestId, text, 503, reply, action));
                out.write(("HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nRetry-After: 1\r\n"
                        + "Content-Length: " + reply.length() + "\r\nConnection: close\r\n\r\n" + reply).getBytes(StandardCharsets.UTF_8));
                out.flush();
                return;
            }
            byte[] reply;
            try (Socket server = new Socket(InetAddress.getLoopbackAddress(), target)) {
                server.setSoTimeout(10_000);
                OutputStream so = server.getOutputStream();
                so.write(fwd.toString().getBytes(StandardCharsets.ISO_8859_1));
                so.write(body);
                so.flush();
                reply = server.getInputStream().readAllBytes(); // the server closes: Connection: close
            }
            String r = new String(reply, StandardCharsets.UTF_8);
            int status = Integer.parseInt(r.substring(9, 12));
            int split = r.indexOf("\r\n\r\n");
            record(new Exchange(path, requestId, text, status, split < 0 ? "" : r.substring(split + 4), action));
            if (action == Action.DROP_REPLY) {
                client.setSoLinger(true, 0); // a reset: the reply is lost after the instance committed
                return;
            }
            out.write(reply);
            out.flush();
        } catch (IOException e) {
            // the client went away
        }
    }

    private synchronized void record(Exchange e) {
        exchanges.add(e);
    }

    /** Reads a request head up to its blank line; null at end of stream. */
    private static String readHead(InputStream in) throws IOException {
        ByteArrayOutputStream b = new ByteArrayOutputStream();
        int state = 0;
        for (int c; (c = in.read()) >= 0;) {
            b.write(c);
            state = (c == '\r' && (state == 0 || state == 2)) ? state + 1 : (c == '\n' && (state == 1 || state == 3)) ? state + 1 : 0;
            if (state == 4) {
                String s = b.toString(StandardCharsets.ISO_8859_1);
                return s.substring(0, s.length() - 4);
            }
        }
        return null;
    }

    /** Returns the string (or bare) JSON field name of json, or null: enough for the flat replies of the range API. */
    static String field(String json, String name) {
        Matcher m = Pattern.compile("\"" + Pattern.quote(name) + "\":(\"([^\"]*)\"|[^,}]+)").matcher(json);
        if (!m.find()) {
            return null;
        }
        return m.group(2) != null ? m.group(2) : m.group(1);
    }

    @Override
    public void close() throws IOException, InterruptedException {
        listener.close();
        pool.shutdownNow();
        pool.awaitTermination(10, TimeUnit.SECONDS);
    }
}
