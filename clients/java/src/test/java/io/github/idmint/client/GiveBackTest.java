package io.github.idmint.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Path;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/** close gives back the unused tail of the newest range, only when nobody was granted anything after it. */
class GiveBackTest {
    @TempDir
    Path dir;

    @Test
    void closeGivesBackTheTail() throws Exception {
        IdmintServer.createTag(dir, "order", 1000, 0);
        try (IdmintServer server = IdmintServer.start(dir)) {
            long last;
            try (IdmintClient a = IdmintClient.builder().urls(server.url()).build()) {
                long[] ids = a.nextN("order", 10);
                last = ids[9];
            }
            try (IdmintClient b = IdmintClient.builder().urls(server.url()).build()) {
                assertEquals(last + 1, b.next("order"), "the next range starts at the tail given back");
            }
        }
    }

    @Test
    void tailNotGivenBackOnceTheTagMovedOn() throws Exception {
        IdmintServer.createTag(dir, "order", 1000, 0);
        try (IdmintServer server = IdmintServer.start(dir)) {
            IdmintClient a = IdmintClient.builder().urls(server.url()).build();
            long aLast = a.nextN("order", 5)[4];
            long bLast;
            try (IdmintClient b = IdmintClient.builder().urls(server.url()).build()) {
                long bFirst = b.next("order");
                assertTrue(bFirst > aLast + 995 - 1, "b's range is after a's: " + bFirst);
                a.close(); // a's tail is no longer the tag's newest: it stays a gap
                bLast = b.nextN("order", 3)[2];
            } // b's tail goes back
            try (IdmintClient c = IdmintClient.builder().urls(server.url()).build()) {
                assertEquals(bLast + 1, c.next("order"));
            }
        }
    }
}
