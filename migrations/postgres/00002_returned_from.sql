-- +goose Up

-- A give-back (an instance returning the unused tail of its newest segment
-- at shutdown) lowers max_id, and the next segment re-grants those IDs. The
-- log row of the segment given back records where its returned part starts,
-- in the same statement as the give-back, so that the log alone explains
-- every ID: the row kept [first_id, returned_from - 1] (nothing when
-- returned_from = first_id) and the rest went to a later segment.
ALTER TABLE idmint_segments ADD COLUMN returned_from bigint
    CONSTRAINT idmint_segments_returned_from
    CHECK (returned_from IS NULL OR (returned_from >= first_id AND returned_from <= last_id));

-- +goose Down
ALTER TABLE idmint_segments DROP COLUMN returned_from;
