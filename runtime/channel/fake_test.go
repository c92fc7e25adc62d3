package channel

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"path"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
)

// recorded is one request a fake platform received.
type recorded struct {
	Key    string // the API method or path the fake routes on
	Header http.Header
	Query  map[string]string
	Body   []byte
	// Form holds multipart fields; Files maps a file field to its name and data.
	Form  map[string]string
	Files map[string]recordedFile
}

type recordedFile struct {
	Name, MediaType string
	Data            []byte
}

// JSON decodes the body as a JSON object.
func (r recorded) JSON() map[string]any {
	var m map[string]any
	_ = json.Unmarshal(r.Body, &m)
	return m
}

// canned is a scripted answer.
type canned struct {
	status int
	header map[string]string
	body   any
}

// fakeAPI is a local stand-in for a platform's API: it records every
// request, answers from routes, and can be told to fail the next calls of a
// method (rate limits, server errors, refusals).
type fakeAPI struct {
	*httptest.Server
	key func(r *http.Request) string

	mu       sync.Mutex
	reqs     []recorded
	failures map[string][]canned
	routes   map[string]func(r recorded) canned
}

func newFakeAPI(t *testing.T, key func(r *http.Request) string) *fakeAPI {
	f := &fakeAPI{key: key, failures: map[string][]canned{}, routes: map[string]func(recorded) canned{}}
	f.Server = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.Close)
	return f
}

// route sets the answer of a method.
func (f *fakeAPI) route(key string, fn func(r recorded) canned) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.routes[key] = fn
}

// failNext queues answers for the next calls of a method.
func (f *fakeAPI) failNext(key string, answers ...canned) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failures[key] = append(f.failures[key], answers...)
}

// requests returns the recorded requests of a method ("" for all).
func (f *fakeAPI) requests(key string) []recorded {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []recorded
	for _, r := range f.reqs {
		if key == "" || r.Key == key {
			out = append(out, r)
		}
	}
	return out
}

func (f *fakeAPI) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	rec := recorded{Key: f.key(r), Header: r.Header.Clone(), Body: body, Query: map[string]string{},
		Form: map[string]string{}, Files: map[string]recordedFile{}}
	for k, v := range r.URL.Query() {
		rec.Query[k] = v[0]
	}
	if mt, params, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err == nil && strings.HasPrefix(mt, "multipart/") {
		mr := multipart.NewReader(bytes.NewReader(body), params["boundary"])
		for {
			p, err := mr.NextPart()
			if err != nil {
				break
			}
			data, _ := io.ReadAll(p)
			if p.FileName() != "" {
				rec.Files[p.FormName()] = recordedFile{Name: p.FileName(), MediaType: p.Header.Get("Content-Type"), Data: data}
			} else {
				rec.Form[p.FormName()] = string(data)
			}
		}
	}
	f.mu.Lock()
	f.reqs = append(f.reqs, rec)
	var ans canned
	if q := f.failures[rec.Key]; len(q) > 0 {
		ans, f.failures[rec.Key] = q[0], q[1:]
	} else if fn := f.routes[rec.Key]; fn != nil {
		ans = fn(rec)
	} else {
		ans = canned{status: http.StatusNotFound, body: map[string]any{"ok": false, "error": "no route " + rec.Key}}
	}
	f.mu.Unlock()
	for k, v := range ans.header {
		w.Header().Set(k, v)
	}
	if ans.status == 0 {
		ans.status = http.StatusOK
	}
	switch b := ans.body.(type) {
	case []byte:
		w.WriteHeader(ans.status)
		_, _ = w.Write(b)
	default:
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(ans.status)
		_ = json.NewEncoder(w).Encode(b)
	}
}

// lastSegment routes on the last path element (Telegram and Slack methods).
func lastSegment(r *http.Request) string { return path.Base(r.URL.Path) }

// urlPath routes on the whole path (Feishu).
func urlPath(r *http.Request) string { return r.URL.Path }

// sendErrorCase is a platform failure and how Send must classify it.
type sendErrorCase struct {
	name       string
	answer     canned
	transient  bool
	retryAfter time.Duration
	code       string
}

// checkSendErrors makes the platform fail the next call of method with each
// case's answer and checks the SendError of c.Send.
func checkSendErrors(t *testing.T, api *fakeAPI, method string, c Channel, chatID string, cases []sendErrorCase) {
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			api.failNext(method, tc.answer)
			_, err := c.Send(t.Context(), Outbound{ChatID: chatID, Text: "x"})
			var se *SendError
			g.Expect(errors.As(err, &se)).To(BeTrue(), "%v", err)
			g.Expect(se.Transient).To(Equal(tc.transient))
			g.Expect(se.RetryAfter).To(Equal(tc.retryAfter))
			g.Expect(se.Code).To(Equal(tc.code))
		})
	}
}
