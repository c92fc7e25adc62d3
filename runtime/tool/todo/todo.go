// Package todo implements todo, the session task plan: one active plan per
// session that the model creates for complex, multi-step or parallel work and
// updates as it goes, so progress survives long turns and context compression.
package todo

import (
	"context"
	"fmt"
	"hash/fnv"
	"strings"
	"sync"

	"github.com/picobot/picobot/runtime/tool"
)

// maxItems bounds a plan; a longer list is not a plan anymore.
const maxItems = 100

// Args are the arguments of todo.
type Args struct {
	Action string   `json:"action" jsonschema:"create, view, append, update or close"`
	Title  string   `json:"title,omitempty" jsonschema:"create: the plan's title"`
	Items  []string `json:"items,omitempty" jsonschema:"create, append: the steps to add, one per entry"`
	ItemID int      `json:"item_id,omitempty" jsonschema:"update: id of the item to change"`
	Status string   `json:"status,omitempty" jsonschema:"update: the item's new status; close: done (default) or cancelled"`
	Note   string   `json:"note,omitempty" jsonschema:"update: a note on the item; close: a closing remark"`
}

const description = "Session task plan. Use it only for complex, multi-step or parallel tasks, never for chit-chat or single-step requests. " +
	"One active plan per session: create it with a title and items, view it, append items, update an item's status or note, close it when finished."

// lockStripes is the number of per-session locks; sessions sharing a stripe
// only wait for each other's short read-modify-write.
const lockStripes = 64

// planner serialises the read-modify-write of each session's plan, so
// concurrent calls in one session cannot lose each other's changes.
type planner struct {
	store Store
	locks [lockStripes]sync.Mutex
}

// New returns the todo tool keeping plans in store.
func New(store Store) tool.Tool {
	p := &planner{store: store}
	return tool.New("todo", description, p.run,
		tool.Enum("action", "create", "view", "append", "update", "close"),
		tool.Enum("status", string(ItemPending), string(ItemInProgress), string(ItemDone), string(ItemCancelled)),
		tool.Range("item_id", tool.Bound(1), nil),
	)
}

func (p *planner) lock(sessionID string) *sync.Mutex {
	h := fnv.New32a()
	_, _ = h.Write([]byte(sessionID))
	return &p.locks[h.Sum32()%lockStripes]
}

func (p *planner) run(ctx context.Context, env tool.Env, a Args) (tool.Result, error) {
	if env.SessionID == "" {
		return tool.Errorf("error: todo needs a session, and this call has none; keep track of the steps in your reply instead."), nil
	}
	mu := p.lock(env.SessionID)
	mu.Lock()
	defer mu.Unlock()

	plan, ok, err := p.store.Get(ctx, env.SessionID)
	if err != nil {
		return tool.Result{}, fmt.Errorf("failed to load plan of session %q: %w", env.SessionID, err)
	}
	active := ok && plan.Active()
	if a.Action != "create" && a.Action != "view" && !active {
		return tool.Errorf("error: there is no active plan to %s. Create one first with action create (only for complex, multi-step tasks).", a.Action), nil
	}

	var msg string
	switch a.Action {
	case "view":
		if !active {
			return tool.Text("There is no active plan."), nil
		}
		return tool.Text(render(plan)), nil
	case "create":
		if active {
			return tool.Errorf("error: a plan is already active: %q with %d items. Use append to add items to it, or close it (status done or cancelled) before creating a new one.", plan.Title, len(plan.Items)), nil
		}
		title := strings.TrimSpace(a.Title)
		if title == "" {
			return tool.Errorf("error: title is required to create a plan."), nil
		}
		plan = Plan{Title: title, Status: PlanActive}
		if res, ok := addItems(&plan, a.Items); !ok {
			return res, nil
		}
		msg = "Created the plan."
	case "append":
		if len(a.Items) == 0 {
			return tool.Errorf("error: items is required to append: pass the steps to add."), nil
		}
		if res, ok := addItems(&plan, a.Items); !ok {
			return res, nil
		}
		msg = fmt.Sprintf("Added %d item(s).", len(a.Items))
	case "update":
		res, ok := updateItem(&plan, a)
		if !ok {
			return res, nil
		}
		msg = res.Content
	case "close":
		status := PlanStatus(a.Status)
		switch status {
		case "":
			status = PlanDone
		case PlanDone, PlanCancelled:
		default:
			return tool.Errorf("error: close takes status done or cancelled, got %q.", a.Status), nil
		}
		plan.Status, plan.Note = status, strings.TrimSpace(a.Note)
		msg = fmt.Sprintf("Closed the plan %q as %s (%s).", plan.Title, status, progress(plan))
	default:
		return tool.Errorf("error: unknown action %q; use create, view, append, update or close.", a.Action), nil
	}
	if err := p.store.Put(ctx, env.SessionID, plan); err != nil {
		return tool.Result{}, fmt.Errorf("failed to save plan of session %q: %w", env.SessionID, err)
	}
	if !plan.Active() {
		return tool.Text(msg), nil
	}
	return tool.Text(msg + "\n\n" + render(plan)), nil
}

// addItems appends texts as pending items with the next ids.
func addItems(plan *Plan, texts []string) (tool.Result, bool) {
	if len(plan.Items)+len(texts) > maxItems {
		return tool.Errorf("error: a plan holds at most %d items and this one would have %d. Group steps into fewer, larger items.", maxItems, len(plan.Items)+len(texts)), false
	}
	next := 1
	for _, it := range plan.Items {
		next = max(next, it.ID+1)
	}
	added := make([]Item, 0, len(texts))
	for i, t := range texts {
		t = strings.TrimSpace(t)
		if t == "" {
			return tool.Errorf("error: items[%d] is empty; every item needs a description.", i), false
		}
		added = append(added, Item{ID: next + i, Text: t, Status: ItemPending})
	}
	plan.Items = append(plan.Items, added...)
	return tool.Result{}, true
}

// updateItem changes the status or note of one item.
func updateItem(plan *Plan, a Args) (tool.Result, bool) {
	if a.ItemID == 0 {
		return tool.Errorf("error: item_id is required to update; view the plan to see the ids."), false
	}
	if a.Status == "" && a.Note == "" {
		return tool.Errorf("error: update needs a status or a note (or both)."), false
	}
	for i := range plan.Items {
		it := &plan.Items[i]
		if it.ID != a.ItemID {
			continue
		}
		var changes []string
		if a.Status != "" {
			it.Status = ItemStatus(a.Status)
			changes = append(changes, "status "+a.Status)
		}
		if a.Note != "" {
			it.Note = strings.TrimSpace(a.Note)
			changes = append(changes, "note")
		}
		return tool.Text(fmt.Sprintf("Updated item %d (%s).", it.ID, strings.Join(changes, ", "))), true
	}
	return tool.Errorf("error: item %d does not exist; the plan has items %s.", a.ItemID, idRange(plan.Items)), false
}

// idRange describes the ids of items for messages.
func idRange(items []Item) string {
	if len(items) == 0 {
		return "none yet (append some first)"
	}
	ids := make([]string, len(items))
	for i, it := range items {
		ids[i] = fmt.Sprint(it.ID)
	}
	return strings.Join(ids, ", ")
}

// progress summarises how many items are done.
func progress(plan Plan) string {
	done := 0
	for _, it := range plan.Items {
		if it.Status == ItemDone {
			done++
		}
	}
	return fmt.Sprintf("%d/%d done", done, len(plan.Items))
}

// render prints the plan for the model.
func render(plan Plan) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Plan: %s (%s, %s)", plan.Title, plan.Status, progress(plan))
	if len(plan.Items) == 0 {
		b.WriteString("\n  (no items yet; add them with append)")
	}
	for _, it := range plan.Items {
		fmt.Fprintf(&b, "\n  %d. [%s] %s", it.ID, it.Status, it.Text)
		if it.Note != "" {
			fmt.Fprintf(&b, " (note: %s)", it.Note)
		}
	}
	return b.String()
}
