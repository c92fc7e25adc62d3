package postgres

// The store's SQL, kept apart from the Go that runs it. Every statement
// names the tenant explicitly ($1) so it uses the (tenant, ...) indexes; the
// row-level security policies check the same tenant independently, so a
// statement that got it wrong would still see nothing of another tenant.

const (
	sqlLockMigrations        = `SELECT pg_advisory_lock($1)`
	sqlUnlockMigrations      = `SELECT pg_advisory_unlock($1)`
	sqlCreateMigrationsTable = `CREATE TABLE IF NOT EXISTS schema_migrations (
	version    integer     PRIMARY KEY,
	name       text        NOT NULL,
	applied_at timestamptz NOT NULL DEFAULT now()
)`
	sqlAppliedMigrations = `SELECT version FROM schema_migrations ORDER BY version`
	sqlRecordMigration   = `INSERT INTO schema_migrations (version, name) VALUES ($1, $2)`
	sqlCurrentSchema     = `SELECT current_schema()`

	// sqlRoleBypassesRLS is true for roles that row-level security does not
	// hold: the store refuses to run as one.
	sqlRoleBypassesRLS = `SELECT rolsuper OR rolbypassrls FROM pg_roles WHERE rolname = current_user`

	// sqlSetTenant scopes the rest of the transaction (is_local = true) to a
	// tenant; the setting vanishes at commit, so a pooled connection never
	// carries it into someone else's transaction.
	sqlSetTenant = `SELECT set_config('picobot.tenant', $1, true)`
)

const sessionColumns = `tenant, id, channel, chat_id, dialog_id, agent, title, title_is_default,
	created_at, updated_at, last_message_at, archived_at, deleted_at, last_compressed_at`

const (
	sqlCreateSession = `INSERT INTO sessions (tenant, id, channel, chat_id, dialog_id, agent, title, title_is_default,
	created_at, updated_at, last_message_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, COALESCE($9, now()), COALESCE($9, now()), COALESCE($9, now()))
RETURNING ` + sessionColumns

	sqlGetSession = `SELECT ` + sessionColumns + ` FROM sessions WHERE tenant = $1 AND id = $2`

	sqlListSessions = `SELECT ` + sessionColumns + ` FROM sessions
WHERE tenant = $1
	AND ($2 = '' OR channel = $2)
	AND ($3 = '' OR chat_id = $3)
	AND ($4::boolean OR archived_at IS NULL)
	AND ($5::boolean OR deleted_at IS NULL)
	AND ($7 = '' OR agent = $7)
ORDER BY last_message_at DESC, id DESC
LIMIT $6`

	// sqlUpdateSession leaves a field alone when its parameter is NULL.
	// Archiving or deleting again keeps the first time.
	sqlUpdateSession = `UPDATE sessions SET
	title = COALESCE($3, title),
	title_is_default = COALESCE($4, title_is_default),
	archived_at = CASE WHEN $5::boolean IS NULL THEN archived_at
		WHEN $5::boolean THEN COALESCE(archived_at, now()) ELSE NULL END,
	deleted_at = CASE WHEN $6::boolean IS NULL THEN deleted_at
		WHEN $6::boolean THEN COALESCE(deleted_at, now()) ELSE NULL END,
	last_compressed_at = COALESCE($7, last_compressed_at),
	updated_at = now()
WHERE tenant = $1 AND id = $2
RETURNING ` + sessionColumns

	sqlSetCurrentDialog = `INSERT INTO current_dialogs (tenant, channel, chat_id, dialog_id, updated_at)
VALUES ($1, $2, $3, $4, now())
ON CONFLICT (tenant, channel, chat_id) DO UPDATE SET dialog_id = EXCLUDED.dialog_id, updated_at = EXCLUDED.updated_at`

	// The current dialog counts only while its session exists and is not
	// deleted (the chat's sessions are found through sessions_by_chat).
	sqlCurrentDialog = `SELECT c.dialog_id FROM current_dialogs c
	JOIN sessions s ON s.tenant = c.tenant AND s.channel = c.channel AND s.chat_id = c.chat_id AND s.dialog_id = c.dialog_id
	WHERE c.tenant = $1 AND c.channel = $2 AND c.chat_id = $3 AND s.deleted_at IS NULL`
)

const messageColumns = `tenant, session_id, seq, id, role, content, tool_calls, tool_call_id, name, is_error,
	images, meta, created_at`

const (
	// sqlLockSessionForAppend takes the session row's lock: appenders to one
	// session queue here, so each sees the previous one's last_seq and IDs.
	sqlLockSessionForAppend = `SELECT last_seq, now() FROM sessions WHERE tenant = $1 AND id = $2 FOR UPDATE`

	// sqlMessageByID is one probe of the (tenant, session_id, id) unique
	// index. Appends queue one per message rather than "id = ANY($3)", which
	// the planner may turn into a filter over the whole session when the
	// table's statistics are stale (seen: 1.7 ms at 10,000 messages).
	sqlMessageByID = `SELECT ` + messageColumns + ` FROM messages WHERE tenant = $1 AND session_id = $2 AND id = $3`

	sqlInsertMessage = `INSERT INTO messages (tenant, session_id, seq, id, role, content, tool_calls, tool_call_id, name,
	is_error, images, meta, created_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)`

	sqlAdvanceSession = `UPDATE sessions SET last_seq = $3, last_message_at = GREATEST(last_message_at, $4), updated_at = now()
WHERE tenant = $1 AND id = $2`

	// sqlLoadMessages selects newest first so LIMIT keeps the last ones; the
	// caller reverses. A NULL limit means all.
	sqlLoadMessages = `SELECT ` + messageColumns + ` FROM messages
WHERE tenant = $1 AND session_id = $2 AND seq > $3 AND ($4::timestamptz IS NULL OR created_at >= $4)
ORDER BY seq DESC
LIMIT $5`

	sqlSessionExists = `SELECT EXISTS (SELECT 1 FROM sessions WHERE tenant = $1 AND id = $2)`

	// sqlSearchMessages finds a chat's messages by the tsquery $2, newest
	// first; deleted dialogs are left out. Each dialog is searched on its
	// own (LATERAL): the planner walks a dialog's newest messages by the
	// primary key for a common word, and the GIN index for a rare one,
	// instead of every match of the whole table.
	sqlSearchMessages = `SELECT m.tenant, m.session_id, m.seq, m.id, m.role, m.content, m.tool_calls, m.tool_call_id, m.name,
	m.is_error, m.images, m.meta, m.created_at, s.title
FROM sessions s
CROSS JOIN LATERAL (
	SELECT * FROM messages m
	WHERE m.tenant = s.tenant AND m.session_id = s.id AND m.search @@ to_tsquery('simple', $2)
	ORDER BY m.seq DESC
	LIMIT $5
) m
WHERE s.tenant = $1 AND s.channel = $3 AND s.chat_id = $4 AND s.deleted_at IS NULL
ORDER BY m.created_at DESC, m.seq DESC
LIMIT $5`

	sqlCountMessages = `SELECT (SELECT count(*) FROM messages WHERE tenant = $1 AND session_id = $2)
FROM sessions WHERE tenant = $1 AND id = $2`
)

const (
	// sqlAcquireLease takes a free lease, steals an expired one, or renews
	// the caller's own; otherwise it returns no row. now() is the database
	// clock, the one every replica agrees on.
	sqlAcquireLease = `INSERT INTO session_leases (tenant, session_id, holder, acquired_at, expires_at)
VALUES ($1, $2, $3, now(), now() + $4 * interval '1 microsecond')
ON CONFLICT (tenant, session_id) DO UPDATE SET
	holder = EXCLUDED.holder,
	acquired_at = CASE WHEN session_leases.holder = EXCLUDED.holder THEN session_leases.acquired_at ELSE EXCLUDED.acquired_at END,
	expires_at = EXCLUDED.expires_at
WHERE session_leases.holder = EXCLUDED.holder OR session_leases.expires_at <= now()
RETURNING holder`

	// sqlRenewLease renews only the caller's lease. An expired lease nobody
	// took is still the caller's: renewing it is safe.
	sqlRenewLease = `UPDATE session_leases SET expires_at = now() + $4 * interval '1 microsecond'
WHERE tenant = $1 AND session_id = $2 AND holder = $3`

	sqlReleaseLease = `DELETE FROM session_leases WHERE tenant = $1 AND session_id = $2 AND holder = $3`
)

const memoryColumns = `tenant, agent, id, key, content, category, kind, source, session_id, importance, created_at, updated_at`

// memoryColumnsM is memoryColumns of the table aliased m.
const memoryColumnsM = `m.tenant, m.agent, m.id, m.key, m.content, m.category, m.kind, m.source, m.session_id,
	m.importance, m.created_at, m.updated_at`

const (
	// sqlPutMemory replaces the memory of the same (agent, key), keeping its
	// id and created_at.
	// $11 is the search terms as a tsvector literal (memsearch.go).
	sqlPutMemory = `INSERT INTO memories (tenant, agent, id, key, content, category, kind, source, session_id, importance,
	created_at, updated_at, terms)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, now(), now(), $11::tsvector)
` + memoryUpsert + `
RETURNING ` + memoryColumns

	sqlGetMemory    = `SELECT ` + memoryColumns + ` FROM memories WHERE tenant = $1 AND agent = $2 AND key = $3`
	sqlDeleteMemory = `DELETE FROM memories WHERE tenant = $1 AND agent = $2 AND key = $3`
	sqlListMemories = `SELECT ` + memoryColumns + ` FROM memories WHERE tenant = $1 AND agent = $2
  AND ($3 = '' OR category = $3) AND ($4 = '' OR session_id = $4)
  AND ($6 = '' OR starts_with(key, $6))
ORDER BY created_at DESC, id DESC LIMIT $5`
)

const cronRunColumns = `tenant, job, run_id, scheduled_time, state, outcome, message, started_at, finished_at, delivery`

const (
	// sqlClaimCronRun inserts the run unless its tick is taken; the UNIQUE
	// (tenant, job, scheduled_time) constraint makes concurrent claimers wait
	// for the first and then insert nothing.
	sqlClaimCronRun = `INSERT INTO cron_runs (tenant, job, run_id, scheduled_time, state, outcome, message, started_at,
	finished_at, delivery)
VALUES ($1, $2, $3, $4, 'claimed', $5, $6, $7, $8, $9)
ON CONFLICT (tenant, job, scheduled_time) DO NOTHING`

	sqlGetCronRun = `SELECT ` + cronRunColumns + ` FROM cron_runs WHERE tenant = $1 AND run_id = $2`

	sqlUpdateCronRun = `UPDATE cron_runs SET
	state = COALESCE($3, state),
	outcome = COALESCE($4, outcome),
	message = COALESCE($5, message),
	started_at = COALESCE($6, started_at),
	finished_at = COALESCE($7, finished_at),
	delivery = COALESCE($8, delivery)
WHERE tenant = $1 AND run_id = $2
RETURNING ` + cronRunColumns

	sqlListCronRuns = `SELECT ` + cronRunColumns + ` FROM cron_runs WHERE tenant = $1 AND job = $2
ORDER BY scheduled_time DESC LIMIT $3`
)

const agentRunColumns = `tenant, id, agent, session_id, parent_run_id, status, input, result, created_at, updated_at,
	mode, parent_agent, completion`

const (
	sqlCreateAgentRun = `INSERT INTO agent_runs (tenant, id, agent, session_id, parent_run_id, status, input, result,
	created_at, updated_at, mode, parent_agent, completion)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, now(), now(), $9, $10, $11)
RETURNING ` + agentRunColumns

	sqlGetAgentRun = `SELECT ` + agentRunColumns + ` FROM agent_runs WHERE tenant = $1 AND id = $2`

	// $6 IfActive, $7 IfCompletion.
	sqlUpdateAgentRun = `UPDATE agent_runs SET
	status = COALESCE($3, status),
	result = COALESCE($4, result),
	completion = COALESCE($5, completion),
	updated_at = now()
WHERE tenant = $1 AND id = $2
	AND (NOT $6 OR status IN ('queued', 'running'))
	AND ($7 = '' OR completion = $7)
RETURNING ` + agentRunColumns

	// $9 and $10 are the cursor (created_at, id); $9 NULL for none.
	sqlListAgentRuns = `SELECT ` + agentRunColumns + ` FROM agent_runs
WHERE tenant = $1
	AND ($2 = '' OR agent = $2)
	AND ($3 = '' OR session_id = $3)
	AND ($4 = '' OR parent_run_id = $4)
	AND ($5 = '' OR status = $5)
	AND ($7 = '' OR mode = $7)
	AND ($8 = '' OR completion = $8)
	AND (NOT $11 OR status IN ('queued', 'running'))
	AND ($9::timestamptz IS NULL OR (created_at, id) < ($9, $10))
ORDER BY created_at DESC, id DESC
LIMIT $6`

	sqlDeleteAgentRuns = `DELETE FROM agent_runs
WHERE tenant = $1 AND updated_at < $2 AND status IN ('succeeded', 'failed', 'cancelled')
	AND completion IN ('', 'delivered', 'closed')`

	sqlDeleteAgentSignals = `DELETE FROM agent_signals s
WHERE s.tenant = $1 AND (s.created_at < $2 OR NOT EXISTS (SELECT 1 FROM agent_runs r WHERE r.tenant = $1 AND r.id = s.run_id))`
)

const agentSignalColumns = `tenant, id, run_id, session_id, delivery, kind, body, state, created_at, updated_at`

const (
	sqlCreateAgentSignal = `INSERT INTO agent_signals (tenant, id, run_id, session_id, delivery, kind, body, state,
	created_at, updated_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, now(), now())
RETURNING ` + agentSignalColumns

	sqlListAgentSignals = `SELECT ` + agentSignalColumns + ` FROM agent_signals
WHERE tenant = $1
	AND ($2 = '' OR session_id = $2)
	AND ($3 = '' OR run_id = $3)
	AND ($4 = '' OR delivery = $4)
	AND ($5 = '' OR state = $5)
ORDER BY created_at, id
LIMIT $6`

	// $2 is the ids (NULL for any), $3 a run id ('' for any).
	sqlMarkAgentSignals = `UPDATE agent_signals SET state = $4, updated_at = now()
WHERE tenant = $1 AND state = 'pending'
	AND ($2::text[] IS NULL OR id = ANY($2))
	AND ($3 = '' OR run_id = $3)`
)

const deliveryColumns = `tenant, id, channel, chat_id, session_id, status, attempts, last_error, created_at, delivered_at`

const (
	sqlCreateDelivery = `INSERT INTO deliveries (tenant, id, channel, chat_id, session_id, status, attempts, last_error,
	created_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, now())
RETURNING ` + deliveryColumns

	sqlGetDelivery = `SELECT ` + deliveryColumns + ` FROM deliveries WHERE tenant = $1 AND id = $2`

	// sqlUpdateDelivery counts attempts in the database so concurrent
	// dispatchers add up; the first move to delivered stamps delivered_at.
	sqlUpdateDelivery = `UPDATE deliveries SET
	status = COALESCE($3, status),
	last_error = COALESCE($4, last_error),
	attempts = attempts + CASE WHEN $5::boolean THEN 1 ELSE 0 END,
	delivered_at = CASE WHEN $3 = 'delivered' THEN COALESCE(delivered_at, now()) ELSE delivered_at END
WHERE tenant = $1 AND id = $2
RETURNING ` + deliveryColumns

	sqlListDeliveries = `SELECT ` + deliveryColumns + ` FROM deliveries
WHERE tenant = $1
	AND ($2 = '' OR status = $2)
	AND ($3 = '' OR session_id = $3)
ORDER BY created_at, id
LIMIT $4`
)

const artifactColumns = `tenant, id, session_id, name, media_type, blob_key, size, created_at`

const (
	sqlCreateArtifact = `INSERT INTO artifacts (tenant, id, session_id, name, media_type, blob_key, size, created_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, now())
RETURNING ` + artifactColumns

	sqlGetArtifact    = `SELECT ` + artifactColumns + ` FROM artifacts WHERE tenant = $1 AND id = $2`
	sqlListArtifacts  = `SELECT ` + artifactColumns + ` FROM artifacts WHERE tenant = $1 AND session_id = $2 ORDER BY created_at, id`
	sqlDeleteArtifact = `DELETE FROM artifacts WHERE tenant = $1 AND id = $2`
)

const (
	sqlGetSessionPlan = `SELECT plan FROM session_plans WHERE tenant = $1 AND session_id = $2`
	sqlPutSessionPlan = `INSERT INTO session_plans (tenant, session_id, plan, updated_at) VALUES ($1, $2, $3, now())
ON CONFLICT (tenant, session_id) DO UPDATE SET plan = excluded.plan, updated_at = excluded.updated_at`
)

const (
	sqlPutTurnError = `INSERT INTO turn_errors (tenant, session_id, message_id, code, message, created_at) VALUES ($1, $2, $3, $4, $5, COALESCE($6::timestamptz, now()))
ON CONFLICT (tenant, session_id, message_id) DO UPDATE SET code = excluded.code, message = excluded.message, created_at = excluded.created_at`
	sqlTurnErrors = `SELECT session_id, message_id, code, message, created_at FROM turn_errors
WHERE tenant = $1 AND session_id = $2 AND message_id = ANY($3::text[]) ORDER BY created_at, message_id`
)

const (
	sqlAddUsage = `INSERT INTO usage_daily (tenant, agent, day, input_tokens, output_tokens, cost_micros, model_calls, turns, tool_calls, sessions) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
ON CONFLICT (tenant, agent, day) DO UPDATE SET input_tokens = usage_daily.input_tokens + excluded.input_tokens, output_tokens = usage_daily.output_tokens + excluded.output_tokens, cost_micros = usage_daily.cost_micros + excluded.cost_micros, model_calls = usage_daily.model_calls + excluded.model_calls, turns = usage_daily.turns + excluded.turns, tool_calls = usage_daily.tool_calls + excluded.tool_calls, sessions = usage_daily.sessions + excluded.sessions`
	sqlListUsage = `SELECT agent, day, input_tokens, output_tokens, cost_micros, model_calls, turns, tool_calls, sessions FROM usage_daily
WHERE tenant = $1 AND ($2 = '' OR agent = $2) AND day >= $3::date AND day <= $4::date ORDER BY day, agent`
	sqlUsageTotals = `SELECT COALESCE(SUM(input_tokens) FILTER (WHERE day = $2::date), 0), COALESCE(SUM(output_tokens) FILTER (WHERE day = $2::date), 0), COALESCE(SUM(cost_micros) FILTER (WHERE day = $2::date), 0), COALESCE(SUM(model_calls) FILTER (WHERE day = $2::date), 0), COALESCE(SUM(turns) FILTER (WHERE day = $2::date), 0), COALESCE(SUM(tool_calls) FILTER (WHERE day = $2::date), 0), COALESCE(SUM(sessions) FILTER (WHERE day = $2::date), 0), COALESCE(SUM(input_tokens), 0), COALESCE(SUM(output_tokens), 0), COALESCE(SUM(cost_micros), 0), COALESCE(SUM(model_calls), 0), COALESCE(SUM(turns), 0), COALESCE(SUM(tool_calls), 0), COALESCE(SUM(sessions), 0)
FROM usage_daily WHERE tenant = $1 AND day >= $3::date AND day <= $2::date`

	// sqlClaimNotice inserts a notice or renews one that expired by now
	// ($3); a notice still in force is left alone, so no row changes.
	sqlClaimNotice = `INSERT INTO quota_notices (tenant, key, expires_at) VALUES ($1, $2, $4)
ON CONFLICT (tenant, key) DO UPDATE SET expires_at = excluded.expires_at WHERE quota_notices.expires_at <= $3`
)

const (
	sqlAppendAudit = `INSERT INTO tool_audit (tenant, id, actor, agent, session_id, tool, args_digest, outcome, duration_us, created_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, COALESCE($10::timestamptz, now()))`
	sqlListAudit = `SELECT id, actor, agent, session_id, tool, args_digest, outcome, duration_us, created_at FROM tool_audit
WHERE tenant = $1 AND ($2 = '' OR agent = $2) AND ($3 = '' OR session_id = $3) AND ($4 = '' OR tool = $4)
	AND ($5::timestamptz IS NULL OR created_at >= $5) AND ($6::timestamptz IS NULL OR (created_at, id) < ($6, $7))
ORDER BY created_at DESC, id DESC LIMIT $8`
	sqlDeleteAudit = `DELETE FROM tool_audit WHERE tenant = $1 AND created_at < $2`
)
