-- +goose Up

-- The SQLite twin of postgres/00006_segment_holder.sql: a caller's range
-- records its principal and the SHA-256 of its holder key; an instance's
-- own segments have neither. (SQLite cannot add a table constraint to an
-- existing table: the "both or neither" rule is the stores'.)
ALTER TABLE idmint_segments ADD COLUMN principal TEXT
    CHECK (length(principal) BETWEEN 1 AND 200);
ALTER TABLE idmint_segments ADD COLUMN holder_hash BLOB
    CHECK (length(holder_hash) = 32);

-- +goose Down
ALTER TABLE idmint_segments DROP COLUMN holder_hash;
ALTER TABLE idmint_segments DROP COLUMN principal;
