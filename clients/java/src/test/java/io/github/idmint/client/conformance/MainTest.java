package io.github.idmint.client.conformance;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.github.idmint.client.IdmintServer;
import java.io.ByteArrayOutputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.util.Arrays;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/** The conformance program's interface: --count IDs from --threads threads, one a line, exit 0 only if every call succeeded. */
class MainTest {
    @TempDir
    Path dir;

    @Test
    void printsEveryIdOnceAndExitsZero() throws Exception {
        IdmintServer.createTag(dir, "order", 100, 1000);
        String token = IdmintServer.createToken(dir, "ids:order");
        try (IdmintServer server = IdmintServer.start(dir, "--auth", "token")) {
            ByteArrayOutputStream out = new ByteArrayOutputStream();
            ByteArrayOutputStream err = new ByteArrayOutputStream();
            int rc = Main.run(new String[] {"--url", server.url() + ",http://127.0.0.1:1", "--tag=order", "--count", "5001",
                    "--threads", "4", "--token", token}, out, new PrintStream(err, true, StandardCharsets.UTF_8));
            assertEquals(0, rc, err.toString(StandardCharsets.UTF_8));
            long[] ids = out.toString(StandardCharsets.US_ASCII).lines().mapToLong(Long::parseLong).sorted().toArray();
            assertEquals(5001, ids.length);
            assertEquals(5001, Arrays.stream(ids).distinct().count(), "every id once");
            assertTrue(err.toString(StandardCharsets.UTF_8).contains("ids/s"));

            // A refusal fails the run at once: exit 1, the code on stderr.
            out.reset();
            err.reset();
            rc = Main.run(new String[] {"--url", server.url(), "--tag", "order", "--count", "10", "--threads", "2",
                    "--token", "idm_notatoken_x"}, out, new PrintStream(err, true, StandardCharsets.UTF_8));
            assertEquals(1, rc);
            assertEquals(0, out.size());
            assertTrue(err.toString(StandardCharsets.UTF_8).contains("(unauthorized)"), err.toString(StandardCharsets.UTF_8));
        }
        assertThrows(IllegalArgumentException.class, () -> Main.run(new String[] {"--tag", "order"}, System.out, System.err));
        assertThrows(IllegalArgumentException.class, () -> Main.run(new String[] {"--url", "http://x", "--tag", "t", "--count", "-1"}, System.out, System.err));
    }
}
