package redact_test

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"testing"

	"github.com/idmint/idmint/internal/redact"
)

func TestString(t *testing.T) {
	tests := []struct {
		name, in string
		gone     []string
		kept     []string
	}{
		{"pgx refused", "failed to connect to `user=idmint database=orders`: 10.1.2.3:5432 (db.internal.example): dial error: dial tcp 10.1.2.3:5432: connect: connection refused",
			[]string{"idmint", "orders", "10.1.2.3", "5432", "db.internal.example"}, []string{"dial tcp [redacted]: connect: connection refused"}},
		{"pgx refused, bare host name", "failed to connect to `user=app database=ids`:\n\t127.0.0.1:6543 (dbhost): dial error: dial tcp 127.0.0.1:6543: connect: connection refused",
			[]string{"app", "ids", "127.0.0.1", "6543", "dbhost"}, []string{"dial error"}},
		{"pgx dns", "failed to connect to `user=app database=ids`:\n\thostname resolving error: lookup db-primary.internal.example on 10.0.0.2:53: no such host",
			[]string{"db-primary", "internal.example", "10.0.0.2", ":53"}, []string{"lookup [redacted]: no such host"}},
		{"dns without server", "dial tcp: lookup db.invalid: no such host", []string{"db.invalid"}, []string{"no such host"}},
		{"pgx password", "failed to connect to `user=app database=ids`: 127.0.0.1:5432 (localhost): failed SASL auth: FATAL: password authentication failed for user \"app\" (SQLSTATE 28P01)",
			[]string{"app", "ids", "5432", "localhost"}, []string{"failed SASL auth", "password authentication failed", "28P01"}},
		{"pg unknown database", `FATAL: database "orders_db" does not exist (SQLSTATE 3D000)`, []string{"orders_db"}, []string{"does not exist"}},
		{"pg unknown role", `FATAL: role "ghost" does not exist (SQLSTATE 28000)`, []string{"ghost"}, []string{"does not exist"}},
		{"pg_hba", `FATAL: no pg_hba.conf entry for host "10.4.5.6", user "app", database "ids", no encryption (SQLSTATE 28000)`,
			[]string{"10.4.5.6", `"app"`, `"ids"`}, []string{"no pg_hba.conf entry"}},
		{"dotted name in parentheses", "connect (db.internal.example): refused", []string{"db.internal"}, []string{"(" + redact.Placeholder + ")"}},
		{"ipv6", "dial tcp [fd00::1]:6432: i/o timeout", []string{"fd00::1", "6432"}, []string{"i/o timeout"}},
		{"bare ipv6", "no route to fd00:1:2::7%eth0", []string{"fd00", "eth0"}, nil},
		{"url", "parse postgres://admin:s3cret@db:5432/x?sslmode=disable", []string{"admin", "s3cret", "db:5432"}, nil},
		{"conninfo", "host=db.internal port=5433 user=app password='p w' dbname=ids", []string{"db.internal", "5433", "app", "p w", "ids"}, nil},
		{"address error", "dial tcp: address db.internal: missing port in address", []string{"db.internal"}, []string{"missing port"}},
		{"certificate", "tls: failed to verify certificate: x509: certificate is valid for a.internal, b.internal, not db.internal", []string{"a.internal", "db.internal"}, []string{"x509"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checkRedacted(t, redact.String(tt.in), tt.gone, tt.kept)
		})
	}
	for _, in := range []string{
		`allocate "order": outcome unknown: timeout`,
		"snowflake: lease window ends at 2024-05-06T12:30:45.123Z",
		"context deadline exceeded",
		"only asynchronous replicas (2): a failover loses the last commits (0.5 s)",
		"",
	} {
		if out := redact.String(in); out != in {
			t.Errorf("a message without connection details changed: %q → %q", in, out)
		}
	}
}

// checkRedacted fails tb if out holds one of gone or lacks one of kept.
func checkRedacted(tb testing.TB, out string, gone, kept []string) {
	tb.Helper()
	for _, g := range gone {
		if strings.Contains(out, g) {
			tb.Errorf("%q left in %q", g, out)
		}
	}
	for _, k := range kept {
		if !strings.Contains(out, k) {
			tb.Errorf("%q lost from %q", k, out)
		}
	}
}

// TestError: the details an error's kind carries go wherever they stand in
// its text, even where no shape gives them away.
func TestError(t *testing.T) {
	dns := &net.DNSError{Err: "no such host", Name: "dbprimary", Server: "resolver", IsNotFound: true}
	op := &net.OpError{Op: "dial", Net: "tcp", Addr: &net.TCPAddr{IP: net.ParseIP("10.7.7.7"), Port: 7777}, Err: errors.New("connect: connection refused")}
	tests := []struct {
		name string
		err  error
		gone []string
		kept string
	}{
		{"dns name in prose", fmt.Errorf("cannot reach dbprimary via resolver: %w", dns), []string{"dbprimary", "resolver"}, "no such host"},
		{"op", fmt.Errorf("load: %w", op), []string{"10.7.7.7", "7777"}, "connection refused"},
		{"joined", errors.Join(errors.New("first"), fmt.Errorf("second: %w", dns)), []string{"dbprimary"}, "first"},
		{"nil", nil, nil, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checkRedacted(t, redact.Error(tt.err), tt.gone, []string{tt.kept})
		})
	}
	// A secret inside a longer word stays: a user "id" leaves "idmint".
	err := fmt.Errorf("idmint: %w", &net.DNSError{Err: "no such host", Name: "id"})
	if out := redact.Error(err); !strings.HasPrefix(out, "idmint: ") {
		t.Errorf("a word containing a secret was cut: %q", out)
	}
}

// TestNewHandler: errors are redacted in a record's attributes, in groups
// and in attributes added by With, in JSON and text.
func TestNewHandler(t *testing.T) {
	err := errors.New("failed to connect to `user=app database=prod`: 10.9.8.7:5432 (db.internal.example): dial error")
	for name, newHandler := range map[string]func(*bytes.Buffer) slog.Handler{
		"json": func(b *bytes.Buffer) slog.Handler { return slog.NewJSONHandler(b, nil) },
		"text": func(b *bytes.Buffer) slog.Handler { return slog.NewTextHandler(b, nil) },
	} {
		t.Run(name, func(t *testing.T) {
			var buf bytes.Buffer
			logger := slog.New(redact.NewHandler(newHandler(&buf)))
			logger.Warn("load failed", "err", err)
			logger.With("error", err.Error()).Info("again")
			logger.Info("grouped", slog.Group("replication", "last_wait_error", err.Error()))
			logger.WithGroup("g").Info("in a group", "cause", err)
			out := buf.String()
			for _, secret := range []string{"app", "prod", "10.9.8.7", "5432", "db.internal"} {
				if strings.Contains(out, secret) {
					t.Errorf("log shows %q: %s", secret, out)
				}
			}
			if n := strings.Count(out, "dial error"); n != 4 {
				t.Errorf("log lost the error itself (%d of 4): %s", n, out)
			}
		})
	}
}

func ExampleString() {
	fmt.Println(redact.String("failed to connect to `user=app database=orders`: 10.0.0.5:5432 (db.internal): dial error: dial tcp 10.0.0.5:5432: connect: connection refused"))
	// Output: failed to connect to `user=[redacted] database=[redacted]`: [redacted]: dial error: dial tcp [redacted]: connect: connection refused
}
