-- Scheduled runs: job definitions agents make in embedded mode (cluster mode
-- keeps them as CronJob resources, but both stores pass one conformance
-- suite), and the detail of each run record — who ran it, in which session,
-- where its outcome went and why a delivery failed.

ALTER TABLE cron_runs
    ADD COLUMN agent          text NOT NULL DEFAULT '',
    ADD COLUMN session_id     text NOT NULL DEFAULT '',
    ADD COLUMN channel        text NOT NULL DEFAULT '',
    ADD COLUMN chat_id        text NOT NULL DEFAULT '',
    ADD COLUMN delivery_error text NOT NULL DEFAULT '';

-- A restarted scheduler looks for runs left unfinished or undelivered; they
-- are few among a long history, so a partial index finds them at once.
CREATE INDEX cron_runs_unfinished ON cron_runs (tenant, scheduled_time)
    WHERE state <> 'done' OR delivery = 'pending';

CREATE TABLE cron_jobs (
    tenant       text        NOT NULL CHECK (tenant <> ''),
    name         text        NOT NULL CHECK (name <> ''),
    display_name text        NOT NULL DEFAULT '',
    agent        text        NOT NULL DEFAULT '',
    spec         jsonb       NOT NULL CHECK (jsonb_typeof(spec) = 'object'),
    version      bigint      NOT NULL CHECK (version > 0),
    created_at   timestamptz NOT NULL,
    updated_at   timestamptz NOT NULL,
    PRIMARY KEY (tenant, name)
);

ALTER TABLE cron_jobs ENABLE ROW LEVEL SECURITY;
ALTER TABLE cron_jobs FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON cron_jobs
    USING (tenant = current_setting('picobot.tenant', true))
    WITH CHECK (tenant = current_setting('picobot.tenant', true));
