package io.github.idmint.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import org.junit.jupiter.api.Test;

/** The configuration of regions: what build refuses, and the one unnamed region of a list of URLs. */
class RegionsConfigTest {
    private static String refused(IdmintClient.Builder b) {
        return assertThrows(IllegalArgumentException.class, b::build).getMessage();
    }

    @Test
    void refusals() {
        assertTrue(refused(IdmintClient.builder().urls("http://x:1").region("a", "http://y:1")).contains("both URLs and regions"));
        assertTrue(refused(IdmintClient.builder().region("", "http://y:1")).contains("no name"));
        assertTrue(refused(IdmintClient.builder().region("a")).contains("no URLs"));
        assertTrue(refused(IdmintClient.builder().region("a", "http://y:1").region("a", "http://z:1")).contains("named twice"));
        assertTrue(refused(IdmintClient.builder().region("a", "ftp://y:1")).contains("want http(s)"));
        assertThrows(IllegalArgumentException.class, () -> IdmintClient.builder().probe(java.time.Duration.ofSeconds(2), java.time.Duration.ofSeconds(1)));
    }

    @Test
    void oneListOfUrlsIsOneUnnamedRegion() {
        try (IdmintClient c = IdmintClient.builder().urls("http://127.0.0.1:1").build()) {
            IdmintClient.Stats st = c.stats();
            assertEquals("", st.region());
            assertEquals(1, st.regions().size());
        }
        try (IdmintClient c = IdmintClient.builder().region("eu", "http://127.0.0.1:1").region("us", "http://127.0.0.1:2").build()) {
            assertEquals("eu", c.stats().region());
            assertEquals(2, c.stats().regions().size());
        }
    }
}
