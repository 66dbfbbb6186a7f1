package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/idmint/idmint/testkit/pgtest"
	"github.com/idmint/idmint/testkit/testutil"
)

// TestPermanentConnectError: an answer a retry would repeat fails at once;
// a server starting, stopping or full, and no answer at all, are waited for.
func TestPermanentConnectError(t *testing.T) {
	pg := func(code string) error {
		return fmt.Errorf("failed to connect to `user=x database=y`: %w", &pgconn.PgError{Severity: "FATAL", Code: code})
	}
	tests := []struct {
		name      string
		err       error
		permanent bool
	}{
		{"database does not exist", pg("3D000"), true},
		{"bad password", pg("28P01"), true},
		{"role does not exist or no pg_hba entry", pg("28000"), true},
		{"no connect privilege", pg("42501"), true},
		{"certificate does not verify", &tls.CertificateVerificationError{Err: x509.UnknownAuthorityError{}}, true},
		{"starting up", pg("57P03"), false},
		{"admin shutdown", pg("57P01"), false},
		{"crash shutdown", pg("57P02"), false},
		{"too many connections", pg("53300"), false},
		{"connection failure", pg("08006"), false},
		{"connection refused", errors.New("dial tcp 127.0.0.1:1: connect: connection refused"), false},
		{"timeout", context.DeadlineExceeded, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := permanentConnectError(tc.err); got != tc.permanent {
				t.Fatalf("permanentConnectError(%v) = %v, want %v", tc.err, got, tc.permanent)
			}
		})
	}
}

// fakePinger answers each Ping with the next error of its list, then nil.
type fakePinger struct {
	errs  []error
	calls int
}

func (f *fakePinger) Ping(context.Context) error {
	f.calls++
	if len(f.errs) == 0 {
		return nil
	}
	err := f.errs[0]
	f.errs = f.errs[1:]
	return err
}

// TestPingUntil: a permanent error ends the wait at its first attempt
// without a word of retrying; transient ones are said once, however many
// attempts follow, until the server answers.
func TestPingUntil(t *testing.T) {
	t.Run("permanent", func(t *testing.T) {
		p := &fakePinger{errs: []error{&pgconn.PgError{Code: "28P01", Message: "password authentication failed"}}}
		var said []string
		err := pingUntil(context.Background(), p, time.Minute, func(m string) { said = append(said, m) })
		if err == nil || !strings.Contains(err.Error(), "password authentication failed") {
			t.Fatalf("err = %v, want the server's reason", err)
		}
		if p.calls != 1 || len(said) != 0 {
			t.Fatalf("%d attempts, said %q: want 1 attempt and nothing said", p.calls, said)
		}
	})
	t.Run("transient then up", func(t *testing.T) {
		refused := errors.New("failed to connect:\n\t127.0.0.1:1: connect: connection refused\n\t[::1]:1: connect: connection refused")
		p := &fakePinger{errs: []error{refused, &pgconn.PgError{Code: "57P03"}, refused}}
		var said []string
		if err := pingUntil(context.Background(), p, time.Minute, func(m string) { said = append(said, m) }); err != nil {
			t.Fatal(err)
		}
		if p.calls != 4 || len(said) != 1 || !strings.Contains(said[0], "retrying for up to 1m0s") || strings.Contains(said[0], "\n") {
			t.Fatalf("%d attempts, said %q: want 4 attempts and one line (no newline) saying how long it retries", p.calls, said)
		}
	})
}

// TestCLI_DatabaseRefused: a database that does not exist, or a role that
// does not exist, fails migrate and tag list at once with the server's
// reason, not after the 10 s wait for a server that does not answer; with
// nothing listening the command says once that it retries, and for how long.
func TestCLI_DatabaseRefused(t *testing.T) {
	srv := pgtest.Shared(t)
	base, err := url.Parse(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	missingDB := *base
	missingDB.Path = "/idmint_no_such_database"
	missingRole := *base
	missingRole.User = url.UserPassword("idmint_no_such_role", "x")
	for _, tc := range []struct {
		name, url, reason string
	}{
		{"database does not exist", missingDB.String(), "does not exist"},
		{"role does not exist", missingRole.String(), "idmint_no_such_role"},
	} {
		for _, args := range [][]string{{"migrate", "--log-format", "text"}, {"tag", "list"}} {
			t.Run(tc.name+"/"+args[0], func(t *testing.T) {
				// Well inside the 10 s a transient error is retried for.
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				var stdout, stderr bytes.Buffer
				start := time.Now()
				err := run(ctx, append(args, "--database-url", tc.url), &stdout, &stderr)
				t.Logf("failed after %v: %v", time.Since(start).Round(time.Millisecond), err)
				if ctx.Err() != nil {
					t.Fatalf("still waiting after 5s: %v\n%s", err, stderr.String())
				}
				if err == nil || !strings.Contains(err.Error(), tc.reason) || !strings.Contains(err.Error(), "refused") {
					t.Fatalf("err = %v, want the refusal and its reason (%q)", err, tc.reason)
				}
				if strings.Contains(stderr.String(), "retrying") {
					t.Fatalf("a permanent error was retried:\n%s", stderr.String())
				}
			})
		}
	}
	t.Run("nothing listening", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		var stdout, stderr bytes.Buffer
		err := run(ctx, []string{"tag", "list", "--database-url", "postgres://idmint@" + testutil.FreeAddr(t) + "/idmint?connect_timeout=1"}, &stdout, &stderr)
		if err == nil {
			t.Fatal("tag list succeeded with nothing listening")
		}
		if n := strings.Count(stderr.String(), "retrying for up to 10s"); n != 1 {
			t.Fatalf("stderr says it retries %d times, want once:\n%s", n, stderr.String())
		}
	})
}
