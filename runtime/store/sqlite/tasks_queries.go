package sqlite

// SQL of the store.TaskStore methods (tasks.go). ?1 is always the tenant.

const taskColumns = `tenant, id, agent, title, note, priority, due_at, repeat, tz, continuity, state, awaiting, result,
	job, version, created_at, updated_at`

const (
	// ?15 is the creation time (the caller's or now).
	sqlCreateTask = `INSERT INTO tasks (tenant, id, agent, title, note, priority, due_at, repeat, tz, continuity, state,
	awaiting, result, job, version, created_at, updated_at)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, 1, ?15, ?15)
RETURNING ` + taskColumns

	sqlGetTask = `SELECT ` + taskColumns + ` FROM tasks WHERE tenant = ?1 AND id = ?2`

	// sqlListTasks: ?3 is a JSON array of states ('[]' for all).
	sqlListTasks = `SELECT ` + taskColumns + ` FROM tasks WHERE tenant = ?1 AND (?2 = '' OR agent = ?2)
	AND (json_array_length(?3) = 0 OR state IN (SELECT value FROM json_each(?3)))
ORDER BY priority, created_at, id LIMIT ?4`

	// sqlUpdateTask matches no row on a version mismatch; the caller then
	// tells a missing task from a conflict with sqlGetTask. ?15 is now.
	sqlUpdateTask = `UPDATE tasks SET
	title = COALESCE(?3, title),
	note = COALESCE(?4, note),
	priority = COALESCE(?5, priority),
	due_at = CASE WHEN ?7 THEN NULL ELSE COALESCE(?6, due_at) END,
	repeat = COALESCE(?8, repeat),
	tz = COALESCE(?9, tz),
	continuity = COALESCE(?10, continuity),
	state = COALESCE(?11, state),
	awaiting = COALESCE(?12, awaiting),
	result = COALESCE(?13, result),
	job = COALESCE(?14, job),
	version = version + 1,
	updated_at = ?15
WHERE tenant = ?1 AND id = ?2 AND (?16 = 0 OR version = ?16)
RETURNING ` + taskColumns
)

const agendaColumns = `tenant, id, agent, at, all_day, text, job, done_at, created_at`

const (
	sqlCreateAgendaItem = `INSERT INTO agenda_items (tenant, id, agent, at, all_day, text, job, created_at)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)
RETURNING ` + agendaColumns

	sqlGetAgendaItem = `SELECT ` + agendaColumns + ` FROM agenda_items WHERE tenant = ?1 AND id = ?2`

	sqlDoneAgendaItem = `UPDATE agenda_items SET done_at = COALESCE(done_at, ?3) WHERE tenant = ?1 AND id = ?2
RETURNING ` + agendaColumns

	sqlDeleteAgendaItem = `DELETE FROM agenda_items WHERE tenant = ?1 AND id = ?2`

	sqlListAgendaItems = `SELECT ` + agendaColumns + ` FROM agenda_items WHERE tenant = ?1 AND (?2 = '' OR agent = ?2)
	AND (?3 OR done_at IS NULL)
ORDER BY at, id LIMIT ?4`
)
