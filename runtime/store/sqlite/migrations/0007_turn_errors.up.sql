-- Why a turn failed, as its client was told, so the error shows again after
-- a reload. Kept beside the messages: the model's history never sees it.

CREATE TABLE turn_errors (
    tenant     TEXT    NOT NULL CHECK (tenant <> ''),
    session_id TEXT    NOT NULL CHECK (session_id <> ''),
    message_id TEXT    NOT NULL CHECK (message_id <> ''),
    code       TEXT    NOT NULL CHECK (code <> ''),
    message    TEXT    NOT NULL,
    created_at INTEGER NOT NULL,
    PRIMARY KEY (tenant, session_id, message_id)
) STRICT;
