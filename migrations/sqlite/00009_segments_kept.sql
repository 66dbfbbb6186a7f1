-- +goose Up

-- The SQLite twin of postgres/00009_segments_kept.sql: the last ID each log
-- row still keeps, per tag, so that a give-back's guard reads only the rows
-- that keep an ID at or above the tail, not every row that ever ended there.
CREATE INDEX idmint_segments_kept ON idmint_segments (biz_tag, COALESCE(returned_from - 1, last_id));

-- +goose Down
DROP INDEX idmint_segments_kept;
