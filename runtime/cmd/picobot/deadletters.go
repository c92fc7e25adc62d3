package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"text/tabwriter"
	"time"

	"github.com/picobot/picobot/runtime/bus"
	"github.com/picobot/picobot/runtime/bus/redisbus"
	"github.com/picobot/picobot/runtime/protocol"
	"github.com/picobot/picobot/runtime/sessionrt"
)

// deadLetterBus is what `picobot dead-letters` needs of the bus: Redis
// streams it reads without consuming, and entries it deletes.
type deadLetterBus interface {
	bus.Bus
	Range(ctx context.Context, stream string, count int64) ([]bus.Message, error)
	Delete(ctx context.Context, stream string, seqs ...string) error
}

// maxDeadLetters bounds what one call lists or requeues.
const maxDeadLetters = 10000

// deadLetters is `picobot dead-letters`: it lists a tenant's messages that
// session runtimes set aside after too many deliveries (cluster mode), and
// requeues them on their chats once the cause is fixed.
func deadLetters(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("dead-letters", flag.ContinueOnError)
	tenant := fs.String("tenant", "", "Tenant (namespace) whose dead letters to list or requeue. Required.")
	redisURL := fs.String("redis-url", os.Getenv("PICOBOT_REDIS_URL"), "Redis of the bus (default $PICOBOT_REDIS_URL).")
	fs.Usage = func() {
		_, _ = fmt.Fprint(fs.Output(), "Usage: picobot dead-letters --tenant NS [requeue MESSAGE_ID... | requeue --all]\n\n"+
			"Lists the tenant's messages set aside after too many deliveries, or puts them back on their chats.\n\n")
		fs.PrintDefaults()
	}
	if err := parseFlags(fs, args, out, os.Stderr); err != nil {
		return err
	}
	if *tenant == "" || *redisURL == "" {
		fs.Usage()
		return errors.New("--tenant and a Redis URL (--redis-url or $PICOBOT_REDIS_URL) are required")
	}
	b, err := redisbus.Open(*redisURL, redisbus.Options{})
	if err != nil {
		return fmt.Errorf("failed to connect to Redis: %w", err)
	}
	defer func() { _ = b.Close() }()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rest := fs.Args()
	if len(rest) == 0 {
		return listDeadLetters(ctx, b, *tenant, out)
	}
	if rest[0] != "requeue" || len(rest) < 2 {
		fs.Usage()
		return fmt.Errorf("unknown arguments %q: want nothing (list) or requeue MESSAGE_ID... or requeue --all", rest)
	}
	return requeueDeadLetters(ctx, b, *tenant, rest[1:], out)
}

// listDeadLetters prints the tenant's dead letters, oldest first.
func listDeadLetters(ctx context.Context, b deadLetterBus, tenant string, out io.Writer) error {
	msgs, err := b.Range(ctx, sessionrt.DeadLetterStream(tenant), maxDeadLetters)
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	// Write errors surface at Flush.
	_, _ = fmt.Fprintln(tw, "MESSAGE ID\tDELIVERIES\tCHAT STREAM\tTEXT")
	for _, m := range msgs {
		dl, err := sessionrt.DecodeDeadLetter(m)
		if err != nil {
			_, _ = fmt.Fprintf(tw, "%s\t-\t-\tunreadable: %v\n", m.ID, err)
			continue
		}
		text := "(unreadable message)"
		if in, err := protocol.DecodeInbound(dl.Payload); err == nil {
			text = in.Text
		}
		if len(text) > 60 {
			text = text[:57] + "..."
		}
		_, _ = fmt.Fprintf(tw, "%s\t%d\t%s\t%q\n", dl.MessageID, dl.Deliveries, dl.Stream, text)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err = fmt.Fprintf(out, "%d dead letters of tenant %s\n", len(msgs), tenant)
	return err
}

// requeueDeadLetters puts the named dead letters (or all with --all) back on
// their chats and removes them from the dead-letter stream.
func requeueDeadLetters(ctx context.Context, b deadLetterBus, tenant string, ids []string, out io.Writer) error {
	stream := sessionrt.DeadLetterStream(tenant)
	msgs, err := b.Range(ctx, stream, maxDeadLetters)
	if err != nil {
		return err
	}
	all := len(ids) == 1 && ids[0] == "--all"
	want := map[string]bool{}
	for _, id := range ids {
		want[id] = true
	}
	n := 0
	for _, m := range msgs {
		dl, err := sessionrt.DecodeDeadLetter(m)
		if err != nil || (!all && !want[dl.MessageID]) {
			continue
		}
		if err := sessionrt.Requeue(ctx, b, dl); err != nil {
			return err
		}
		if err := b.Delete(ctx, stream, m.Seq); err != nil {
			return err
		}
		delete(want, dl.MessageID)
		_, _ = fmt.Fprintf(out, "requeued %s on %s\n", dl.MessageID, dl.Stream) // done either way
		n++
	}
	if !all && len(want) > 0 {
		missing := make([]string, 0, len(want))
		for id := range want {
			missing = append(missing, id)
		}
		return fmt.Errorf("no dead letter of tenant %s has message id %q", tenant, missing)
	}
	_, err = fmt.Fprintf(out, "%d requeued\n", n)
	return err
}
