-- Scheduled runs: job definitions agents make in embedded mode, and the
-- detail of each run record — who ran it, in which session, where its outcome
-- went and why a delivery failed.

ALTER TABLE cron_runs ADD COLUMN agent TEXT NOT NULL DEFAULT '';
ALTER TABLE cron_runs ADD COLUMN session_id TEXT NOT NULL DEFAULT '';
ALTER TABLE cron_runs ADD COLUMN channel TEXT NOT NULL DEFAULT '';
ALTER TABLE cron_runs ADD COLUMN chat_id TEXT NOT NULL DEFAULT '';
ALTER TABLE cron_runs ADD COLUMN delivery_error TEXT NOT NULL DEFAULT '';

-- A restarted scheduler looks for runs left unfinished or undelivered; they
-- are few among a long history, so a partial index finds them at once.
CREATE INDEX cron_runs_unfinished ON cron_runs (tenant, scheduled_time)
    WHERE state <> 'done' OR delivery = 'pending';

CREATE TABLE cron_jobs (
    tenant       TEXT    NOT NULL CHECK (tenant <> ''),
    name         TEXT    NOT NULL CHECK (name <> ''),
    display_name TEXT    NOT NULL DEFAULT '',
    agent        TEXT    NOT NULL DEFAULT '',
    spec         TEXT    NOT NULL CHECK (json_valid(spec) AND json_type(spec) = 'object'),
    version      INTEGER NOT NULL CHECK (version > 0),
    created_at   INTEGER NOT NULL,
    updated_at   INTEGER NOT NULL,
    PRIMARY KEY (tenant, name)
) STRICT;
