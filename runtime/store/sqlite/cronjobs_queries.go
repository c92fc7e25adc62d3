package sqlite

// SQL of the store.CronStore methods (cronjobs.go). ?1 is always the tenant.

const cronJobColumns = `tenant, name, display_name, agent, spec, version, created_at, updated_at, origin`

const (
	// ?6 is the creation time (the caller's or now).
	sqlCreateCronJob = `INSERT INTO cron_jobs (tenant, name, display_name, agent, spec, version, created_at, updated_at, origin)
VALUES (?1, ?2, ?3, ?4, ?5, 1, ?6, ?6, ?7)
RETURNING ` + cronJobColumns

	sqlGetCronJob = `SELECT ` + cronJobColumns + ` FROM cron_jobs WHERE tenant = ?1 AND name = ?2`

	sqlListCronJobs = `SELECT ` + cronJobColumns + ` FROM cron_jobs WHERE tenant = ?1 AND (?2 = '' OR agent = ?2)
ORDER BY name LIMIT ?3`

	// sqlUpdateCronJob matches no row on a version mismatch; the caller then
	// tells a missing job from a conflict with sqlGetCronJob. ?6 is now.
	sqlUpdateCronJob = `UPDATE cron_jobs SET
	display_name = COALESCE(?3, display_name),
	spec = COALESCE(?4, spec),
	version = version + 1,
	updated_at = ?6
WHERE tenant = ?1 AND name = ?2 AND (?5 = 0 OR version = ?5)
RETURNING ` + cronJobColumns

	sqlDeleteCronJob = `DELETE FROM cron_jobs WHERE tenant = ?1 AND name = ?2`
)

const detailedCronRunColumns = cronRunColumns + `, agent, session_id, channel, chat_id, delivery_error`

const (
	// sqlClaimCronRunDetailed is sqlClaimCronRun with the state and detail
	// given, so a skipped tick is recorded finished in one insert.
	sqlClaimCronRunDetailed = `INSERT INTO cron_runs (tenant, job, run_id, scheduled_time, state, outcome, message,
	started_at, finished_at, delivery, agent, session_id, channel, chat_id, delivery_error)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15)
ON CONFLICT (tenant, job, scheduled_time) DO NOTHING`

	sqlUpdateCronRunDetail = `UPDATE cron_runs SET
	state = COALESCE(?3, state),
	outcome = COALESCE(?4, outcome),
	message = COALESCE(?5, message),
	started_at = COALESCE(?6, started_at),
	finished_at = COALESCE(?7, finished_at),
	delivery = COALESCE(?8, delivery),
	agent = COALESCE(?9, agent),
	session_id = COALESCE(?10, session_id),
	channel = COALESCE(?11, channel),
	chat_id = COALESCE(?12, chat_id),
	delivery_error = COALESCE(?13, delivery_error)
WHERE tenant = ?1 AND run_id = ?2
RETURNING ` + detailedCronRunColumns

	sqlGetDetailedCronRun = `SELECT ` + detailedCronRunColumns + ` FROM cron_runs WHERE tenant = ?1 AND run_id = ?2`

	sqlListDetailedCronRuns = `SELECT ` + detailedCronRunColumns + ` FROM cron_runs WHERE tenant = ?1 AND job = ?2
ORDER BY scheduled_time DESC LIMIT ?3`

	// sqlLastCronRunTimes looks each job (?2, a JSON array of [job, bound
	// in microseconds]) up in the (tenant, job, scheduled_time) unique index.
	sqlLastCronRunTimes = `SELECT job, last FROM (
	SELECT j.value ->> 0 AS job, (SELECT max(scheduled_time) FROM cron_runs c
		WHERE c.tenant = ?1 AND c.job = j.value ->> 0 AND c.scheduled_time <= j.value ->> 1) AS last
	FROM json_each(?2) j)
WHERE last IS NOT NULL`

	sqlListUnfinishedCronRuns = `SELECT ` + detailedCronRunColumns + ` FROM cron_runs
WHERE tenant = ?1 AND (state <> 'done' OR delivery = 'pending') AND (?2 = '' OR job = ?2)
ORDER BY scheduled_time LIMIT ?3`
)
