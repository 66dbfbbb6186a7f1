// Package peers watches a region's peers: it asks each peer region's
// instance for its share (GET /id/health, its region part) at start and
// periodically, and refuses this region's grants (region.ErrConflict) once
// one disagrees: a peer whose epochs overlap this region's with other
// blocks, that claims this region's index or name, or its worker slot. A
// peer that cannot be reached is reported, not fatal.
//
//	w := peers.New(peers.Config{Self: share, URLs: urls})
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
	Self region.Share
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

	mu       sync.Mutex // protects peers and conflict
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
	w := &Watcher{cfg: cfg}
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

// Check asks every peer once, and returns the conflict seen (now or
// before), nil when every peer that answered agrees.
func (w *Watcher) Check(ctx context.Context) error {
	for i, u := range w.cfg.URLs {
		p := Peer{URL: u}
		now := w.cfg.Now().UTC()
		p.CheckedAt = &now
		share, err := w.fetch(ctx, u)
		switch {
		case err != nil:
			p.Error = err.Error()
		default:
			p.Reachable, p.Name = true, share.Name
			if err := region.Compatible(w.cfg.Self, share); err != nil {
				p.Error = err.Error()
				w.refuse(fmt.Errorf("peer %s: %w", u, err))
			} else {
				p.Agrees = true
			}
		}
		w.mu.Lock()
		w.peers[i] = p
		w.mu.Unlock()
	}
	return w.Err()
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

// Run checks the peers every Config.Every until ctx ends.
func (w *Watcher) Run(ctx context.Context) {
	t := time.NewTicker(w.cfg.Every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
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
