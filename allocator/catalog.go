package allocator

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/idmint/idmint/segment"
)

// catalog is the set of tag names the store knows, as last read. It answers
// "is this a tag?" for a tag that has no buffer yet, so that requests for
// made-up names are answered from memory: whatever the number of names, the
// store is read at most once per refresh interval (single-flight), and a tag
// created anywhere is seen within one interval. A name already in the
// catalog needs no read at all: tags are never deleted.
type catalog struct {
	lister   Admin // reads Tags
	interval time.Duration
	// timeout bounds one read: the attempt timeout, following the round
	// trip as the other store calls do.
	timeout func() time.Duration
	now     func() time.Time

	mu sync.Mutex // protects the fields below
	// names is the last successful read; readAt when the last read (or
	// failed attempt) started; err the failure of the last attempt.
	names   map[string]struct{}
	readAt  time.Time
	err     error
	reading chan struct{} // closed when the read in flight ends; nil when none
	reads   int64         // reads attempted, for tests and metrics
}

// known reports whether tag is in the store's catalog, reading the catalog
// again if tag is missing and the last read is older than the interval. A
// failed read is an unavailable error, remembered for one interval.
func (c *catalog) known(ctx context.Context, tag string) (bool, error) {
	for waited := false; ; waited = true {
		c.mu.Lock()
		if _, ok := c.names[tag]; ok {
			c.mu.Unlock()
			return true, nil
		}
		// After a read (this request's or one it waited for), its outcome
		// stands, however short the interval.
		fresh := waited || (c.names != nil || c.err != nil) && c.now().Sub(c.readAt) < c.interval
		if fresh {
			err := c.err
			c.mu.Unlock()
			if err != nil {
				return false, &segment.UnavailableError{Tag: tag, RetryAfter: c.interval, Err: err}
			}
			return false, nil
		}
		if c.reading == nil {
			c.reading = make(chan struct{})
			c.readAt = c.now()
			c.reads++
			done := c.reading
			c.mu.Unlock()
			c.read(ctx, done)
			continue
		}
		done := c.reading
		c.mu.Unlock()
		select {
		case <-done:
		case <-ctx.Done():
			return false, fmt.Errorf("%w: tag %q: %w", ErrUnavailable, tag, ctx.Err())
		}
	}
}

// read lists the tags and installs them. It runs in the goroutine of the
// request that found the catalog stale, bounded by its own timeout rather
// than that request's context, since other requests wait on it.
func (c *catalog) read(ctx context.Context, done chan struct{}) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.timeout())
	tags, err := c.lister.Tags(ctx)
	cancel()
	c.mu.Lock()
	defer c.mu.Unlock()
	defer close(done)
	c.reading = nil
	c.err = err
	if err != nil {
		c.err = fmt.Errorf("read tag catalog: %w", err)
		return
	}
	names := make(map[string]struct{}, len(tags))
	for _, t := range tags {
		names[t.Name] = struct{}{}
	}
	c.names = names
}

// CatalogReads returns how many times the allocator read the store's tag catalog:
// requests for tags it has no buffer for cost at most one read per refresh
// interval, whatever their number.
func (a *Allocator) CatalogReads() int64 {
	if a.catalog == nil {
		return 0
	}
	a.catalog.mu.Lock()
	defer a.catalog.mu.Unlock()
	return a.catalog.reads
}
