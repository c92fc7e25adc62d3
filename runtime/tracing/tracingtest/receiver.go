// Package tracingtest is a real OTLP trace receiver for tests: a gRPC server
// of the OTLP TraceService and an HTTP server of POST /v1/traces
// (application/x-protobuf), both speaking the OTLP wire protocol with the
// collector service types of go.opentelemetry.io/proto/otlp. What PicoBot's
// exporters send it is kept as Spans, for a test to assert the span tree of
// a turn. It is what an OpenTelemetry Collector's otlpreceiver does, without
// the collector's hundreds of modules.
package tracingtest

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
)

// Span is one received span, flattened.
type Span struct {
	// Service is the service.name of the span's resource.
	Service  string
	TraceID  string
	SpanID   string
	ParentID string // "" for a root
	Name     string
	Kind     tracepb.Span_SpanKind
	// Attrs holds the span's attributes as strings (ints in decimal).
	Attrs map[string]string
	// Links are the "traceID/spanID" of the spans it links to.
	Links []string
	// Error says the span's status is Error.
	Error bool
}

// Receiver is a running OTLP receiver.
type Receiver struct {
	// GRPCEndpoint and HTTPEndpoint are the URLs to export to
	// (--otlp-endpoint or OTEL_EXPORTER_OTLP_ENDPOINT) with each protocol.
	GRPCEndpoint, HTTPEndpoint string

	mu    sync.Mutex
	spans []Span
}

type traceService struct {
	coltracepb.UnimplementedTraceServiceServer
	r *Receiver
}

func (s traceService) Export(_ context.Context, req *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	s.r.add(req)
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

// Start starts a receiver on loopback ports, stopped when t ends.
func Start(t testing.TB) *Receiver {
	t.Helper()
	r, stop, err := New()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	return r
}

// New starts a receiver on loopback ports; stop stops it. For a TestMain,
// where there is no testing.TB yet.
func New() (r *Receiver, stop func(), err error) {
	r = &Receiver{}
	gl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, nil, err
	}
	hl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		_ = gl.Close()
		return nil, nil, err
	}
	gs := grpc.NewServer()
	coltracepb.RegisterTraceServiceServer(gs, traceService{r: r})
	go func() { _ = gs.Serve(gl) }()
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/traces", r.serveHTTP)
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = hs.Serve(hl) }()
	r.GRPCEndpoint, r.HTTPEndpoint = "http://"+gl.Addr().String(), "http://"+hl.Addr().String()
	return r, func() { gs.Stop(); _ = hs.Close() }, nil
}

// serveHTTP is OTLP/HTTP with binary protobuf bodies (the Go exporter's).
func (r *Receiver) serveHTTP(w http.ResponseWriter, req *http.Request) {
	if ct := req.Header.Get("Content-Type"); ct != "application/x-protobuf" {
		http.Error(w, fmt.Sprintf("content type %q is not application/x-protobuf", ct), http.StatusUnsupportedMediaType)
		return
	}
	b, err := io.ReadAll(req.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var body coltracepb.ExportTraceServiceRequest
	if err := proto.Unmarshal(b, &body); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	r.add(&body)
	out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(out)
}

func (r *Receiver) add(req *coltracepb.ExportTraceServiceRequest) {
	var got []Span
	for _, rs := range req.GetResourceSpans() {
		service := attrs(rs.GetResource().GetAttributes())["service.name"]
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				sp := Span{Service: service, TraceID: hex.EncodeToString(s.GetTraceId()), SpanID: hex.EncodeToString(s.GetSpanId()),
					Name: s.GetName(), Kind: s.GetKind(), Attrs: attrs(s.GetAttributes()),
					Error: s.GetStatus().GetCode() == tracepb.Status_STATUS_CODE_ERROR}
				if len(s.GetParentSpanId()) > 0 {
					sp.ParentID = hex.EncodeToString(s.GetParentSpanId())
				}
				for _, l := range s.GetLinks() {
					sp.Links = append(sp.Links, hex.EncodeToString(l.GetTraceId())+"/"+hex.EncodeToString(l.GetSpanId()))
				}
				got = append(got, sp)
			}
		}
	}
	r.mu.Lock()
	r.spans = append(r.spans, got...)
	r.mu.Unlock()
}

func attrs(kvs []*commonpb.KeyValue) map[string]string {
	m := make(map[string]string, len(kvs))
	for _, kv := range kvs {
		v := kv.GetValue()
		switch v.GetValue().(type) {
		case *commonpb.AnyValue_IntValue:
			m[kv.GetKey()] = fmt.Sprint(v.GetIntValue())
		case *commonpb.AnyValue_BoolValue:
			m[kv.GetKey()] = fmt.Sprint(v.GetBoolValue())
		case *commonpb.AnyValue_DoubleValue:
			m[kv.GetKey()] = fmt.Sprint(v.GetDoubleValue())
		default:
			m[kv.GetKey()] = v.GetStringValue()
		}
	}
	return m
}

// Spans returns the spans received so far.
func (r *Receiver) Spans() []Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.spans)
}

// Trace returns the spans of trace id.
func (r *Receiver) Trace(id string) []Span {
	var out []Span
	for _, s := range r.Spans() {
		if s.TraceID == id {
			out = append(out, s)
		}
	}
	return out
}

// Named returns the spans named name.
func (r *Receiver) Named(name string) []Span {
	var out []Span
	for _, s := range r.Spans() {
		if s.Name == name {
			out = append(out, s)
		}
	}
	return out
}

// Tree renders the spans of one trace as an indented tree of names, children
// sorted by name so the tree does not depend on timing: what a test
// compares against. A span
// whose parent is not among them (a remote parent not exported, or one
// missing) is shown at the top with a "?" mark.
func Tree(spans []Span) string {
	ids := map[string]bool{}
	for _, s := range spans {
		ids[s.SpanID] = true
	}
	children := map[string][]Span{}
	var roots []Span
	for _, s := range spans {
		if s.ParentID == "" || !ids[s.ParentID] {
			roots = append(roots, s)
			continue
		}
		children[s.ParentID] = append(children[s.ParentID], s)
	}
	var b strings.Builder
	var walk func(s Span, depth int)
	walk = func(s Span, depth int) {
		b.WriteString(strings.Repeat("  ", depth))
		if s.ParentID != "" && !ids[s.ParentID] {
			b.WriteString("?")
		}
		b.WriteString(s.Name)
		b.WriteString("\n")
		kids := children[s.SpanID]
		slices.SortStableFunc(kids, func(a, b Span) int { return strings.Compare(a.Name, b.Name) })
		for _, k := range kids {
			walk(k, depth+1)
		}
	}
	for _, r := range roots {
		walk(r, 0)
	}
	return b.String()
}

// Find returns the one span of spans named name, an error when there is none
// or several.
func Find(spans []Span, name string) (Span, error) {
	var found []Span
	for _, s := range spans {
		if s.Name == name {
			found = append(found, s)
		}
	}
	switch len(found) {
	case 1:
		return found[0], nil
	case 0:
		return Span{}, fmt.Errorf("no span %q among %d", name, len(spans))
	}
	return Span{}, errors.New("several spans named " + name)
}
