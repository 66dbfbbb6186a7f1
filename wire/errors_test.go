package wire_test

import (
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/idmint/idmint/wire"
)

// TestDecodeError: a reply decodes into its code and message, matches
// every sentinel of its code and no other, and keeps its Retry-After; a
// body that is not idmint's error is CodeHTTPError.
func TestDecodeError(t *testing.T) {
	tests := []struct {
		name       string
		status     int
		retryAfter string
		body       string
		code, msg  string
		is, isNot  []error
		wait       time.Duration
	}{
		{name: "unknown tag", status: 404, body: `{"error":{"code":"unknown_tag","message":"no such tag"}}`,
			code: wire.CodeUnknownTag, msg: "no such tag", is: []error{wire.ErrUnknownTag}, isNot: []error{wire.ErrInvalidTag, wire.ErrUnknownToken}},
		{name: "one code, two sentinels", status: 400, body: `{"error":{"code":"invalid_request","message":"step"}}`,
			code: wire.CodeInvalidSpec, msg: "step", is: []error{wire.ErrInvalidTagSpec, wire.ErrInvalidTokenSpec}, isNot: []error{wire.ErrInvalidTag}},
		{name: "retry after", status: 503, retryAfter: "3", body: `{"error":{"code":"unavailable","message":"later"}}`,
			code: wire.CodeUnavailable, msg: "later", is: []error{wire.ErrUnavailable}, wait: 3 * time.Second},
		{name: "not idmint's", status: http.StatusBadGateway, body: `<html>bad gateway</html>`,
			code: wire.CodeHTTPError, msg: http.StatusText(http.StatusBadGateway), isNot: []error{wire.ErrUnavailable}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := fmt.Errorf("call: %w", wire.DecodeError(tt.status, tt.retryAfter, []byte(tt.body)))
			e, ok := errors.AsType[*wire.Error](err)
			if !ok || e.Code != tt.code || e.Message != tt.msg || e.Status != tt.status || e.RetryAfter != tt.wait {
				t.Fatalf("decoded %+v, want code %s, message %q, status %d, wait %s", e, tt.code, tt.msg, tt.status, tt.wait)
			}
			if wire.CodeOf(err) != tt.code {
				t.Errorf("CodeOf = %q, want %q", wire.CodeOf(err), tt.code)
			}
			for _, s := range tt.is {
				if !errors.Is(err, s) {
					t.Errorf("does not match %v", s)
				}
			}
			for _, s := range tt.isNot {
				if errors.Is(err, s) {
					t.Errorf("matches %v", s)
				}
			}
		})
	}
}

// TestError_BornApart: two sentinels born with one code stay two errors:
// only a decoded error stands for its whole code.
func TestError_BornApart(t *testing.T) {
	if errors.Is(wire.ErrInvalidTagSpec, wire.ErrInvalidTokenSpec) {
		t.Fatal("sentinels of one code match each other")
	}
	// A server's reply that it is shutting down is not this process's
	// ErrClosed: a client that took it for its own Close would stop.
	shutting := wire.DecodeError(503, "1", []byte(`{"error":{"code":"shutting_down","message":"idmint is shutting down"}}`))
	if errors.Is(shutting, wire.ErrClosed) || errors.Is(fmt.Errorf("load: %w", shutting), wire.ErrClosed) {
		t.Fatal("a decoded shutting_down matches ErrClosed")
	}
	if !errors.Is(fmt.Errorf("next: %w", wire.ErrClosed), wire.ErrClosed) {
		t.Fatal("ErrClosed does not match itself")
	}
	if wire.CodeOf(fmt.Errorf("x: %w", wire.ErrFloorBudget)) != wire.CodeRateLimited || wire.CodeOf(errors.New("x")) != "" {
		t.Fatal("CodeOf does not read the code an error carries")
	}
}
