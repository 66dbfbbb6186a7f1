package segment_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/idmint/idmint/segment"
)

// fakeSource grants ranges of step IDs of one high-water mark, once per
// request ID, as a store does. Its knobs lose replies, drop requests and
// hand request IDs to strangers; it records every request ID it is sent.
type fakeSource struct {
	step int64

	mu      sync.Mutex // protects the fields below
	maxID   int64
	granted map[uuid.UUID]segment.Range
	// lose: the next lose grants commit, and their replies are lost.
	lose int
	// drop: the next drop grants commit nothing, and answer as if their
	// reply was lost.
	drop int
	// fail: the next fail grants commit nothing, and fail with an error of
	// no class.
	fail int
	// hide: the next hide lookups of a committed request do not see it
	// (ErrNotFound), as a replica behind would.
	hide int
	// claimed: request IDs a stranger holds: answered ErrNotHeld.
	claimed map[uuid.UUID]bool
	// claimFirst hands the first request ID sent to a stranger;
	// claimOnDrop hands a dropped request's ID to one.
	claimFirst, claimOnDrop bool
	unknown                 bool
	grants                  []uuid.UUID // request IDs of every Grant call
	lookups                 []uuid.UUID // request IDs of every Lookup call
	gaveBack                []givenBack
}

type givenBack struct {
	id uuid.UUID
	r  segment.Range
}

var errLost = errors.New("connection reset after the statement was sent")

func newFakeSource(step int64) *fakeSource {
	return &fakeSource{step: step, granted: map[uuid.UUID]segment.Range{}, claimed: map[uuid.UUID]bool{}}
}

func (f *fakeSource) Grant(ctx context.Context, req segment.Ask) (segment.Grant, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.grants = append(f.grants, req.ID)
	if f.claimFirst {
		f.claimFirst = false
		f.claimed[req.ID] = true
	}
	switch {
	case f.unknown:
		return segment.Grant{}, segment.Classify(segment.ErrRefused, segment.ErrUnknownTag)
	case f.claimed[req.ID]:
		return segment.Grant{}, segment.Classify(segment.ErrNotHeld, errors.New("request_id belongs to another caller"))
	}
	if _, ok := f.granted[req.ID]; ok {
		return segment.Grant{}, segment.Classify(segment.ErrAlreadyGranted, errors.New("duplicate request id"))
	}
	if f.fail > 0 {
		f.fail--
		return segment.Grant{}, errors.New("connection refused")
	}
	if f.drop > 0 {
		f.drop--
		if f.claimOnDrop {
			f.claimed[req.ID] = true
		}
		return segment.Grant{}, segment.Classify(segment.ErrAmbiguous, errLost)
	}
	base := max(f.maxID, req.Floor)
	r := segment.Range{First: base + 1, Last: base + f.step}
	f.maxID = r.Last
	f.granted[req.ID] = r
	if f.lose > 0 {
		f.lose--
		return segment.Grant{}, segment.Classify(segment.ErrAmbiguous, errLost)
	}
	return segment.Grant{Range: r, RequestID: req.ID.String()}, nil
}

func (f *fakeSource) Lookup(ctx context.Context, req segment.Ask) (segment.Grant, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lookups = append(f.lookups, req.ID)
	if f.claimed[req.ID] {
		return segment.Grant{}, segment.Classify(segment.ErrNotHeld, errors.New("request_id belongs to another caller"))
	}
	r, ok := f.granted[req.ID]
	if ok && f.hide > 0 {
		f.hide--
		ok = false
	}
	if !ok {
		return segment.Grant{}, segment.ErrNotFound
	}
	return segment.Grant{Range: r, RequestID: req.ID.String(), Recovered: true}, nil
}

func (f *fakeSource) GiveBack(ctx context.Context, req segment.Ask, r segment.Range) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	g, ok := f.granted[req.ID]
	if !ok || f.maxID != r.Last || g.Last != r.Last || r.First < g.First {
		return false, nil
	}
	f.maxID = r.First - 1
	f.gaveBack = append(f.gaveBack, givenBack{req.ID, r})
	return true, nil
}

// sent returns the request IDs of the Grant and Lookup calls so far.
func (f *fakeSource) sent() (grants, lookups []uuid.UUID) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]uuid.UUID(nil), f.grants...), append([]uuid.UUID(nil), f.lookups...)
}

func newSet(tb testing.TB, g segment.Source, edit func(*segment.SetConfig)) *segment.Set {
	tb.Helper()
	cfg := segment.SetConfig{
		Source:   g,
		RetryMin: time.Microsecond, RetryMax: time.Microsecond,
		Buffer: segment.Config{Threshold: 0.5},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
	if edit != nil {
		edit(&cfg)
	}
	s := segment.NewSet(cfg)
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		s.Close(ctx)
	})
	return s
}

// TestSet_Load walks the Set's request through a source's answers: every
// retry of a request carries its ID, a lost reply is looked up, and only a
// request settled without a range for the Set makes it choose a new one.
func TestSet_Load(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name  string
		setup func(*fakeSource)
		// want: the request IDs sent, by the index of the request (0: the
		// first one chosen), Grant calls then Lookup calls.
		wantGrants, wantLookups []int
		wantFirst               int64
		wantRecovered           int64
	}{
		{
			name:       "granted",
			setup:      func(*fakeSource) {},
			wantGrants: []int{0}, wantFirst: 1,
		},
		{
			// The grant committed and its reply was lost: the lookup finds
			// the committed range, which is served; nothing is granted
			// twice.
			name:       "lost reply is looked up",
			setup:      func(f *fakeSource) { f.lose = 1 },
			wantGrants: []int{0}, wantLookups: []int{0}, wantFirst: 1, wantRecovered: 1,
		},
		{
			// Nothing committed: the lookup finds nothing, and the same
			// request is sent again, under its own ID.
			name:       "not found is sent again",
			setup:      func(f *fakeSource) { f.drop = 1 },
			wantGrants: []int{0, 0}, wantLookups: []int{0}, wantFirst: 1,
		},
		{
			// A stranger holds the request ID: nothing of the Set's is under
			// it, and the load goes on with a new request.
			name:       "holder refusal starts a new request",
			setup:      func(f *fakeSource) { f.claimFirst = true },
			wantGrants: []int{0, 1}, wantFirst: 1,
		},
		{
			// The reply was lost, and the lookup finds the ID held by a
			// stranger: never served; a new request.
			name: "lost reply held by a stranger starts a new request",
			setup: func(f *fakeSource) {
				f.drop = 1
				f.claimOnDrop = true
			},
			wantGrants: []int{0, 1}, wantLookups: []int{0}, wantFirst: 1,
		},
		{
			// Nothing committed, and the error says so by having no class:
			// the same request is sent again after a pause, not looked up.
			name:       "a failure is sent again",
			setup:      func(f *fakeSource) { f.fail = 1 },
			wantGrants: []int{0, 0}, wantFirst: 1,
		},
		{
			// The reply was lost and the lookup cannot see the grant yet, so
			// the request is sent again: already granted. From then on it is
			// only looked up, until the lookup sees it.
			name: "already granted is looked up until it is seen",
			setup: func(f *fakeSource) {
				f.lose = 1
				f.hide = 2
			},
			wantGrants: []int{0, 0}, wantLookups: []int{0, 0, 0}, wantFirst: 1, wantRecovered: 1,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFakeSource(10)
			tt.setup(f)
			s := newSet(t, f, nil)
			id, err := s.Next(ctx, "order")
			if err != nil || id != tt.wantFirst {
				t.Fatalf("Next = %d, %v; want %d", id, err, tt.wantFirst)
			}
			grants, lookups := f.sent()
			index := map[uuid.UUID]int{}
			order := func(ids []uuid.UUID) []int {
				var out []int
				for _, id := range ids {
					if _, ok := index[id]; !ok {
						index[id] = len(index)
					}
					out = append(out, index[id])
				}
				return out
			}
			if got := order(grants); !equal(got, tt.wantGrants) {
				t.Errorf("grants sent for requests %v, want %v", got, tt.wantGrants)
			}
			if got := order(lookups); !equal(got, tt.wantLookups) {
				t.Errorf("lookups sent for requests %v, want %v", got, tt.wantLookups)
			}
			if st := s.Stats(); len(st) != 1 || st[0].Recovered != tt.wantRecovered {
				t.Errorf("stats %+v, want one tag with %d recovered", st, tt.wantRecovered)
			}
		})
	}
}

func equal(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestSet_UnsettledResumes: a load that gives up with its outcome unknown
// leaves its request to the tag's next load, which looks it up and serves
// the range committed for it instead of leaking it.
func TestSet_UnsettledResumes(t *testing.T) {
	f := newFakeSource(10)
	f.lose = 1 << 30 // every reply is lost...
	lookupsDown := true
	g := &flakyLookups{fakeSource: f, down: func() bool { f.mu.Lock(); defer f.mu.Unlock(); return lookupsDown }}
	s := newSet(t, g, func(c *segment.SetConfig) {
		c.Buffer.LoadTimeout = 20 * time.Millisecond
		c.Buffer.WaitTimeout = 10 * time.Second
		c.Buffer.MinBackoff = time.Microsecond
	})
	if _, err := s.Next(context.Background(), "order"); !errors.Is(err, segment.ErrUnavailable) {
		t.Fatalf("Next = %v, want ErrUnavailable", err)
	}
	f.mu.Lock()
	f.lose, lookupsDown = 0, false // ...until the source comes back
	first := f.grants[0]
	f.mu.Unlock()
	var id int64
	eventually(t, 5*time.Second, "an id", func() bool {
		var err error
		id, err = s.Next(context.Background(), "order")
		return err == nil
	})
	if id != 1 {
		t.Fatalf("first id %d, want 1: the range committed for the unsettled request", id)
	}
	grants, lookups := f.sent()
	if lookups[len(lookups)-1] != first {
		t.Fatalf("the range was found under %v, want the first request %v", lookups[len(lookups)-1], first)
	}
	for _, id := range grants {
		if id != first {
			t.Fatalf("grants sent under %v besides the first request %v: a new request leaks its range", grants, first)
		}
	}
}

// flakyLookups is a fakeSource whose lookups fail while down.
type flakyLookups struct {
	*fakeSource
	down func() bool
}

func (f *flakyLookups) Lookup(ctx context.Context, req segment.Ask) (segment.Grant, error) {
	if f.down() {
		return segment.Grant{}, errors.New("source unreachable")
	}
	return f.fakeSource.Lookup(ctx, req)
}

// TestSet_CloseGivesBack: Close gives back the unused tail of the newest
// range with the request that was granted it, then the range before it,
// which the first give-back left at the top.
func TestSet_CloseGivesBack(t *testing.T) {
	ctx := context.Background()
	f := newFakeSource(10)
	s := newSet(t, f, nil)
	ids, err := s.NextN(ctx, "order", 6, nil) // past half of [1, 10]: [11, 20] loads
	if err != nil || len(ids) != 6 {
		t.Fatalf("NextN = %v, %v", ids, err)
	}
	eventually(t, 5*time.Second, "the next range", func() bool { return s.Stats()[0].NextRange != nil })
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.maxID != 6 || len(f.gaveBack) != 2 {
		t.Fatalf("max id %d after give-backs %+v; want 6 after two", f.maxID, f.gaveBack)
	}
	for _, g := range f.gaveBack {
		if r := f.granted[g.id]; r.Last != g.r.Last {
			t.Errorf("gave back %+v under the request of %+v", g.r, r)
		}
	}
	if st := s.Stats(); len(st) != 1 || st[0].GivenBack != 14 || st[0].Abandoned != 0 || st[0].Issued != 6 {
		t.Errorf("stats after Close: %+v; want 14 given back, none abandoned, 6 issued", st)
	}
	if _, err := s.Next(ctx, "order"); !errors.Is(err, segment.ErrClosed) {
		t.Errorf("Next after Close = %v, want ErrClosed", err)
	}
}

// TestSet_UnknownTag: a tag the source does not know keeps no buffer and
// is answered from memory, with no second request, for UnknownTTL.
func TestSet_UnknownTag(t *testing.T) {
	ctx := context.Background()
	f := newFakeSource(10)
	f.unknown = true
	s := newSet(t, f, func(c *segment.SetConfig) { c.UnknownTTL = time.Hour })
	for range 3 {
		if _, err := s.Next(ctx, "nope"); !errors.Is(err, segment.ErrUnknownTag) {
			t.Fatalf("Next = %v, want ErrUnknownTag", err)
		}
	}
	if grants, _ := f.sent(); len(grants) != 1 {
		t.Errorf("%d grants sent for an unknown tag, want 1", len(grants))
	}
	if _, err := s.Next(ctx, "no such"); !errors.Is(err, segment.ErrInvalidTag) {
		t.Errorf("Next(invalid) = %v, want ErrInvalidTag", err)
	}
	if st := s.Stats(); len(st) != 0 {
		t.Errorf("buffers %+v, want none", st)
	}
}
