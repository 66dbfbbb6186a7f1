-- +goose Up

-- The SQLite twin of postgres/00003_snowflake_workers.sql: the same tables,
-- columns and checks; released is 0 or 1.
CREATE TABLE idmint_snowflake_layout (
    id            INTEGER NOT NULL PRIMARY KEY CHECK (id = 1),
    epoch_ms      INTEGER NOT NULL CHECK (epoch_ms >= 0),
    time_bits     INTEGER NOT NULL CHECK (time_bits BETWEEN 35 AND 55),
    worker_bits   INTEGER NOT NULL CHECK (worker_bits BETWEEN 1 AND 16),
    sequence_bits INTEGER NOT NULL CHECK (sequence_bits BETWEEN 1 AND 22),
    created_at    TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    CHECK (time_bits + worker_bits + sequence_bits = 63),
    UNIQUE (id, worker_bits)
) STRICT;

CREATE TABLE idmint_snowflake_workers (
    worker_id        INTEGER NOT NULL PRIMARY KEY,
    layout_id        INTEGER NOT NULL DEFAULT 1,
    worker_bits      INTEGER NOT NULL,
    holder           TEXT    NOT NULL DEFAULT '' CHECK (length(holder) <= 200),
    epoch            INTEGER NOT NULL DEFAULT 0 CHECK (epoch >= 0),
    released         INTEGER NOT NULL DEFAULT 1 CHECK (released IN (0, 1)),
    lease_expires_ms INTEGER NOT NULL DEFAULT 0 CHECK (lease_expires_ms >= 0),
    time_floor_ms    INTEGER NOT NULL DEFAULT 0 CHECK (time_floor_ms >= 0),
    updated_at       TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    CHECK (worker_id >= 0 AND worker_id < (1 << worker_bits)),
    FOREIGN KEY (layout_id, worker_bits) REFERENCES idmint_snowflake_layout (id, worker_bits)
) STRICT;

-- +goose Down
DROP TABLE idmint_snowflake_workers;
DROP TABLE idmint_snowflake_layout;
