package channel

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"

	picobotv1alpha1 "github.com/picobot/picobot/api/v1alpha1"
	"github.com/picobot/picobot/runtime/store"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"))
}

// inbox records what a Manager hands on and can be told to fail.
type inbox struct {
	mu     sync.Mutex
	got    []handed
	fail   int // fail this many calls before succeeding
	notify chan struct{}
}

type handed struct {
	Tenant, Agent string
	In            Inbound
}

func newInbox() *inbox { return &inbox{notify: make(chan struct{}, 100)} }

func (b *inbox) handle(ctx context.Context, agent string, in Inbound) error {
	tenant, err := store.TenantFrom(ctx)
	if err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.fail > 0 {
		b.fail--
		return errors.New("queue unavailable")
	}
	b.got = append(b.got, handed{tenant, agent, in})
	select {
	case b.notify <- struct{}{}:
	default:
	}
	return nil
}

func (b *inbox) failNext(n int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.fail = n
}

func (b *inbox) all() []handed {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]handed(nil), b.got...)
}

// testEnv is a Manager with one agent "bot" in tenant "team-a".
type testEnv struct {
	m     *Manager
	box   *inbox
	clock *clocktesting.FakeClock
	h     http.Handler
}

const (
	tenant    = "team-a"
	agentName = "bot"
)

func newEnv(t testing.TB, opts Options, channels []picobotv1alpha1.Channel, secrets map[string]map[string]string) *testEnv {
	t.Helper()
	e := &testEnv{box: newInbox(), clock: clocktesting.NewFakeClock(time.Now())}
	opts.OnInbound = e.box.handle
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	if opts.Clock == nil {
		opts.Clock = e.clock
	}
	e.m = NewManager(opts)
	err := e.m.SetAgent(tenant, agentSpec(channels...), func(name string) *corev1.Secret {
		if s, ok := secrets[name]; ok {
			return secret(s)
		}
		return nil
	})
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	e.h = e.m.Handler()
	return e
}

func agentSpec(channels ...picobotv1alpha1.Channel) *picobotv1alpha1.Agent {
	return &picobotv1alpha1.Agent{ObjectMeta: metav1.ObjectMeta{Name: agentName, Namespace: tenant},
		Spec: picobotv1alpha1.AgentSpec{Channels: channels}}
}

func secret(kv map[string]string) *corev1.Secret {
	s := &corev1.Secret{Data: map[string][]byte{}}
	for k, v := range kv {
		s.Data[k] = []byte(v)
	}
	return s
}

func ch(typ picobotv1alpha1.ChannelType, name, secretName string) picobotv1alpha1.Channel {
	c := picobotv1alpha1.Channel{Type: typ, Name: name}
	if secretName != "" {
		c.SecretRef = &corev1.LocalObjectReference{Name: secretName}
	}
	return c
}

// post sends a webhook request and returns the status and decoded answer.
func (e *testEnv) post(t testing.TB, path string, body []byte, header map[string]string) (int, map[string]any) {
	t.Helper()
	req := httptest.NewRequest(http.MethodPost, path, bytes.NewReader(body))
	for k, v := range header {
		req.Header.Set(k, v)
	}
	rec := httptest.NewRecorder()
	e.h.ServeHTTP(rec, req)
	var out map[string]any
	_ = json.Unmarshal(rec.Body.Bytes(), &out)
	return rec.Code, out
}

// errorCode is the "code" of a JSON error answer.
func errorCode(ans map[string]any) string {
	if e, ok := ans["error"].(map[string]any); ok {
		s, _ := e["code"].(string)
		return s
	}
	return ""
}

func testdata(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// start runs the manager's background work until the test ends.
func (e *testEnv) start(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = e.m.Start(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
}

func newRecorder() *httptest.ResponseRecorder { return httptest.NewRecorder() }
