package client_test

import (
	"context"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/idmint/idmint/client"
	"github.com/idmint/idmint/segment"
	"github.com/idmint/idmint/testkit/otlptest"
	"github.com/idmint/idmint/testkit/servetest"
	"github.com/idmint/idmint/testkit/testutil"
)

// TestClient_TraceContext runs a real idmint serve (SQLite) that exports
// its spans to a receiver of the test's own, and a client whose
// HTTPClient is an otelhttp transport: every request the client makes on a
// caller's behalf carries that caller's trace. New's first load, a
// prefetch started by a Next whose context is cancelled at once (the load
// keeps the trace, not the cancellation) and the give-back at Close each
// arrive at the server in the trace of the call that caused it.
func TestClient_TraceContext(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs idmint serve")
	}
	dir := t.TempDir()
	bin := servetest.Build(t)
	db := "sqlite://" + filepath.Join(dir, "ids.db")
	if out, err := exec.Command(bin, "tag", "create", "order", "--step", "10", "--max-step", "10", "--database-url", db).CombinedOutput(); err != nil {
		t.Fatalf("tag create: %v\n%s", err, out)
	}
	recv := otlptest.NewHTTP(t)
	addr := testutil.FreeAddr(t)
	logPath := filepath.Join(dir, "serve.log")
	logs, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logs.Close()
	serve := exec.Command(bin, "serve", "--database-url", db, "--listen", addr, "--grpc-listen", "off", "--snowflake=false", "--log-format", "json")
	serve.Env = append(os.Environ(), "OTEL_EXPORTER_OTLP_ENDPOINT="+recv.Endpoint, "OTEL_BSP_SCHEDULE_DELAY=600000")
	serve.Stdout, serve.Stderr = logs, logs
	if err := serve.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if serve.ProcessState == nil {
			serve.Process.Kill()
			serve.Wait()
		}
	})
	base := "http://" + addr
	testutil.Eventually(t, 20*time.Second, "idmint serve up", func() bool {
		resp, err := http.Get(base + "/id/health")
		if err == nil {
			resp.Body.Close()
		}
		return err == nil
	})

	// The caller's own tracing: spans kept in memory, traceparent injected
	// by the transport.
	tp := sdktrace.NewTracerProvider()
	defer tp.Shutdown(context.Background())
	tracer := tp.Tracer("orders")
	var cancelling atomic.Pointer[context.CancelFunc]
	hc := &http.Client{Transport: otelhttp.NewTransport(roundTripper(func(r *http.Request) (*http.Response, error) {
		if cancel := cancelling.Swap(nil); cancel != nil {
			(*cancel)()
		}
		return http.DefaultTransport.RoundTrip(r)
	}), otelhttp.WithTracerProvider(tp), otelhttp.WithPropagators(propagation.TraceContext{}))}

	ctx := context.Background()
	newCtx, newSpan := tracer.Start(ctx, "start")
	c, err := client.New(newCtx, client.Config{URLs: []string{base}, Tags: []string{"order"}, HTTPClient: hc,
		Segment: segment.Config{Threshold: 0.5}})
	newSpan.End()
	if err != nil {
		t.Fatal(err)
	}
	// The takes that cross the first range's threshold, and so start the
	// prefetch, are under one span, whose context the transport cancels as
	// the prefetch's request goes out: the request must go on regardless.
	nextCtx, nextSpan := tracer.Start(ctx, "next")
	nextCtx, cancel := context.WithCancel(nextCtx)
	cancelling.Store(&cancel)
	for range 9 {
		if _, err := c.Next(nextCtx, "order"); err != nil {
			t.Fatal(err)
		}
	}
	nextSpan.End()
	testutil.Eventually(t, 10*time.Second, "the prefetch loaded", func() bool {
		st := c.Stats().Tags
		return len(st) == 1 && st[0].Loads == 2
	})
	if st := c.Stats().Tags[0]; st.LoadFailures != 0 {
		t.Errorf("the prefetch failed %d times: it took the cancellation of the take that started it", st.LoadFailures)
	}
	closeCtx, closeSpan := tracer.Start(ctx, "close")
	if err := c.Close(closeCtx); err != nil {
		t.Fatal(err)
	}
	closeSpan.End()
	if err := serve.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	serve.Wait()

	in := func(sp trace.Span, name string) otlptest.Span {
		t.Helper()
		id := sp.SpanContext().TraceID().String()
		for _, s := range recv.Spans() {
			if s.TraceID == id && s.Name == name {
				return s
			}
		}
		out, _ := os.ReadFile(logPath)
		t.Fatalf("no %s span in the trace of the caller's %T; received: %s\n%s", name, sp, recv.Names(), out)
		return otlptest.Span{}
	}
	in(newSpan, "POST /v1/segments")
	in(newSpan, "idmint.store.allocate")
	in(nextSpan, "POST /v1/segments")
	in(nextSpan, "idmint.store.allocate")
	in(closeSpan, "POST /v1/segments/giveback")
	if gb := in(closeSpan, "idmint.store.give_back_range"); gb.Attrs["idmint.given_back"] != "true" {
		t.Errorf("the give-back at Close: %v", gb.Attrs)
	}
}

// roundTripper is a function as an http.RoundTripper.
type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
