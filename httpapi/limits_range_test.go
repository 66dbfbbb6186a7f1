package httpapi_test

import (
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/idmint/idmint/allocator"
	"github.com/idmint/idmint/httpapi"
	"github.com/idmint/idmint/wire"
)

// frozenClock is a server clock that stands still at the time it is made:
// no budget refills.
func frozenClock() func() time.Time {
	at := time.Now()
	return func() time.Time { return at }
}

// TestLimits_AddressKey: the per-address limit counts an IPv6 address by
// its /64 (a host picks its low 64 bits at will) and an IPv4-mapped one as
// its IPv4 address; other IPv4 addresses and other /64s have budgets of
// their own.
func TestLimits_AddressKey(t *testing.T) {
	for _, tc := range []struct {
		name, first, second string
		shared              bool
	}{
		{name: "one IPv6 /64", first: "[2001:db8:1:2::1]:4000", second: "[2001:db8:1:2:ffff:ffff:ffff:fffe]:4001", shared: true},
		{name: "another IPv6 /64", first: "[2001:db8:1:2::1]:4000", second: "[2001:db8:1:3::1]:4000"},
		{name: "IPv4-mapped IPv6", first: "192.0.2.7:4000", second: "[::ffff:192.0.2.7]:4001", shared: true},
		{name: "IPv4-mapped, another IPv4 address", first: "192.0.2.7:4000", second: "[::ffff:192.0.2.8]:4000"},
		{name: "link-local, other zones", first: "[fe80::1%eth0]:4000", second: "[fe80::2%eth1]:4000", shared: true},
		{name: "another IPv4 address", first: "192.0.2.7:4000", second: "192.0.2.8:4000"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// 100 IDs (the burst: MaxCount) spend an address's budget.
			api, _, _ := limitedServerAt(t, httpapi.AuthConfig{}, httpapi.Limits{IDsPerSecondPerAddress: 10}, frozenClock())
			take := func(remote string) int {
				req := httptest.NewRequest("GET", "/ids?biz_tag=order&count=100", nil)
				req.RemoteAddr = remote
				rec := httptest.NewRecorder()
				api.ServeHTTP(rec, req)
				return rec.Code
			}
			if s := take(tc.first); s != http.StatusOK {
				t.Fatalf("%s: %d", tc.first, s)
			}
			want := http.StatusOK
			if tc.shared {
				want = http.StatusTooManyRequests
			}
			if s := take(tc.second); s != want {
				t.Fatalf("%s after %s spent its budget: %d, want %d", tc.second, tc.first, s, want)
			}
		})
	}
}

// clientFrom is a client whose connections come from the loopback address
// local (127.0.0.1 is the shared client's).
func clientFrom(t *testing.T, local string) *http.Client {
	t.Helper()
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(local)}, Timeout: 5 * time.Second}
	tr := &http.Transport{DialContext: d.DialContext}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Timeout: 10 * time.Second, Transport: validating{next: tr}}
}

// TestLimits_RangeGrants: range requests, each a write to the store, are
// bounded per address in the open mode and per token in the token mode. A
// flood is refused after the burst with 429, Retry-After and the
// rate_limited count, and writes nothing: no segment-log row for the
// refused request IDs, max_id unmoved, no give-back. Another address (or
// token) is still served.
func TestLimits_RangeGrants(t *testing.T) {
	const perSecond, burst, extra = 20, 40, 5 // idmint serve's default
	for _, tc := range []struct {
		name string
		mode httpapi.AuthMode
	}{
		{name: "per address in the open mode", mode: httpapi.AuthOpen},
		{name: "per token in the token mode", mode: httpapi.AuthToken},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, base, m := limitedServerAt(t, httpapi.AuthConfig{IDs: tc.mode}, httpapi.Limits{RangeGrantsPerSecond: perSecond}, frozenClock())
			if _, err := m.CreateTag(t.Context(), allocator.TagSpec{Name: "range", Step: 10, MaxStep: 10}); err != nil {
				t.Fatal(err)
			}
			// The flood comes from one address with one token; the other
			// caller has its own address in the open mode, its own token
			// in the token mode.
			flooder, other := client, clientFrom(t, "127.0.0.2")
			var floodBearer, otherBearer string
			if tc.mode == httpapi.AuthToken {
				_, floodBearer = newToken(t, m, "flood", "ids")
				_, otherBearer = newToken(t, m, "other", "ids")
				other = client
			}
			grant := func(c *http.Client, bearer string, id uuid.UUID) (int, http.Header, []byte) {
				t.Helper()
				return postFrom(t, c, base+"/v1/segments", bearer, grantBody("range", 10, id))
			}
			var last wire.SegmentResponse
			for i := range burst {
				s, _, body := grant(flooder, floodBearer, uuid.Must(uuid.NewV7()))
				if s != http.StatusOK || json.Unmarshal(body, &last) != nil {
					t.Fatalf("grant %d of the burst: %d %s", i+1, s, body)
				}
			}
			var refusedIDs []uuid.UUID
			for range extra {
				id := uuid.Must(uuid.NewV7())
				s, hdr, body := grant(flooder, floodBearer, id)
				if s != http.StatusTooManyRequests || errorCode(t, body) != wire.CodeRateLimited {
					t.Fatalf("a grant past the burst: %d %s", s, body)
				}
				if ra := hdr.Get("Retry-After"); ra != "1" { // one more grant in 50 ms
					t.Fatalf("Retry-After %q, want 1", ra)
				}
				refusedIDs = append(refusedIDs, id)
			}
			gb, _ := json.Marshal(wire.GiveBackRequest{Tag: "range", RequestID: last.RequestID, HolderKey: holderKey(uuid.MustParse(last.RequestID)), First: last.Last - 4, Last: last.Last})
			if s, _, body := postFrom(t, flooder, base+"/v1/segments/giveback", floodBearer, string(gb)); s != http.StatusTooManyRequests {
				t.Fatalf("a give-back past the burst: %d %s", s, body)
			}
			for _, id := range refusedIDs {
				if _, err := m.Lookup(t.Context(), id); !errors.Is(err, allocator.ErrNotFound) {
					t.Fatalf("refused request %s: lookup %v, want not found", id, err)
				}
			}
			if n := refused(t, base, wire.CodeRateLimited); n != extra+1 {
				t.Fatalf("rate_limited counted %d, want %d", n, extra+1)
			}
			// The next range starts right after the flood's last: max_id
			// did not move for the refused grants, nor back for the
			// refused give-back.
			var next wire.SegmentResponse
			if s, _, body := grant(other, otherBearer, uuid.Must(uuid.NewV7())); s != http.StatusOK || json.Unmarshal(body, &next) != nil {
				t.Fatalf("another caller during the flood: %d %s", s, body)
			}
			if next.First != last.Last+1 {
				t.Fatalf("the range after the refusals starts at %d, want %d: a refused request moved max_id", next.First, last.Last+1)
			}
		})
	}
}

// TestLimits_RangeRefusedByIDs: a range request refused by the ID limit
// costs no range request either, since it writes nothing.
func TestLimits_RangeRefusedByIDs(t *testing.T) {
	// 100 IDs (MaxCount) and 2 range requests, never refilled.
	_, base, m := limitedServerAt(t, httpapi.AuthConfig{},
		httpapi.Limits{IDsPerSecondPerAddress: 10, RangeGrantsPerSecond: 1}, frozenClock())
	if _, err := m.CreateTag(t.Context(), allocator.TagSpec{Name: "range", Step: 10, MaxStep: 100}); err != nil {
		t.Fatal(err)
	}
	for _, step := range []struct {
		size int64
		want int
	}{
		{size: 60, want: http.StatusOK},
		{size: 60, want: http.StatusTooManyRequests}, // 40 IDs left
		{size: 40, want: http.StatusOK},              // the second range request
	} {
		if s, _, body := postWith(t, base+"/v1/segments", "", grantBody("range", step.size, uuid.Must(uuid.NewV7()))); s != step.want {
			t.Fatalf("a range of %d: %d %s, want %d", step.size, s, body, step.want)
		}
	}
}
