// Package busbacklog publishes what Redis itself holds on the bus's streams
// of every tenant with Agents: per stream kind (chat, wake, outbound) and
// consumer group, the entries delivered to a consumer and not acknowledged
// (pending) and those not yet delivered to the group (unread), and the age
// of the oldest pending entry. Each PicoBot process reports its own share of
// the pending entries (picobot_bus_pending_entries); this is the streams'
// own count, which a consumer that died can no longer report.
//
// It reads with XINFO GROUPS (one call per stream, pipelined), XPENDING's
// summary form for the streams with pending entries, and one SCAN of the
// keyspace per pass for the chat streams (one per chat), stopping at
// MaxChatStreams: its cost grows with the keys and the chats, and is bounded
// by the pass's caps.
package busbacklog

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	picobotv1alpha1 "github.com/picobot/picobot/api/v1alpha1"
	"github.com/picobot/picobot/runtime/cluster/wake"
)

// Defaults of Reader.
const (
	DefaultInterval = 30 * time.Second
	// DefaultMaxChatStreams caps the chat streams read per pass.
	DefaultMaxChatStreams = 10_000
	// maxUnreadCount caps the entries counted one by one when Redis cannot
	// say a group's lag (entries deleted after the group's position).
	maxUnreadCount = 1000
	// pipelineBatch is how many streams one pipeline asks about.
	pipelineBatch = 200
	// scanCount is the SCAN hint: keys looked at per call.
	scanCount = 1000
)

// Stream kinds of the stream label (as runtime/metrics names them).
const (
	StreamChat     = "chat"
	StreamWake     = "wake"
	StreamOutbound = "outbound"
)

// Entry states of picobot_bus_stream_entries.
const (
	StatePending = "pending"
	StateUnread  = "unread"
)

// knownGroups are the consumer groups PicoBot creates; any other group (a
// tenant's credentials may create one on its own streams) is "other", so
// the group label stays bounded.
var knownGroups = map[string]bool{"runtime": true, wake.GroupPods: true, "gateway": true}

// noGroup labels the unread entries of a stream no group reads yet (a chat
// whose runtime has not started).
const noGroup = "none"

// Reader is a manager.Runnable keeping the gauges up to date. It runs on
// the leader only: one reader is enough, and a second replica's series
// would add up to twice the backlog.
type Reader struct {
	Client client.Reader
	Redis  *redis.Client
	// Interval between passes (DefaultInterval when 0).
	Interval time.Duration
	// MaxChatStreams caps the chat streams read per pass
	// (DefaultMaxChatStreams when 0).
	MaxChatStreams int
	Clock          clock.PassiveClock

	entries *prometheus.GaugeVec
	oldest  *prometheus.GaugeVec
	streams *prometheus.GaugeVec
	pass    prometheus.Gauge
	// last are the series of the last pass (Update is not called
	// concurrently: Start's loop, or a test).
	last map[series]bool
}

// series is one label set of the gauges, group "" for those without one.
type series struct{ namespace, stream, group, state string }

// New returns a Reader registered with reg.
func New(c client.Reader, rdb *redis.Client, reg prometheus.Registerer) (*Reader, error) {
	r := &Reader{Client: c, Redis: rdb, Clock: clock.RealClock{},
		entries: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "picobot_bus_stream_entries",
			Help: "Entries of a tenant's bus streams of one kind (chat, wake, outbound) as Redis counts them per consumer group: pending (delivered, not acknowledged) or unread (not delivered to the group yet; group none: streams no group reads yet)."},
			[]string{"namespace", "stream", "group", "state"}),
		oldest: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "picobot_bus_stream_oldest_pending_seconds",
			Help: "Age of the oldest pending (delivered, not acknowledged) entry of a tenant's streams of one kind, from its stream id; 0 when none is pending."},
			[]string{"namespace", "stream"}),
		streams: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "picobot_bus_streams",
			Help: "Streams of a tenant of one kind that the last reading of Redis found."}, []string{"namespace", "stream"}),
		pass: prometheus.NewGauge(prometheus.GaugeOpts{Name: "picobot_bus_backlog_read_seconds",
			Help: "Time the last reading of the bus streams' backlog in Redis took."}),
	}
	for _, c := range []prometheus.Collector{r.entries, r.oldest, r.streams, r.pass} {
		if err := reg.Register(c); err != nil {
			return nil, errors.Join(errors.New("failed to register the bus backlog gauges"), err)
		}
	}
	return r, nil
}

// NeedLeaderElection implements manager.LeaderElectionRunnable.
func (r *Reader) NeedLeaderElection() bool { return true }

// Start implements manager.Runnable.
func (r *Reader) Start(ctx context.Context) error {
	interval := r.Interval
	if interval <= 0 {
		interval = DefaultInterval
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		if err := r.Update(ctx); err != nil && ctx.Err() == nil {
			log.FromContext(ctx).WithName("bus-backlog").Error(err, "Failed to read the bus backlog")
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// stream is one stream to read and what it counts towards.
type stream struct{ key, namespace, kind string }

// reading is what one stream's groups hold.
type reading struct {
	pending, unread map[string]int64 // by group label
	oldest          time.Time        // of the oldest pending entry; zero when none
}

// Update reads the backlog once and replaces the gauges' series: those of
// namespaces that no longer have Agents go.
func (r *Reader) Update(ctx context.Context) error {
	start := r.Clock.Now()
	var agents picobotv1alpha1.AgentList
	if err := r.Client.List(ctx, &agents); err != nil {
		return err
	}
	namespaces := map[string]bool{}
	var streams []stream
	for _, a := range agents.Items {
		streams = append(streams, stream{wake.Stream(a.Namespace, a.Name), a.Namespace, StreamWake})
		if !namespaces[a.Namespace] {
			namespaces[a.Namespace] = true
			streams = append(streams, stream{wake.OutboundStream(a.Namespace), a.Namespace, StreamOutbound})
		}
	}
	chats, err := r.chatStreams(ctx, namespaces)
	if err != nil {
		return err
	}
	streams = append(streams, chats...)

	entries := map[series]float64{}
	oldest := map[series]time.Time{}
	counted := map[series]float64{}
	for ns := range namespaces {
		for _, kind := range []string{StreamChat, StreamWake, StreamOutbound} {
			counted[series{ns, kind, "", ""}] = 0
		}
	}
	for i := 0; i < len(streams); i += pipelineBatch {
		batch := streams[i:min(i+pipelineBatch, len(streams))]
		readings, err := r.read(ctx, batch)
		if err != nil {
			return err
		}
		for j, rd := range readings {
			if rd == nil {
				continue // gone meanwhile, or never written
			}
			s := batch[j]
			counted[series{s.namespace, s.kind, "", ""}]++
			for group, n := range rd.pending {
				entries[series{s.namespace, s.kind, group, StatePending}] += float64(n)
			}
			for group, n := range rd.unread {
				entries[series{s.namespace, s.kind, group, StateUnread}] += float64(n)
			}
			key := series{s.namespace, s.kind, "", ""}
			if o, ok := oldest[key]; !rd.oldest.IsZero() && (!ok || rd.oldest.Before(o)) {
				oldest[key] = rd.oldest
			}
		}
	}
	now := r.Clock.Now()
	seen := map[series]bool{}
	for s, n := range counted {
		seen[s] = true
		r.streams.WithLabelValues(s.namespace, s.stream).Set(n)
		age := 0.0
		if o, ok := oldest[s]; ok {
			age = max(now.Sub(o), 0).Seconds()
		}
		r.oldest.WithLabelValues(s.namespace, s.stream).Set(age)
	}
	for s, n := range entries {
		seen[s] = true
		r.entries.WithLabelValues(s.namespace, s.stream, s.group, s.state).Set(n)
	}
	r.prune(seen)
	r.pass.Set(r.Clock.Since(start).Seconds())
	return nil
}

// prune drops the series of the last pass that this one did not set.
func (r *Reader) prune(seen map[series]bool) {
	for s := range r.last {
		if seen[s] {
			continue
		}
		if s.state == "" {
			r.streams.DeleteLabelValues(s.namespace, s.stream)
			r.oldest.DeleteLabelValues(s.namespace, s.stream)
		} else {
			r.entries.DeleteLabelValues(s.namespace, s.stream, s.group, s.state)
		}
	}
	r.last = seen
}

// chatStreams finds the chat streams of namespaces ({tenant:agent}:chat:...)
// with one SCAN of the keyspace, up to MaxChatStreams.
func (r *Reader) chatStreams(ctx context.Context, namespaces map[string]bool) ([]stream, error) {
	maxStreams := r.MaxChatStreams
	if maxStreams <= 0 {
		maxStreams = DefaultMaxChatStreams
	}
	var out []stream
	var cursor uint64
	for {
		keys, next, err := r.Redis.ScanType(ctx, cursor, "{*}:"+StreamChat+":*", scanCount, "stream").Result()
		if err != nil {
			return nil, err
		}
		for _, k := range keys {
			if ns := tenantOf(k); namespaces[ns] {
				out = append(out, stream{k, ns, StreamChat})
			}
		}
		if len(out) >= maxStreams {
			log.FromContext(ctx).WithName("bus-backlog").V(1).Info("Read only part of the chat streams", "max", maxStreams)
			return out[:maxStreams], nil
		}
		if cursor = next; cursor == 0 {
			return out, nil
		}
	}
}

// tenantOf is the tenant of a key bus.Key built: the hash tag's first part.
// Namespace names have none of the characters bus.Key escapes.
func tenantOf(key string) string {
	tag, ok := strings.CutPrefix(key, "{")
	if !ok {
		return ""
	}
	tag, _, _ = strings.Cut(tag, "}")
	tenant, _, _ := strings.Cut(tag, ":")
	return tenant
}

// groupLabel bounds a group name to the ones PicoBot creates.
func groupLabel(name string) string {
	if knownGroups[name] {
		return name
	}
	return "other"
}

// read asks Redis about a batch of streams: their groups, then the length
// of the streams without one, the unread entries of groups whose lag Redis
// cannot say, and the oldest pending entry of groups with some. A stream
// that does not exist reads nil.
func (r *Reader) read(ctx context.Context, batch []stream) ([]*reading, error) {
	pipe := r.Redis.Pipeline()
	infos := make([]*redis.XInfoGroupsCmd, len(batch))
	for i, s := range batch {
		infos[i] = pipe.XInfoGroups(ctx, s.key)
	}
	if _, err := pipe.Exec(ctx); err != nil && !isNoSuchKey(err) {
		return nil, err
	}
	out := make([]*reading, len(batch))
	type later struct {
		i     int
		group string
		len   *redis.IntCmd
		rng   *redis.XMessageSliceCmd
		pend  *redis.XPendingCmd
	}
	var more []later
	pipe = r.Redis.Pipeline()
	for i, cmd := range infos {
		groups, err := cmd.Result()
		if isNoSuchKey(err) {
			continue
		}
		if err != nil {
			return nil, err
		}
		out[i] = &reading{pending: map[string]int64{}, unread: map[string]int64{}}
		key := batch[i].key
		if len(groups) == 0 {
			more = append(more, later{i: i, group: noGroup, len: pipe.XLen(ctx, key)})
		}
		for _, g := range groups {
			label := groupLabel(g.Name)
			out[i].pending[label] += g.Pending
			if g.Lag >= 0 {
				out[i].unread[label] += g.Lag
			} else {
				more = append(more, later{i: i, group: label, rng: pipe.XRangeN(ctx, key, "("+g.LastDeliveredID, "+", maxUnreadCount)})
			}
			if g.Pending > 0 {
				more = append(more, later{i: i, group: label, pend: pipe.XPending(ctx, key, g.Name)})
			}
		}
	}
	if len(more) == 0 {
		return out, nil
	}
	if _, err := pipe.Exec(ctx); err != nil && !isNoSuchKey(err) && !isNoGroup(err) {
		return nil, err
	}
	for _, m := range more {
		rd := out[m.i]
		switch {
		case m.len != nil:
			if n, err := m.len.Result(); err == nil {
				rd.unread[m.group] += n
			}
		case m.rng != nil:
			if msgs, err := m.rng.Result(); err == nil {
				rd.unread[m.group] += int64(len(msgs))
			}
		case m.pend != nil:
			p, err := m.pend.Result()
			if err != nil || p.Count == 0 {
				continue
			}
			if at, ok := idTime(p.Lower); ok && (rd.oldest.IsZero() || at.Before(rd.oldest)) {
				rd.oldest = at
			}
		}
	}
	return out, nil
}

// idTime is the time a stream entry id ("<ms>-<seq>") was given at.
func idTime(id string) (time.Time, bool) {
	ms, _, _ := strings.Cut(id, "-")
	n, err := strconv.ParseInt(ms, 10, 64)
	if err != nil {
		return time.Time{}, false
	}
	return time.UnixMilli(n), true
}

func isNoSuchKey(err error) bool {
	return err != nil && strings.Contains(err.Error(), "no such key")
}

func isNoGroup(err error) bool {
	return err != nil && strings.HasPrefix(err.Error(), "NOGROUP")
}
