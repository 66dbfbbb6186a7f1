-- +goose Up

-- The SQLite twin of postgres/00001_init.sql: the same tables, columns and
-- checks. SQLite has no regular expressions, so two GLOBs check the tag
-- name (first character, then every character); STRICT makes the integer
-- columns refuse anything but integers; timestamps are ISO 8601 text in UTC,
-- which sorts as time does.
CREATE TABLE idmint_tags (
    biz_tag     TEXT    NOT NULL PRIMARY KEY
                CHECK (length(biz_tag) BETWEEN 1 AND 64
                       AND biz_tag GLOB '[A-Za-z0-9]*'
                       AND NOT biz_tag GLOB '*[^A-Za-z0-9_.:-]*'),
    max_id      INTEGER NOT NULL DEFAULT 0 CHECK (max_id >= 0),
    step        INTEGER NOT NULL DEFAULT 1000 CHECK (step BETWEEN 1 AND 100000000),
    max_step    INTEGER CHECK (max_step IS NULL OR (max_step >= step AND max_step <= 100000000)),
    description TEXT    NOT NULL DEFAULT '' CHECK (length(description) <= 1000),
    created_at  TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    updated_at  TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
) STRICT;

-- One row per granted segment. The primary key makes "one request, one
-- segment" a database fact, as in PostgreSQL. NOT NULL is spelled out:
-- SQLite lets a non-integer primary key be NULL otherwise.
CREATE TABLE idmint_segments (
    request_id TEXT    NOT NULL PRIMARY KEY CHECK (length(request_id) = 36),
    biz_tag    TEXT    NOT NULL REFERENCES idmint_tags (biz_tag) ON DELETE CASCADE,
    first_id   INTEGER NOT NULL,
    last_id    INTEGER NOT NULL,
    instance   TEXT    NOT NULL DEFAULT '',
    granted_at TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    CHECK (first_id >= 1 AND first_id <= last_id)
) STRICT;

CREATE INDEX idmint_segments_granted_at ON idmint_segments (granted_at);
CREATE INDEX idmint_segments_biz_tag ON idmint_segments (biz_tag, last_id);

-- +goose Down
DROP TABLE idmint_segments;
DROP TABLE idmint_tags;
