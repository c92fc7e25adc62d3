package sqlite

// The store's SQL, kept apart from the Go that runs it. SQLite has no
// row-level security, so every statement filters on tenant (?1) — the rule
// that keeps tenants apart here; the conformance suite's isolation tests check
// it method by method. Times are microseconds since the epoch, from the
// store's clock (?N named "now" below).

const (
	sqlCreateMigrationsTable = `CREATE TABLE IF NOT EXISTS schema_migrations (
	version    INTEGER PRIMARY KEY,
	name       TEXT    NOT NULL,
	applied_at INTEGER NOT NULL
) STRICT`
	sqlMigrationApplied = `SELECT EXISTS (SELECT 1 FROM schema_migrations WHERE version = ?1)`
	sqlRecordMigration  = `INSERT INTO schema_migrations (version, name, applied_at) VALUES (?1, ?2, ?3)`
)

const sessionColumns = `tenant, id, channel, chat_id, dialog_id, agent, title, title_is_default,
	created_at, updated_at, last_message_at, archived_at, deleted_at, last_compressed_at`

const (
	// ?9 is the creation time (the caller's or now).
	sqlCreateSession = `INSERT INTO sessions (tenant, id, channel, chat_id, dialog_id, agent, title, title_is_default,
	created_at, updated_at, last_message_at)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?9, ?9)
RETURNING ` + sessionColumns

	sqlGetSession = `SELECT ` + sessionColumns + ` FROM sessions WHERE tenant = ?1 AND id = ?2`

	sqlListSessions = `SELECT ` + sessionColumns + ` FROM sessions
WHERE tenant = ?1
	AND (?2 = '' OR channel = ?2)
	AND (?3 = '' OR chat_id = ?3)
	AND (?4 OR archived_at IS NULL)
	AND (?5 OR deleted_at IS NULL)
	AND (?7 = '' OR agent = ?7)
ORDER BY last_message_at DESC, id DESC
LIMIT ?6`

	// sqlUpdateSession leaves a field alone when its parameter is NULL;
	// archiving or deleting again keeps the first time. ?8 is now.
	sqlUpdateSession = `UPDATE sessions SET
	title = COALESCE(?3, title),
	title_is_default = COALESCE(?4, title_is_default),
	archived_at = CASE WHEN ?5 IS NULL THEN archived_at WHEN ?5 THEN COALESCE(archived_at, ?8) ELSE NULL END,
	deleted_at = CASE WHEN ?6 IS NULL THEN deleted_at WHEN ?6 THEN COALESCE(deleted_at, ?8) ELSE NULL END,
	last_compressed_at = COALESCE(?7, last_compressed_at),
	updated_at = ?8
WHERE tenant = ?1 AND id = ?2
RETURNING ` + sessionColumns

	sqlSetCurrentDialog = `INSERT INTO current_dialogs (tenant, channel, chat_id, dialog_id, updated_at)
VALUES (?1, ?2, ?3, ?4, ?5)
ON CONFLICT (tenant, channel, chat_id) DO UPDATE SET dialog_id = excluded.dialog_id, updated_at = excluded.updated_at`

	// The current dialog counts only while its session exists and is not
	// deleted (the chat's sessions are found through sessions_by_chat).
	sqlCurrentDialog = `SELECT c.dialog_id FROM current_dialogs c
	JOIN sessions s ON s.tenant = c.tenant AND s.channel = c.channel AND s.chat_id = c.chat_id AND s.dialog_id = c.dialog_id
	WHERE c.tenant = ?1 AND c.channel = ?2 AND c.chat_id = ?3 AND s.deleted_at IS NULL`
)

const messageColumns = `tenant, session_id, seq, id, role, content, tool_calls, tool_call_id, name, is_error,
	images, meta, created_at`

const (
	sqlSessionLastSeq = `SELECT last_seq FROM sessions WHERE tenant = ?1 AND id = ?2`

	sqlMessageByID = `SELECT ` + messageColumns + ` FROM messages WHERE tenant = ?1 AND session_id = ?2 AND id = ?3`

	// sqlInsertMessage stores nothing for an id the session already has
	// (a redelivery); the caller sees no row changed.
	sqlInsertMessage = `INSERT INTO messages (tenant, session_id, seq, id, role, content, tool_calls, tool_call_id, name,
	is_error, images, meta, created_at)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)
ON CONFLICT (tenant, session_id, id) DO NOTHING`

	// sqlSearchMessages finds a chat's messages by the FTS5 query ?1 (which
	// narrows to the chat's session ids too), newest first: FTS5 walks its
	// matches in rowid order, so the first ?5 hits end the search.
	sqlSearchMessages = `SELECT m.tenant, m.session_id, m.seq, m.id, m.role, m.content, m.tool_calls, m.tool_call_id, m.name,
	m.is_error, m.images, m.meta, m.created_at, s.title
FROM message_fts
JOIN messages m ON m.rowid = message_fts.rowid
JOIN sessions s ON s.tenant = m.tenant AND s.id = m.session_id
WHERE message_fts MATCH ?1 AND m.tenant = ?2 AND s.channel = ?3 AND s.chat_id = ?4 AND s.deleted_at IS NULL
ORDER BY message_fts.rowid DESC
LIMIT ?5`

	sqlAdvanceSession = `UPDATE sessions SET last_seq = ?3, last_message_at = MAX(last_message_at, ?4), updated_at = ?5
WHERE tenant = ?1 AND id = ?2`

	// sqlLoadMessages selects newest first so LIMIT keeps the last ones; the
	// caller reverses. LIMIT -1 means all.
	sqlLoadMessages = `SELECT ` + messageColumns + ` FROM messages
WHERE tenant = ?1 AND session_id = ?2 AND seq > ?3 AND (?4 IS NULL OR created_at >= ?4)
ORDER BY seq DESC
LIMIT ?5`

	sqlSessionExists = `SELECT EXISTS (SELECT 1 FROM sessions WHERE tenant = ?1 AND id = ?2)`

	sqlCountMessages = `SELECT (SELECT count(*) FROM messages WHERE tenant = ?1 AND session_id = ?2)
FROM sessions WHERE tenant = ?1 AND id = ?2`
)

const (
	// sqlAcquireLease takes a free lease, steals an expired one, or renews
	// the caller's own; otherwise it returns no row. ?4 is now, ?5 the ttl.
	sqlAcquireLease = `INSERT INTO session_leases (tenant, session_id, holder, acquired_at, expires_at)
VALUES (?1, ?2, ?3, ?4, ?4 + ?5)
ON CONFLICT (tenant, session_id) DO UPDATE SET
	holder = excluded.holder,
	acquired_at = CASE WHEN session_leases.holder = excluded.holder THEN session_leases.acquired_at ELSE excluded.acquired_at END,
	expires_at = excluded.expires_at
WHERE session_leases.holder = excluded.holder OR session_leases.expires_at <= ?4
RETURNING holder`

	// sqlRenewLease renews only the caller's lease. An expired lease nobody
	// took is still the caller's: renewing it is safe.
	sqlRenewLease = `UPDATE session_leases SET expires_at = ?4 + ?5
WHERE tenant = ?1 AND session_id = ?2 AND holder = ?3`

	sqlReleaseLease = `DELETE FROM session_leases WHERE tenant = ?1 AND session_id = ?2 AND holder = ?3`
)

const memoryColumns = `tenant, agent, id, key, content, category, kind, source, session_id, importance, created_at, updated_at`

const (
	// sqlPutMemory replaces the memory of the same (agent, key), keeping its
	// id, created_at and rowid (which keys its search terms, memsearch.go).
	// ?11 is created_at, ?12 updated_at.
	sqlPutMemory = `INSERT INTO memories (tenant, agent, id, key, content, category, kind, source, session_id, importance,
	created_at, updated_at)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)
ON CONFLICT (tenant, agent, key) DO UPDATE SET
	content = excluded.content,
	category = excluded.category,
	kind = excluded.kind,
	source = excluded.source,
	session_id = excluded.session_id,
	importance = excluded.importance,
	updated_at = excluded.updated_at
RETURNING rowid, ` + memoryColumns

	sqlGetMemory    = `SELECT ` + memoryColumns + ` FROM memories WHERE tenant = ?1 AND agent = ?2 AND key = ?3`
	sqlDeleteMemory = `DELETE FROM memories WHERE tenant = ?1 AND agent = ?2 AND key = ?3`
	sqlListMemories = `SELECT ` + memoryColumns + ` FROM memories WHERE tenant = ?1 AND agent = ?2
  AND (?3 = '' OR category = ?3) AND (?4 = '' OR session_id = ?4)
  AND (?6 = '' OR substr(key, 1, length(?6)) = ?6)
ORDER BY created_at DESC, id DESC LIMIT ?5`
)

const cronRunColumns = `tenant, job, run_id, scheduled_time, state, outcome, message, started_at, finished_at, delivery`

const (
	// sqlClaimCronRun inserts the run unless its tick is taken.
	sqlClaimCronRun = `INSERT INTO cron_runs (tenant, job, run_id, scheduled_time, state, outcome, message, started_at,
	finished_at, delivery)
VALUES (?1, ?2, ?3, ?4, 'claimed', ?5, ?6, ?7, ?8, ?9)
ON CONFLICT (tenant, job, scheduled_time) DO NOTHING`

	sqlGetCronRun = `SELECT ` + cronRunColumns + ` FROM cron_runs WHERE tenant = ?1 AND run_id = ?2`

	sqlUpdateCronRun = `UPDATE cron_runs SET
	state = COALESCE(?3, state),
	outcome = COALESCE(?4, outcome),
	message = COALESCE(?5, message),
	started_at = COALESCE(?6, started_at),
	finished_at = COALESCE(?7, finished_at),
	delivery = COALESCE(?8, delivery)
WHERE tenant = ?1 AND run_id = ?2
RETURNING ` + cronRunColumns

	sqlListCronRuns = `SELECT ` + cronRunColumns + ` FROM cron_runs WHERE tenant = ?1 AND job = ?2
ORDER BY scheduled_time DESC LIMIT ?3`
)

const agentRunColumns = `tenant, id, agent, session_id, parent_run_id, status, input, result, created_at, updated_at,
	mode, parent_agent, completion`

const (
	// ?9 is now.
	sqlCreateAgentRun = `INSERT INTO agent_runs (tenant, id, agent, session_id, parent_run_id, status, input, result,
	created_at, updated_at, mode, parent_agent, completion)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?9, ?10, ?11, ?12)
RETURNING ` + agentRunColumns

	sqlGetAgentRun = `SELECT ` + agentRunColumns + ` FROM agent_runs WHERE tenant = ?1 AND id = ?2`

	// ?5 is now; ?7 IfActive, ?8 IfCompletion.
	sqlUpdateAgentRun = `UPDATE agent_runs SET
	status = COALESCE(?3, status),
	result = COALESCE(?4, result),
	completion = COALESCE(?6, completion),
	updated_at = ?5
WHERE tenant = ?1 AND id = ?2
	AND (NOT ?7 OR status IN ('queued', 'running'))
	AND (?8 = '' OR completion = ?8)
RETURNING ` + agentRunColumns

	// ?9 and ?10 are the cursor (created_at, id); ?9 = 0 for none.
	sqlListAgentRuns = `SELECT ` + agentRunColumns + ` FROM agent_runs
WHERE tenant = ?1
	AND (?2 = '' OR agent = ?2)
	AND (?3 = '' OR session_id = ?3)
	AND (?4 = '' OR parent_run_id = ?4)
	AND (?5 = '' OR status = ?5)
	AND (?7 = '' OR mode = ?7)
	AND (?8 = '' OR completion = ?8)
	AND (NOT ?11 OR status IN ('queued', 'running'))
	AND (?9 = 0 OR created_at < ?9 OR (created_at = ?9 AND id < ?10))
ORDER BY created_at DESC, id DESC
LIMIT ?6`

	sqlDeleteAgentRuns = `DELETE FROM agent_runs
WHERE tenant = ?1 AND updated_at < ?2 AND status IN ('succeeded', 'failed', 'cancelled')
	AND completion IN ('', 'delivered', 'closed')`

	sqlDeleteAgentSignals = `DELETE FROM agent_signals
WHERE tenant = ?1 AND (created_at < ?2 OR NOT EXISTS (SELECT 1 FROM agent_runs r WHERE r.tenant = ?1 AND r.id = run_id))`
)

const agentSignalColumns = `tenant, id, run_id, session_id, delivery, kind, body, state, created_at, updated_at`

const (
	// ?9 is now.
	sqlCreateAgentSignal = `INSERT INTO agent_signals (tenant, id, run_id, session_id, delivery, kind, body, state,
	created_at, updated_at)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?9)
RETURNING ` + agentSignalColumns

	sqlListAgentSignals = `SELECT ` + agentSignalColumns + ` FROM agent_signals
WHERE tenant = ?1
	AND (?2 = '' OR session_id = ?2)
	AND (?3 = '' OR run_id = ?3)
	AND (?4 = '' OR delivery = ?4)
	AND (?5 = '' OR state = ?5)
ORDER BY created_at, id
LIMIT ?6`

	// ?2 is a JSON array of ids (or null), ?3 a run id ('' for any); ?5 is now.
	sqlMarkAgentSignals = `UPDATE agent_signals SET state = ?4, updated_at = ?5
WHERE tenant = ?1 AND state = 'pending'
	AND (?2 IS NULL OR id IN (SELECT value FROM json_each(?2)))
	AND (?3 = '' OR run_id = ?3)`
)

const deliveryColumns = `tenant, id, channel, chat_id, session_id, status, attempts, last_error, created_at, delivered_at`

const (
	// ?9 is now.
	sqlCreateDelivery = `INSERT INTO deliveries (tenant, id, channel, chat_id, session_id, status, attempts, last_error,
	created_at)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)
RETURNING ` + deliveryColumns

	sqlGetDelivery = `SELECT ` + deliveryColumns + ` FROM deliveries WHERE tenant = ?1 AND id = ?2`

	// sqlUpdateDelivery counts attempts in the database; the first move to
	// delivered stamps delivered_at. ?6 is now.
	sqlUpdateDelivery = `UPDATE deliveries SET
	status = COALESCE(?3, status),
	last_error = COALESCE(?4, last_error),
	attempts = attempts + CASE WHEN ?5 THEN 1 ELSE 0 END,
	delivered_at = CASE WHEN ?3 = 'delivered' THEN COALESCE(delivered_at, ?6) ELSE delivered_at END
WHERE tenant = ?1 AND id = ?2
RETURNING ` + deliveryColumns

	sqlListDeliveries = `SELECT ` + deliveryColumns + ` FROM deliveries
WHERE tenant = ?1
	AND (?2 = '' OR status = ?2)
	AND (?3 = '' OR session_id = ?3)
ORDER BY created_at, id
LIMIT ?4`
)

const artifactColumns = `tenant, id, session_id, name, media_type, blob_key, size, created_at`

const (
	// ?8 is now.
	sqlCreateArtifact = `INSERT INTO artifacts (tenant, id, session_id, name, media_type, blob_key, size, created_at)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)
RETURNING ` + artifactColumns

	sqlGetArtifact    = `SELECT ` + artifactColumns + ` FROM artifacts WHERE tenant = ?1 AND id = ?2`
	sqlListArtifacts  = `SELECT ` + artifactColumns + ` FROM artifacts WHERE tenant = ?1 AND session_id = ?2 ORDER BY created_at, id`
	sqlDeleteArtifact = `DELETE FROM artifacts WHERE tenant = ?1 AND id = ?2`
)

const (
	sqlGetSessionPlan = `SELECT plan FROM session_plans WHERE tenant = ?1 AND session_id = ?2`
	sqlPutSessionPlan = `INSERT INTO session_plans (tenant, session_id, plan, updated_at) VALUES (?1, ?2, ?3, ?4)
ON CONFLICT (tenant, session_id) DO UPDATE SET plan = excluded.plan, updated_at = excluded.updated_at`
)

const (
	sqlPutTurnError = `INSERT INTO turn_errors (tenant, session_id, message_id, code, message, created_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6)
ON CONFLICT (tenant, session_id, message_id) DO UPDATE SET code = excluded.code, message = excluded.message, created_at = excluded.created_at`
	sqlTurnErrors = `SELECT session_id, message_id, code, message, created_at FROM turn_errors
WHERE tenant = ?1 AND session_id = ?2 AND message_id IN (SELECT value FROM json_each(?3)) ORDER BY created_at, message_id`
)

const (
	sqlAddUsage = `INSERT INTO usage_daily (tenant, agent, day, input_tokens, output_tokens, cost_micros, model_calls, turns, tool_calls, sessions) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)
ON CONFLICT (tenant, agent, day) DO UPDATE SET input_tokens = usage_daily.input_tokens + excluded.input_tokens, output_tokens = usage_daily.output_tokens + excluded.output_tokens, cost_micros = usage_daily.cost_micros + excluded.cost_micros, model_calls = usage_daily.model_calls + excluded.model_calls, turns = usage_daily.turns + excluded.turns, tool_calls = usage_daily.tool_calls + excluded.tool_calls, sessions = usage_daily.sessions + excluded.sessions`
	sqlListUsage = `SELECT agent, day, input_tokens, output_tokens, cost_micros, model_calls, turns, tool_calls, sessions FROM usage_daily
WHERE tenant = ?1 AND (?2 = '' OR agent = ?2) AND day >= ?3 AND day <= ?4 ORDER BY day, agent`
	sqlUsageTotals = `SELECT COALESCE(SUM(CASE WHEN day = ?2 THEN input_tokens END), 0), COALESCE(SUM(CASE WHEN day = ?2 THEN output_tokens END), 0), COALESCE(SUM(CASE WHEN day = ?2 THEN cost_micros END), 0), COALESCE(SUM(CASE WHEN day = ?2 THEN model_calls END), 0), COALESCE(SUM(CASE WHEN day = ?2 THEN turns END), 0), COALESCE(SUM(CASE WHEN day = ?2 THEN tool_calls END), 0), COALESCE(SUM(CASE WHEN day = ?2 THEN sessions END), 0), COALESCE(SUM(input_tokens), 0), COALESCE(SUM(output_tokens), 0), COALESCE(SUM(cost_micros), 0), COALESCE(SUM(model_calls), 0), COALESCE(SUM(turns), 0), COALESCE(SUM(tool_calls), 0), COALESCE(SUM(sessions), 0)
FROM usage_daily WHERE tenant = ?1 AND day >= ?3 AND day <= ?2`

	// sqlClaimNotice inserts a notice or renews one that expired by now
	// (?3); a notice still in force is left alone, so no row changes.
	sqlClaimNotice = `INSERT INTO quota_notices (tenant, key, expires_at) VALUES (?1, ?2, ?4)
ON CONFLICT (tenant, key) DO UPDATE SET expires_at = excluded.expires_at WHERE quota_notices.expires_at <= ?3`
)

const (
	sqlAppendAudit = `INSERT INTO tool_audit (tenant, id, actor, agent, session_id, tool, args_digest, outcome, duration_us, created_at)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)`
	sqlListAudit = `SELECT id, actor, agent, session_id, tool, args_digest, outcome, duration_us, created_at FROM tool_audit
WHERE tenant = ?1 AND (?2 = '' OR agent = ?2) AND (?3 = '' OR session_id = ?3) AND (?4 = '' OR tool = ?4)
	AND (?5 IS NULL OR created_at >= ?5) AND (?6 IS NULL OR (created_at, id) < (?6, ?7))
ORDER BY created_at DESC, id DESC LIMIT ?8`
	sqlDeleteAudit = `DELETE FROM tool_audit WHERE tenant = ?1 AND created_at < ?2`
)
