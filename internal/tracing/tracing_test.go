package tracing

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/google/uuid"
	"go.opentelemetry.io/otel/attribute"
	otelcodes "go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"

	"github.com/idmint/idmint/allocator"
	"github.com/idmint/idmint/allocator/memstore"
	"github.com/idmint/idmint/lease"
	"github.com/idmint/idmint/snowflake"
)

// recorded returns a Tracing whose spans the recorder keeps.
func recorded(t *testing.T) (*Tracing, *tracetest.SpanRecorder) {
	t.Helper()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { tp.Shutdown(context.Background()) })
	return New(tp), rec
}

// allowed is every attribute key a span may carry (attrs.go).
var allowed = map[attribute.Key]bool{
	keyMethod: true, keyRoute: true, keyStatus: true, keyRPCSystem: true, keyRPCService: true, keyRPCMethod: true,
	keyGRPCCode: true, keyTag: true, keyRequestID: true, keyHeldBy: true, keySize: true, keyFirst: true, keyLast: true,
	keyGivenBack: true, keyRepaired: true, keyWorker: true, keyEpoch: true, keyOutcome: true,
}

// attrsOf returns s's attributes, failing t for a key not allowed, an
// event or a value holding one of secrets.
func attrsOf(t *testing.T, s sdktrace.ReadOnlySpan, secrets ...string) map[string]string {
	t.Helper()
	m := map[string]string{}
	for _, kv := range s.Attributes() {
		if !allowed[kv.Key] {
			t.Errorf("span %s: attribute %s is not allowed", s.Name(), kv.Key)
		}
		m[string(kv.Key)] = kv.Value.String()
	}
	if len(s.Events()) > 0 {
		t.Errorf("span %s: events %v", s.Name(), s.Events())
	}
	all := fmt.Sprint(s.Name(), m, s.Status())
	for _, sec := range secrets {
		if strings.Contains(all, sec) {
			t.Errorf("span %s holds %q: %s", s.Name(), sec, all)
		}
	}
	return m
}

func env(kv ...string) func(string) string {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return func(k string) string { return m[k] }
}

func TestEnabled(t *testing.T) {
	for _, tt := range []struct {
		name string
		env  []string
		on   bool
		err  bool
	}{
		{name: "nothing set", on: false},
		{name: "otlp", env: []string{"OTEL_TRACES_EXPORTER", "otlp"}, on: true},
		{name: "an endpoint", env: []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318"}, on: true},
		{name: "a traces endpoint", env: []string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://127.0.0.1:4318/v1/traces"}, on: true},
		{name: "none wins over an endpoint", env: []string{"OTEL_TRACES_EXPORTER", "none", "OTEL_EXPORTER_OTLP_ENDPOINT", "http://x"}, on: false},
		{name: "sdk disabled", env: []string{"OTEL_SDK_DISABLED", "true", "OTEL_TRACES_EXPORTER", "otlp"}, on: false},
		{name: "sdk not disabled", env: []string{"OTEL_SDK_DISABLED", "false", "OTEL_TRACES_EXPORTER", "otlp"}, on: true},
		{name: "another exporter", env: []string{"OTEL_TRACES_EXPORTER", "zipkin"}, err: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			on, err := Enabled(env(tt.env...))
			if on != tt.on || (err != nil) != tt.err {
				t.Errorf("Enabled = %v, %v; want %v, error %v", on, err, tt.on, tt.err)
			}
		})
	}
}

func TestProtocol(t *testing.T) {
	for _, tt := range []struct {
		env  []string
		want string
	}{
		{nil, "http/protobuf"},
		{[]string{"OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"}, "grpc"},
		{[]string{"OTEL_EXPORTER_OTLP_PROTOCOL", "grpc", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/protobuf"}, "http/protobuf"},
		{[]string{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "grpc"}, "grpc"},
		{[]string{"OTEL_EXPORTER_OTLP_PROTOCOL", "http/json"}, ""},
	} {
		got, err := protocol(env(tt.env...))
		if got != tt.want || (err != nil) != (tt.want == "") {
			t.Errorf("protocol(%v) = %q, %v; want %q", tt.env, got, err, tt.want)
		}
	}
}

// TestFromEnv_Off: with no OTEL_* variable there is no provider at all.
func TestFromEnv_Off(t *testing.T) {
	tr, err := FromEnv(context.Background(), env(), "test", nil)
	if tr != nil || err != nil {
		t.Fatalf("FromEnv with nothing set = %v, %v; want nil, nil", tr, err)
	}
	if _, err := FromEnv(context.Background(), env("OTEL_TRACES_EXPORTER", "console"), "test", nil); err == nil {
		t.Fatal("FromEnv(console): want an error")
	}
}

const callerTrace = "4bf92f3577b34da6a3ce929d0e0e4736"

func TestTracing_HTTP(t *testing.T) {
	tr, rec := recorded(t)
	r := chi.NewRouter()
	ok := func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte("ok")) }
	r.Get("/id", ok)
	r.Route("/v1/segments", func(r chi.Router) { r.Post("/", ok) })
	r.Get("/v1/tags/{biz_tag}", ok)
	r.Handle("/idmint.v1.IDService/NextID", http.HandlerFunc(ok))
	r.Get("/boom", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusServiceUnavailable) })
	h := tr.HTTP(r, r)
	const secret = "tok-3f9a1c"
	for _, tt := range []struct {
		method, target, name, route string
		status                      int
	}{
		{"GET", "/id?biz_tag=order&access_token=" + secret, "GET /id", "/id", 200},
		{"POST", "/v1/segments", "POST /v1/segments", "/v1/segments", 200},
		{"GET", "/v1/tags/" + secret, "GET /v1/tags/{biz_tag}", "/v1/tags/{biz_tag}", 200},
		{"POST", "/idmint.v1.IDService/NextID", "idmint.v1.IDService/NextID", "", 200},
		{"GET", "/no/such/" + secret, "GET", "", 404},
		{"BREW", "/id", "_OTHER", "", 405},
		{"GET", "/boom", "GET /boom", "/boom", 503},
	} {
		t.Run(tt.method+" "+tt.target, func(t *testing.T) {
			rec.Reset()
			req := httptest.NewRequest(tt.method, tt.target, nil)
			req.Header.Set("Traceparent", "00-"+callerTrace+"-00f067aa0ba902b7-01")
			req.Header.Set("Authorization", "Bearer "+secret)
			req.Header.Set("Cookie", "idmint_session="+secret)
			w := httptest.NewRecorder()
			h.ServeHTTP(w, req)
			spans := rec.Ended()
			if len(spans) != 1 {
				t.Fatalf("%d spans, want 1", len(spans))
			}
			s := spans[0]
			if s.Name() != tt.name || s.SpanKind() != trace.SpanKindServer {
				t.Errorf("span %q %v, want %q server", s.Name(), s.SpanKind(), tt.name)
			}
			if s.Parent().TraceID().String() != callerTrace || s.Parent().SpanID().String() != "00f067aa0ba902b7" || !s.Parent().IsRemote() {
				t.Errorf("parent %v: want the caller's span", s.Parent())
			}
			a := attrsOf(t, s, secret, "biz_tag=order")
			if a["http.route"] != tt.route || a["http.response.status_code"] != fmt.Sprint(tt.status) {
				t.Errorf("attributes %v: want route %q status %d", a, tt.route, tt.status)
			}
			if wantErr := tt.status >= 500; (s.Status().Code == otelcodes.Error) != wantErr {
				t.Errorf("status %v for %d", s.Status(), tt.status)
			}
		})
	}
	t.Run("the handler runs in the span", func(t *testing.T) {
		rec.Reset()
		var got trace.SpanContext
		h := tr.HTTP(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
			got = trace.SpanContextFromContext(r.Context())
		}), r)
		req := httptest.NewRequest("GET", "/id", nil)
		req.Header.Set("Traceparent", "00-"+callerTrace+"-00f067aa0ba902b7-01")
		h.ServeHTTP(httptest.NewRecorder(), req)
		if got.TraceID().String() != callerTrace || got.SpanID() != rec.Ended()[0].SpanContext().SpanID() {
			t.Errorf("the handler's context has %v, want the request's span", got)
		}
	})
}

// TestTracing_Watched: a probe, a scrape or the dashboard's poll makes no
// span of its own, over HTTP and gRPC; the same call in a caller's
// sampled trace is traced, and an ID request without one is a root span.
func TestTracing_Watched(t *testing.T) {
	tr, rec := recorded(t)
	r := chi.NewRouter()
	ok := func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte("ok")) }
	for _, route := range []string{"/id", "/id/live", "/id/health", "/id/dashboard", "/metrics"} {
		r.Get(route, ok)
	}
	r.Handle("/grpc.health.v1.Health/Check", http.HandlerFunc(ok))
	h := tr.HTTP(r, r)
	serve := func(method, target, traceparent string) {
		req := httptest.NewRequest(method, target, nil)
		if traceparent != "" {
			req.Header.Set("Traceparent", traceparent)
		}
		h.ServeHTTP(httptest.NewRecorder(), req)
	}
	sampled := "00-" + callerTrace + "-00f067aa0ba902b7-01"
	unsampled := "00-" + callerTrace + "-00f067aa0ba902b7-00"
	for _, target := range []string{"/id/live", "/id/health", "/id/dashboard", "/metrics"} {
		serve("GET", target, "")
		serve("GET", target, unsampled)
	}
	serve("POST", "/grpc.health.v1.Health/Check", "")
	_, end := tr.GRPC(context.Background(), "/grpc.health.v1.Health/Check", metadata.MD{})
	end(codes.OK)
	if n := len(rec.Ended()); n != 0 {
		t.Fatalf("probes and scrapes made %d spans, want none", n)
	}
	serve("GET", "/id/health", sampled)
	_, end = tr.GRPC(context.Background(), "/grpc.health.v1.Health/Check", metadata.Pairs("traceparent", sampled))
	end(codes.OK)
	serve("GET", "/id?biz_tag=order", "")
	spans := rec.Ended()
	if len(spans) != 3 || spans[0].Name() != "GET /id/health" || spans[1].Name() != "grpc.health.v1.Health/Check" || spans[2].Name() != "GET /id" {
		names := make([]string, len(spans))
		for i, s := range spans {
			names[i] = s.Name()
		}
		t.Fatalf("spans %v; want the health read and check in the caller's trace, then GET /id", names)
	}
}

func TestTracing_GRPC(t *testing.T) {
	tr, rec := recorded(t)
	const secret = "tok-8e1d"
	md := metadata.Pairs("traceparent", "00-"+callerTrace+"-00f067aa0ba902b7-01", "authorization", "Bearer "+secret,
		"x-request-id", "r-"+secret)
	ctx, end := tr.GRPC(context.Background(), "/idmint.v1.IDService/NextID", md)
	if got := trace.SpanContextFromContext(ctx); got.TraceID().String() != callerTrace {
		t.Errorf("the call's context has %v, want the caller's trace", got)
	}
	end(codes.Unavailable)
	s := rec.Ended()[0]
	a := attrsOf(t, s, secret)
	if s.Name() != "idmint.v1.IDService/NextID" || s.Parent().SpanID().String() != "00f067aa0ba902b7" ||
		a["rpc.service"] != "idmint.v1.IDService" || a["rpc.method"] != "NextID" || a["rpc.grpc.status_code"] != "14" ||
		s.Status().Code != otelcodes.Error {
		t.Errorf("span %q parent %v attrs %v status %v", s.Name(), s.Parent(), a, s.Status())
	}
	_, end = tr.GRPC(context.Background(), "/idmint.v1.IDService/NextID", metadata.MD{})
	end(codes.NotFound)
	if s := rec.Ended()[1]; s.Parent().IsValid() || s.Status().Code == otelcodes.Error {
		t.Errorf("a call without traceparent: parent %v, status %v; want a root, no error (the caller's fault)", s.Parent(), s.Status())
	}
}

// failing is a store whose Allocate fails as a driver would, naming the
// database.
type failing struct{ allocator.Store }

func (failing) Allocate(context.Context, allocator.Request) (allocator.Segment, error) {
	return allocator.Segment{}, fmt.Errorf("%w: failed to connect to `host=db-7.internal user=idmint database=ids`: password=hunter2", allocator.ErrAmbiguous)
}

func TestTracing_Store(t *testing.T) {
	tr, rec := recorded(t)
	m := memstore.New()
	ctx := context.Background()
	if _, err := m.CreateTag(ctx, allocator.TagSpec{Name: "order", Step: 10}); err != nil {
		t.Fatal(err)
	}
	s := tr.Store(m)
	parentCtx, parent := tr.tracer.Start(ctx, "request")
	const key = "holder-key-secret"
	h := allocator.NewHolder("app-token-id", key)
	id := uuid.Must(uuid.NewV7())
	seg, err := s.Allocate(parentCtx, allocator.Request{ID: id, Tag: "order", Holder: h})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Lookup(parentCtx, id); err != nil {
		t.Fatal(err)
	}
	if ok, err := s.GiveBackRange(parentCtx, id, h, "order", seg.First+5, seg.Last); !ok || err != nil {
		t.Fatalf("GiveBackRange = %v, %v", ok, err)
	}
	own, err := s.Allocate(parentCtx, allocator.Request{ID: uuid.Must(uuid.NewV7()), Tag: "order"})
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := s.GiveBack(parentCtx, "order", own.First, own.Last); !ok || err != nil {
		t.Fatalf("GiveBack = %v, %v", ok, err)
	}
	if _, err := tr.Store(failing{m}).Allocate(parentCtx, allocator.Request{ID: id, Tag: "order"}); !errors.Is(err, allocator.ErrAmbiguous) {
		t.Fatalf("failing Allocate: %v", err)
	}
	parent.End()
	want := []string{"idmint.store.allocate", "idmint.store.lookup", "idmint.store.give_back_range", "idmint.store.allocate",
		"idmint.store.give_back", "idmint.store.allocate", "request"}
	spans := rec.Ended()
	if len(spans) != len(want) {
		t.Fatalf("%d spans, want %d", len(spans), len(want))
	}
	for i, sp := range spans[:len(want)-1] {
		a := attrsOf(t, sp, key, "app-token-id", "db-7", "hunter2", "user=", fmt.Sprintf("%x", h.KeyHash[:4]))
		if sp.Name() != want[i] || sp.Parent().SpanID() != parent.SpanContext().SpanID() {
			t.Errorf("span %d: %q under %v, want %q under the request", i, sp.Name(), sp.Parent().SpanID(), want[i])
		}
		if a["idmint.biz_tag"] != "order" {
			t.Errorf("span %s: attributes %v", sp.Name(), a)
		}
	}
	if a := attrsOf(t, spans[0]); a["idmint.request_id"] != id.String() || a["idmint.held_by"] != "caller" || a["idmint.first"] != fmt.Sprint(seg.First) {
		t.Errorf("a caller's grant: %v", a)
	}
	if a := attrsOf(t, spans[3]); a["idmint.held_by"] != "instance" {
		t.Errorf("an instance's grant: %v", a)
	}
	if a := attrsOf(t, spans[2]); a["idmint.given_back"] != "true" {
		t.Errorf("give-back: %v", a)
	}
	if f := spans[5]; f.Status().Code != otelcodes.Error || f.Status().Description != "ambiguous" {
		t.Errorf("a failed grant's status %v: want its class alone", f.Status())
	}
}

func TestTracing_Leases(t *testing.T) {
	tr, rec := recorded(t)
	ctx := context.Background()
	l := tr.Leases(lease.NewMemory(time.Now))
	if err := l.Prepare(ctx, snowflake.DefaultLayout()); err != nil {
		t.Fatal(err)
	}
	got, err := l.Acquire(ctx, snowflake.AcquireRequest{Holder: "host-1", MaxWorker: 3, TTL: time.Minute, Margin: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	// A renewal is a root, whatever context it is called in.
	parentCtx, parent := tr.tracer.Start(ctx, "somewhere")
	if got, err = l.Renew(parentCtx, got, time.Minute, time.Second); err != nil {
		t.Fatal(err)
	}
	parent.End()
	if err := l.Release(ctx, got, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Renew(ctx, got, time.Minute, time.Second); !errors.Is(err, snowflake.ErrLeaseLost) {
		t.Fatalf("Renew after Release: %v", err)
	}
	var names []string
	for _, s := range rec.Ended() {
		names = append(names, s.Name())
		a := attrsOf(t, s, "host-1")
		if s.Name() == "idmint.lease.renew" && s.Parent().IsValid() {
			t.Errorf("renewal under %v: want a root", s.Parent())
		}
		if strings.HasPrefix(s.Name(), "idmint.lease.") && a["idmint.worker_id"] != fmt.Sprint(got.Worker) {
			t.Errorf("%s: %v", s.Name(), a)
		}
	}
	if want := "idmint.lease.acquire idmint.lease.renew somewhere idmint.lease.release idmint.lease.renew"; strings.Join(names, " ") != want {
		t.Errorf("spans %v, want %s", names, want)
	}
	if last := rec.Ended()[4]; last.Status().Description != "lease_lost" {
		t.Errorf("a lost lease's status %v", last.Status())
	}
}
