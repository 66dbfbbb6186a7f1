-- +goose Up

-- One row per business tag. max_id is the high-water mark: every ID above
-- it has never been handed out by anyone. It only moves up, through the one
-- allocation statement (or an operator's explicit bump).
CREATE TABLE idmint_tags (
    biz_tag     text        PRIMARY KEY
                CHECK (biz_tag ~ '^[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}$'),
    max_id      bigint      NOT NULL DEFAULT 0 CHECK (max_id >= 0),
    step        integer     NOT NULL DEFAULT 1000 CHECK (step BETWEEN 1 AND 100000000),
    max_step    integer     CHECK (max_step IS NULL OR (max_step >= step AND max_step <= 100000000)),
    description text        NOT NULL DEFAULT '' CHECK (length(description) <= 1000),
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now()
);

-- One row per granted segment. The primary key makes "one request, one
-- segment" a database fact: a retry with the same request_id fails with a
-- unique violation and the instance looks the request up instead.
CREATE TABLE idmint_segments (
    request_id uuid        PRIMARY KEY,
    biz_tag    text        NOT NULL REFERENCES idmint_tags (biz_tag) ON DELETE CASCADE,
    first_id   bigint      NOT NULL,
    last_id    bigint      NOT NULL,
    instance   text        NOT NULL DEFAULT '',
    granted_at timestamptz NOT NULL DEFAULT now(),
    CHECK (first_id >= 1 AND first_id <= last_id)
);

CREATE INDEX idmint_segments_granted_at ON idmint_segments (granted_at);
CREATE INDEX idmint_segments_biz_tag ON idmint_segments (biz_tag, last_id);

-- +goose Down
DROP TABLE idmint_segments;
DROP TABLE idmint_tags;
