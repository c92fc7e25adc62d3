package postgres

// SQL of the store.CronStore methods (cronjobs.go). $1 is always the tenant.

const cronJobColumns = `tenant, name, display_name, agent, spec, version, created_at, updated_at, origin`

const (
	sqlCreateCronJob = `INSERT INTO cron_jobs (tenant, name, display_name, agent, spec, version, created_at, updated_at, origin)
VALUES ($1, $2, $3, $4, $5, 1, COALESCE($6, now()), COALESCE($6, now()), $7)
RETURNING ` + cronJobColumns

	sqlGetCronJob = `SELECT ` + cronJobColumns + ` FROM cron_jobs WHERE tenant = $1 AND name = $2`

	sqlListCronJobs = `SELECT ` + cronJobColumns + ` FROM cron_jobs WHERE tenant = $1 AND ($2 = '' OR agent = $2)
ORDER BY name LIMIT $3`

	// sqlUpdateCronJob matches no row on a version mismatch; the caller then
	// tells a missing job from a conflict with sqlGetCronJob.
	sqlUpdateCronJob = `UPDATE cron_jobs SET
	display_name = COALESCE($3, display_name),
	spec = COALESCE($4, spec),
	version = version + 1,
	updated_at = now()
WHERE tenant = $1 AND name = $2 AND ($5 = 0 OR version = $5)
RETURNING ` + cronJobColumns

	sqlDeleteCronJob = `DELETE FROM cron_jobs WHERE tenant = $1 AND name = $2`
)

const detailedCronRunColumns = cronRunColumns + `, agent, session_id, channel, chat_id, delivery_error`

const (
	// sqlClaimCronRuns inserts a batch of ticks in one statement (one array
	// per column); the unique (tenant, job, scheduled_time) lets only one
	// claimer insert each tick, and RETURNING names the claims that won.
	sqlClaimCronRuns = `INSERT INTO cron_runs (tenant, job, run_id, scheduled_time, state, outcome, message,
	started_at, finished_at, delivery, agent, session_id, channel, chat_id, delivery_error)
SELECT $1, u.job, u.run_id, u.scheduled_time, u.state, u.outcome, u.message, u.started_at, u.finished_at, u.delivery,
	u.agent, u.session_id, u.channel, u.chat_id, u.delivery_error
FROM unnest($2::text[], $3::text[], $4::timestamptz[], $5::text[], $6::text[], $7::text[], $8::timestamptz[],
	$9::timestamptz[], $10::text[], $11::text[], $12::text[], $13::text[], $14::text[], $15::text[])
	AS u(job, run_id, scheduled_time, state, outcome, message, started_at, finished_at, delivery, agent, session_id,
	channel, chat_id, delivery_error)
ON CONFLICT (tenant, job, scheduled_time) DO NOTHING
RETURNING run_id`

	sqlUpdateCronRunDetail = `UPDATE cron_runs SET
	state = COALESCE($3, state),
	outcome = COALESCE($4, outcome),
	message = COALESCE($5, message),
	started_at = COALESCE($6, started_at),
	finished_at = COALESCE($7, finished_at),
	delivery = COALESCE($8, delivery),
	agent = COALESCE($9, agent),
	session_id = COALESCE($10, session_id),
	channel = COALESCE($11, channel),
	chat_id = COALESCE($12, chat_id),
	delivery_error = COALESCE($13, delivery_error)
WHERE tenant = $1 AND run_id = $2
RETURNING ` + detailedCronRunColumns

	sqlGetDetailedCronRun = `SELECT ` + detailedCronRunColumns + ` FROM cron_runs WHERE tenant = $1 AND run_id = $2`

	sqlListDetailedCronRuns = `SELECT ` + detailedCronRunColumns + ` FROM cron_runs WHERE tenant = $1 AND job = $2
ORDER BY scheduled_time DESC LIMIT $3`

	// sqlLastCronRunTimes looks each job up in the (tenant, job,
	// scheduled_time) unique index instead of grouping the whole history.
	sqlLastCronRunTimes = `SELECT j.job, r.last FROM unnest($2::text[], $3::timestamptz[]) AS j(job, until)
CROSS JOIN LATERAL (SELECT max(scheduled_time) AS last FROM cron_runs c
	WHERE c.tenant = $1 AND c.job = j.job AND c.scheduled_time <= j.until) r
WHERE r.last IS NOT NULL`

	sqlListUnfinishedCronRuns = `SELECT ` + detailedCronRunColumns + ` FROM cron_runs
WHERE tenant = $1 AND (state <> 'done' OR delivery = 'pending') AND ($2 = '' OR job = $2)
ORDER BY scheduled_time LIMIT $3`
)
