package main

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/idmint/idmint/snowflake"
	"github.com/idmint/idmint/testkit/testutil"
	"github.com/idmint/idmint/wire"
)

// TestDrill_Snowflake runs `idmint drill --snowflake` against two serving
// processes on one SQLite file: every acknowledged Snowflake ID goes through
// the checker, one at a time and in batches.
func TestDrill_Snowflake(t *testing.T) {
	dir := t.TempDir()
	a, _ := startServe(t, "--data-dir", dir)
	b, _ := startServe(t, "--data-dir", dir)
	for _, count := range []string{"1", "50"} {
		out := idmint(t, "drill", "--target", a, "--target", b, "--snowflake", "--duration", "1s", "--concurrency", "4", "--count", count)
		if !strings.Contains(out, "biz_tag (snowflake): ") || !strings.Contains(out, " 0 duplicates") || !strings.Contains(out, "valid: no duplicates") {
			t.Fatalf("drill --count %s:\n%s", count, out)
		}
	}
}

func TestSnowflakeParse(t *testing.T) {
	out := idmint(t, "snowflake", "parse", "4214791", "--snowflake-bits", "41/10/12", "--snowflake-epoch", "2025-01-01T00:00:00Z")
	var p wire.ParsedSnowflake
	if err := json.Unmarshal([]byte(out), &p); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	// 4214791 = 1<<22 | 5<<12 | 7: 1 ms after the epoch, worker 5, sequence 7.
	if p.ID != 4214791 || p.WorkerID != 5 || p.Sequence != 7 || p.UnixMS != snowflake.DefaultEpoch.UnixMilli()+1 {
		t.Fatalf("parse: %+v", p)
	}
	var stderr strings.Builder
	for _, args := range [][]string{
		{"snowflake", "parse", "0"},
		{"snowflake", "parse", "x"},
		{"snowflake", "parse", "1", "--snowflake-bits", "41/10/13"},
		{"snowflake", "parse", "1", "--snowflake-epoch", "yesterday"},
		{"snowflake", "parse"},
		{"snowflake"},
	} {
		if err := run(context.Background(), args, io.Discard, &stderr); err == nil {
			t.Errorf("idmint %s: no error", strings.Join(args, " "))
		}
	}
}

// TestServe_SnowflakeLayoutMismatch: an instance with another layout than
// the one recorded in the database refuses to start.
func TestServe_SnowflakeLayoutMismatch(t *testing.T) {
	dir := t.TempDir()
	_, stop := startServe(t, "--data-dir", dir)
	stop()
	var stderr strings.Builder
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := run(ctx, []string{"serve", "--data-dir", dir, "--listen", testutil.FreeAddr(t), "--snowflake-bits", "42/9/12"}, io.Discard, &stderr)
	if err == nil || !errors.Is(err, snowflake.ErrLayoutMismatch) {
		t.Fatalf("serve with another layout: %v\n%s", err, stderr.String())
	}
	if err := run(ctx, []string{"serve", "--data-dir", dir, "--snowflake-bits", "41/10/13"}, io.Discard, &stderr); err == nil {
		t.Fatal("serve with bits summing to 64 started")
	}
}
