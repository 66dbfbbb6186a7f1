package redact_test

import (
	"strings"
	"testing"

	"github.com/idmint/idmint/internal/redact"
)

func TestString(t *testing.T) {
	tests := []struct {
		name, in string
		gone     []string
	}{
		{"pgx connect", "failed to connect to `user=idmint database=orders`: 10.1.2.3:5432 (db.internal.example): dial error: dial tcp 10.1.2.3:5432: connect: connection refused",
			[]string{"idmint", "orders", "10.1.2.3", "5432", "db.internal.example"}},
		{"ipv6", "dial tcp [fd00::1]:6432: i/o timeout", []string{"fd00::1", "6432"}},
		{"url", "parse postgres://admin:s3cret@db:5432/x?sslmode=disable", []string{"admin", "s3cret", "db:5432"}},
		{"conninfo", "host=db.internal port=5433 user=app password='p w' dbname=ids", []string{"db.internal", "5433", "app", "p w", "ids"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out := redact.String(tt.in)
			for _, g := range tt.gone {
				if strings.Contains(out, g) {
					t.Errorf("%q left in %q", g, out)
				}
			}
		})
	}
	if in := `allocate "order": outcome unknown: timeout`; redact.String(in) != in {
		t.Errorf("an error without connection details changed: %q", redact.String(in))
	}
}
