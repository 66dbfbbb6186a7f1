package postgres

import (
	"errors"
	"fmt"
	"io"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/idmint/idmint/allocator"
)

// TestClassify: only errors that prove nothing committed are retried as
// such; anything that may follow a commit is ambiguous.
func TestClassify(t *testing.T) {
	pg := func(code, constraint string) error {
		return fmt.Errorf("wrapped: %w", &pgconn.PgError{Code: code, ConstraintName: constraint})
	}
	tests := []struct {
		name      string
		err       error
		granted   bool
		ambiguous bool
	}{
		{"request granted before", pg("23505", "idmint_segments_pkey"), true, false},
		{"other unique violation", pg("23505", "other"), false, false},
		{"serialization failure", pg("40001", ""), false, false},
		{"admin shutdown", pg("57P01", ""), false, true},
		{"crash shutdown", pg("57P02", ""), false, true},
		{"pooler: connection failure", pg("08006", ""), false, true},
		{"internal error", pg("XX000", ""), false, true},
		{"connection lost", io.ErrUnexpectedEOF, false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := classify("allocate", tt.err)
			if errors.Is(got, allocator.ErrAlreadyGranted) != tt.granted || errors.Is(got, allocator.ErrAmbiguous) != tt.ambiguous {
				t.Fatalf("classify(%v) = %v; want granted %v, ambiguous %v", tt.err, got, tt.granted, tt.ambiguous)
			}
		})
	}
}
