-- +goose NO TRANSACTION
-- +goose Up

-- The last ID each log row still keeps (returned_from - 1 once its tail was
-- given back, else last_id), per tag: the guard of a give-back asks whether
-- any other request keeps an ID at or above the tail's first, under the
-- tag's row lock. On (biz_tag, last_id) that reads every row that ever
-- ended above it, given back or not, and a caller who grants and gives back
-- the same range over and over adds one such row each time; on this index
-- it reads only rows that keep something there. CONCURRENTLY: a long log is
-- indexed while grants go on (outside a transaction, hence NO TRANSACTION).
CREATE INDEX CONCURRENTLY idmint_segments_kept
    ON idmint_segments (biz_tag, (COALESCE(returned_from - 1, last_id)));

-- +goose Down
DROP INDEX CONCURRENTLY idmint_segments_kept;
