package todo

import (
	"context"
	"fmt"
	"strconv"
	"strings"
)

// A delegate run may be bound to an item of the session's active plan
// (delegate's plan_item_id): the item is in progress while the run works on
// it, and a foreground run's end sets it done (succeeded) or back to pending
// with a note saying why. A background run's result comes in the
// continuation turn, which names the item for the agent to update.

// CheckItem says what is wrong with binding itemID in the session's plan,
// "" when nothing is: a session without an active plan binds nothing (the
// id is only recorded); with one, the id must be one of its items.
func CheckItem(ctx context.Context, s Store, sessionID, itemID string) (string, error) {
	plan, ok, err := s.Get(ctx, sessionID)
	if err != nil || !ok || !plan.Active() {
		return "", err
	}
	if _, found := findItem(plan, itemID); !found {
		return fmt.Sprintf("plan_item_id %q is not an item of the active plan %q, which has items %s", itemID, plan.Title, idRange(plan.Items)), nil
	}
	return "", nil
}

// BindItem marks itemID of the session's active plan in progress, noting
// the run; it does nothing without an active plan or such an item.
func BindItem(ctx context.Context, s Store, sessionID, itemID, runID string) error {
	return setItem(ctx, s, sessionID, itemID, ItemInProgress, "delegated: run "+runID)
}

// FinishItem ends a bound item with its foreground run: done when the run
// succeeded, pending again otherwise, with a note of the run's status.
func FinishItem(ctx context.Context, s Store, sessionID, itemID, runID, runStatus string) error {
	st := ItemPending
	if runStatus == "succeeded" {
		st = ItemDone
	}
	return setItem(ctx, s, sessionID, itemID, st, "run "+runID+" "+runStatus)
}

func setItem(ctx context.Context, s Store, sessionID, itemID string, st ItemStatus, note string) error {
	plan, ok, err := s.Get(ctx, sessionID)
	if err != nil || !ok || !plan.Active() {
		return err
	}
	i, found := findItem(plan, itemID)
	if !found {
		return nil
	}
	plan.Items[i].Status, plan.Items[i].Note = st, note
	if err := s.Put(ctx, sessionID, plan); err != nil {
		return fmt.Errorf("failed to update item %s of the plan of session %q: %w", itemID, sessionID, err)
	}
	return nil
}

func findItem(plan Plan, itemID string) (int, bool) {
	id, err := strconv.Atoi(strings.TrimSpace(itemID))
	if err != nil {
		return 0, false
	}
	for i, it := range plan.Items {
		if it.ID == id {
			return i, true
		}
	}
	return 0, false
}
