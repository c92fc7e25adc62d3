-- The W3C traceparent of the turn that made an agent-made job, so each of
-- its fires' traces links back to that turn (docs/tracing.md). Empty for
-- jobs made with tracing off.
ALTER TABLE cron_jobs ADD COLUMN origin TEXT NOT NULL DEFAULT '';
