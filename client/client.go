package client

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idmint/idmint/segment"
)

// Errors returned by a Client.
var (
	// ErrUnknownTag means the instances do not know the tag.
	ErrUnknownTag = errors.New("unknown biz_tag")
	// ErrInvalidTag means the tag is not a valid name.
	ErrInvalidTag = errors.New("invalid biz_tag")
	// ErrClosed means the client was closed.
	ErrClosed = errors.New("client closed")
	// ErrUnavailable means no ID could be handed out in time: both ranges
	// of the tag are empty and no instance granted a new one.
	ErrUnavailable = segment.ErrUnavailable
)

// Config configures a Client. Zero fields take the defaults named.
type Config struct {
	// URLs are the base URLs of idmint instances ("http://host:8080"). A
	// range request goes to the one that answered last, and to the next
	// one when it fails.
	URLs []string
	// Tags are loaded by New, so that the first IDs need no round trip.
	Tags []string
	// HTTPClient sends the requests (default: a client of its own, whose
	// idle connections Close closes).
	HTTPClient *http.Client
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
	if len(c.URLs) == 0 {
		return errors.New("client: no URLs")
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
	if c.RetryMin <= 0 {
		c.RetryMin = 20 * time.Millisecond
	}
	if c.RetryMax < c.RetryMin {
		c.RetryMax = max(time.Second, c.RetryMin)
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return own
}

// Client hands out IDs of many tags from ranges granted by idmint
// instances. It is safe for concurrent use.
type Client struct {
	cfg  Config
	urls []string // base URLs without a trailing slash

	// buffers maps tag to buffer. It is replaced, never changed, so that
	// Next reads it without a lock.
	buffers atomic.Pointer[segment.Index]
	// preferred is the index in urls of the instance that answered last.
	preferred atomic.Int64
	// requests counts range requests sent (attempts, not loads).
	requests atomic.Int64

	// transport is the HTTPClient's transport when the client made it
	// itself: Close closes its idle connections.
	transport *http.Transport

	mu     sync.Mutex // protects tags, closed, replacing buffers and adding to dropping
	tags   map[string]*tagLoads
	closed bool
	// dropping tracks the closes of buffers dropped for unknown tags; Close
	// waits for them.
	dropping sync.WaitGroup
}

// New returns a client of the instances at cfg.URLs. When cfg.Tags is set
// it loads the first range of each within ctx and fails if one cannot be
// loaded; otherwise it sends nothing until the first Next.
func New(ctx context.Context, cfg Config) (*Client, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	own := cfg.setDefaults()
	c := &Client{cfg: cfg, tags: map[string]*tagLoads{}, transport: own}
	for _, raw := range cfg.URLs {
		u, err := url.Parse(raw)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("client: URL %q: want http(s)://host[:port]", raw)
		}
		c.urls = append(c.urls, strings.TrimRight(raw, "/"))
	}
	c.buffers.Store(segment.NewIndex(nil))
	for _, tag := range cfg.Tags {
		b, err := c.buffer(tag)
		if err == nil {
			err = b.Ready(ctx)
		}
		if err != nil {
			cctx, cancel := context.WithTimeout(context.Background(), cfg.AttemptTimeout)
			c.Close(cctx)
			cancel()
			return nil, fmt.Errorf("client: load %q: %w", tag, c.takeFailed(tag, b, err))
		}
	}
	return c, nil
}

// Next returns the next ID of tag. In steady state it is one atomic add;
// it waits only when both ranges of the tag are empty, and then for its
// turn on the ranges that arrive: at most Segment.WaitTimeout without one,
// Segment.MaxWait in all.
func (c *Client) Next(ctx context.Context, tag string) (int64, error) {
	// The fast path is inlined and makes no call; see allocator.Next.
	if b := c.buffers.Load().Find(tag); b != nil {
		if id, ok := b.TryTake(); ok {
			return id, nil
		}
	}
	return c.nextSlow(ctx, tag)
}

// nextSlow is Next for a tag without a buffer yet, or when TryTake
// declines.
func (c *Client) nextSlow(ctx context.Context, tag string) (int64, error) {
	b := c.buffers.Load().Find(tag)
	if b == nil {
		var err error
		if b, err = c.buffer(tag); err != nil {
			return 0, err
		}
	}
	id, err := b.Take(ctx)
	if err != nil {
		return 0, c.takeFailed(tag, b, err)
	}
	return id, nil
}

// NextN returns n IDs of tag, increasing. On error it returns no ID: the
// IDs already taken are a gap.
func (c *Client) NextN(ctx context.Context, tag string, n int) ([]int64, error) {
	if n < 1 {
		return nil, fmt.Errorf("count %d: must be at least 1", n)
	}
	b := c.buffers.Load().Find(tag)
	if b == nil {
		var err error
		if b, err = c.buffer(tag); err != nil {
			return nil, err
		}
	}
	ids, err := b.TakeN(ctx, n, make([]int64, 0, n))
	if err != nil {
		return nil, c.takeFailed(tag, b, err)
	}
	return ids, nil
}

var tagPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}$`)

// buffer returns tag's buffer, making it on first use.
func (c *Client) buffer(tag string) (*segment.Buffer, error) {
	if !tagPattern.MatchString(tag) {
		return nil, fmt.Errorf("%w: %q: want 1-64 of [A-Za-z0-9_.:-], starting with a letter or digit", ErrInvalidTag, tag)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, ErrClosed
	}
	bufs := c.buffers.Load().Buffers()
	if b, ok := bufs[tag]; ok {
		return b, nil
	}
	tl, ok := c.tags[tag]
	if !ok {
		tl = &tagLoads{tag: tag}
		c.tags[tag] = tl
	}
	sc := c.cfg.Segment
	sc.Tag = tag
	sc.Loader = segment.LoaderFunc(func(ctx context.Context, size int64) (segment.Grant, error) {
		return c.load(ctx, tl, size)
	})
	sc.Logger = c.cfg.Logger
	// A buffer made again for a tag (after an unknown-tag answer) refuses
	// what its predecessor was granted.
	sc.Floor = tl.highestGranted()
	b := segment.New(sc)
	next := maps.Clone(bufs)
	next[tag] = b
	c.buffers.Store(segment.NewIndex(next))
	return b, nil
}

// takeFailed shapes a buffer's error, and drops the buffer of a tag the
// instances do not know, so that made-up tags do not pile up buffers.
func (c *Client) takeFailed(tag string, b *segment.Buffer, err error) error {
	switch {
	case errors.Is(err, segment.ErrClosed):
		return ErrClosed
	case errors.Is(err, ErrUnknownTag):
		c.mu.Lock()
		if bufs := c.buffers.Load().Buffers(); !c.closed && bufs[tag] == b && b != nil {
			next := maps.Clone(bufs)
			delete(next, tag)
			c.buffers.Store(segment.NewIndex(next))
			c.dropping.Go(func() { b.Close() }) // holds nothing: it never loaded a range
		}
		c.mu.Unlock()
		return fmt.Errorf("%w: %q", ErrUnknownTag, tag)
	}
	return err
}

// Stats is a snapshot of a client.
type Stats struct {
	// Tags holds each tag's buffer, sorted by tag.
	Tags []segment.Stats
	// Requests counts range requests sent to instances, retries included.
	Requests int64
}

// Stats returns a snapshot of every tag's buffer.
func (c *Client) Stats() Stats {
	bufs := c.buffers.Load().Buffers()
	st := Stats{Requests: c.requests.Load()}
	for _, tag := range slices.Sorted(maps.Keys(bufs)) {
		st.Tags = append(st.Tags, bufs[tag].Stats())
	}
	return st
}

// Close stops background loads and gives back, for each tag, the unused
// tail of its newest range, when no one was granted anything after it. The
// other unused IDs are a gap. It waits for the client's goroutines, and
// closes the idle connections of the transport it made (not those of a
// Config.HTTPClient). Next fails with ErrClosed afterwards. ctx bounds the
// give-backs.
func (c *Client) Close(ctx context.Context) error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	bufs := c.buffers.Load().Buffers()
	c.buffers.Store(segment.NewIndex(nil))
	tags := maps.Clone(c.tags)
	c.mu.Unlock()

	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	for tag, b := range bufs {
		wg.Go(func() {
			if err := c.closeBuffer(ctx, tags[tag], b); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	c.dropping.Wait()
	if c.transport != nil {
		c.transport.CloseIdleConnections()
	}
	return errors.Join(errs...)
}

// closeBuffer closes a tag's buffer and gives back its newest range's
// unused part.
func (c *Client) closeBuffer(ctx context.Context, tl *tagLoads, b *segment.Buffer) error {
	unused := b.Close()
	if len(unused) == 0 {
		return nil
	}
	r := unused[len(unused)-1]
	id, ok := tl.requestOf(r.Last)
	if !ok {
		return nil
	}
	back, err := c.giveBack(ctx, tl.tag, id, r)
	if err != nil {
		return fmt.Errorf("give back %q [%d, %d]: %w", tl.tag, r.First, r.Last, err)
	}
	if back {
		b.GaveBack(r)
	}
	c.cfg.Logger.Debug("gave back unused ids", "biz_tag", tl.tag, "first", r.First, "last", r.Last, "given_back", back)
	return nil
}

// pause returns the jittered pause before retry round n (n >= 1).
func (c *Client) pause(n int) time.Duration {
	d := min(c.cfg.RetryMin<<min(n, 16), c.cfg.RetryMax)
	return rand.N(d)
}
