package io.github.idmint.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Path;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * Refusals are final and typed: each costs exactly one request, carries the instance's stable code,
 * and is never an UnavailableException (so a caller that retries on it does not retry a refusal).
 */
class RefusalTest {
    @TempDir
    Path dir;

    @Test
    void refusalsAreFinalAndTyped() throws Exception {
        IdmintServer.createTag(dir, "order", 100, 0);
        IdmintServer.createTag(dir, "other", 100, 0);
        String orderOnly = IdmintServer.createToken(dir, "ids:order");
        String every = IdmintServer.createToken(dir, "ids");
        try (IdmintServer server = IdmintServer.start(dir, "--auth", "token"); Proxy proxy = new Proxy(server.port())) {
            try (IdmintClient none = IdmintClient.builder().urls(proxy.url()).build()) {
                UnauthorizedException e = assertThrows(UnauthorizedException.class, () -> none.next("order"));
                assertEquals(401, e.status());
                assertEquals("unauthorized", e.code());
                assertEquals("order", e.tag());
                assertEquals(1, proxy.grants().size(), "a refusal costs one request");
            }
            try (IdmintClient c = IdmintClient.builder().urls(proxy.url()).token(orderOnly).build()) {
                int before = proxy.grants().size();
                ForbiddenException f = assertThrows(ForbiddenException.class, () -> c.next("other"));
                assertEquals(403, f.status());
                assertEquals("forbidden", f.code());
                assertTrue(f.getMessage().contains("ids:other"), "the message names the scope needed: " + f.getMessage());
                assertFalse(f.getMessage().contains(orderOnly), "the token is never in an exception");
                assertEquals(before + 1, proxy.grants().size(), "a refusal costs one request");

                // The token's own tag is served by the same client.
                assertEquals(1, c.next("order"));
            }
            try (IdmintClient c = IdmintClient.builder().urls(proxy.url()).token(every).build()) {
                int before;
                before = proxy.grants().size();
                UnknownTagException u = assertThrows(UnknownTagException.class, () -> c.next("nope"));
                assertEquals(404, u.status());
                assertEquals("unknown_tag", u.code());
                assertEquals(before + 1, proxy.grants().size());
                RefusedException again = assertThrows(UnknownTagException.class, () -> c.nextN("nope", 3));
                assertEquals("unknown_tag", again.code());
                assertEquals(before + 1, proxy.grants().size(), "an unknown tag is answered from memory");
                assertTrue(c.stats().tags().stream().noneMatch(t -> t.tag().equals("nope")), "a made-up tag leaves no buffer");

                before = proxy.grants().size();
                InvalidTagException i = assertThrows(InvalidTagException.class, () -> c.next("no spaces"));
                assertEquals("invalid_biz_tag", i.code());
                assertEquals(before, proxy.grants().size(), "an invalid tag is refused without a request");
                assertThrows(IllegalArgumentException.class, () -> c.nextN("order", 0));
            }
        }
    }

    @Test
    void closedClientRefusesCalls() throws Exception {
        IdmintServer.createTag(dir, "order", 100, 0);
        try (IdmintServer server = IdmintServer.start(dir)) {
            IdmintClient c = IdmintClient.builder().urls(server.url()).build();
            c.next("order");
            c.close();
            assertThrows(ClientClosedException.class, () -> c.next("order"));
            assertThrows(ClientClosedException.class, () -> c.next("fresh"));
        }
    }

    @Test
    void badSettingsRefusedAtBuild() {
        assertThrows(IllegalArgumentException.class, () -> IdmintClient.builder().build());
        assertThrows(IllegalArgumentException.class, () -> IdmintClient.builder().urls("ftp://x").build());
        assertThrows(IllegalArgumentException.class, () -> IdmintClient.builder().urls("http://127.0.0.1:1")
                .waitTimeout(java.time.Duration.ofSeconds(1)).attemptTimeout(java.time.Duration.ofSeconds(1)).build());
    }
}
