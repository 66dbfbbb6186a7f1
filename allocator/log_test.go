package allocator_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/idmint/idmint/allocator"
	"github.com/idmint/idmint/allocator/memstore"
	"github.com/idmint/idmint/segment"
	"github.com/idmint/idmint/testkit/testlog"
)

// logLines collects JSON log lines; safe for concurrent use.
type logLines struct{ testlog.Buffer }

// with returns the lines whose message starts with msg.
func (l *logLines) with(tb testing.TB, msg string) []map[string]any {
	tb.Helper()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(l.String()), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			tb.Fatalf("not JSON: %q", line)
		}
		if s, _ := m["msg"].(string); strings.HasPrefix(s, msg) {
			out = append(out, m)
		}
	}
	return out
}

// replyLoser is a memstore.Store that loses the reply of its next allocation
// after committing it.
type replyLoser struct {
	*memstore.Store
	loseNext atomic.Bool
}

func (s *replyLoser) Allocate(ctx context.Context, req allocator.Request) (allocator.Segment, error) {
	seg, err := s.Store.Allocate(ctx, req)
	if err == nil && s.loseNext.CompareAndSwap(true, false) {
		return allocator.Segment{}, fmt.Errorf("%w: connection reset", allocator.ErrAmbiguous)
	}
	return seg, err
}

// TestAllocator_Logs checks the log lines operators rely on: one per
// segment load with tag, range, step, latency and request ID, and a loud
// one for every recovered or abandoned range and every repaired rollback.
func TestAllocator_Logs(t *testing.T) {
	ctx := context.Background()
	m := memstore.New()
	if _, err := m.CreateTag(ctx, allocator.TagSpec{Name: "order", Step: 10}); err != nil {
		t.Fatal(err)
	}
	store := &replyLoser{Store: m}
	var logs logLines
	a := allocator.New(allocator.Config{
		Store: store, Logger: slog.New(slog.NewJSONHandler(&logs, nil)),
		RetryMin: time.Millisecond, RetryMax: time.Millisecond,
		Segment: segment.Config{Period: time.Nanosecond, MinBackoff: time.Hour},
	})
	defer a.Close(ctx)
	next := func(n int) {
		t.Helper()
		for range n {
			if _, err := a.Next(ctx, "order"); err != nil {
				t.Fatal(err)
			}
		}
	}
	wait := func(msg string, n int) []map[string]any {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for {
			if lines := logs.with(t, msg); len(lines) >= n {
				return lines
			}
			if time.Now().After(deadline) {
				t.Fatalf("no %d %q lines in:\n%s", n, msg, logs.String())
			}
			time.Sleep(time.Millisecond)
		}
	}
	has := func(line map[string]any, want map[string]any) {
		t.Helper()
		for k, v := range want {
			if got, ok := line[k]; !ok || (v != nil && got != v) {
				t.Errorf("%s: %s = %v, want %v", line["msg"], k, got, v)
			}
		}
		if id, _ := line["request_id"].(string); len(id) != 36 {
			t.Errorf("%s: request_id %q", line["msg"], line["request_id"])
		}
		if lat, ok := line["latency"].(float64); !ok || lat < 0 {
			t.Errorf("%s: latency %v", line["msg"], line["latency"])
		}
	}

	store.loseNext.Store(true)
	next(1) // the first load's reply is lost, then found; 10% used: prefetch
	recovered := wait("RECOVERED segment", 1)[0]
	has(recovered, map[string]any{"level": "WARN", "biz_tag": "order", "first": 1.0, "last": 10.0, "step": 10.0})
	loaded := wait("segment loaded", 1)[0]
	has(loaded, map[string]any{"level": "INFO", "biz_tag": "order", "first": 11.0, "last": 20.0, "step": 10.0, "attempts": 1.0})

	m.SetMaxID("order", 5) // the database goes back in time
	next(10)               // the rest of [1,10], then 11: the threshold of [11,20]
	repaired := wait("REPAIRED rollback", 1)[0]
	has(repaired, map[string]any{"level": "ERROR", "biz_tag": "order", "max_id_found": 5.0, "raised_to": 20.0, "first": 21.0, "last": 30.0})

	// Another instance allocates: the unused ranges cannot go back.
	if _, err := m.Allocate(ctx, allocator.Request{ID: uuid.Must(uuid.NewV7()), Tag: "order"}); err != nil {
		t.Fatal(err)
	}
	a.Close(ctx)
	abandoned := wait("ABANDONED ids", 1)[0]
	if abandoned["level"] != "WARN" || abandoned["biz_tag"] != "order" || abandoned["first"] != 12.0 ||
		abandoned["last"] != 20.0 || abandoned["count"] != 9.0 {
		t.Errorf("abandoned: %v", abandoned)
	}
}

// TestAllocator_ClaimedFloorLogs: a caller's range raised to its claimed
// floor alone logs a warning naming the lead, never the rollback alarm
// (ERROR "REPAIRED rollback", which operators page on and which anyone may
// otherwise trigger in the open mode); a range raised to this instance's
// own floor still logs the alarm.
func TestAllocator_ClaimedFloorLogs(t *testing.T) {
	ctx := context.Background()
	m := memstore.New()
	if _, err := m.CreateTag(ctx, allocator.TagSpec{Name: "order", Step: 10}); err != nil {
		t.Fatal(err)
	}
	var logs logLines
	// Threshold 0.95: the one ID taken below must not start a background
	// prefetch, which would move the instance's floor while the test reads it.
	a := allocator.New(allocator.Config{Store: m, Logger: slog.New(slog.NewJSONHandler(&logs, nil)),
		Segment: segment.Config{MinBackoff: time.Hour, Threshold: 0.95}})
	defer a.Close(ctx)
	grant := func(floor int64) allocator.Segment {
		t.Helper()
		seg, _, err := a.GrantRange(ctx, allocator.RangeRequest{ID: uuid.Must(uuid.NewV7()), Tag: "order", Size: 10,
			Floor: floor, MaxLead: allocator.MaxClaimedLead, Holder: allocator.NewHolder("anonymous", "key")})
		if err != nil {
			t.Fatal(err)
		}
		return seg
	}

	if seg := grant(1000); !seg.Repaired || seg.Lead != 1000 || seg.First != 1001 {
		t.Fatalf("GrantRange with floor 1000 = %+v; want [1001, 1010], a lead of 1000", seg)
	}
	if alarms := logs.with(t, "REPAIRED rollback"); len(alarms) != 0 {
		t.Fatalf("a claimed floor alone logged the rollback alarm: %v", alarms)
	}
	raised := logs.with(t, "RAISED max_id to a client's claimed floor")
	if len(raised) != 1 || raised[0]["level"] != "WARN" || raised[0]["client_lead"] != 1000.0 || raised[0]["max_id_found"] != 0.0 {
		t.Fatalf("raised lines %v; want one WARN with client_lead 1000, max_id_found 0\n%s", raised, logs.String())
	}

	// The instance's own range, then the database behind it.
	if _, err := a.Next(ctx, "order"); err != nil {
		t.Fatal(err)
	}
	m.SetMaxID("order", 5)
	if seg := grant(0); !seg.Repaired || seg.First != 1021 {
		t.Fatalf("GrantRange below the instance's floor = %+v; want [1021, 1030], repaired", seg)
	}
	alarms := logs.with(t, "REPAIRED rollback while granting a client range")
	if len(alarms) != 1 || alarms[0]["level"] != "ERROR" || alarms[0]["instance_floor"] != 1020.0 {
		t.Fatalf("alarms %v; want one ERROR with instance_floor 1020\n%s", alarms, logs.String())
	}
}
