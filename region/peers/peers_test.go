package peers_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/idmint/idmint/region"
	"github.com/idmint/idmint/region/peers"
	"github.com/idmint/idmint/testkit/testlog"
)

// shares holds a share that a test changes, as a database or a peer's
// /id/health would show it.
type shares struct {
	mu sync.Mutex
	s  region.Share
}

func (h *shares) get() region.Share {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.s
}

func (h *shares) set(s region.Share) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.s = s
}

// peer serves sh as a peer's /id/health.
func peer(t *testing.T, sh *shares) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		json.NewEncoder(w).Encode(map[string]any{"region": map[string]any{"share": sh.get()}})
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

var (
	old  = []string{"eu", "us"}
	next = []string{"eu", "us", "ap"}
)

// share is region k of a deployment of old, fenced at fence (0: open) and
// split there into next when split.
func share(k int, fence int64, split bool) region.Share {
	s := region.Share{Name: old[k], WorkerSlot: k, WorkerSlots: 4,
		Epochs: []region.Epoch{{From: 1, To: fence, Block: 1000, Regions: old, Index: k}}}
	if split {
		s.Epochs = append(s.Epochs, region.Epoch{From: fence, Block: 1000, Regions: next, Index: k})
	}
	return s
}

// TestWatcher_Split: an instance that reads its share from its database
// follows a split, and a peer seen on the other side of the split for a
// moment is no conflict; one that goes on disagreeing past Confirm is.
func TestWatcher_Split(t *testing.T) {
	db, us := &shares{s: share(0, 0, false)}, &shares{s: share(1, 0, false)}
	w := peers.New(peers.Config{Self: db.get(), URLs: []string{peer(t, us)},
		Load:    func(context.Context) (region.Share, error) { return db.get(), nil },
		Refresh: 10 * time.Millisecond, Confirm: 300 * time.Millisecond, Logger: testlog.Discard()})
	if err := w.Check(t.Context()); err != nil {
		t.Fatal(err)
	}

	// The peer's database was split, ours not yet read: its new epoch
	// overlaps our open one. Our database gets it 50 ms later.
	us.set(share(1, 5001, true))
	go func() {
		time.Sleep(50 * time.Millisecond)
		db.set(share(0, 5001, true))
	}()
	if err := w.Check(t.Context()); err != nil {
		t.Fatalf("a split seen on both sides within Confirm: %v", err)
	}
	if got := w.Self(); len(got.Epochs) != 2 || got.Epochs[0].To != 5001 {
		t.Fatalf("Self after the split: %v", got.Epochs)
	}
	if p := w.Peers()[0]; !p.Agrees || p.Name != "us" {
		t.Fatalf("peer %+v", p)
	}

	// A peer that stays on another scheme is a conflict, after Confirm.
	us.set(region.Share{Name: "us", WorkerSlot: 1, WorkerSlots: 4,
		Epochs: []region.Epoch{{From: 1, Block: 999, Regions: old, Index: 1}}})
	begin := time.Now()
	if err := w.Check(t.Context()); !errors.Is(err, region.ErrConflict) {
		t.Fatalf("a peer with other blocks: %v", err)
	}
	if d := time.Since(begin); d < 300*time.Millisecond {
		t.Fatalf("conflict after %v, before Confirm", d)
	}
}

// TestWatcher_ShareChanged: a database whose share changed other than by a
// split (here: unfenced) is a conflict.
func TestWatcher_ShareChanged(t *testing.T) {
	db := &shares{s: share(0, 5001, false)}
	w := peers.New(peers.Config{Self: db.get(), Logger: testlog.Discard(),
		Load: func(context.Context) (region.Share, error) { return db.get(), nil }})
	if err := w.Check(t.Context()); err != nil {
		t.Fatal(err)
	}
	db.set(share(0, 0, false))
	if err := w.Check(t.Context()); !errors.Is(err, region.ErrConflict) {
		t.Fatalf("an unfenced share: %v", err)
	}
}

// TestWatcher_Holding: the share a range reply carries owns the range; a
// range granted above the share last read (a split landed since) reads
// the share again before it is answered.
func TestWatcher_Holding(t *testing.T) {
	db := &shares{s: share(0, 0, false)}
	w := peers.New(peers.Config{Self: db.get(), Logger: testlog.Discard(),
		Load: func(context.Context) (region.Share, error) { return db.get(), nil }})
	if got := w.Holding(t.Context(), 1, 1000); len(got.Epochs) != 1 {
		t.Fatalf("Holding of a range its share owns: %v", got.Epochs)
	}
	// Split at 6001 into eu, us, ap: eu's second block above is
	// 9001..10000 (block 3 of the new epoch), which the old share gives
	// to us.
	db.set(share(0, 6001, true))
	if w.Self().OwnsRange(9001, 10000) {
		t.Fatal("the test's range is eu's in the old share too")
	}
	got := w.Holding(t.Context(), 9001, 10000)
	if !got.OwnsRange(9001, 10000) {
		t.Fatalf("Holding of a range granted after a split: %v, which does not own it", got.Epochs)
	}
}
