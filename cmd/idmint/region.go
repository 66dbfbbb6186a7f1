package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/idmint/idmint/allocator"
	"github.com/idmint/idmint/core"
	"github.com/idmint/idmint/region"
	"github.com/idmint/idmint/region/peers"
	"github.com/idmint/idmint/snowflake"
)

const regionDetail = `A region is one database (PostgreSQL or a SQLite file) and its instances in
a deployment of several that share one ID space: each database grants only
the IDs of its share, interleaved blocks of --block IDs (block j of an epoch
is the region at j mod N of --regions), so that no two regions ever grant
the same ID (docs/regions.md). A share is written once, by claim, and only
extended by split; serve --region NAME refuses a database whose share names
another region, and a database with a share refuses serve without --region.`

// regionDB is a store that keeps a region share: the postgres and sqlite
// stores.
type regionDB interface {
	allocator.Store
	region.Database
}

// asRegionDB is the opened store as a regionDB.
func asRegionDB(o *openedStore) (regionDB, error) {
	db, ok := o.store.(regionDB)
	if !ok {
		return nil, fmt.Errorf("%T keeps no region share", o.store)
	}
	return db, nil
}

// regionClaimFlags is `idmint region claim`.
func regionClaimFlags(fs *flag.FlagSet) runFunc {
	name := fs.String("name", "", "this database's region (1-32 of a-z, 0-9, '-')")
	list := fs.String("regions", "", "every region of the deployment, in block order, comma-separated (the same list and order in every region's claim)")
	block := fs.Int64("block", 1_000_000_000, "IDs per block: at least every tag's max_step (1,000,000 when unset)")
	from := fs.Int64("from", 1, "first ID of the share: above every tag's max_id in every region's database, the same in every claim")
	slots := fs.Int("worker-slots", 8, "slices the Snowflake worker IDs are cut in (at least the region count): room for regions added later")
	return storeFlags(fs, func(ctx context.Context, store *openedStore, out output, _ []string) error {
		db, err := asRegionDB(store)
		if err != nil {
			return err
		}
		regions, err := region.ParseRegions(*list)
		if err != nil {
			return fmt.Errorf("--regions: %w", err)
		}
		s, err := region.Claim(*name, regions, *from, *block, *slots)
		if err != nil {
			return err
		}
		if err := db.WriteShare(ctx, s); err != nil {
			return fmt.Errorf("claim region %q: %w", *name, err)
		}
		fmt.Fprintf(out.stdout, "region %s claimed: %s, worker slot %d of %d\n", s.Name, s.Epochs[0], s.WorkerSlot, s.WorkerSlots)
		return nil
	})
}

// regionShowFlags is `idmint region show`.
func regionShowFlags(fs *flag.FlagSet) runFunc {
	asJSON := fs.Bool("json", false, "print the share as JSON")
	return storeFlags(fs, func(ctx context.Context, store *openedStore, out output, _ []string) error {
		db, err := asRegionDB(store)
		if err != nil {
			return err
		}
		s, err := db.Share(ctx)
		if err != nil {
			return err
		}
		if *asJSON {
			enc := json.NewEncoder(out.stdout)
			enc.SetIndent("", "  ")
			return enc.Encode(s)
		}
		printShare(out.stdout, s)
		return nil
	})
}

func printShare(w io.Writer, s region.Share) {
	if s.IsZero() {
		fmt.Fprintln(w, "no region share: a single-region database")
		return
	}
	fmt.Fprintf(w, "region %s, worker slot %d of %d\n", s.Name, s.WorkerSlot, s.WorkerSlots)
	for _, e := range s.Epochs {
		fmt.Fprintf(w, "  epoch %s\n", e)
	}
}

// urlList is a flag that may be given many times, each value one whole
// URL: unlike stringList it does not cut at commas, which separate the
// hosts of a multi-host PostgreSQL URL (a Patroni cluster's).
type urlList []string

func (l *urlList) String() string { return strings.Join(*l, " ") }

func (l *urlList) Set(v string) error {
	*l = append(*l, strings.TrimSpace(v))
	return nil
}

var _ flag.Value = (*urlList)(nil)

// regionSplitFlags is `idmint region split`.
func regionSplitFlags(fs *flag.FlagSet) runFunc {
	var urls urlList
	fs.Var(&urls, "database-url", "a region's database (repeat: every region's, and with --add the new region's, which has no share yet; a multi-host URL is one value)")
	add := fs.String("add", "", "the region to add")
	retire := fs.String("retire", "", "the region to retire")
	at := fs.Int64("at", 0, "the boundary: the new epoch starts there (0: a cycle start above every database's highest max_id plus --margin)")
	margin := fs.Int64("margin", 0, "IDs above the highest max_id the boundary leaves for the grants made while the split runs (0: one cycle of blocks)")
	return func(ctx context.Context, out output, _ []string) error {
		if len(urls) == 0 {
			return usageError{"--database-url: every region's database"}
		}
		var dbs []region.Database
		for _, u := range urls {
			store, err := openForCommand(ctx, storeConfig{url: u}, out.stderr)
			if err != nil {
				return err
			}
			defer store.close()
			db, err := asRegionDB(store)
			if err != nil {
				return err
			}
			dbs = append(dbs, db)
		}
		m := *margin
		if m == 0 {
			m = -1 // a cycle, once the epoch is known
		}
		res, err := region.Split(ctx, dbs, region.SplitPlan{Add: *add, Retire: *retire, At: *at, Margin: m})
		if err != nil {
			return fmt.Errorf("split: %w (run it again to complete it: a fenced database grants nothing above the boundary meanwhile)", err)
		}
		if res.Resumed {
			fmt.Fprintf(out.stdout, "an interrupted split at %d completed\n", res.At)
		}
		fmt.Fprintf(out.stdout, "split at %d: regions %s from there\n", res.At, strings.Join(res.Epoch.Regions, ","))
		for _, s := range res.Shares {
			printShare(out.stdout, s)
		}
		return nil
	}
}

// regionConfig is serve's region flags.
type regionConfig struct {
	name      string
	peerURLs  stringList
	peerEvery time.Duration
}

func (c *regionConfig) register(fs *flag.FlagSet) {
	fs.StringVar(&c.name, "region", "", "this instance's region: must be the one its database's share names (idmint region claim); empty for a single-region database")
	fs.Var(&c.peerURLs, "region-peer", "a peer region's instance (http://host:port; repeat, or comma-separate): its share is checked at start and every --region-peer-every, and a disagreement refuses grants")
	renameEnv(fs, "region-peer", "IDMINT_REGION_PEERS")
	fs.DurationVar(&c.peerEvery, "region-peer-every", 30*time.Second, "how often the peers' shares are checked")
}

// servingRegion is the region an instance serves: core.RegionSource. Its
// share is the watcher's, read from the database while it runs (a split
// fences it and adds an epoch).
type servingRegion struct {
	share   region.Share // at start: the worker slot
	workers *core.WorkerRange
	watcher *peers.Watcher
}

// Region implements core.RegionSource.
func (r *servingRegion) Region() core.RegionState {
	return core.RegionState{Share: r.watcher.Self(), Workers: r.workers, Peers: r.watcher.Peers(), Conflict: r.watcher.Err()}
}

// Holding implements core.RegionSource.
func (r *servingRegion) Holding(ctx context.Context, first, last int64) region.Share {
	return r.watcher.Holding(ctx, first, last)
}

// errRegionMismatch: the instance's --region and its database's share
// disagree.
var errRegionMismatch = errors.New("region mismatch")

// startRegion checks --region against the database's share and the peers
// once, before anything is granted, and returns the region (nil for a
// single-region database). A disagreement is an error: nothing is served.
func startRegion(ctx context.Context, c regionConfig, store *openedStore, logger *slog.Logger) (*servingRegion, error) {
	db, ok := store.store.(regionDB)
	var share region.Share
	if ok {
		var err error
		if share, err = db.Share(ctx); err != nil {
			return nil, err
		}
	}
	switch {
	case share.IsZero() && c.name == "":
		if len(c.peerURLs) > 0 {
			return nil, fmt.Errorf("%w: --region-peer without --region", errRegionMismatch)
		}
		return nil, nil
	case share.IsZero():
		return nil, fmt.Errorf("%w: --region %s, but the database has no region share: claim it first (idmint region claim)", errRegionMismatch, c.name)
	case c.name == "":
		return nil, fmt.Errorf("%w: the database is region %q's: serve it with --region %s", errRegionMismatch, share.Name, share.Name)
	case c.name != share.Name:
		return nil, fmt.Errorf("%w: --region %s, but the database is region %q's", errRegionMismatch, c.name, share.Name)
	}
	if err := share.Validate(); err != nil {
		return nil, err
	}
	w := peers.New(peers.Config{Self: share, Load: db.Share, URLs: c.peerURLs, Every: c.peerEvery, Logger: logger})
	if err := w.Check(ctx); err != nil {
		return nil, fmt.Errorf("%w: %w", errRegionMismatch, err)
	}
	for _, p := range w.Peers() {
		if !p.Reachable {
			logger.Warn("region peer unreachable at start; checked again later", "peer", p.URL, "err", p.Error)
		}
	}
	logger.Info("region", "name", share.Name, "epochs", fmt.Sprint(share.Epochs), "worker_slot", share.WorkerSlot, "worker_slots", share.WorkerSlots)
	return &servingRegion{share: share, watcher: w}, nil
}

// workerSlice is the region's slice of layout's worker IDs.
func (r *servingRegion) workerSlice(layout snowflake.Layout) (lo, hi int64, err error) {
	lo, hi, ok := region.WorkerSlice(r.share.WorkerSlot, r.share.WorkerSlots, layout.MaxWorker())
	if !ok {
		return 0, 0, fmt.Errorf("snowflake: %d worker bits hold fewer worker IDs than the region's %d worker slots", layout.WorkerBits, r.share.WorkerSlots)
	}
	r.workers = &core.WorkerRange{First: lo, Last: hi}
	return lo, hi, nil
}
