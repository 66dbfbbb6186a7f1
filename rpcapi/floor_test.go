package rpcapi_test

import (
	"bytes"
	"encoding/json"
	"math"
	"net/http"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/google/uuid"

	"github.com/idmint/idmint/allocator"
	"github.com/idmint/idmint/httpapi"
	idmintv1 "github.com/idmint/idmint/rpcapi/gen/idmint/v1"
	"github.com/idmint/idmint/rpcapi/gen/idmint/v1/idmintv1connect"
	"github.com/idmint/idmint/wire"
)

// TestService_ClaimedFloorCharged: GrantRange runs POST /v1/segments, so a
// floor claimed over Connect is charged to the same budget as one claimed
// over HTTP from the same address: after a first claim near 2^63 took the
// burst (2^32), the next ones, over either protocol, move max_id by no more
// than the default budget refilled meanwhile (10^8 a second), which the
// test's own clock bounds.
func TestService_ClaimedFloorCharged(t *testing.T) {
	f := newFixture(t, httpapi.AuthOpen)
	c := idmintv1connect.NewSegmentServiceClient(http.DefaultClient, f.url)
	const huge = math.MaxInt64 - 1000
	key := strings.Repeat("k", 32)
	var last int64 // max_id after the last grant: each range of 10 ends it
	overRPC := func() (int64, error) {
		t.Helper()
		r, err := c.GrantRange(t.Context(), connect.NewRequest(&idmintv1.GrantRangeRequest{
			BizTag: "order", Size: 10, RequestId: uuid.Must(uuid.NewV7()).String(), HolderKey: key, Floor: huge}))
		if err != nil {
			return 0, err
		}
		return r.Msg.GetFirst(), nil
	}
	overHTTP := func() int64 {
		t.Helper()
		body, _ := json.Marshal(wire.SegmentRequest{Tag: "order", Size: 10, RequestID: uuid.Must(uuid.NewV7()).String(), HolderKey: key, Floor: huge})
		resp, err := http.Post(f.url+"/v1/segments", "application/json", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var r wire.SegmentResponse
		if resp.StatusCode == http.StatusTooManyRequests {
			return 0
		}
		if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&r) != nil {
			t.Fatalf("a floor over HTTP: %d", resp.StatusCode)
		}
		return r.First
	}
	start := time.Now() // before the burst is taken: the refill starts then
	first, err := overRPC()
	if err != nil || first != allocator.MaxClaimedLead+1 {
		t.Fatalf("a first floor near 2^63 over Connect: from %d, %v; want a range from 2^32 + 1 (the burst)", first, err)
	}
	last = first + 9
	for i := range 4 {
		var got int64
		if i%2 == 0 {
			got, err = overRPC()
			if err != nil && (connect.CodeOf(err) != connect.CodeResourceExhausted || reason(err) != wire.CodeRateLimited || retryDelay(err) < time.Second) {
				t.Fatalf("a floor over Connect with the budget spent: %v, want ResourceExhausted rate_limited with a retry delay", err)
			}
		} else {
			got = overHTTP()
		}
		if got == 0 {
			continue // refused: nothing moved
		}
		refilled := int64(math.Ceil(httpapi.DefaultFloorLeadPerSecond * time.Since(start).Seconds()))
		if lead := got - 1 - last; lead < 0 || lead > refilled {
			t.Fatalf("claim %d: a lead of %d after the burst was spent, want at most the %d refilled since", i+2, lead, refilled)
		}
		last = got + 9
	}
}
