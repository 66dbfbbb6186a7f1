package client_test

import (
	"context"
	"testing"
	"time"

	"github.com/idmint/idmint/allocator"
	"github.com/idmint/idmint/allocator/memstore"
	"github.com/idmint/idmint/client"
	"github.com/idmint/idmint/segment"
	"github.com/idmint/idmint/testkit/testutil"
)

// TestClient_Runway: Config.Runway reaches every tag's buffer, and a tag
// whose max_step cannot hold it at the client's rate is reported short.
func TestClient_Runway(t *testing.T) {
	_, url := startLosing(t, memStore(t, 5, 20), 0)
	c := newClient(t, client.Config{URLs: []string{url}, Tags: []string{"order"}, Runway: time.Hour,
		Segment: segment.Config{Runway: time.Second}})
	var st segment.Stats
	testutil.Eventually(t, 15*time.Second, "the client's runway reported short", func() bool {
		for range 5 {
			if _, err := c.Next(context.Background(), "order"); err != nil {
				t.Fatal(err)
			}
		}
		st = c.Stats().Tags[0]
		return !st.RunwayMet
	})
	if st.Runway != time.Hour || st.RunwayShort != segment.RunwayShortMaxStep || st.Peak <= 0 {
		t.Fatalf("client stats: %+v", st)
	}
}

// TestClient_TagRunway: the tag's own runway comes with every range and
// replaces the client's Config.Runway when above 0, as in an instance's
// buffers; a tag without one keeps the client's. The tag's max_step (20)
// cannot hold an hour at any rate, so the buffer sizes its ranges up to
// max_step and says so.
func TestClient_TagRunway(t *testing.T) {
	for _, tc := range []struct {
		name              string
		tagRunway, client time.Duration
		want              time.Duration
	}{
		{"the tag's runway, the client has none", time.Hour, 0, time.Hour},
		{"the tag's runway above the client's", time.Hour, time.Second, time.Hour},
		{"the tag's runway below the client's", 2 * time.Hour, 3 * time.Hour, 2 * time.Hour},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := memstore.New()
			if _, err := m.CreateTag(context.Background(), allocator.TagSpec{Name: "order", Step: 5, MaxStep: 20, Runway: tc.tagRunway}); err != nil {
				t.Fatal(err)
			}
			_, url := startLosing(t, m, 0)
			c := newClient(t, client.Config{URLs: []string{url}, Tags: []string{"order"}, Runway: tc.client})
			var st segment.Stats
			testutil.Eventually(t, 15*time.Second, "the tag's runway reported short at max_step", func() bool {
				for range 5 {
					if _, err := c.Next(context.Background(), "order"); err != nil {
						t.Fatal(err)
					}
				}
				st = c.Stats().Tags[0]
				return st.Runway == tc.want && st.RunwayShort == segment.RunwayShortMaxStep && st.Step == 20
			})
			if st.RunwayMet || st.Peak <= 0 {
				t.Fatalf("client stats: %+v", st)
			}
		})
	}
}
