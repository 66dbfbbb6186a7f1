// Package otlptest is an OTLP trace receiver on loopback for tests: it
// takes spans over HTTP (http/protobuf) or gRPC, as a collector would, and
// keeps every byte it received, so that a test can look for what must not
// be in a trace.
package otlptest

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"sort"
	"strings"
	"sync"
	"testing"

	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
)

// Span is one received span, flattened.
type Span struct {
	Name                          string
	TraceID, SpanID, ParentSpanID string // hex; ParentSpanID "" for a root
	Kind                          string
	Status                        string // "STATUS_CODE_ERROR" and the like
	Attrs                         map[string]string
	// Service is the resource's service.name.
	Service string
}

// Receiver keeps what an exporter sent it.
type Receiver struct {
	// Endpoint is what OTEL_EXPORTER_OTLP_ENDPOINT takes:
	// "http://127.0.0.1:PORT".
	Endpoint string

	mu    sync.Mutex // guards raw and spans
	raw   [][]byte
	spans []Span
}

// NewHTTP starts a receiver of OTLP over HTTP (POST /v1/traces, protobuf,
// gzipped or not), stopped on cleanup.
func NewHTTP(tb testing.TB) *Receiver {
	tb.Helper()
	ln, r := listen(tb)
	srv := &http.Server{Handler: http.HandlerFunc(r.serveHTTP)}
	go srv.Serve(ln)
	tb.Cleanup(func() { srv.Close() })
	return r
}

// listen opens a loopback port for a receiver.
func listen(tb testing.TB) (net.Listener, *Receiver) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	return ln, &Receiver{Endpoint: "http://" + ln.Addr().String()}
}

func (r *Receiver) serveHTTP(w http.ResponseWriter, req *http.Request) {
	if req.Method != http.MethodPost || req.URL.Path != "/v1/traces" {
		http.Error(w, "want POST /v1/traces", http.StatusNotFound)
		return
	}
	body, err := io.ReadAll(io.LimitReader(req.Body, 64<<20))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if req.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(bytes.NewReader(body))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if body, err = io.ReadAll(zr); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
	}
	var msg collectortrace.ExportTraceServiceRequest
	if err := proto.Unmarshal(body, &msg); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	// The raw request, headers included: an exporter must not send a
	// secret anywhere.
	var head bytes.Buffer
	req.Header.Write(&head)
	r.add(append(head.Bytes(), body...), &msg)
	reply, _ := proto.Marshal(&collectortrace.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	w.Write(reply)
}

// NewGRPC starts a receiver of OTLP over gRPC (cleartext), stopped on
// cleanup.
func NewGRPC(tb testing.TB) *Receiver {
	tb.Helper()
	ln, r := listen(tb)
	gs := grpc.NewServer()
	collectortrace.RegisterTraceServiceServer(gs, grpcTraces{r: r})
	go gs.Serve(ln)
	tb.Cleanup(gs.Stop)
	return r
}

type grpcTraces struct {
	collectortrace.UnimplementedTraceServiceServer
	r *Receiver
}

func (g grpcTraces) Export(_ context.Context, msg *collectortrace.ExportTraceServiceRequest) (*collectortrace.ExportTraceServiceResponse, error) {
	raw, err := proto.Marshal(msg)
	if err != nil {
		return nil, err
	}
	g.r.add(raw, msg)
	return &collectortrace.ExportTraceServiceResponse{}, nil
}

func (r *Receiver) add(raw []byte, msg *collectortrace.ExportTraceServiceRequest) {
	var spans []Span
	for _, rs := range msg.GetResourceSpans() {
		service := attrs(rs.GetResource().GetAttributes())["service.name"]
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				parent := ""
				if len(s.GetParentSpanId()) > 0 {
					parent = hex.EncodeToString(s.GetParentSpanId())
				}
				spans = append(spans, Span{
					Name: s.GetName(), TraceID: hex.EncodeToString(s.GetTraceId()), SpanID: hex.EncodeToString(s.GetSpanId()),
					ParentSpanID: parent, Kind: s.GetKind().String(), Status: s.GetStatus().GetCode().String(),
					Attrs: attrs(s.GetAttributes()), Service: service,
				})
				// Events and links are kept in raw: a scan finds them.
			}
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.raw = append(r.raw, raw)
	r.spans = append(r.spans, spans...)
}

// attrs flattens OTLP attributes to strings.
func attrs(kvs []*commonpb.KeyValue) map[string]string {
	m := make(map[string]string, len(kvs))
	for _, kv := range kvs {
		v := kv.GetValue()
		switch x := v.GetValue().(type) {
		case *commonpb.AnyValue_StringValue:
			m[kv.GetKey()] = x.StringValue
		case *commonpb.AnyValue_IntValue:
			m[kv.GetKey()] = fmt.Sprint(x.IntValue)
		case *commonpb.AnyValue_BoolValue:
			m[kv.GetKey()] = fmt.Sprint(x.BoolValue)
		default:
			m[kv.GetKey()] = v.String()
		}
	}
	return m
}

// Spans returns the spans received so far.
func (r *Receiver) Spans() []Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Span(nil), r.spans...)
}

// Raw returns every byte received so far, requests one after the other.
func (r *Receiver) Raw() []byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	return bytes.Join(r.raw, nil)
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

// Names lists the names of the spans received, sorted, each once: for a
// failure's message.
func (r *Receiver) Names() string {
	seen := map[string]bool{}
	for _, s := range r.Spans() {
		seen[s.Name] = true
	}
	names := make([]string, 0, len(seen))
	for n := range seen {
		names = append(names, n)
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}

// Leaks returns the secrets of secrets found anywhere in what the
// receiver got, in any of the forms a span could carry them in (as they
// are, and hex-encoded).
func (r *Receiver) Leaks(secrets ...string) []string {
	raw := r.Raw()
	var found []string
	for _, s := range secrets {
		if s == "" {
			continue
		}
		if bytes.Contains(raw, []byte(s)) || bytes.Contains(raw, []byte(hex.EncodeToString([]byte(s)))) {
			found = append(found, s)
		}
	}
	return found
}
