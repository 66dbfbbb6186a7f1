package allocator

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/idmint/idmint/segment"
)

// Config configures an Allocator. Zero fields take the defaults named.
type Config struct {
	Store Store
	// Instance names this process in the segment log (default "idmint").
	Instance string
	// Segment holds the buffer settings every tag uses: Period, Threshold,
	// WaitTimeout, MaxWait, LoadTimeout, MinBackoff, MaxBackoff, OnLoad. Tag,
	// Loader, Logger and Now are set by the allocator.
	Segment segment.Config
	// AttemptTimeout bounds one store call within a load (default 3s), so a
	// hung connection leaves time to retry on another. With RoundTrip set it
	// is the floor: a call gets RoundTrip.Timeout(AttemptTimeout).
	AttemptTimeout time.Duration
	// RoundTrip, when set, is the store's measured round trip (see
	// Postgres.RoundTrip): the attempt timeout follows it, so a database a
	// WAN away is given the time its round trips take.
	RoundTrip *RoundTrip
	// RetryMin and RetryMax bound the pause between attempts of one load
	// (defaults 20ms and 1s), with full jitter.
	RetryMin, RetryMax time.Duration
	// UnknownTTL is how long an unknown tag is remembered as unknown, so that
	// requests for bogus tags cannot hammer the store (default 5s).
	UnknownTTL time.Duration
	// LogRetention is the age past which the store's segment-log rows are
	// pruned (0: never). An unsettled request older than half of it is
	// abandoned rather than resumed: its row may be gone.
	LogRetention time.Duration
	// CatalogInterval is how often, at most, the store's list of tags is
	// read again for a tag that has no buffer (default 500ms): a tag created
	// anywhere is served within it, and made-up tags cost at most one read
	// per interval.
	CatalogInterval time.Duration
	Logger          *slog.Logger
	Now             func() time.Time
	// Jitter returns a random duration in [0, d); default math/rand/v2.
	Jitter func(d time.Duration) time.Duration
}

func (c *Config) setDefaults() {
	if c.Instance == "" {
		c.Instance = "idmint"
	}
	if c.AttemptTimeout <= 0 {
		c.AttemptTimeout = 3 * time.Second
	}
	if c.CatalogInterval <= 0 {
		c.CatalogInterval = 500 * time.Millisecond
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Now == nil {
		c.Now = time.Now
	}
}

// Allocator hands out IDs for every tag of a Store. It is safe for
// concurrent use.
type Allocator struct {
	cfg Config
	// set is the tags' buffers, fed by the store through storeSource: it
	// keeps each tag's floor, unsettled requests, gaps and why a tag has
	// no buffer.
	set *segment.Set
	// catalog knows the store's tag names.
	catalog *catalog
}

// New returns an Allocator over cfg.Store. It starts no goroutine until a
// tag is first asked for.
func New(cfg Config) *Allocator {
	cfg.setDefaults()
	a := &Allocator{cfg: cfg}
	if cfg.RoundTrip != nil {
		// A load is given the attempts its round trips need.
		cfg.Segment.AdaptTimeout = a.loadTimeout
		// A cold tag's first request waits for as long as one fetch
		// attempt may take at this round trip.
		cfg.Segment.ColdWait = a.coldWait
	}
	sc := segment.SetConfig{
		Source:     storeSource{a},
		Buffer:     cfg.Segment,
		UnknownTTL: cfg.UnknownTTL,
		RetryMin:   cfg.RetryMin, RetryMax: cfg.RetryMax,
		Logger: cfg.Logger, Now: cfg.Now, Jitter: cfg.Jitter,
	}
	// An unsettled request older than half the segment log's retention may
	// have lost its log row to pruning: sent again without it, it would be
	// granted a second segment while the first stays an untraced gap.
	if r := cfg.LogRetention; r > 0 {
		sc.ResumeWithin = r / 2
	}
	a.catalog = &catalog{lister: cfg.Store, interval: cfg.CatalogInterval, timeout: a.attemptTimeout, now: cfg.Now}
	sc.Check = a.known
	a.set = segment.NewSet(sc)
	return a
}

// Next returns the next ID for tag. For a warm tag it costs finding the
// tag's buffer and an atomic add: no lock, no allocation, no call.
func (a *Allocator) Next(ctx context.Context, tag string) (int64, error) {
	// Everything on the fast path is inlined (TestIntendedInlining), and
	// the slow path is a call of its own, so that the fast one spills no
	// registers for it.
	if b := a.set.Index().Find(tag); b != nil {
		if id, ok := b.TryTake(); ok {
			return id, nil
		}
	}
	return a.nextSlow(ctx, tag)
}

// nextSlow is Next for a tag without a published buffer, or when
// Buffer.TryTake declines (segment used up, or a load to start).
func (a *Allocator) nextSlow(ctx context.Context, tag string) (int64, error) {
	return a.set.Next(ctx, tag)
}

// MaxN is the largest count NextN hands out in one call.
const MaxN = 1_000_000

// NextN returns n IDs for tag, increasing, 1 <= n <= MaxN. On error it also
// returns the IDs it took before the error (maybe none): they are the
// caller's, and handing them out is better than leaving them a gap. A
// caller that needs all n or nothing drops them: a gap, never a duplicate
// (client.Client.NextN does the same).
func (a *Allocator) NextN(ctx context.Context, tag string, n int) ([]int64, error) {
	if n < 1 || n > MaxN {
		return nil, fmt.Errorf("count %d: must be 1 to %d", n, MaxN)
	}
	ids, err := a.set.NextN(ctx, tag, n, make([]int64, 0, n))
	return ids, err
}

// NextRanges takes n IDs for tag and appends them to dst as increasing
// ranges of consecutive IDs (usually one, two when the IDs span a segment
// switch). On error it also returns the ranges taken before the error
// (maybe none): they are the caller's, as with NextN.
func (a *Allocator) NextRanges(ctx context.Context, tag string, n int, dst []segment.Range) ([]segment.Range, error) {
	if n < 1 || n > MaxN {
		return dst, fmt.Errorf("count %d: must be 1 to %d", n, MaxN)
	}
	out, err := a.set.NextRanges(ctx, tag, n, dst)
	return out, err
}

// Stats returns a snapshot of every loaded tag, sorted by tag.
func (a *Allocator) Stats() []segment.Stats { return a.set.Stats() }

// TagStats returns a snapshot of one tag's buffer. It never loads a
// segment: a tag that is known (see catalog) but not loaded here yet has
// stats with only Tag set. It returns ErrUnknownTag for a tag the store
// does not know.
func (a *Allocator) TagStats(ctx context.Context, tag string) (segment.Stats, error) {
	return a.set.TagStats(ctx, tag)
}

// known returns an error for a tag the catalog does not know (the Set's
// Check).
func (a *Allocator) known(ctx context.Context, tag string) error {
	known, err := a.catalog.known(ctx, tag)
	if err != nil {
		return err
	}
	if !known {
		return fmt.Errorf("%w: %q", ErrUnknownTag, tag)
	}
	return nil
}

// Ping reports whether the store can be reached.
func (a *Allocator) Ping(ctx context.Context) error { return a.cfg.Store.Ping(ctx) }

// Close stops every tag's background loads and waits for them. IDs granted
// but not handed out are abandoned (a gap), except that a Store which is a
// Returner gets back the unused tail of each tag's newest segment when nobody
// allocated after it (see segment.Set.Close). Next fails with ErrClosed
// after. ctx bounds the give-backs.
func (a *Allocator) Close(ctx context.Context) error { return a.set.Close(ctx) }
