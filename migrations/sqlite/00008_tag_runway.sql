-- +goose Up

-- The SQLite twin of postgres/00008_tag_runway.sql: a tag's runway in
-- milliseconds, 0 for the instance's --runway, at most a day.
ALTER TABLE idmint_tags ADD COLUMN runway_ms INTEGER NOT NULL DEFAULT 0
    CHECK (runway_ms BETWEEN 0 AND 86400000);

-- +goose Down
ALTER TABLE idmint_tags DROP COLUMN runway_ms;
