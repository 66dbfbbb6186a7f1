package lease_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/idmint/idmint/allocator/sqlite"
	"github.com/idmint/idmint/lease"
	"github.com/idmint/idmint/migrations"
	"github.com/idmint/idmint/snowflake"
	"github.com/idmint/idmint/testkit/pgstore"
	"github.com/idmint/idmint/testkit/pgtest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

// backend opens stores on one database: each call a new store with its own
// connections, as another process would have.
type backend struct {
	name string
	open func(t *testing.T) func() snowflake.LeaseStore
}

// openPostgres migrates a fresh database and returns a function that
// connects another store to it.
func openPostgres(t *testing.T) func() snowflake.LeaseStore {
	url := pgstore.NewDatabase(t, pgtest.Shared(t))
	return func() snowflake.LeaseStore { return lease.NewPostgres(pgstore.Open(t, url).Pool()) }
}

// openSQLite migrates a fresh file and returns a function that opens
// another handle on it.
func openSQLite(t *testing.T) func() snowflake.LeaseStore {
	path := filepath.Join(t.TempDir(), "idmint.db")
	open := func() *sqlite.Store {
		s, err := sqlite.Open(context.Background(), path)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	if _, err := migrations.Up(context.Background(), open().DB(), migrations.SQLite, nil); err != nil {
		t.Fatal(err)
	}
	return func() snowflake.LeaseStore { return lease.NewSQLite(open().DB()) }
}

var backends = []backend{
	{"memory", func(t *testing.T) func() snowflake.LeaseStore {
		m := lease.NewMemory(nil)
		return func() snowflake.LeaseStore { return m }
	}},
	{"sqlite", openSQLite},
	{"postgres", openPostgres},
}

// smallLayout has 4 worker IDs.
func smallLayout() snowflake.Layout {
	return snowflake.Layout{Epoch: snowflake.DefaultEpoch, TimeBits: 49, WorkerBits: 2, SequenceBits: 12}
}

// ttl is the lease of the tests that wait for an expiry; longTTL that of
// the others, so that a slow machine cannot expire their leases midway.
const (
	ttl     = time.Second
	longTTL = time.Hour
	margin  = 50 * time.Millisecond
)

// request asks for a lease of ttl on worker IDs 0…maxWorker.
func request(holder string, maxWorker int64) snowflake.AcquireRequest {
	return snowflake.AcquireRequest{Holder: holder, MaxWorker: maxWorker, TTL: ttl, Margin: margin}
}

// longRequest asks for a lease of longTTL.
func longRequest(holder string, maxWorker int64) snowflake.AcquireRequest {
	r := request(holder, maxWorker)
	r.TTL = longTTL
	return r
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// acquireWhenFree retries Acquire until a worker ID frees up (an expiry),
// for at most 10 TTLs.
func acquireWhenFree(t *testing.T, ctx context.Context, s snowflake.LeaseStore, req snowflake.AcquireRequest) snowflake.Lease {
	t.Helper()
	deadline := time.Now().Add(10 * ttl)
	for {
		l, err := s.Acquire(ctx, req)
		if err == nil {
			return l
		}
		if !errors.Is(err, snowflake.ErrAllHeld) || time.Now().After(deadline) {
			t.Fatalf("acquire: %v", err)
		}
		time.Sleep(ttl / 20)
	}
}

func TestLeaseStore(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Run("Prepare", func(t *testing.T) {
				ctx, open := ctxT(t), b.open(t)
				s := open()
				l := smallLayout()
				if err := s.Prepare(ctx, l); err != nil {
					t.Fatal(err)
				}
				if err := open().Prepare(ctx, l); err != nil {
					t.Fatalf("second Prepare with the same layout: %v", err)
				}
				other := l
				other.WorkerBits, other.SequenceBits = 3, 11
				if err := open().Prepare(ctx, other); !errors.Is(err, snowflake.ErrLayoutMismatch) {
					t.Fatalf("Prepare with other bits = %v, want ErrLayoutMismatch", err)
				}
				other = l
				other.Epoch = l.Epoch.Add(time.Millisecond)
				if err := open().Prepare(ctx, other); !errors.Is(err, snowflake.ErrLayoutMismatch) {
					t.Fatalf("Prepare with another epoch = %v, want ErrLayoutMismatch", err)
				}
			})
			t.Run("AcquireUntilAllHeld", func(t *testing.T) {
				ctx, open := ctxT(t), b.open(t)
				s := open()
				l := smallLayout()
				if err := s.Prepare(ctx, l); err != nil {
					t.Fatal(err)
				}
				seen := map[int64]bool{}
				for i := range l.MaxWorker() + 1 {
					got, err := open().Acquire(ctx, longRequest("h"+string(rune('a'+i)), l.MaxWorker()))
					if err != nil {
						t.Fatal(err)
					}
					if got.Worker < 0 || got.Worker > l.MaxWorker() || seen[got.Worker] {
						t.Fatalf("acquire %d: worker %d (seen %v)", i, got.Worker, seen)
					}
					seen[got.Worker] = true
					if got.Epoch != 1 || got.Expires-got.DBTime != longTTL.Milliseconds() || got.Start != 1 {
						t.Fatalf("first lease of worker %d: %+v", got.Worker, got)
					}
				}
				if _, err := s.Acquire(ctx, longRequest("extra", l.MaxWorker())); !errors.Is(err, snowflake.ErrAllHeld) {
					t.Fatalf("acquire with every worker id held = %v, want ErrAllHeld", err)
				}
			})
			t.Run("RenewAndRelease", func(t *testing.T) {
				ctx, open := ctxT(t), b.open(t)
				s := open()
				if err := s.Prepare(ctx, smallLayout()); err != nil {
					t.Fatal(err)
				}
				a, err := s.Acquire(ctx, longRequest("a", 0))
				if err != nil {
					t.Fatal(err)
				}
				r, err := s.Renew(ctx, a, longTTL, margin)
				if err != nil || r.Worker != a.Worker || r.Epoch != a.Epoch || r.Expires < a.Expires || r.Start != a.Start {
					t.Fatalf("renew %+v = %+v, %v", a, r, err)
				}
				wrong := a
				wrong.Epoch++
				if _, err := s.Renew(ctx, wrong, ttl, margin); !errors.Is(err, snowflake.ErrLeaseLost) {
					t.Fatalf("renew with another epoch = %v, want ErrLeaseLost", err)
				}
				wrong = a
				wrong.Holder = "b"
				if _, err := s.Renew(ctx, wrong, ttl, margin); !errors.Is(err, snowflake.ErrLeaseLost) {
					t.Fatalf("renew by another holder = %v, want ErrLeaseLost", err)
				}
				floor := r.DBTime + 5
				if err := s.Release(ctx, a, floor); err != nil {
					t.Fatal(err)
				}
				if err := s.Release(ctx, a, floor); !errors.Is(err, snowflake.ErrLeaseLost) {
					t.Fatalf("second release = %v, want ErrLeaseLost", err)
				}
				if _, err := s.Renew(ctx, a, ttl, margin); !errors.Is(err, snowflake.ErrLeaseLost) {
					t.Fatalf("renew after release = %v, want ErrLeaseLost", err)
				}
				// A released worker ID is taken at once, by the next holder
				// (or the same instance restarted), starting after the floor.
				b, err := open().Acquire(ctx, longRequest("a", 0))
				if err != nil {
					t.Fatal(err)
				}
				if b.Worker != a.Worker || b.Epoch != a.Epoch+1 || b.Start != floor+1 {
					t.Fatalf("acquire after release at floor %d: %+v, want worker %d epoch %d start %d", floor, b, a.Worker, a.Epoch+1, floor+1)
				}
			})
			t.Run("ExpiredTakeover", func(t *testing.T) {
				ctx, open := ctxT(t), b.open(t)
				s1, s2 := open(), open()
				if err := s1.Prepare(ctx, smallLayout()); err != nil {
					t.Fatal(err)
				}
				a, err := s1.Acquire(ctx, request("a", 0))
				if err != nil {
					t.Fatal(err)
				}
				if _, err := s2.Acquire(ctx, request("b", 0)); !errors.Is(err, snowflake.ErrAllHeld) {
					t.Fatalf("acquire of a held worker id = %v, want ErrAllHeld", err)
				}
				// a renews once, then stops (paused): its window now ends at
				// r.Expires - margin.
				r, err := s1.Renew(ctx, a, ttl, margin)
				if err != nil {
					t.Fatal(err)
				}
				b := acquireWhenFree(t, ctx, s2, request("b", 0))
				if b.Worker != a.Worker || b.Epoch != a.Epoch+1 {
					t.Fatalf("takeover: %+v after %+v", b, a)
				}
				if b.DBTime <= r.Expires {
					t.Fatalf("taken at %d, before the lease expired at %d", b.DBTime, r.Expires)
				}
				// The fence: b starts a margin after a's window ends.
				aEnd := r.Expires - margin.Milliseconds()
				if b.Start != aEnd+margin.Milliseconds()+1 {
					t.Fatalf("new holder starts at %d; the old window ended at %d, margin %v", b.Start, aEnd, margin)
				}
				if _, err := s1.Renew(ctx, r, ttl, margin); !errors.Is(err, snowflake.ErrLeaseLost) {
					t.Fatalf("old holder's renew = %v, want ErrLeaseLost", err)
				}
				if err := s1.Release(ctx, r, 1); !errors.Is(err, snowflake.ErrLeaseLost) {
					t.Fatalf("old holder's release = %v, want ErrLeaseLost", err)
				}
				// b crashes without releasing: the next holder starts after
				// b's window, though b never renewed.
				c := acquireWhenFree(t, ctx, s1, request("c", 0))
				if want := b.Expires + 1; c.Epoch != b.Epoch+1 || c.Start != want {
					t.Fatalf("after an unrenewed lease %+v: %+v, want start %d", b, c, want)
				}
			})
			t.Run("SameHolderTakeover", func(t *testing.T) {
				// The default holder name, hostname-pid, repeats across
				// container restarts: the stale holder and its replacement
				// have the same name, and only the epoch tells them apart.
				ctx, open := ctxT(t), b.open(t)
				s1, s2 := open(), open()
				if err := s1.Prepare(ctx, smallLayout()); err != nil {
					t.Fatal(err)
				}
				old, err := s1.Acquire(ctx, request("host-1", 0))
				if err != nil {
					t.Fatal(err)
				}
				// The old holder pauses past its expiry; the restarted
				// container, same name, takes the worker ID over.
				cur := acquireWhenFree(t, ctx, s2, request("host-1", 0))
				if cur.Worker != old.Worker || cur.Epoch != old.Epoch+1 || cur.Holder != old.Holder {
					t.Fatalf("takeover by the same name: %+v after %+v", cur, old)
				}
				if r, err := s1.Renew(ctx, old, longTTL, margin); !errors.Is(err, snowflake.ErrLeaseLost) {
					t.Fatalf("stale holder of the same name renews with its old epoch %d: %+v, %v; want ErrLeaseLost", old.Epoch, r, err)
				}
				if err := s1.Release(ctx, old, old.Start); !errors.Is(err, snowflake.ErrLeaseLost) {
					t.Fatalf("stale holder of the same name releases with its old epoch: %v, want ErrLeaseLost", err)
				}
				// The replacement still holds it: nothing above changed it.
				r, err := s2.Renew(ctx, cur, longTTL, margin)
				if err != nil || r.Epoch != cur.Epoch {
					t.Fatalf("the replacement's renew: %+v, %v", r, err)
				}
				if _, err := s1.Acquire(ctx, request("host-2", 0)); !errors.Is(err, snowflake.ErrAllHeld) {
					t.Fatalf("acquire while the replacement holds the worker id: %v, want ErrAllHeld", err)
				}
			})
			t.Run("RenewAfterExpiry", func(t *testing.T) {
				ctx, s := ctxT(t), b.open(t)()
				if err := s.Prepare(ctx, smallLayout()); err != nil {
					t.Fatal(err)
				}
				a, err := s.Acquire(ctx, request("a", 0))
				if err != nil {
					t.Fatal(err)
				}
				time.Sleep(ttl + 10*time.Millisecond) // the condition is time itself
				// Nobody took it: the epoch is the same, so renewing is safe.
				r, err := s.Renew(ctx, a, ttl, margin)
				if err != nil || r.Epoch != a.Epoch || r.Expires <= a.Expires {
					t.Fatalf("renew after expiry, no takeover: %+v, %v", r, err)
				}
			})
			t.Run("RaceForTheLastWorker", func(t *testing.T) {
				ctx, open := ctxT(t), b.open(t)
				if err := open().Prepare(ctx, smallLayout()); err != nil {
					t.Fatal(err)
				}
				const racers = 8
				stores := make([]snowflake.LeaseStore, racers)
				for i := range stores {
					stores[i] = open()
				}
				var (
					wg      sync.WaitGroup
					mu      sync.Mutex
					winners []snowflake.Lease
					start   = make(chan struct{})
				)
				for i, s := range stores {
					wg.Go(func() {
						<-start
						l, err := s.Acquire(ctx, longRequest(string(rune('a'+i)), 0))
						switch {
						case err == nil:
							mu.Lock()
							winners = append(winners, l)
							mu.Unlock()
						case !errors.Is(err, snowflake.ErrAllHeld):
							t.Errorf("racer %d: %v", i, err)
						}
					})
				}
				close(start)
				wg.Wait()
				if len(winners) != 1 || winners[0].Worker != 0 || winners[0].Epoch != 1 {
					t.Fatalf("%d racers for one worker id: winners %+v, want exactly one", racers, winners)
				}
			})
		})
	}
}

// TestSchema_WorkerIDBounds: a worker ID outside the layout's range cannot
// be written, whatever writes it.
func TestSchema_WorkerIDBounds(t *testing.T) {
	ctx := ctxT(t)
	l := smallLayout() // worker IDs 0…3
	t.Run("postgres", func(t *testing.T) {
		store := pgstore.Open(t, pgstore.NewDatabase(t, pgtest.Shared(t)))
		if err := lease.NewPostgres(store.Pool()).Prepare(ctx, l); err != nil {
			t.Fatal(err)
		}
		checkBounds(t, ctx, func(q string, args ...any) error { _, err := store.Pool().Exec(ctx, q, args...); return err }, "$1", "$2")
	})
	t.Run("sqlite", func(t *testing.T) {
		store, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "idmint.db"))
		if err != nil {
			t.Fatal(err)
		}
		defer store.Close()
		if _, err := migrations.Up(ctx, store.DB(), migrations.SQLite, nil); err != nil {
			t.Fatal(err)
		}
		if err := lease.NewSQLite(store.DB()).Prepare(ctx, l); err != nil {
			t.Fatal(err)
		}
		checkBounds(t, ctx, func(q string, args ...any) error { _, err := store.DB().ExecContext(ctx, q, args...); return err }, "?", "?")
	})
}

func checkBounds(t *testing.T, ctx context.Context, exec func(q string, args ...any) error, p1, p2 string) {
	t.Helper()
	insert := `INSERT INTO idmint_snowflake_workers (worker_id, worker_bits) VALUES (` + p1 + `, ` + p2 + `)`
	for _, c := range []struct {
		name         string
		worker, bits int
	}{
		{"above the range", 4, 2},
		{"negative", -1, 2},
		{"with other worker bits than the layout's", 5, 3},
	} {
		if err := exec(insert, c.worker, c.bits); err == nil {
			t.Errorf("worker id %d, %d bits (%s): inserted", c.worker, c.bits, c.name)
		}
	}
	if err := exec(`UPDATE idmint_snowflake_workers SET worker_id = 4 WHERE worker_id = 3`); err == nil {
		t.Error("worker id 3 moved to 4")
	}
	if err := exec(`INSERT INTO idmint_snowflake_layout (id, epoch_ms, time_bits, worker_bits, sequence_bits) VALUES (2, 0, 41, 10, 12)`); err == nil {
		t.Error("a second layout row was inserted")
	}
}
