// Package peers watches a region's peers: it asks each peer region's
// instance for its share (GET /id/health, its region part) at start and
// periodically, and refuses this region's grants (region.ErrConflict) once
// one disagrees: a peer whose epochs overlap this region's with other
// blocks, that claims this region's index or name, or its worker slot. A
// peer that cannot be reached is reported, not fatal.
//
// With Config.Load, the watcher reads this region's share from its database
// every Config.Refresh while it runs, so that a split (a fence, a new
// epoch) shows in what the instance says and compares without a restart;
// and a disagreement counts only once it has lasted Config.Confirm, read
// again on both sides: while a split runs, an instance and its peer may
// read their databases on either side of it for a moment.
//
//	w := peers.New(peers.Config{Self: share, Load: db.Share, URLs: urls})
//	w.Check(ctx)            // before serving: w.Err() != nil refuses
//	go w.Run(ctx)           // then every Config.Every
//	store = peers.Gate(store, w)
package peers

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/idmint/idmint/allocator"
	"github.com/idmint/idmint/region"
)

// Peer is what a watcher knows of one peer.
type Peer struct {
	URL string `json:"url"`
	// Name is the peer's region, once it answered.
	Name      string     `json:"name,omitempty"`
	Reachable bool       `json:"reachable"`
	Agrees    bool       `json:"agrees"`
	Error     string     `json:"error,omitempty"`
	CheckedAt *time.Time `json:"checked_at,omitempty"`
}

// Config configures a Watcher.
type Config struct {
	// Self is this region's share at start.
	Self region.Share
	// Load, if set, reads this region's share from its database: every
	// Refresh, and again before a disagreement counts. A share that did not
	// grow from the one before (region.Grown) is a conflict.
	Load func(context.Context) (region.Share, error)
	// Refresh is how often Load runs (default 500ms).
	Refresh time.Duration
	// Confirm is how long a peer must go on disagreeing, rechecked every
	// Refresh, before it is a conflict (default 2s); without Load the first
	// disagreement is one.
	Confirm time.Duration
	// URLs are the peers' base URLs (http://host:port).
	URLs []string
	// Every is how often the peers are asked (default 30s).
	Every  time.Duration
	Client *http.Client
	Logger *slog.Logger
	Now    func() time.Time
}

// Watcher asks the peers for their shares and remembers a disagreement.
type Watcher struct {
	cfg Config

	mu       sync.Mutex // protects self, peers and conflict
	self     region.Share
	peers    []Peer
	conflict error // the first disagreement seen; sticky until restart
}

// New returns a watcher of cfg.URLs; it asks nothing until Check or Run.
func New(cfg Config) *Watcher {
	if cfg.Every <= 0 {
		cfg.Every = 30 * time.Second
	}
	if cfg.Client == nil {
		cfg.Client = &http.Client{Timeout: 5 * time.Second}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Refresh <= 0 {
		cfg.Refresh = 500 * time.Millisecond
	}
	if cfg.Confirm <= 0 {
		cfg.Confirm = 2 * time.Second
	}
	w := &Watcher{cfg: cfg, self: cfg.Self}
	for _, u := range cfg.URLs {
		w.peers = append(w.peers, Peer{URL: u})
	}
	return w
}

// healthDoc is the part of a peer's /id/health a watcher reads.
type healthDoc struct {
	Region *struct {
		Share region.Share `json:"share"`
	} `json:"region"`
}

// Check reads this region's share (with Config.Load), asks every peer once,
// and returns the conflict seen (now or before), nil when every peer that
// answered agrees.
func (w *Watcher) Check(ctx context.Context) error {
	w.reload(ctx)
	for i, u := range w.cfg.URLs {
		p := w.checkPeer(ctx, u)
		w.mu.Lock()
		w.peers[i] = p
		w.mu.Unlock()
	}
	return w.Err()
}

// checkPeer asks the peer at u for its share and compares it with this
// region's; a disagreement is asked again, with this region's share read
// again, every Refresh until it has lasted Confirm (with Load).
func (w *Watcher) checkPeer(ctx context.Context, u string) Peer {
	since := w.cfg.Now()
	for {
		now := w.cfg.Now().UTC()
		p := Peer{URL: u, CheckedAt: &now}
		share, err := w.fetch(ctx, u)
		if err != nil {
			p.Error = err.Error()
			return p
		}
		p.Reachable, p.Name = true, share.Name
		err = region.Compatible(w.Self(), share)
		if err == nil {
			p.Agrees = true
			return p
		}
		// A conflict seen already needs no confirming: it is sticky.
		if w.cfg.Load == nil || w.Err() != nil || now.Sub(since) >= w.cfg.Confirm || !sleep(ctx, w.cfg.Refresh) {
			p.Error = err.Error()
			w.refuse(fmt.Errorf("peer %s: %w", u, err))
			return p
		}
		w.reload(ctx)
	}
}

// reload reads this region's share with Config.Load. A database that
// cannot be read leaves the share as it was; one whose share did not grow
// from it is a conflict.
func (w *Watcher) reload(ctx context.Context) {
	if w.cfg.Load == nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, w.cfg.Refresh)
	defer cancel()
	cur, err := w.cfg.Load(ctx)
	if err != nil {
		return // the database's own health says it is unreachable
	}
	if err := region.Grown(w.Self(), cur); err != nil {
		w.refuse(fmt.Errorf("the database's share changed under the instance: %w", err))
		return
	}
	w.mu.Lock()
	w.self = cur
	w.mu.Unlock()
}

// Holding returns this region's share as last read when it owns every ID
// of [first, last], a range just granted; otherwise it reads the share
// from the database again (with Config.Load) first: a split landed since
// the last read. Replies carry the share that holds their range, so that a
// client comparing regions does not take a moment's lag for a conflict.
func (w *Watcher) Holding(ctx context.Context, first, last int64) region.Share {
	if s := w.Self(); s.OwnsRange(first, last) {
		return s
	}
	w.reload(ctx)
	return w.Self()
}

// Self returns this region's share as last read.
func (w *Watcher) Self() region.Share {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.self
}

// sleep waits d; false if ctx ended first.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

func (w *Watcher) refuse(err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.conflict == nil {
		w.conflict = err
		w.cfg.Logger.Error("REFUSING grants: a peer region's share may overlap this one's", "err", err)
	}
}

// fetch reads a peer's share. A peer with no region part (a single-region
// instance) is a conflict of its own: it may grant anything.
func (w *Watcher) fetch(ctx context.Context, base string) (region.Share, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/id/health", nil)
	if err != nil {
		return region.Share{}, err
	}
	resp, err := w.cfg.Client.Do(req)
	if err != nil {
		return region.Share{}, fmt.Errorf("unreachable: %w", err)
	}
	defer resp.Body.Close()
	var doc healthDoc
	// 200 and 503 both carry the document.
	if err := json.NewDecoder(io.LimitReader(resp.Body, 4<<20)).Decode(&doc); err != nil {
		return region.Share{}, fmt.Errorf("unreachable: /id/health answered %d without its document", resp.StatusCode)
	}
	if doc.Region == nil {
		return region.Share{Name: "(no region)"}, nil
	}
	return doc.Region.Share, nil
}

// Run checks the peers every Config.Every, and reads this region's share
// every Config.Refresh (with Load), until ctx ends.
func (w *Watcher) Run(ctx context.Context) {
	t := time.NewTicker(w.cfg.Every)
	defer t.Stop()
	var refresh <-chan time.Time
	if w.cfg.Load != nil {
		r := time.NewTicker(w.cfg.Refresh)
		defer r.Stop()
		refresh = r.C
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-refresh:
			w.reload(ctx)
		case <-t.C:
			_ = w.Check(ctx)
		}
	}
}

// Err is the conflict seen, wrapping region.ErrConflict; nil if none.
func (w *Watcher) Err() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.conflict
}

// Peers returns what is known of each peer.
func (w *Watcher) Peers() []Peer {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]Peer(nil), w.peers...)
}

// Gate returns store refusing every grant with the watcher's conflict once
// it has one (region.ErrConflict): lookups and give-backs of grants made
// before still go through.
func Gate(store allocator.Store, w *Watcher) allocator.Store { return gated{store, w} }

type gated struct {
	allocator.Store
	w *Watcher
}

func (g gated) Allocate(ctx context.Context, req allocator.Request) (allocator.Segment, error) {
	if err := g.w.Err(); err != nil {
		return allocator.Segment{}, err
	}
	return g.Store.Allocate(ctx, req)
}
