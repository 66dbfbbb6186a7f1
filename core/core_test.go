package core_test

import (
	"context"
	"testing"

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
