package io.github.idmint.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * The floor repairs a database that went back in time: the SQLite file is restored from a copy
 * taken before the client's grants, and the client's next range request, carrying the highest ID
 * it was granted, gets a range above it instead of IDs it already handed out.
 */
class FloorTest {
    @TempDir
    Path dir;

    @Test
    void rolledBackDatabaseGrantsAboveTheFloor() throws Exception {
        IdmintServer.createTag(dir, "order", 100, 100);
        Path backup = Files.createDirectory(dir.resolve("backup"));
        Files.copy(dir.resolve("idmint.db"), backup.resolve("idmint.db"));
        Set<Long> seen = new HashSet<>();
        IdmintServer first = IdmintServer.start(dir);
        try (Proxy proxy = new Proxy(first.port());
                IdmintClient c = IdmintClient.builder().urls(proxy.url()).build()) {
            for (int i = 0; i < 50; i++) {
                assertTrue(seen.add(c.next("order")));
            }
            first.close();
            // The database goes back to before any grant: max_id 0.
            for (String f : List.of("idmint.db-wal", "idmint.db-shm")) {
                Files.deleteIfExists(dir.resolve(f));
            }
            Files.copy(backup.resolve("idmint.db"), dir.resolve("idmint.db"), StandardCopyOption.REPLACE_EXISTING);
            int before = proxy.grants().size();
            try (IdmintServer restored = IdmintServer.start(dir)) {
                proxy.target(restored.port());
                for (int i = 0; i < 300; i++) {
                    long id = c.next("order");
                    assertTrue(seen.add(id), "id " + id + " handed out twice after the rollback");
                }
                Proxy.Exchange after = proxy.grants().get(before);
                long floor = Long.parseLong(Proxy.field(after.body(), "floor"));
                assertTrue(floor >= 100, "the request carries the highest id granted: " + after.body());
                assertEquals(200, after.status(), after.reply());
                assertEquals(floor + 1, Long.parseLong(after.replyField("first")), "the range starts above the floor");
            }
        }
    }
}
