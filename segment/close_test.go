package segment_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idmint/idmint/segment"
)

// closeRaceSource is a fakeSource whose lookups fail while down, and whose
// grants, once hold is set, wait (see grantHeld): the orders of a source's
// statements that Close must survive.
type closeRaceSource struct {
	*fakeSource

	mu          sync.Mutex // protects the fields below
	lookupsDown bool
	hold        bool
	// late: a held grant whose caller stopped waiting still commits, right
	// after the source's next give-back (a statement the source runs on
	// after the cancel, and that takes the tag's lock last); else a held
	// grant waits for the next give-back, or its context, and commits only
	// in the first case.
	late    bool
	held    chan struct{} // closed when the first held grant waits
	heldAsk segment.Ask   // the held grant's ask
	gaveOne chan struct{} // closed after the first give-back
	commit  func()        // the late grant that commits after the next give-back
}

func newCloseRaceSource(step int64) *closeRaceSource {
	return &closeRaceSource{fakeSource: newFakeSource(step), held: make(chan struct{}), gaveOne: make(chan struct{})}
}

func (c *closeRaceSource) Grant(ctx context.Context, req segment.Ask) (segment.Grant, error) {
	if err := ctx.Err(); err != nil {
		return segment.Grant{}, err // nothing sent
	}
	c.mu.Lock()
	hold, late := c.hold, c.late
	if hold {
		c.hold, c.heldAsk = false, req
		close(c.held)
	}
	c.mu.Unlock()
	if !hold {
		return c.fakeSource.Grant(ctx, req)
	}
	return c.grantHeld(ctx, req, late)
}

// grantHeld is a grant that waits. A late one waits for its context and
// answers that its reply was lost, and commits after the source's next
// give-back. Otherwise it commits once a give-back was made, or commits nothing
// when its context ends first.
func (c *closeRaceSource) grantHeld(ctx context.Context, req segment.Ask, late bool) (segment.Grant, error) {
	if late {
		<-ctx.Done()
		c.mu.Lock()
		c.commit = func() { c.fakeSource.Grant(context.Background(), req) }
		c.mu.Unlock()
		return segment.Grant{}, segment.Classify(segment.ErrAmbiguous, ctx.Err())
	}
	select {
	case <-c.gaveOne:
		return c.fakeSource.Grant(ctx, req)
	case <-ctx.Done():
		return segment.Grant{}, ctx.Err()
	}
}

// afterGiveBack commits the late grant waiting for the next give-back.
func (c *closeRaceSource) afterGiveBack() {
	c.mu.Lock()
	commit := c.commit
	c.commit = nil
	c.mu.Unlock()
	if commit != nil {
		commit()
	}
}

func (c *closeRaceSource) Lookup(ctx context.Context, req segment.Ask) (segment.Grant, error) {
	c.mu.Lock()
	down := c.lookupsDown
	c.mu.Unlock()
	if down {
		return segment.Grant{}, errors.New("source unreachable")
	}
	if err := ctx.Err(); err != nil {
		return segment.Grant{}, err // nothing sent
	}
	return c.fakeSource.Lookup(ctx, req)
}

func (c *closeRaceSource) GiveBack(ctx context.Context, req segment.Ask, r segment.Range) (bool, error) {
	back, err := c.fakeSource.GiveBack(ctx, req, r)
	c.mu.Lock()
	select {
	case <-c.gaveOne:
	default:
		close(c.gaveOne)
	}
	c.mu.Unlock()
	c.afterGiveBack()
	return back, err
}

// set sets the source's knobs under its lock.
func (c *closeRaceSource) set(f func(*closeRaceSource)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	f(c)
}

// maxID returns the source's high-water mark.
func (c *closeRaceSource) maxID() int64 {
	c.fakeSource.mu.Lock()
	defer c.fakeSource.mu.Unlock()
	return c.fakeSource.maxID
}

// gaveBack returns the give-backs the source took.
func (c *closeRaceSource) gaveBack() []givenBack {
	c.fakeSource.mu.Lock()
	defer c.fakeSource.mu.Unlock()
	return append([]givenBack(nil), c.fakeSource.gaveBack...)
}

// closeSet closes s within a bound and returns the tag's stats after.
func closeSet(t *testing.T, s *segment.Set, tag string) segment.Stats {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	st, err := s.TagStats(ctx, tag)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// TestSet_CloseAccountsEveryID: at the end of Close every ID the source
// granted the Set is handed out, given back, or counted (and logged)
// abandoned, whatever order the source's statements land in.
func TestSet_CloseAccountsEveryID(t *testing.T) {
	// A dropped buffer's load is still in flight, and only granted a
	// range after the served buffer's tail would have gone back: the
	// tail goes back only once that load ended.
	t.Run("load of a dropped buffer", func(t *testing.T) {
		ctx := context.Background()
		src := newCloseRaceSource(10)
		src.fakeSource.lose = 1
		src.lookupsDown = true
		var logs syncBuffer
		s := newSet(t, src, func(c *segment.SetConfig) {
			c.RetryMin, c.RetryMax = time.Millisecond, time.Millisecond
			c.Buffer.WaitTimeout = 20 * time.Millisecond
			c.Buffer.MinBackoff = time.Microsecond
			c.Buffer.LoadTimeout = 10 * time.Second // Close waits 2 s for a load in flight
			c.Logger = slog.New(slog.NewTextHandler(&logs, nil))
		})
		// The first load commits [1, 10] and loses the reply; its lookups
		// fail, the caller gives up, and the buffer is dropped while its
		// load goes on.
		if _, err := s.Next(ctx, "t"); !errors.Is(err, segment.ErrUnavailable) {
			t.Fatalf("first Next = %v, want ErrUnavailable", err)
		}
		// A new buffer is granted [11, 20] and hands out 11.
		var id int64
		eventually(t, 5*time.Second, "the new buffer to serve", func() bool {
			var err error
			id, err = s.Next(ctx, "t")
			return err == nil
		})
		if id != 11 {
			t.Fatalf("first id served %d, want 11", id)
		}
		// The dropped buffer's load finds [1, 10] below the tag's floor
		// (a settled gap) and asks anew, with the floor 20: that grant
		// waits.
		src.set(func(c *closeRaceSource) { c.lookupsDown, c.hold = false, true })
		select {
		case <-src.held:
		case <-time.After(5 * time.Second):
			t.Fatal("the dropped buffer's load sent no new grant")
		}
		st := closeSet(t, s, "t")
		m := src.maxID()
		if st.Issued+st.Abandoned != m {
			t.Fatalf("max_id %d, %d ids handed out, %d abandoned, %d given back (%+v): %d ids unaccounted for",
				m, st.Issued, st.Abandoned, st.GivenBack, src.gaveBack(), m-st.Issued-st.Abandoned)
		}
		if !strings.Contains(logs.String(), "ABANDONED ids") {
			t.Errorf("%d ids abandoned without an ABANDONED line", st.Abandoned)
		}
	})

	// The served buffer's own load gives up unsettled at Close, and its
	// grant still commits at the source, after a give-back would: no tail
	// goes back while such an ask is unsettled.
	t.Run("ask that commits after its load gave up", func(t *testing.T) {
		ctx := context.Background()
		src := newCloseRaceSource(10)
		var logs syncBuffer
		s := newSet(t, src, func(c *segment.SetConfig) {
			// Close waits 20 ms for a load in flight, which nothing
			// else ends.
			c.Buffer.LoadTimeout = 20 * time.Millisecond
			c.Buffer.AdaptTimeout = func(time.Duration) time.Duration { return time.Minute }
			c.Logger = slog.New(slog.NewTextHandler(&logs, nil))
		})
		if _, err := s.Next(ctx, "t"); err != nil {
			t.Fatal(err)
		}
		src.set(func(c *closeRaceSource) { c.hold, c.late = true, true })
		ids, err := s.NextN(ctx, "t", 5, nil) // past half of [1, 10]: the next load starts
		if err != nil || len(ids) != 5 {
			t.Fatalf("NextN = %v, %v", ids, err)
		}
		select {
		case <-src.held:
		case <-time.After(5 * time.Second):
			t.Fatal("no prefetch")
		}
		st := closeSet(t, s, "t")
		m := src.maxID()
		if gb := src.gaveBack(); len(gb) > 0 {
			t.Errorf("gave back %+v while an ask of the tag was unsettled", gb)
		}
		// The late grant's range is the Set's to count when a lookup
		// found it; else its request is logged as abandoned, and the
		// source's log has the range.
		var lateIDs int64
		src.mu.Lock()
		held := src.heldAsk.ID
		src.mu.Unlock()
		if strings.Contains(logs.String(), "ABANDONED request") && strings.Contains(logs.String(), held.String()) {
			src.fakeSource.mu.Lock()
			if r, ok := src.fakeSource.granted[held]; ok {
				lateIDs = r.Len()
			}
			src.fakeSource.mu.Unlock()
		}
		if st.Issued+st.Abandoned+lateIDs != m {
			t.Fatalf("max_id %d, %d ids handed out, %d abandoned, %d given back, %d under an abandoned request: %d ids unaccounted for",
				m, st.Issued, st.Abandoned, st.GivenBack, lateIDs, m-st.Issued-st.Abandoned-lateIDs)
		}
	})
}

// syncBuffer is a bytes.Buffer safe for concurrent writes, for logs.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// TestBuffer_CloseLateReply: a load whose reply lands only after Close
// stopped waiting for it (and cancelled it) still has its range reported
// by Close, and counted abandoned, never served.
func TestBuffer_CloseLateReply(t *testing.T) {
	ctx := context.Background()
	loads := 0
	l := segment.LoaderFunc(func(ctx context.Context, size int64) (segment.Grant, error) {
		loads++ // loads of one buffer never overlap
		if loads == 1 {
			return segment.Grant{Range: segment.Range{First: 1, Last: 10}}, nil
		}
		<-ctx.Done() // the reply comes only once Close gave up waiting
		return segment.Grant{Range: segment.Range{First: 11, Last: 20}}, nil
	})
	b := segment.New(segment.Config{Tag: "t", Loader: l, Logger: quiet(), Threshold: 0.5,
		LoadTimeout:  20 * time.Millisecond, // Close waits 20 ms for a load in flight
		AdaptTimeout: func(time.Duration) time.Duration { return time.Minute }})
	if ids, err := b.TakeN(ctx, 6, nil); err != nil || len(ids) != 6 {
		t.Fatalf("TakeN = %v, %v", ids, err)
	}
	eventually(t, 5*time.Second, "the next load", func() bool { return b.Stats().Loading })
	unused := b.Close()
	want := []segment.Range{{First: 7, Last: 10}, {First: 11, Last: 20}}
	if len(unused) != 2 || unused[0] != want[0] || unused[1] != want[1] {
		t.Fatalf("unused = %v, want %v", unused, want)
	}
	if st := b.Stats(); st.Abandoned != 14 || st.Issued != 6 || st.Serving {
		t.Errorf("stats after Close: %d abandoned, %d issued, serving %v; want 14, 6, false", st.Abandoned, st.Issued, st.Serving)
	}
	if _, err := b.Take(ctx); !errors.Is(err, segment.ErrClosed) {
		t.Errorf("Take after Close = %v, want ErrClosed", err)
	}
}
