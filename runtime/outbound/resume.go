package outbound

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/picobot/picobot/runtime/channel"
	"github.com/picobot/picobot/runtime/store"
)

// maxResumeFile caps an attachment read back for a resumed delivery.
const maxResumeFile = 64 << 20

// Resume retries the deliveries of the tenant in ctx that a crash left
// pending, oldest first, and returns how many it finished (delivered or
// failed). Deliveries younger than MaxWait are left alone: a live
// dispatcher (this one, or another replica) may still be working on them;
// call Resume at start-up and then periodically. A delivery whose stored
// message or attachments are gone is marked failed.
func (d *Dispatcher) Resume(ctx context.Context) (int, error) {
	tenant, err := store.TenantFrom(ctx)
	if err != nil {
		return 0, fmt.Errorf("failed to resume deliveries: %w", err)
	}
	done := 0
	seen := map[string]bool{}
	for {
		page, err := d.cfg.Store.ListDeliveries(ctx, store.DeliveryFilter{Status: store.DeliveryPending})
		if err != nil {
			return done, fmt.Errorf("failed to list pending deliveries: %w", err)
		}
		progressed := false
		for _, del := range page {
			if seen[del.ID] {
				continue
			}
			seen[del.ID] = true
			if d.cfg.Clock.Since(del.CreatedAt) < d.cfg.MaxWait {
				return done, nil // this and all younger ones may be in flight
			}
			progressed = true
			if err := d.resumeOne(ctx, tenant, del); err != nil {
				if ctx.Err() != nil {
					return done, ctx.Err()
				}
				d.cfg.Log.Info("Resumed delivery failed", "delivery", del.ID, "err", err)
			}
			done++
		}
		if !progressed || len(page) < store.DefaultListLimit {
			return done, nil
		}
	}
}

// resumeOne reloads a pending delivery's message and attempts it again.
func (d *Dispatcher) resumeOne(ctx context.Context, tenant string, del store.Delivery) error {
	res := Result{DeliveryID: del.ID, SessionID: del.SessionID, Status: store.DeliveryPending, Attempts: del.Attempts}
	msgs, err := d.cfg.Store.LoadMessages(ctx, del.SessionID, store.LoadOptions{Since: del.CreatedAt.Add(-time.Millisecond)})
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("failed to load the message of delivery %s: %w", del.ID, err)
	}
	var stored *store.Message
	for i := range msgs {
		if msgs[i].ID == "out_"+del.ID {
			stored = &msgs[i]
			break
		}
	}
	if stored == nil {
		_, err := d.fail(ctx, res, errors.New("the message was lost before it was stored (crash); it cannot be resent"))
		return err
	}
	j := &job{tenant: tenant, agent: stored.Meta[MetaAgent], target: Target{Channel: del.Channel, ChatID: del.ChatID},
		id: del.ID, sessionID: del.SessionID, messageID: stored.ID, origin: stored.Meta[MetaOrigin],
		text: storedText(stored.Content, stored.Meta[MetaFiles] != "")}
	if ids := stored.Meta[MetaFiles]; ids != "" {
		if d.cfg.Artifacts == nil {
			_, err := d.fail(ctx, res, errors.New("its attachments cannot be read back: no artifact store is configured"))
			return err
		}
		for _, id := range strings.Split(ids, ",") {
			f, a, err := d.readArtifact(ctx, id)
			if err != nil {
				_, ferr := d.fail(ctx, res, fmt.Errorf("its attachment %s cannot be read back: %w", id, err))
				return ferr
			}
			j.files, j.artifacts = append(j.files, f), append(j.artifacts, a)
		}
	}
	if err := d.route(j); err != nil {
		_, ferr := d.fail(ctx, res, err)
		return ferr
	}
	_, err = d.run(ctx, j, res)
	return err
}

// storedText undoes outboundContent's attachment list.
func storedText(content string, hasFiles bool) string {
	if !hasFiles {
		return content
	}
	if i := strings.LastIndex(content, "[attachments: "); i >= 0 {
		return strings.TrimSuffix(content[:i], "\n\n")
	}
	return content
}

func (d *Dispatcher) readArtifact(ctx context.Context, id string) (channel.File, store.Artifact, error) {
	rc, a, err := d.cfg.Artifacts.Open(ctx, id)
	if err != nil {
		return channel.File{}, store.Artifact{}, err
	}
	defer func() { _ = rc.Close() }()
	data, err := io.ReadAll(io.LimitReader(rc, maxResumeFile+1))
	if err != nil {
		return channel.File{}, store.Artifact{}, fmt.Errorf("failed to read artifact %s: %w", id, err)
	}
	if len(data) > maxResumeFile {
		return channel.File{}, store.Artifact{}, fmt.Errorf("artifact %s exceeds %d bytes", id, maxResumeFile)
	}
	return channel.File{Name: a.Name, MediaType: a.MediaType, Size: a.Size, Data: data}, a, nil
}
