package io.github.idmint.client;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.PrintWriter;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * IdmintServer is a real {@code idmint serve} on a SQLite file in a test's directory, listening on a
 * loopback port of its own. The binary is built once per test run from the repository ({@code go
 * build -o target/idmint ../../cmd/idmint}), unless IDMINT_BIN names one.
 */
public final class IdmintServer implements AutoCloseable {
    private static final Pattern LISTEN = Pattern.compile("\"listen\":\"([^\"]+)\"");
    private static Path binary;

    private final Process process;
    private final String address; // host:port
    private final boolean tls;

    private IdmintServer(Process process, String address, boolean tls) {
        this.process = process;
        this.address = address;
        this.tls = tls;
    }

    /** Returns the idmint binary, building it on first use. */
    public static synchronized Path binary() throws IOException, InterruptedException {
        if (binary != null) {
            return binary;
        }
        String given = System.getenv("IDMINT_BIN");
        if (given != null && !given.isEmpty()) {
            binary = Path.of(given).toAbsolutePath();
            return binary;
        }
        Path out = Path.of("target", "idmint").toAbsolutePath();
        String go = Files.isExecutable(Path.of("/usr/local/go/bin/go")) && !onPath("go") ? "/usr/local/go/bin/go" : "go";
        Process p = new ProcessBuilder(go, "build", "-o", out.toString(), "../../cmd/idmint")
                .redirectErrorStream(true)
                .start();
        String log = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
        if (!p.waitFor(10, TimeUnit.MINUTES) || p.exitValue() != 0) {
            throw new IOException("go build ../../cmd/idmint failed:\n" + log);
        }
        binary = out;
        return binary;
    }

    private static boolean onPath(String cmd) {
        for (String dir : System.getenv().getOrDefault("PATH", "").split(":")) {
            if (!dir.isEmpty() && Files.isExecutable(Path.of(dir, cmd))) {
                return true;
            }
        }
        return false;
    }

    /** Returns the --database-url of the SQLite file in dir. */
    public static String database(Path dir) {
        return "sqlite://" + dir.resolve("idmint.db").toAbsolutePath();
    }

    /** Runs {@code idmint ARGS --database-url …} on dir's database and returns its stdout. */
    public static String cli(Path dir, String... args) throws IOException, InterruptedException {
        List<String> cmd = new ArrayList<>(Arrays.asList(args));
        cmd.add("--database-url");
        cmd.add(database(dir));
        return run(cmd.toArray(new String[0]));
    }

    /** Runs {@code idmint ARGS} and returns its stdout. */
    public static String run(String... args) throws IOException, InterruptedException {
        List<String> cmd = new ArrayList<>();
        cmd.add(binary().toString());
        cmd.addAll(Arrays.asList(args));
        Process p = new ProcessBuilder(cmd).redirectError(ProcessBuilder.Redirect.DISCARD).start();
        String out = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
        if (!p.waitFor(1, TimeUnit.MINUTES) || p.exitValue() != 0) {
            throw new IOException("idmint " + String.join(" ", args) + " failed");
        }
        return out.trim();
    }

    /** Creates tag with the given step and max_step in dir's database. */
    public static void createTag(Path dir, String tag, long step, long maxStep) throws IOException, InterruptedException {
        cli(dir, "tag", "create", tag, "--step", Long.toString(step), "--max-step", Long.toString(maxStep));
    }

    /** Makes a bearer token with the scopes in dir's database and returns it. */
    public static String createToken(Path dir, String scopes) throws IOException, InterruptedException {
        String out = cli(dir, "token", "create", "--name", "test", "--scope", scopes);
        return out.lines().filter(l -> l.startsWith("idm_")).findFirst().orElseThrow(() -> new IOException("no token in: " + out));
    }

    /**
     * Starts {@code idmint serve} on dir's database with extra flags, waits until it listens, and
     * returns it. Range requests are not rate limited, so that tiny steps can be tested; its log
     * goes to dir/serve.log.
     */
    public static IdmintServer start(Path dir, String... extra) throws IOException, InterruptedException {
        return startOn(dir.resolve("serve.log"), database(dir), "127.0.0.1:0", extra);
    }

    /**
     * Starts {@code idmint serve} on the database of databaseUrl, listening on listen, as {@link
     * #start(Path, String...)} does; its log goes to the file log.
     */
    public static IdmintServer startOn(Path logFile, String databaseUrl, String listen, String... extra)
            throws IOException, InterruptedException {
        List<String> cmd = new ArrayList<>(List.of(binary().toString(), "serve",
                "--database-url", databaseUrl,
                "--listen", listen,
                "--log-format", "json",
                "--range-grants-per-second", "0",
                "--snowflake=false",
                "--grpc-listen", "off"));
        cmd.addAll(Arrays.asList(extra));
        boolean tls = cmd.contains("--tls-cert");
        Process p = new ProcessBuilder(cmd).redirectErrorStream(true).start();
        BufferedReader r = new BufferedReader(new InputStreamReader(p.getInputStream(), StandardCharsets.UTF_8));
        PrintWriter log = new PrintWriter(Files.newBufferedWriter(logFile), true);
        CompletableFuture<String> listening = new CompletableFuture<>();
        Thread pump = new Thread(() -> {
            try (log) {
                for (String line; (line = r.readLine()) != null;) {
                    log.println(line);
                    Matcher m = LISTEN.matcher(line);
                    if (line.contains("\"idmint serving\"") && m.find()) {
                        listening.complete(m.group(1));
                    }
                }
            } catch (IOException e) {
                // the process ended
            }
            listening.completeExceptionally(new IOException("idmint serve ended before listening; see " + logFile));
        }, "idmint-serve-log");
        pump.setDaemon(true);
        pump.start();
        try {
            return new IdmintServer(p, listening.get(30, TimeUnit.SECONDS), tls);
        } catch (Exception e) {
            p.destroyForcibly();
            throw new IOException("idmint serve did not start: " + e.getMessage(), e);
        }
    }

    /** Returns the server's port. */
    public int port() {
        return Integer.parseInt(address.substring(address.lastIndexOf(':') + 1));
    }

    /** Returns the server's base URL (https://localhost:PORT when it serves TLS, for its certificate's name). */
    public String url() {
        return tls ? "https://localhost:" + port() : "http://" + address;
    }

    /** SIGKILLs the process and waits until it is gone. */
    public void kill() throws InterruptedException {
        process.destroyForcibly().waitFor(10, TimeUnit.SECONDS);
    }

    @Override
    public void close() throws InterruptedException {
        process.destroy();
        if (!process.waitFor(20, TimeUnit.SECONDS)) {
            process.destroyForcibly().waitFor(10, TimeUnit.SECONDS);
        }
    }
}
