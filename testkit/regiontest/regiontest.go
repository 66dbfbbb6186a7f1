// Package regiontest is the contract of a region's store, run against
// every backend that keeps region shares (postgres, sqlite): several
// databases claimed as the regions of one deployment, granting
// concurrently, split, retired and interrupted, never grant one ID twice.
package regiontest

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/idmint/idmint/allocator"
	"github.com/idmint/idmint/region"
)

// Store is a region's database: a store that keeps a share.
type Store interface {
	allocator.Store
	region.Database
}

// Open returns a new, empty, migrated database.
type Open func(t *testing.T) Store

// tag is the tag every clause grants: ranges of 10 to 100 IDs in blocks
// of 100, so that ranges meet block ends all the time.
const (
	tag   = "order"
	block = 100
)

// Run runs every clause against open's databases.
func Run(t *testing.T, open Open) {
	t.Run("concurrent grants in three regions never meet", func(t *testing.T) { concurrent(t, open) })
	t.Run("claim refusals", func(t *testing.T) { claimRefusals(t, open) })
	t.Run("give-back across a block boundary", func(t *testing.T) { giveBack(t, open) })
	t.Run("a split adding a region under load", func(t *testing.T) { splitUnderLoad(t, open, false) })
	t.Run("an interrupted split fences and completes", func(t *testing.T) { splitUnderLoad(t, open, true) })
	t.Run("retire a region", func(t *testing.T) { retire(t, open) })
}

// deployment is a database per region, each claimed with regions.
func deployment(t *testing.T, open Open, regions ...string) []Store {
	t.Helper()
	dbs := make([]Store, len(regions))
	for i, name := range regions {
		dbs[i] = open(t)
		newTag(t, dbs[i])
		s, err := region.Claim(name, regions, 1, block, 4)
		if err != nil {
			t.Fatal(err)
		}
		if err := dbs[i].WriteShare(t.Context(), s); err != nil {
			t.Fatalf("claim %s: %v", name, err)
		}
	}
	return dbs
}

func newTag(t *testing.T, db Store) {
	t.Helper()
	if _, err := db.CreateTag(t.Context(), allocator.TagSpec{Name: tag, Step: 10, MaxStep: block}); err != nil {
		t.Fatal(err)
	}
}

func grant(ctx context.Context, db Store, size int64) (allocator.Segment, error) {
	return db.Allocate(ctx, allocator.Request{ID: uuid.Must(uuid.NewV7()), Tag: tag, Size: size, Instance: "regiontest"})
}

// ledger collects every range granted, by region, and checks them.
type ledger struct {
	mu     sync.Mutex
	ranges map[string][][2]int64 // region → ranges in grant order
}

func (l *ledger) add(name string, seg allocator.Segment) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ranges == nil {
		l.ranges = map[string][][2]int64{}
	}
	l.ranges[name] = append(l.ranges[name], [2]int64{seg.First, seg.Last})
}

// check fails t on an ID granted twice (anywhere) or a range out of the
// share of its region (shares: the shares at the end); it returns the IDs
// granted. (Ranges granted concurrently reach the ledger in any order:
// order is the segment buffer's, per instance.)
func (l *ledger) check(t *testing.T, shares map[string]region.Share) int64 {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	var all [][3]int64 // first, last, region number
	names := slices.Sorted(func(yield func(string) bool) {
		for n := range l.ranges {
			if !yield(n) {
				return
			}
		}
	})
	var ids int64
	for i, name := range names {
		s := shares[name]
		for _, r := range l.ranges[name] {
			// A range lies in one block of its share: its first ID owned,
			// and its last ID the end of that block at the latest.
			first, end, ok := s.NextOwned(r[0] - 1)
			if !ok || first != r[0] || r[1] > end {
				t.Errorf("%s: range [%d, %d] outside its share %v (next owned %d..%d %v)", name, r[0], r[1], s.Epochs, first, end, ok)
			}
			ids += r[1] - r[0] + 1
			all = append(all, [3]int64{r[0], r[1], int64(i)})
		}
	}
	slices.SortFunc(all, func(a, b [3]int64) int { return int(min(max(a[0]-b[0], -1), 1)) })
	dups := 0
	for i := 1; i < len(all); i++ {
		if all[i][0] <= all[i-1][1] {
			dups++
			if dups <= 5 {
				t.Errorf("duplicate: [%d, %d] of %s and [%d, %d] of %s", all[i-1][0], all[i-1][1], names[all[i-1][2]], all[i][0], all[i][1], names[all[i][2]])
			}
		}
	}
	if dups > 0 {
		t.Errorf("%d overlapping ranges among %d", dups, len(all))
	}
	t.Logf("%d ranges, %d IDs, %d duplicates, over %d regions", len(all), ids, dups, len(names))
	return ids
}

// load grants from db as region name with workers goroutines until stop
// closes; share_exhausted is counted, any other error fails t.
func load(t *testing.T, wg *sync.WaitGroup, stop <-chan struct{}, db Store, name string, l *ledger, fenced *atomic.Int64) {
	for w := range 4 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				seg, err := grant(context.Background(), db, int64(10+(i*7+w*13)%91))
				switch {
				case errors.Is(err, allocator.ErrShareExhausted):
					fenced.Add(1)
					time.Sleep(time.Millisecond)
				case err != nil:
					t.Errorf("%s: %v", name, err)
					return
				default:
					l.add(name, seg)
				}
			}
		})
	}
}

func sharesOf(t *testing.T, dbs []Store) map[string]region.Share {
	t.Helper()
	m := map[string]region.Share{}
	for _, db := range dbs {
		s, err := db.Share(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		m[s.Name] = s
	}
	return m
}

func concurrent(t *testing.T, open Open) {
	dbs := deployment(t, open, "eu", "us", "ap")
	var l ledger
	var wg sync.WaitGroup
	for i, db := range dbs {
		name := []string{"eu", "us", "ap"}[i]
		for w := range 4 {
			wg.Go(func() {
				for j := range 60 {
					seg, err := grant(context.Background(), db, int64(10+(j*7+w*13)%91))
					if err != nil {
						t.Errorf("%s: %v", name, err)
						return
					}
					l.add(name, seg)
				}
			})
		}
	}
	wg.Wait()
	if ids := l.check(t, sharesOf(t, dbs)); ids == 0 {
		t.Fatal("no IDs granted")
	}
}

func claimRefusals(t *testing.T, open Open) {
	ctx := t.Context()
	regions := []string{"eu", "us"}
	db := open(t)
	newTag(t, db)
	eu, _ := region.Claim("eu", regions, 1, block, 2)
	if err := db.WriteShare(ctx, eu); err != nil {
		t.Fatal(err)
	}
	if err := db.WriteShare(ctx, eu); err != nil {
		t.Fatalf("the same claim again: %v, want it done", err)
	}
	us, _ := region.Claim("us", regions, 1, block, 2)
	if err := db.WriteShare(ctx, us); !errors.Is(err, region.ErrShareDiffers) {
		t.Fatalf("another region's claim: %v, want ErrShareDiffers", err)
	}
	other, _ := region.Claim("eu", regions, 1, 2*block, 2)
	if err := db.WriteShare(ctx, other); !errors.Is(err, region.ErrShareDiffers) {
		t.Fatalf("another block: %v, want ErrShareDiffers", err)
	}
	if got, err := db.Share(ctx); err != nil || !got.Equal(eu) {
		t.Fatalf("share %+v, %v; want %+v", got, err, eu)
	}
	if _, err := db.SetStep(ctx, tag, 10, 2*block); !errors.Is(err, allocator.ErrInvalidSpec) {
		t.Fatalf("max_step above the block: %v, want ErrInvalidSpec", err)
	}
	if _, err := db.CreateTag(ctx, allocator.TagSpec{Name: "wide", Step: 10}); !errors.Is(err, allocator.ErrInvalidSpec) {
		t.Fatalf("a tag whose default max_step is above the block: %v, want ErrInvalidSpec", err)
	}

	// A database that granted already: a claim from below its max_id is
	// refused, one above it is taken.
	used := open(t)
	newTag(t, used)
	seg, err := grant(ctx, used, 50)
	if err != nil {
		t.Fatal(err)
	}
	if err := used.WriteShare(ctx, eu); !errors.Is(err, region.ErrGranted) {
		t.Fatalf("claim from 1 over max_id %d: %v, want ErrGranted", seg.Last, err)
	}
	if s, _ := used.Share(ctx); !s.IsZero() {
		t.Fatalf("a refused claim left %+v", s)
	}
	above, _ := region.Claim("us", regions, seg.Last+1, block, 2)
	if err := used.WriteShare(ctx, above); err != nil {
		t.Fatalf("claim above max_id: %v", err)
	}
	next, err := grant(ctx, used, 10)
	if err != nil || !above.Owns(next.First) || next.First <= seg.Last {
		t.Fatalf("after the claim from %d: %+v, %v", seg.Last+1, next, err)
	}
	// A fence at or below a tag's max_id is refused, and changes nothing.
	if _, err := used.FenceShare(ctx, next.Last, false); !errors.Is(err, region.ErrGranted) {
		t.Fatalf("fence at max_id %d: %v, want ErrGranted", next.Last, err)
	}
	if s, _ := used.Share(ctx); s.Fence() != 0 {
		t.Fatalf("a refused fence left %v", s.Epochs)
	}
	// A block smaller than a tag's max_step.
	small := open(t)
	newTag(t, small)
	narrow, _ := region.Claim("eu", regions, 1, block/2, 2)
	if err := small.WriteShare(ctx, narrow); !errors.Is(err, region.ErrBlockBelowStep) {
		t.Fatalf("a block below max_step: %v, want ErrBlockBelowStep", err)
	}
}

func giveBack(t *testing.T, open Open) {
	ctx := t.Context()
	dbs := deployment(t, open, "eu", "us")
	us := dbs[1]
	// us owns [101, 200], [301, 400], ...: a range asked across 200 ends
	// there.
	a, err := grant(ctx, us, 60)
	if err != nil || a.First != 101 || a.Last != 160 {
		t.Fatalf("first range %+v, %v; want [101, 160]", a, err)
	}
	b, err := grant(ctx, us, 60)
	if err != nil || b.First != 161 || b.Last != 200 {
		t.Fatalf("range at the block's end %+v, %v; want [161, 200], clipped", b, err)
	}
	// Given back, the next grant finds its first ID again.
	if ok, err := us.GiveBack(ctx, tag, b.First, b.Last); err != nil || !ok {
		t.Fatalf("give back [%d, %d]: %v, %v", b.First, b.Last, ok, err)
	}
	c, err := grant(ctx, us, 100)
	if err != nil || c.First != 161 || c.Last != 200 {
		t.Fatalf("after the give-back %+v, %v; want [161, 200]", c, err)
	}
	// The next range skips eu's block.
	d, err := grant(ctx, us, 100)
	if err != nil || d.First != 301 || d.Last != 400 {
		t.Fatalf("next block %+v, %v; want [301, 400]", d, err)
	}
	// A give-back of a whole block lowers max_id below eu's block: the
	// next grant still skips it.
	if ok, err := us.GiveBack(ctx, tag, d.First, d.Last); err != nil || !ok {
		t.Fatalf("give back [%d, %d]: %v, %v", d.First, d.Last, ok, err)
	}
	e, err := grant(ctx, us, 100)
	if err != nil || e.First != 301 {
		t.Fatalf("after giving back a block %+v, %v; want it from 301", e, err)
	}
}

// failing is a database whose WriteShare fails while fail is set: a split
// interrupted between its phases.
type failing struct {
	Store
	fail atomic.Bool
}

func (f *failing) WriteShare(ctx context.Context, s region.Share) error {
	if f.fail.Load() {
		return errors.New("connection lost")
	}
	return f.Store.WriteShare(ctx, s)
}

func splitUnderLoad(t *testing.T, open Open, interrupted bool) {
	ctx := t.Context()
	dbs := deployment(t, open, "eu", "us")
	newDB := open(t)
	newTag(t, newDB)
	var l ledger
	var fenced atomic.Int64
	wg, stop, end := loads(t)
	load(t, wg, stop, dbs[0], "eu", &l, &fenced)
	load(t, wg, stop, dbs[1], "us", &l, &fenced)
	waitRanges(t, &l, 50)

	us := &failing{Store: dbs[1]}
	us.fail.Store(interrupted)
	all := []region.Database{dbs[0], us, newDB}
	res, err := region.Split(ctx, all, region.SplitPlan{Add: "ap", Margin: 20 * block})
	if interrupted {
		if err == nil {
			t.Fatal("a split whose phase 2 failed reported success")
		}
		// us is fenced without the new epoch: its grants stop at the
		// boundary, a gap, never a duplicate.
		deadline := time.Now().Add(30 * time.Second)
		for fenced.Load() == 0 && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		if fenced.Load() == 0 {
			t.Fatal("no grant refused at the fence of an interrupted split")
		}
		s, _ := dbs[1].Share(ctx)
		if len(s.Epochs) != 1 || s.Fence() == 0 {
			t.Fatalf("us after the interrupted split: %+v", s)
		}
		us.fail.Store(false)
		if res, err = region.Split(ctx, all, region.SplitPlan{Add: "ap", Margin: 20 * block}); err != nil || !res.Resumed || res.At != s.Fence() {
			t.Fatalf("split again: %+v, %v; want it resumed at %d", res, err, s.Fence())
		}
	} else if err != nil {
		t.Fatal(err)
	}
	load(t, wg, stop, newDB, "ap", &l, &fenced)
	waitAbove(t, &l, res.At, "eu", "us", "ap")
	end()
	shares := sharesOf(t, append(dbs, newDB))
	for name, s := range shares {
		if len(s.Epochs) == 0 || s.Epochs[len(s.Epochs)-1].From != res.At {
			t.Errorf("%s's share after the split: %v", name, s.Epochs)
		}
	}
	t.Logf("split at %d; %d grants refused at the fence", res.At, fenced.Load())
	l.check(t, shares)
}

func retire(t *testing.T, open Open) {
	ctx := t.Context()
	dbs := deployment(t, open, "eu", "us", "ap")
	var l ledger
	var fenced atomic.Int64
	wg, stop, end := loads(t)
	for i, name := range []string{"eu", "us", "ap"} {
		load(t, wg, stop, dbs[i], name, &l, &fenced)
	}
	waitRanges(t, &l, 50)
	all := []region.Database{dbs[0], dbs[1], dbs[2]}
	res, err := region.Split(ctx, all, region.SplitPlan{Retire: "us", Margin: 20 * block})
	if err != nil {
		t.Fatal(err)
	}
	waitAbove(t, &l, res.At, "eu", "ap")
	end()
	shares := sharesOf(t, dbs)
	if s := shares["us"]; s.Fence() != res.At {
		t.Fatalf("the retired region's share %v, want it fenced at %d", s.Epochs, res.At)
	}
	// us may still have IDs below its fence; it never grants one above.
	for i := 0; ; i++ {
		seg, err := grant(ctx, dbs[1], block)
		if errors.Is(err, allocator.ErrShareExhausted) {
			break
		}
		if err != nil || seg.Last >= res.At || i > int(res.At/block) {
			t.Fatalf("the retired region granted [%d, %d] (fence %d): %v", seg.First, seg.Last, res.At, err)
		}
		l.add("us", seg)
	}
	if !slices.Equal(shares["eu"].Epochs[1].Regions, []string{"eu", "ap"}) {
		t.Fatalf("eu's new epoch %v", shares["eu"].Epochs)
	}
	l.check(t, shares)
}

// loads returns the wait group and stop channel of load goroutines, and
// end, which stops them and waits (run on cleanup too, before the
// databases close).
func loads(t *testing.T) (*sync.WaitGroup, chan struct{}, func()) {
	wg, stop := new(sync.WaitGroup), make(chan struct{})
	var once sync.Once
	end := func() { once.Do(func() { close(stop); wg.Wait() }) }
	t.Cleanup(end)
	return wg, stop, end
}

// waitRanges waits until l holds n ranges.
func waitRanges(t *testing.T, l *ledger, n int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		l.mu.Lock()
		got := 0
		for _, r := range l.ranges {
			got += len(r)
		}
		l.mu.Unlock()
		if got >= n {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("fewer than %d ranges granted in 30s", n)
}

// waitAbove waits until each region in names was granted a range above at.
func waitAbove(t *testing.T, l *ledger, at int64, names ...string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		l.mu.Lock()
		done := true
		for _, n := range names {
			r := l.ranges[n]
			done = done && len(r) > 0 && r[len(r)-1][0] >= at
		}
		l.mu.Unlock()
		if done {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("not every region of %v granted above %d in 30s", names, at)
}
