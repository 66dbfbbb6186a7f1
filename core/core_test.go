package core_test

import (
	"context"
	"testing"
	"time"

	"github.com/idmint/idmint/core"
)

func TestRequestID(t *testing.T) {
	ctx := context.Background()
	if id := core.RequestID(ctx); id != "" {
		t.Fatalf("RequestID of a bare context = %q", id)
	}
	if id := core.RequestID(core.WithRequestID(ctx, "host/abc-7")); id != "host/abc-7" {
		t.Fatalf("RequestID = %q, want host/abc-7", id)
	}
	if id := core.RequestID(context.WithValue(ctx, core.RequestIDKey, "keyed")); id != "keyed" {
		t.Fatalf("RequestID through RequestIDKey = %q", id)
	}
}

func TestCaller_Bearer(t *testing.T) {
	if b := core.NewCaller(nil, "10.0.0.1:5").Bearer(); b != "" {
		t.Fatalf("Bearer without Authorization = %q", b)
	}
	if b := core.NewCaller([]string{"Bearer idm_x", "Bearer idm_y"}, "").Bearer(); b != "Bearer idm_x" {
		t.Fatalf("Bearer = %q, want the first value", b)
	}
}

func TestCore_Observe(t *testing.T) {
	type call struct {
		name   string
		status int
	}
	var got []call
	c := core.New(core.Config{OnCall: func(name string, status int, _ time.Duration) { got = append(got, call{name, status}) }})
	c.Observe("/idmint.v1.IDService/NextID", 200, time.Millisecond)
	if len(got) != 1 || got[0] != (call{"/idmint.v1.IDService/NextID", 200}) {
		t.Fatalf("OnCall got %v", got)
	}
	core.New(core.Config{}).Observe("/x", 200, 0) // no OnCall: nothing to record, no panic
}
