-- Paired devices (`picobot node`): a node says hello with its own id and
-- waits as pending until the tenant's user approves or rejects it; an
-- approved node can be revoked. Capabilities are a JSON array of strings.

CREATE TABLE nodes (
    tenant       TEXT    NOT NULL CHECK (tenant <> ''),
    id           TEXT    NOT NULL CHECK (id <> ''),
    name         TEXT    NOT NULL,
    platform     TEXT    NOT NULL,
    version      TEXT    NOT NULL,
    capabilities TEXT    NOT NULL CHECK (json_valid(capabilities)),
    state        TEXT    NOT NULL CHECK (state IN ('pending', 'approved', 'rejected', 'revoked')),
    created_at   INTEGER NOT NULL,
    updated_at   INTEGER NOT NULL,
    last_seen_at INTEGER NOT NULL,
    PRIMARY KEY (tenant, id)
) STRICT;
