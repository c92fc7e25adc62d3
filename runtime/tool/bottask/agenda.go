package bottask

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	picobotv1alpha1 "github.com/picobot/picobot/api/v1alpha1"
	"github.com/picobot/picobot/runtime/scheduler"
	"github.com/picobot/picobot/runtime/store"
	"github.com/picobot/picobot/runtime/tool"
)

const agendaDescription = "Agenda: what to do at a moment. add needs at (ISO 8601 with offset, e.g. 2026-10-01T18:30:00+08:00, " +
	"or a date 2026-10-01) and text; a future time is reminded in this chat. done/remove need id. " +
	"Natural language (\"tomorrow afternoon\") is refused."

type agendaArgs struct {
	Action string `json:"action"`
	At     string `json:"at,omitempty"`
	Text   string `json:"text,omitempty"`
	ID     string `json:"id,omitempty"`
	// Connector reminds through a connector rather than this chat.
	Connector string `json:"connector,omitempty" jsonschema:"remind through this bot_connector id, not this chat"`
}

const maxAgendaText = 2000

func (t *tools) agenda(ctx context.Context, env tool.Env, a agendaArgs) (tool.Result, error) {
	ctx, tenant := t.ctxTenant(ctx)
	switch a.Action {
	case "add":
		return t.addItem(ctx, env, tenant, a)
	case "list":
		return t.listItems(ctx)
	case "done", "remove":
		return t.closeItem(ctx, tenant, a.Action, a.ID)
	}
	return tool.Errorf("error: action %q is unknown; use add, list, done or remove", a.Action), nil
}

func (t *tools) addItem(ctx context.Context, env tool.Env, tenant string, a agendaArgs) (tool.Result, error) {
	text := strings.TrimSpace(a.Text)
	switch {
	case a.At == "":
		return tool.Errorf("error: add needs at, an ISO 8601 date-time with offset such as %s (or a date such as 2026-10-01)", isoExample), nil
	case text == "":
		return tool.Errorf("error: add needs text saying what to do at that moment"), nil
	case len([]rune(text)) > maxAgendaText:
		return tool.Errorf("error: text has more than %d characters", maxAgendaText), nil
	case strings.ContainsRune(text, 0):
		return tool.Errorf("error: text must not contain NUL bytes"), nil
	}
	at, allDay, err := parseISO("at", a.At, true)
	if err != nil {
		return tool.Errorf("error: %v", err), nil
	}
	now := t.now()
	if allDay && at.Before(now.UTC().Truncate(24*time.Hour)) || !allDay && !at.After(now) {
		return tool.Errorf("error: at %s is in the past (now is %s); agenda items are for moments to come", a.At, now.UTC().Format(time.RFC3339)), nil
	}
	item := store.AgendaItem{ID: newID("a-"), Agent: env.Agent, At: at.UTC(), AllDay: allDay, Text: text}
	if item.Agent == "" {
		item.Agent = t.agent
	}
	var spec *picobotv1alpha1.CronJobSpec
	note := ""
	target, policy, err := t.target(env, a.Connector)
	if err != nil {
		return tool.Errorf("error: %v", err), nil
	}
	switch {
	case allDay:
		note = " It is a whole day, so no reminder is scheduled."
	case t.jobs == nil:
		note = " No reminder is scheduled: this runtime has no scheduler for the agenda."
	case target == nil:
		note = " No reminder is scheduled: this session has no chat to remind."
	default:
		spec = &picobotv1alpha1.CronJobSpec{Schedule: picobotv1alpha1.Schedule{At: new(item.At.UnixMilli())},
			Prompt: fmt.Sprintf("Agenda reminder (item %s, due %s): %s\n\nCall complete_scheduled_run with outcome alert and a "+
				"one-line reminder of this for the user.", item.ID, at.Format(time.RFC3339), text),
			Target: target, DeliveryPolicy: policy, MissedRunPolicy: picobotv1alpha1.MissedRunOnce}
		if item.Agent != "" && item.Agent != scheduler.RootAgent {
			spec.AgentRef = &corev1.LocalObjectReference{Name: item.Agent}
		}
		if err := scheduler.ValidateSpec(*spec, now, true); err != nil {
			return tool.Errorf("error: %v", err), nil
		}
		item.Job = "agenda-" + item.ID
	}
	created, err := t.ts.CreateAgendaItem(ctx, item)
	if err != nil {
		return tool.Result{}, err
	}
	if spec != nil {
		if err := t.putJob(ctx, tenant, item.Job, excerpt(text, 60), *spec); err != nil {
			return tool.Result{}, err
		}
		note = " A reminder will be sent to this chat then."
		if a.Connector != "" {
			note = fmt.Sprintf(" A reminder will be sent through connector %s (chat %s) then.", target.Channel, target.ChatID)
		}
	}
	return itemReport(fmt.Sprintf("Added agenda item %q.%s", created.ID, note), created)
}

func (t *tools) listItems(ctx context.Context) (tool.Result, error) {
	items, err := t.ts.ListAgendaItems(ctx, store.AgendaFilter{Agent: t.agent})
	if err != nil {
		return tool.Result{}, err
	}
	if len(items) == 0 {
		return tool.Text("The agenda is empty."), nil
	}
	out := make([]itemOut, len(items))
	for i, it := range items {
		out[i] = toItemOut(it)
	}
	b, err := json.Marshal(map[string]any{"items": out})
	if err != nil {
		return tool.Result{}, fmt.Errorf("failed to encode agenda: %w", err)
	}
	return tool.Text(string(b)), nil
}

func (t *tools) closeItem(ctx context.Context, tenant, action, id string) (tool.Result, error) {
	if err := checkID("agenda item", id, "bot_agenda list"); err != nil {
		return tool.Errorf("error: %v", err), nil
	}
	item, err := t.ts.GetAgendaItem(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return tool.Errorf("error: no agenda item %q; bot_agenda list shows the items", id), nil
	}
	if err != nil {
		return tool.Result{}, err
	}
	if err := t.dropJob(ctx, tenant, item.Job); err != nil {
		return tool.Result{}, err
	}
	if action == "remove" {
		if err := t.ts.DeleteAgendaItem(ctx, id); err != nil && !errors.Is(err, store.ErrNotFound) {
			return tool.Result{}, err
		}
		return tool.Text(fmt.Sprintf("Removed agenda item %q.", id)), nil
	}
	done, err := t.ts.MarkAgendaItemDone(ctx, id, t.now())
	if err != nil {
		return tool.Result{}, err
	}
	return itemReport(fmt.Sprintf("Agenda item %q is done.", id), done)
}

type itemOut struct {
	ID   string `json:"id"`
	At   string `json:"at"`
	Text string `json:"text"`
	Done string `json:"done,omitempty"`
}

func toItemOut(it store.AgendaItem) itemOut {
	o := itemOut{ID: it.ID, At: it.At.Format(time.RFC3339), Text: it.Text}
	if it.AllDay {
		o.At = it.At.Format(time.DateOnly)
	}
	if it.DoneAt != nil {
		o.Done = it.DoneAt.Format(time.RFC3339)
	}
	return o
}

func itemReport(sentence string, it store.AgendaItem) (tool.Result, error) {
	b, err := json.Marshal(toItemOut(it))
	if err != nil {
		return tool.Result{}, fmt.Errorf("failed to encode agenda item %q: %w", it.ID, err)
	}
	return tool.Text(sentence + "\n" + string(b)), nil
}

func excerpt(s string, n int) string {
	if r := []rune(s); len(r) > n {
		return string(r[:n]) + "…"
	}
	return s
}
