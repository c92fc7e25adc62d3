-- The todo tool's plan of each session, so a plan survives a restart (and,
-- in cluster mode, the session moving to another pod).

CREATE TABLE session_plans (
    tenant     TEXT    NOT NULL CHECK (tenant <> ''),
    session_id TEXT    NOT NULL CHECK (session_id <> ''),
    plan       TEXT    NOT NULL,
    updated_at INTEGER NOT NULL,
    PRIMARY KEY (tenant, session_id)
) STRICT;
