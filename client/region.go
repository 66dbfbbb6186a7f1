package client

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idmint/idmint/segment"
)

// Region is one region of a deployment: idmint instances that share a
// database, whose share of every tag's ID space is disjoint from the other
// regions' (see docs/regions.md).
type Region struct {
	// Name names the region in logs and Stats.
	Name string
	// URLs are the base URLs of the region's instances, as Config.URLs.
	URLs []string
}

// region is one of the client's regions: its instances and what the client
// keeps of it across its stints.
type region struct {
	name  string
	index int      // in Client.regions; 0 is home
	urls  []string // base URLs without a trailing slash
	// preferred is the index in urls of the instance that answered last.
	preferred atomic.Int64

	mu sync.Mutex // protects floors
	// floors holds the highest ID the region granted to each tag, kept
	// across stints: the floor sent with the region's asks is its own,
	// never another region's, whose IDs lie in another share.
	floors map[string]int64

	left      atomic.Int64 // moves away because it could not grant
	abandoned atomic.Int64 // asks given up as ambiguous when it was left
	gap       atomic.Int64 // IDs of the stints left, never handed out nor given back
}

// floor returns the highest ID the region granted to tag.
func (r *region) floor(tag string) int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.floors[tag]
}

// raise records that the region granted tag IDs up to last.
func (r *region) raise(tag string, last int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.floors[tag] = max(r.floors[tag], last)
}

// stint is one period of the client serving from one region: a Set of its
// own, whose asks, lookups and give-backs go to that region and nowhere
// else. A request ID is thereby scoped to the region it was sent to: when
// the client leaves the region, the stint is closed with its Set, and its
// asks are never sent again; the next stint, in any region, starts with
// new request IDs.
type stint struct {
	region *region
	set    *segment.Set
	// ctx is cancelled when the client leaves the stint: callers waiting
	// on its Set go on to the stint serving then.
	ctx    context.Context
	cancel context.CancelFunc
	// down is set when the stint was left because its region could not
	// grant: from then on nothing is sent to the region under it; its
	// asks still unsettled are given up (gaps if they committed) and its
	// give-backs skipped (gaps).
	down atomic.Bool

	mu sync.Mutex // protects uncertain
	// uncertain holds the asks whose last answer left their fate unknown
	// (a reply lost or unconfirmed): those still in it when the stint is
	// closed are given up.
	uncertain map[string]bool
}

// newStint returns a stint in r, with its Set; it sends nothing yet.
func (c *Client) newStint(r *region) *stint {
	st := &stint{region: r, uncertain: map[string]bool{}}
	st.ctx, st.cancel = context.WithCancel(context.Background())
	st.set = segment.NewSet(segment.SetConfig{
		Source:     rangeSource{c: c, st: st},
		Buffer:     c.cfg.Segment,
		HolderKeys: true,
		RetryMin:   c.cfg.RetryMin, RetryMax: c.cfg.RetryMax,
		Logger: c.cfg.Logger.With("region", r.name),
	})
	return st
}

// settle records what the last answer said of ask's fate.
func (st *stint) settle(ask segment.Ask, err error) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if errors.Is(err, segment.ErrAmbiguous) {
		st.uncertain[ask.ID.String()] = true
		return
	}
	delete(st.uncertain, ask.ID.String())
}

// errRegionLeft answers what a stint's Set still asks of a region the
// client left because it could not grant.
var errRegionLeft = errors.New("the client left the region: nothing more is sent to it under this request")

// refusal is the answer to a call of the stint's Set once it is down: a
// refusal, so that its load ends at once and keeps the ask, which Close
// then gives up.
func (st *stint) refusal() error {
	return segment.Classify(segment.ErrRefused, fmt.Errorf("region %q: %w", st.region.name, errRegionLeft))
}

// take runs f on the stint's Set. With several regions, f's ctx also ends
// when the client leaves the stint, so that a caller waiting on a region
// that cannot grant goes on to the next one.
func (c *Client) take(ctx context.Context, st *stint, f func(context.Context, *segment.Set) error) error {
	if len(c.regions) == 1 {
		return f(ctx, st.set)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(st.ctx, cancel)
	defer stop()
	return f(ctx, st.set)
}

// inRegions runs f on the Set of the stint serving, and again on the next
// region's when the client moves (at most once per region).
func (c *Client) inRegions(ctx context.Context, f func(context.Context, *segment.Set) error) error {
	var err error
	for range len(c.regions) {
		st := c.serving.Load()
		if err = c.take(ctx, st, f); err == nil || !c.failOver(ctx, st, err) {
			return err
		}
	}
	return err
}

// failOver reports whether the caller, whose f on st failed with err,
// tries again in the stint serving now: when the client left st meanwhile,
// or when err says that st's region could not grant within the caller's
// wait, which makes the client leave it.
func (c *Client) failOver(ctx context.Context, st *stint, err error) bool {
	var refused *APIError
	switch {
	case len(c.regions) == 1 || ctx.Err() != nil || c.isClosed() || errors.As(err, new(*partial)) || c.shares.err() != nil:
		return false
	case st.ctx.Err() != nil:
		return true
	case errors.As(err, &refused) && refused.final():
		return false
	case errors.Is(err, ErrUnavailable):
		c.leave(st, err)
		return true
	}
	return false
}

// cannotGrant is called when every instance of st's region failed one
// request of tag's: when the tag's buffer there has nothing to hand out,
// callers are waiting on a region that cannot grant, and the client
// leaves it.
func (c *Client) cannotGrant(st *stint, tag string, err error) {
	if len(c.regions) == 1 || st.down.Load() || st.ctx.Err() != nil {
		return
	}
	if s, e := st.set.TagStats(context.Background(), tag); e == nil && !s.Serving {
		c.leave(st, err)
	}
}

// leave moves the client from st, which could not grant, to the next
// region in order of preference, unless it left st already. st is closed
// in the background as down.
func (c *Client) leave(st *stint, why error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed || c.serving.Load() != st {
		return
	}
	next := c.regions[(st.region.index+1)%len(c.regions)]
	st.down.Store(true)
	st.region.left.Add(1)
	c.failovers.Add(1)
	c.cfg.Logger.Warn("MOVED to another region: this one could not grant within the wait; its unsettled requests are given up (gaps if they committed), never sent elsewhere",
		"from", st.region.name, "to", next.name, "err", why)
	c.switchLocked(c.newStint(next))
	if next.index != 0 && !c.probing {
		c.probing = true
		c.bg.Go(func() { c.probeHome(c.ctx) })
	}
}

// switchLocked makes st the stint serving and closes the one before in
// the background.
func (c *Client) switchLocked(st *stint) {
	old := c.serving.Swap(st)
	old.cancel()
	c.bg.Go(func() { c.closeStint(old) })
}

// closeStint closes st's Set: a stint that is not down gives its tails
// back to its own region, within two attempts; a down one sends nothing.
// Its asks still unsettled are then given up, each counted and logged.
func (c *Client) closeStint(st *stint) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*c.cfg.AttemptTimeout)
	defer cancel()
	err := st.set.Close(ctx)
	for _, s := range st.set.Stats() {
		st.region.gap.Add(s.Abandoned)
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	for id := range st.uncertain {
		st.region.abandoned.Add(1)
		c.cfg.Logger.Warn("ABANDONED request: its reply was lost and the client left the region; it is never looked up nor sent elsewhere; if it committed, its range is a gap (the region's segment log has it)",
			"region", st.region.name, "request_id", id)
	}
	st.uncertain = map[string]bool{}
	return err
}

// probeHome runs while the client serves from a region other than home:
// with backoff from ProbeMin to ProbeMax (full jitter), it checks that an
// instance of home is live (GET /id/live), then loads each tag's first
// range in a new stint at home, and moves back home once every tag has
// one. A probe that fails costs no range: the stint's ranges are given
// back to home, and its unsettled asks given up.
func (c *Client) probeHome(ctx context.Context) {
	pause := c.cfg.ProbeMin
	for {
		select {
		case <-time.After(pause/2 + rand.N(pause/2+1)):
		case <-ctx.Done():
			return
		}
		if c.tryReturn(ctx) {
			return
		}
		pause = min(2*pause, c.cfg.ProbeMax)
	}
}

// tryReturn makes one probe of home and moves there if it can grant; it
// reports whether the probing is over (home serving, or the client
// closed).
func (c *Client) tryReturn(ctx context.Context) bool {
	home := c.regions[0]
	if c.serving.Load().region == home || c.shares.err() != nil {
		return c.stopProbing()
	}
	if !c.live(ctx, home) {
		return false
	}
	st := c.newStint(home)
	ready := true
	wctx, cancel := context.WithTimeout(ctx, c.cfg.Segment.WaitTimeout)
	for _, s := range c.serving.Load().set.Stats() {
		if err := st.set.Ready(wctx, s.Tag); err != nil {
			c.cfg.Logger.Info("home region live but not granting yet", "region", home.name, "biz_tag", s.Tag, "err", err)
			ready = false
			break
		}
	}
	cancel()
	c.mu.Lock()
	switch {
	case c.closed || c.refusing || c.serving.Load().region == home:
		c.probing = false
		c.mu.Unlock()
		c.closeStint(st)
		return true
	case !ready:
		c.mu.Unlock()
		c.closeStint(st)
		return false
	}
	from := c.serving.Load().region.name
	c.switchLocked(st)
	c.returns.Add(1)
	c.probing = false
	c.mu.Unlock()
	c.cfg.Logger.Warn("RETURNED to the home region: it grants again", "from", from, "to", home.name)
	return true
}

// stopProbing ends the probing, and reports true, when home serves (or
// the client is closed, or refuses every call); checked under the lock, so that a move away from
// home made meanwhile, which saw the probing still on, keeps it on.
func (c *Client) stopProbing() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.closed && !c.refusing && c.serving.Load().region != c.regions[0] {
		return false
	}
	c.probing = false
	return true
}

// live reports whether an instance of r answers GET /id/live: the process
// is up and reachable. Whether the region grants is for the probe's loads
// to tell.
func (c *Client) live(ctx context.Context, r *region) bool {
	for _, base := range r.urls {
		actx, cancel := context.WithTimeout(ctx, c.cfg.AttemptTimeout)
		req, err := http.NewRequestWithContext(actx, http.MethodGet, base+pathLive, nil)
		if err == nil {
			var resp *http.Response
			if resp, err = c.cfg.HTTPClient.Do(req); err == nil {
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					cancel()
					return true
				}
			}
		}
		cancel()
	}
	return false
}

// pathLive answers 200 while an instance's process is up.
const pathLive = "/id/live"

// isClosed reports whether Close was called.
func (c *Client) isClosed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closed
}

// RegionStats is a snapshot of one of a client's regions.
type RegionStats struct {
	Name string
	// Serving is true for the region the client serves from now.
	Serving bool
	// Left counts the moves away from the region because it could not
	// grant within the wait.
	Left int64
	// Abandoned counts the requests given up as ambiguous when the client
	// left the region (a reply lost, then the region gone): each one's
	// range, if it committed, is a gap, found in the region's segment log
	// by its request ID.
	Abandoned int64
	// Gap counts the IDs the region granted to the client before it left
	// the region, and that were neither handed out nor given back (a
	// give-back is skipped when the region is down): what the region's
	// buffers held then, and the ranges of the requests found committed
	// but not served.
	Gap int64
}
