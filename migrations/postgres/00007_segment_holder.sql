-- +goose Up

-- A caller's range (POST /v1/segments) belongs to whoever asked for it: the
-- principal (a bearer token's ID, or "anonymous" in the open mode) and the
-- SHA-256 of a secret holder key the caller chose with its request ID. A
-- retried grant and a give-back must present both; the request ID alone,
-- which is logged and sent in headers, proves nothing. The key itself is
-- never stored. An instance's own segments have neither: no caller can
-- retry or give them back.
ALTER TABLE idmint_segments ADD COLUMN principal text
    CONSTRAINT idmint_segments_principal CHECK (length(principal) BETWEEN 1 AND 200);
ALTER TABLE idmint_segments ADD COLUMN holder_hash bytea
    CONSTRAINT idmint_segments_holder_hash CHECK (octet_length(holder_hash) = 32);
ALTER TABLE idmint_segments ADD CONSTRAINT idmint_segments_holder
    CHECK ((principal IS NULL) = (holder_hash IS NULL));

-- +goose Down
ALTER TABLE idmint_segments DROP CONSTRAINT idmint_segments_holder;
ALTER TABLE idmint_segments DROP COLUMN holder_hash;
ALTER TABLE idmint_segments DROP COLUMN principal;
