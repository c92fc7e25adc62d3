-- The audit log of tool calls: who asked, which agent ran which tool in
-- which session, a SHA-256 digest of the arguments (never the arguments),
-- the outcome and the duration. Rows are only added, and deleted past the
-- tenant's retention; GET /api/v1/audit reads them newest first.

CREATE TABLE tool_audit (
    tenant      TEXT    NOT NULL CHECK (tenant <> ''),
    id          TEXT    NOT NULL CHECK (id <> ''),
    actor       TEXT    NOT NULL,
    agent       TEXT    NOT NULL CHECK (agent <> ''),
    session_id  TEXT    NOT NULL,
    tool        TEXT    NOT NULL CHECK (tool <> ''),
    args_digest TEXT    NOT NULL CHECK (args_digest LIKE 'sha256:%'),
    outcome     TEXT    NOT NULL CHECK (outcome IN ('ok', 'error')),
    duration_us INTEGER NOT NULL CHECK (duration_us >= 0),
    created_at  INTEGER NOT NULL,
    PRIMARY KEY (tenant, id)
) STRICT;

-- Pages newest first, and retention, walk this index.
CREATE INDEX tool_audit_by_time ON tool_audit (tenant, created_at DESC, id DESC);
