-- +goose Up

-- The SQLite twin of postgres/00010_regions.sql: the tables of a region's
-- share. The next owned ID is computed in Go (package region) inside the
-- allocation's write transaction, which holds the database's one write
-- lock: a split's fence, a claim and a grant never interleave.
CREATE TABLE idmint_region (
    id           INTEGER NOT NULL PRIMARY KEY CHECK (id = 1),
    name         TEXT    NOT NULL CHECK (length(name) BETWEEN 1 AND 32
                                         AND name GLOB '[a-z0-9]*'
                                         AND NOT name GLOB '*[^a-z0-9-]*'),
    worker_slot  INTEGER NOT NULL,
    worker_slots INTEGER NOT NULL,
    created_at   TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    CHECK (worker_slot >= 0 AND worker_slot < worker_slots AND worker_slots <= 1024)
) STRICT;

CREATE TABLE idmint_region_epochs (
    from_id      INTEGER NOT NULL PRIMARY KEY CHECK (from_id >= 1),
    to_id        INTEGER CHECK (to_id IS NULL OR to_id > from_id),
    block        INTEGER NOT NULL CHECK (block >= 1),
    regions      TEXT    NOT NULL,
    region_count INTEGER NOT NULL CHECK (region_count BETWEEN 1 AND 64),
    region_index INTEGER NOT NULL,
    CHECK (region_index >= 0 AND region_index < region_count)
) STRICT;

-- +goose Down
DROP TABLE idmint_region_epochs;
DROP TABLE idmint_region;
