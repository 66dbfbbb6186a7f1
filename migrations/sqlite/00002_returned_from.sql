-- +goose Up

-- The SQLite twin of postgres/00002_returned_from.sql: the log row of a
-- segment given back records where its returned part starts.
ALTER TABLE idmint_segments ADD COLUMN returned_from INTEGER
    CHECK (returned_from IS NULL OR (returned_from >= first_id AND returned_from <= last_id));

-- +goose Down
ALTER TABLE idmint_segments DROP COLUMN returned_from;
