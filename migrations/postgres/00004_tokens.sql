-- +goose Up

-- Bearer tokens for the HTTP API. The secret is never stored: only its
-- SHA-256, compared in constant time. id is the public part of the token
-- (idm_<id>_<secret>), so a request finds its row without a scan. A token is
-- never deleted, only revoked, so that its id is never reused.
CREATE TABLE idmint_tokens (
    id          text        PRIMARY KEY CHECK (id ~ '^[a-z2-7]{16}$'),
    name        text        NOT NULL CHECK (length(name) BETWEEN 1 AND 100),
    secret_hash bytea       NOT NULL CHECK (length(secret_hash) = 32),
    scopes      text        NOT NULL CHECK (length(scopes) BETWEEN 1 AND 4000),
    created_at  timestamptz NOT NULL DEFAULT now(),
    revoked_at  timestamptz
);

-- +goose Down
DROP TABLE idmint_tokens;
