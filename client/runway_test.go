package client_test

import (
	"context"
	"testing"
	"time"

	"github.com/idmint/idmint/client"
	"github.com/idmint/idmint/internal/testutil"
	"github.com/idmint/idmint/segment"
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
