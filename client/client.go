package client

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idmint/idmint/segment"
	"github.com/idmint/idmint/wire"
)

// Errors returned by a Client.
var (
	// ErrUnknownTag means the instances do not know the tag.
	ErrUnknownTag = segment.ErrUnknownTag
	// ErrInvalidTag means the tag is not a valid name (see
	// segment.ValidateTag).
	ErrInvalidTag = segment.ErrInvalidTag
	// ErrClosed means the client was closed (segment.ErrClosed, the same
	// value). An instance's reply that it is shutting down is not it.
	ErrClosed = segment.ErrClosed
	// ErrUnavailable means no ID could be handed out in time: both ranges
	// of the tag are empty and no instance granted a new one. It is worth
	// a retry; the refusals below are not, and never match it.
	ErrUnavailable = segment.ErrUnavailable
	// ErrUnauthorized means an instance refused the token (401): none
	// given, unknown or revoked. It is returned at once, never retried.
	ErrUnauthorized = errors.New("unauthorized: the instance refused the token")
	// ErrForbidden means the token's scopes do not cover the tag (403);
	// the error names the tag and the scope it needs. It is returned at
	// once, never retried.
	ErrForbidden = errors.New("forbidden: the token's scopes do not cover the request")
)

// Config configures a Client. Zero fields take the defaults named.
type Config struct {
	// URLs are the base URLs of idmint instances ("http://host:8080"). A
	// range request goes to the one that answered last, and to the next
	// one when it fails. They are one region, without a name; set Regions
	// instead for several.
	URLs []string
	// Regions are the regions of a deployment whose regions' databases
	// own disjoint shares of every tag's ID space, in order of preference:
	// the first is home. The client serves from home, moves to the next
	// region when the one it serves from cannot grant within the wait, and
	// comes back home once home grants again (see docs/clients.md,
	// "Regions"). Each region needs a name and URLs; URLs and Regions
	// cannot both be set.
	Regions []Region
	// ProbeMin and ProbeMax bound the pause between two probes of home
	// while the client serves from another region (defaults 250ms and
	// 10s), doubled after each probe that fails, with jitter.
	ProbeMin, ProbeMax time.Duration
	// Tags are loaded by New, so that the first IDs need no round trip.
	Tags []string
	// HTTPClient sends the requests (default: a client of its own, whose
	// idle connections Close closes). Every request carries the context of
	// the call it is made for: New's for the first loads, the Next (or
	// NextN) whose take started a background load (its values, such as a
	// trace, not its cancellation or deadline), Close's for the
	// give-backs. So a transport that reads the context, such as
	// OpenTelemetry's otelhttp.NewTransport, sends the caller's trace
	// (traceparent) with each of them.
	HTTPClient *http.Client
	// Token is the bearer token sent with every request, for instances
	// serving with --auth token (scope ids or ids:TAG). It is never logged
	// nor put in an error.
	Token string
	// TLS configures the default HTTPClient's connections to https://
	// URLs: the CAs to trust and a client certificate (LoadTLS reads them
	// from files). Nil uses the system's CAs. It cannot be combined with
	// HTTPClient, which has its own transport.
	TLS *tls.Config
	// AttemptTimeout bounds one HTTP request (default half of
	// Segment.WaitTimeout: 1s). It must be below Segment.WaitTimeout when
	// both are set: callers waiting for a range then still wait when a slow
	// reply's attempt is given up, for the retry on the next instance.
	AttemptTimeout time.Duration
	// RetryMin and RetryMax bound the pause after every instance failed
	// once (defaults 20ms and 1s), with full jitter.
	RetryMin, RetryMax time.Duration
	// Runway is how long the client's buffers must carry its callers with
	// no instance answering, at each tag's recent peak rate: the ranges it
	// asks for cover it (within the tag's max_step) and the next range is
	// fetched while the current one still holds it, as an instance does
	// with --runway. 0 leaves Segment.Runway. Stats says when it is short.
	Runway time.Duration
	// Segment holds the buffer settings every tag uses: Period, Threshold,
	// WaitTimeout, MaxWait, LoadTimeout, MinBackoff, MaxBackoff, OnLoad.
	// Tag, Loader, Logger and Floor are set by the client.
	Segment segment.Config
	Logger  *slog.Logger
}

// check reports settings that cannot work together; zero fields are
// defaults and pass.
func (c *Config) check() error {
	switch {
	case len(c.URLs) > 0 && len(c.Regions) > 0:
		return errors.New("client: URLs and Regions are both set: give the URLs as one of the Regions")
	case len(c.URLs) == 0 && len(c.Regions) == 0:
		return errors.New("client: no URLs")
	}
	names := map[string]bool{}
	for i, r := range c.Regions {
		switch {
		case r.Name == "":
			return fmt.Errorf("client: region %d has no name", i)
		case names[r.Name]:
			return fmt.Errorf("client: region %q is named twice", r.Name)
		case len(r.URLs) == 0:
			return fmt.Errorf("client: region %q has no URLs", r.Name)
		}
		names[r.Name] = true
	}
	if c.ProbeMin > 0 && c.ProbeMax > 0 && c.ProbeMax < c.ProbeMin {
		return fmt.Errorf("client: ProbeMax %v is below ProbeMin %v", c.ProbeMax, c.ProbeMin)
	}
	if c.TLS != nil && c.HTTPClient != nil {
		return errors.New("client: TLS and HTTPClient are both set: configure TLS on the HTTPClient's transport")
	}
	if a, w := c.AttemptTimeout, c.Segment.WaitTimeout; a > 0 && w > 0 && a >= w {
		return fmt.Errorf("client: AttemptTimeout %v must be below Segment.WaitTimeout %v, or a slow reply times out the callers waiting for it", a, w)
	}
	return nil
}

// setDefaults fills in the zero fields; it returns the transport it made
// for a default HTTPClient, nil when the caller gave one.
func (c *Config) setDefaults() (own *http.Transport) {
	if c.HTTPClient == nil {
		own = &http.Transport{
			Proxy:               http.ProxyFromEnvironment,
			DialContext:         (&net.Dialer{Timeout: 2 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
			MaxIdleConnsPerHost: 8,
			IdleConnTimeout:     90 * time.Second,
			TLSClientConfig:     c.TLS,
		}
		c.HTTPClient = &http.Client{Transport: own}
	}
	if c.Segment.WaitTimeout <= 0 {
		c.Segment.WaitTimeout = segment.DefaultWaitTimeout
	}
	if c.Runway > 0 {
		c.Segment.Runway = c.Runway
	}
	if c.AttemptTimeout <= 0 {
		c.AttemptTimeout = c.Segment.WaitTimeout / 2
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.ProbeMin <= 0 {
		c.ProbeMin = 250 * time.Millisecond
	}
	if c.ProbeMax <= 0 {
		c.ProbeMax = max(10*time.Second, c.ProbeMin)
	}
	if len(c.Regions) == 0 {
		c.Regions = []Region{{URLs: c.URLs}}
	}
	return own
}

// Client hands out IDs of many tags from ranges granted by idmint
// instances. It is safe for concurrent use.
type Client struct {
	cfg Config
	// regions are the client's regions, home first (one, unnamed, for
	// Config.URLs).
	regions []*region
	// serving is the stint of the region served from now: its Set holds
	// the tags' buffers, fed by the region's instances through
	// rangeSource, the same tag set as an allocator's, over HTTP.
	serving atomic.Pointer[stint]
	// requests counts range requests sent (attempts, not loads).
	requests atomic.Int64
	// failovers counts the moves away from a region that could not
	// grant; returns the moves back home.
	failovers, returns atomic.Int64
	// lastFrom holds, per tag, the name of the region that granted its
	// last range (map[string]string).
	lastFrom sync.Map

	// shares holds the share each region sent last, and a conflict
	// between them (several regions only).
	shares shares

	mu sync.Mutex // protects closed, probing and refusing, and orders the moves
	// closed is set by Close.
	closed bool
	// probing is set while probeHome runs.
	probing bool
	// refusing is set once the regions' shares conflict (refuseAll).
	refusing bool
	// ctx ends the probing at Close; bg tracks the probe and the stints
	// closing in the background.
	ctx    context.Context
	cancel context.CancelFunc
	bg     sync.WaitGroup

	// transport is the HTTPClient's transport when the client made it
	// itself: Close closes its idle connections.
	transport *http.Transport
}

// New returns a client of the instances at cfg.URLs. When cfg.Tags is set
// it loads the first range of each within ctx and fails if one cannot be
// loaded; otherwise it sends nothing until the first Next.
func New(ctx context.Context, cfg Config) (*Client, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	own := cfg.setDefaults()
	c := &Client{cfg: cfg, transport: own, shares: shares{last: map[int]wire.Share{}}}
	for i, cr := range cfg.Regions {
		r := &region{name: cr.Name, index: i, floors: map[string]int64{}}
		for _, raw := range cr.URLs {
			u, err := url.Parse(raw)
			if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				return nil, fmt.Errorf("client: URL %q: want http(s)://host[:port]", raw)
			}
			r.urls = append(r.urls, strings.TrimRight(raw, "/"))
		}
		c.regions = append(c.regions, r)
	}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	c.serving.Store(c.newStint(c.regions[0]))
	for _, tag := range cfg.Tags {
		err := c.inRegions(ctx, func(ctx context.Context, s *segment.Set) error { return s.Ready(ctx, tag) })
		if err != nil {
			cctx, cancel := context.WithTimeout(context.Background(), cfg.AttemptTimeout)
			c.Close(cctx)
			cancel()
			return nil, fmt.Errorf("client: load %q: %w", tag, c.callerErr(err))
		}
	}
	return c, nil
}

// Next returns the next ID of tag. In steady state it is one atomic add;
// it waits only when both ranges of the tag are empty, and then for its
// turn on the ranges that arrive: at most Segment.WaitTimeout without one,
// Segment.MaxWait in all. A tag the instances do not know is answered
// ErrUnknownTag from memory for a few seconds, without a request.
func (c *Client) Next(ctx context.Context, tag string) (int64, error) {
	// The fast path is inlined and makes no call; see allocator.Next.
	if b := c.serving.Load().set.Index().Find(tag); b != nil {
		if id, ok := b.TryTake(); ok {
			return id, nil
		}
	}
	return c.nextSlow(ctx, tag)
}

// nextSlow is Next for a tag without a buffer yet, or when TryTake
// declines.
func (c *Client) nextSlow(ctx context.Context, tag string) (int64, error) {
	var id int64
	err := c.inRegions(ctx, func(ctx context.Context, s *segment.Set) (err error) {
		id, err = s.Next(ctx, tag)
		return err
	})
	return id, c.callerErr(err)
}

// NextN returns n IDs of tag, increasing. On error it also returns the IDs
// it took before the error (maybe none): they are the caller's, unique like
// any other, and handing them out is better than leaving them a gap; a
// caller that needs all n or nothing drops them (a gap, never a
// duplicate). allocator.Allocator.NextN does the same.
func (c *Client) NextN(ctx context.Context, tag string, n int) ([]int64, error) {
	if n < 1 {
		return nil, fmt.Errorf("count %d: must be at least 1", n)
	}
	// A region that fails after handing out some of the n leaves them
	// with the error: the n are increasing, and two regions' IDs are not
	// in order.
	ids := make([]int64, 0, n)
	err := c.inRegions(ctx, func(ctx context.Context, s *segment.Set) (err error) {
		ids, err = s.NextN(ctx, tag, n, ids)
		if err != nil && len(ids) > 0 {
			return &partial{err}
		}
		return err
	})
	if p, ok := err.(*partial); ok {
		err = p.err
	}
	return ids, c.callerErr(err)
}

// callerErr is err as the client's caller sees it: the Set's ErrClosed as
// the client's, the regions' conflicting shares (ErrSharesOverlap) and an
// instance's final refusal (APIError.final: 400, 401, 403, 404) as
// themselves, not wrapped in the buffer's ErrUnavailable ("no ids
// available, retry in …"), so that a caller that retries on
// ErrUnavailable does not retry a refusal forever.
func (c *Client) callerErr(err error) error {
	var refused *APIError
	switch {
	case err == nil:
		return nil
	case c.shares.err() != nil:
		return c.shares.err()
	case errors.Is(err, segment.ErrClosed):
		return ErrClosed
	case errors.As(err, &refused) && refused.final():
		return refused
	}
	return err
}

// partial is the error of a take that handed out some IDs before it
// failed: the client does not move to another region for the rest.
type partial struct{ err error }

func (p *partial) Error() string { return p.err.Error() }

// Stats is a snapshot of a client.
type Stats struct {
	// Tags holds each tag's buffer in the region served from now, sorted
	// by tag.
	Tags []segment.Stats
	// Requests counts range requests sent to instances, retries included.
	Requests int64
	// Region is the name of the region served from now ("" for
	// Config.URLs).
	Region string
	// LastRangeFrom holds, per tag, the name of the region that granted
	// its last range.
	LastRangeFrom map[string]string
	// Failovers counts the moves away from a region that could not
	// grant; Returns the moves back home.
	Failovers, Returns int64
	// Regions holds each region's counters, home first.
	Regions []RegionStats
	// Conflict is why the client hands out no more IDs (ErrSharesOverlap:
	// two regions' shares may overlap), nil while it does.
	Conflict error
}

// Stats returns a snapshot of every tag's buffer and of the regions.
func (c *Client) Stats() Stats {
	st := c.serving.Load()
	out := Stats{
		Tags: st.set.Stats(), Requests: c.requests.Load(), Region: st.region.name,
		LastRangeFrom: map[string]string{},
		Failovers:     c.failovers.Load(), Returns: c.returns.Load(),
		Conflict: c.shares.err(),
	}
	c.lastFrom.Range(func(tag, name any) bool {
		out.LastRangeFrom[tag.(string)] = name.(string)
		return true
	})
	for _, r := range c.regions {
		out.Regions = append(out.Regions, RegionStats{
			Name: r.name, Serving: r == st.region, Left: r.left.Load(),
			Abandoned: r.abandoned.Load(), Gap: r.gap.Load(),
		})
	}
	return out
}

// Close stops background loads and gives back, for each tag, the unused
// tail of its newest range, when no one was granted anything after it (and
// the range before it, when the two touch). The other unused IDs are a
// gap. Each range goes back to the region that granted it, never to
// another. It waits for the client's goroutines, and closes the idle
// connections of the transport it made (not those of a
// Config.HTTPClient). Next fails with ErrClosed afterwards. ctx bounds the
// give-backs.
func (c *Client) Close(ctx context.Context) error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	st := c.serving.Load()
	c.mu.Unlock()
	c.cancel()
	err := st.set.Close(ctx)
	c.bg.Wait()
	if c.transport != nil {
		c.transport.CloseIdleConnections()
	}
	return err
}
