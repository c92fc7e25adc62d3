-- Notices a tenant was given once across all its runtimes (a soft limit
-- reached, a chat told that the model budget is spent): a claim is an
-- atomic insert-if-absent, renewed only once the last claim expired, so of
-- many runtimes noticing at once exactly one tells.

CREATE TABLE quota_notices (
    tenant     TEXT    NOT NULL CHECK (tenant <> ''),
    key        TEXT    NOT NULL CHECK (key <> ''),
    expires_at INTEGER NOT NULL,
    PRIMARY KEY (tenant, key)
) STRICT;
