-- +goose Up

-- The SQLite twin of postgres/00004_tokens.sql. The id is checked by length
-- and by GLOB for the base32 alphabet.
CREATE TABLE idmint_tokens (
    id          TEXT NOT NULL PRIMARY KEY
                CHECK (length(id) = 16 AND NOT id GLOB '*[^a-z2-7]*'),
    name        TEXT NOT NULL CHECK (length(name) BETWEEN 1 AND 100),
    secret_hash BLOB NOT NULL CHECK (length(secret_hash) = 32),
    scopes      TEXT NOT NULL CHECK (length(scopes) BETWEEN 1 AND 4000),
    created_at  TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    revoked_at  TEXT
) STRICT;

-- +goose Down
DROP TABLE idmint_tokens;
