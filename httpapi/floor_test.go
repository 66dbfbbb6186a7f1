package httpapi_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/idmint/idmint/allocator"
	"github.com/idmint/idmint/allocator/memstore"
	"github.com/idmint/idmint/httpapi"
	"github.com/idmint/idmint/wire"
)

// floorCase is one claimed-floor grant of TestLimits_ClaimedFloorCharged
// and what it must get: a range from first, or a 429 (first 0).
type floorCase struct {
	name  string
	floor int64 // -1: the tag's max_id now (an honest client's)
	// retry sends the last granted request again, as a client whose reply
	// was lost does: it gets its range back, whatever its budget.
	retry bool
	after time.Duration
	first int64
}

// TestLimits_ClaimedFloorCharged: the lead a caller's floor causes (the IDs
// between the tag's max_id and the range granted above the floor) counts
// against that caller's limits, over real HTTP on every store. A token of N
// IDs per second claiming floors near 2^63 moves max_id by at most what its
// budget holds, each grant; once it is spent a claim above max_id is 429
// with Retry-After and a JSON error, and changes nothing (no max_id moved,
// no request logged); honest grants (no floor, a floor at or below max_id)
// go on as before. In the open mode without ID limits the default floor-lead
// budget bounds it the same way.
func TestLimits_ClaimedFloorCharged(t *testing.T) {
	const huge = math.MaxInt64 - 1000
	// A token of 1000 IDs a second, whose burst is 1000 (MaxCount): the
	// tag's ranges are 10 IDs.
	byToken := []floorCase{
		{name: "no floor", floor: 0, first: 1},
		{name: "an honest floor", floor: -1, first: 11},
		// 980 IDs left, 10 reserved for the range: a lead of 970.
		{name: "a huge floor, first", floor: huge, first: 20 + 970 + 1},
		{name: "a huge floor, budget spent", floor: huge, after: 10 * time.Millisecond},
		{name: "the first huge floor's request again", retry: true, first: 991},
		{name: "an honest floor with the budget spent", floor: -1, after: 10 * time.Millisecond, first: 1001},
		{name: "a huge floor a second later", floor: huge, after: time.Second, first: 1010 + 990 + 1},
		{name: "a huge floor again", floor: huge, after: 10 * time.Millisecond},
		{name: "a floor at max_id", floor: -1, after: 10 * time.Millisecond, first: 2011},
	}
	// The open mode at the defaults: no ID limit, the floor-lead budget of
	// 10^8 a second with a burst of 2^32.
	const burst = allocator.MaxClaimedLead
	byAddress := []floorCase{
		{name: "no floor", floor: 0, first: 1},
		{name: "a huge floor, first", floor: huge, first: 10 + burst + 1},
		{name: "a huge floor, budget spent", floor: huge},
		{name: "the first huge floor's request again", retry: true, first: 10 + burst + 1},
		{name: "an honest floor with the budget spent", floor: -1, first: 10 + burst + 11},
		{name: "a huge floor a second later", floor: huge, after: time.Second, first: 30 + burst + httpapi.DefaultFloorLeadPerSecond + 1},
		{name: "a huge floor again", floor: huge},
		{name: "a floor below max_id", floor: 5, first: 40 + burst + httpapi.DefaultFloorLeadPerSecond + 1},
	}
	for name, open := range stores(t) {
		t.Run(name, func(t *testing.T) {
			t.Run("per token", func(t *testing.T) { runFloorCases(t, open(t), httpapi.AuthToken, byToken) })
			t.Run("per address", func(t *testing.T) { runFloorCases(t, open(t), httpapi.AuthOpen, byAddress) })
		})
	}
	t.Run("memstore", func(t *testing.T) {
		t.Run("per token", func(t *testing.T) { runFloorCases(t, memstore.New(), httpapi.AuthToken, byToken) })
		t.Run("per address", func(t *testing.T) { runFloorCases(t, memstore.New(), httpapi.AuthOpen, byAddress) })
	})
}

func runFloorCases(t *testing.T, store adminStore, mode httpapi.AuthMode, cases []floorCase) {
	if _, err := store.CreateTag(t.Context(), allocator.TagSpec{Name: "floor", Step: 10, MaxStep: 10}); err != nil {
		t.Fatal(err)
	}
	var bearer string
	if mode == httpapi.AuthToken {
		bearer = rateToken(t, store, "claimer", 1000)
	}
	// The range grants at idmint serve's default, 20 a second (burst 40).
	clock := newStepClock()
	p := newTokenInstanceWith(t, store, httpapi.AuthConfig{IDs: mode}, httpapi.Limits{RangeGrantsPerSecond: 20}, func(c *httpapi.Config) {
		c.Now, c.RequestTimeout = clock.now, time.Minute
	})
	var (
		lead, refusals int64
		granted        wire.SegmentRequest
	)
	for _, c := range cases {
		clock.advance(c.after)
		before := tagMaxID(t, store, "floor")
		floor := c.floor
		if floor < 0 {
			floor = before
		}
		id := uuid.Must(uuid.NewV7())
		body := wire.SegmentRequest{Tag: "floor", Size: 10, RequestID: id.String(), HolderKey: holderKey(id), Floor: floor}
		if c.retry {
			body, id = granted, uuid.MustParse(granted.RequestID)
		}
		status, hdr, reply := do(t, p.srv, "POST", "/v1/segments", bearer, body)
		after := tagMaxID(t, store, "floor")
		if c.first == 0 {
			retry, err := strconv.Atoi(hdr.Get("Retry-After"))
			if status != http.StatusTooManyRequests || errorCode(t, reply) != wire.CodeRateLimited || err != nil || retry < 1 ||
				!strings.Contains(string(reply), "floor") {
				t.Fatalf("%s: %d %s (Retry-After %q); want 429 rate_limited about the floor, with Retry-After", c.name, status, reply, hdr.Get("Retry-After"))
			}
			if after != before {
				t.Fatalf("%s: refused, yet max_id moved from %d to %d", c.name, before, after)
			}
			if _, err := store.Lookup(t.Context(), id); !errors.Is(err, allocator.ErrNotFound) {
				t.Fatalf("%s: refused, yet the request is logged: %v", c.name, err)
			}
			refusals++
			continue
		}
		var got wire.SegmentResponse
		if status != http.StatusOK || json.Unmarshal(reply, &got) != nil {
			t.Fatalf("%s: %d %s", c.name, status, reply)
		}
		if c.retry {
			if !got.Recovered || got.First != c.first || after != before {
				t.Fatalf("%s: %s, max_id %d after %d; want the range from %d recovered, max_id unmoved", c.name, reply, after, before, c.first)
			}
			continue
		}
		if got.First != c.first || got.Last != c.first+9 || after != got.Last || got.Recovered {
			t.Fatalf("%s at max_id %d: [%d, %d], max_id %d after; want [%d, %d]", c.name, before, got.First, got.Last, after, c.first, c.first+9)
		}
		lead += got.First - 1 - before
		granted = body
	}
	_, _, metrics := do(t, p.srv, "GET", "/metrics", "", nil)
	if n := metricValue(metrics, `idmint_claimed_floor_lead_ids_total{biz_tag="floor"}`); n != lead {
		t.Errorf("idmint_claimed_floor_lead_ids_total = %d, want %d, the leads granted", n, lead)
	}
	if n := metricValue(metrics, `idmint_claimed_floor_refused_total{biz_tag="floor"}`); n != refusals {
		t.Errorf("idmint_claimed_floor_refused_total = %d, want %d", n, refusals)
	}
}

func tagMaxID(t *testing.T, store adminStore, name string) int64 {
	t.Helper()
	tags, err := store.Tags(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for _, tag := range tags {
		if tag.Name == name {
			return tag.MaxID
		}
	}
	t.Fatalf("no tag %q", name)
	return 0
}

// losingStore commits allocations and, while lose is set, answers them as
// a lost reply would: ErrAmbiguous.
type losingStore struct {
	adminStore
	lose atomic.Bool
}

func (s *losingStore) Allocate(ctx context.Context, req allocator.Request) (allocator.Segment, error) {
	seg, err := s.adminStore.Allocate(ctx, req)
	if err == nil && s.lose.Load() {
		return allocator.Segment{}, fmt.Errorf("%w: reply lost after the commit", allocator.ErrAmbiguous)
	}
	return seg, err
}

// TestLimits_ClaimedFloorUnsure: a grant whose outcome is unknown (its reply
// lost after the commit) may have taken its lead, and is charged it: the
// caller's next claim finds its budget spent, and its retry recovers the
// range without a second lead.
func TestLimits_ClaimedFloorUnsure(t *testing.T) {
	store := &losingStore{adminStore: memstore.New()}
	if _, err := store.CreateTag(t.Context(), allocator.TagSpec{Name: "floor", Step: 10, MaxStep: 10}); err != nil {
		t.Fatal(err)
	}
	p := newTokenInstanceWith(t, store, httpapi.AuthConfig{}, httpapi.Limits{}, func(c *httpapi.Config) {
		c.Now, c.RequestTimeout = frozenClock(), time.Minute
	})
	claim := func(id uuid.UUID) (int, []byte) {
		t.Helper()
		status, _, reply := do(t, p.srv, "POST", "/v1/segments", "",
			wire.SegmentRequest{Tag: "floor", Size: 10, RequestID: id.String(), HolderKey: holderKey(id), Floor: math.MaxInt64 - 1000})
		return status, reply
	}
	lost := uuid.Must(uuid.NewV7())
	store.lose.Store(true)
	if status, reply := claim(lost); status != http.StatusServiceUnavailable {
		t.Fatalf("a claim whose reply is lost: %d %s, want 503", status, reply)
	}
	store.lose.Store(false)
	if m := tagMaxID(t, store, "floor"); m != allocator.MaxClaimedLead+10 {
		t.Fatalf("max_id %d after the lost grant, want 2^32 + 10: the scenario proves nothing", m)
	}
	if status, reply := claim(uuid.Must(uuid.NewV7())); status != http.StatusTooManyRequests || errorCode(t, reply) != wire.CodeRateLimited {
		t.Fatalf("a claim after a lost one that took the whole budget: %d %s, want 429", status, reply)
	}
	status, reply := claim(lost)
	var got wire.SegmentResponse
	if status != http.StatusOK || json.Unmarshal(reply, &got) != nil || !got.Recovered || got.First != allocator.MaxClaimedLead+1 {
		t.Fatalf("the lost claim's retry: %d %s, want its range recovered", status, reply)
	}
	if m := tagMaxID(t, store, "floor"); m != allocator.MaxClaimedLead+10 {
		t.Fatalf("max_id %d after the retry, want it unmoved", m)
	}
}
