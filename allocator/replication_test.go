package allocator_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/stdlib"

	"github.com/idmint/idmint/allocator"
	"github.com/idmint/idmint/internal/pgtest"
	"github.com/idmint/idmint/migrations"
)

func TestParseReplicas(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want allocator.Replicas
		err  bool
	}{
		{in: "auto", want: allocator.ReplicasAuto},
		{in: "off", want: 0},
		{in: "0", want: 0},
		{in: " 2 ", want: 2},
		{in: "-1", err: true},
		{in: "many", err: true},
		{in: "101", err: true},
	} {
		got, err := allocator.ParseReplicas(tt.in)
		if (err != nil) != tt.err || got != tt.want {
			t.Errorf("ParseReplicas(%q) = %v, %v; want %v, error %v", tt.in, got, err, tt.want, tt.err)
		}
	}
	if _, err := allocator.ParseReplicaAck("replay"); err != nil {
		t.Error(err)
	}
	if _, err := allocator.ParseReplicaAck("apply"); err == nil {
		t.Error("ParseReplicaAck accepted apply")
	}
}

// replicated returns a migrated database on a new primary+standby pair,
// with the tag "order" (step 10), and a store on it with cfg.
func replicated(t *testing.T, opts pgtest.ReplicationOptions) (*pgtest.Replication, string) {
	t.Helper()
	r := pgtest.NewReplication(t, opts)
	db := r.NewDatabase(t)
	admin := connect(t, r.URL(db))
	sqlDB := stdlib.OpenDBFromPool(admin.Pool())
	defer sqlDB.Close()
	if _, err := migrations.Up(context.Background(), sqlDB, migrations.PostgreSQL, nil); err != nil {
		t.Fatal(err)
	}
	createTag(t, admin, allocator.TagSpec{Name: "order", Step: 10, MaxStep: 10})
	return r, db
}

func withReplicas(t *testing.T, dbURL string, required allocator.Replicas) *allocator.Postgres {
	t.Helper()
	store := connect(t, dbURL)
	store.SetReplication(allocator.ReplicationConfig{Required: required, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	return store
}

// TestPostgres_Replication checks that a grant is only returned once the
// required standbys have its WAL: a stalled standby holds it back (the
// grant committed, but Allocate and Lookup say ErrNotReplicated) until it
// catches up; more standbys required than connected fails at once; and the
// status tells asynchronous replicas and a promotion.
func TestPostgres_Replication(t *testing.T) {
	r, db := replicated(t, pgtest.ReplicationOptions{})
	ctx := context.Background()
	one := withReplicas(t, r.URL(db), 1)

	st, err := one.ReplicationStatus(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Replicas != 1 || st.SyncReplicas != 0 || st.Hidden != 0 || st.InRecovery || st.Timeline != 1 || st.TimelineChanged() {
		t.Fatalf("status %+v; want 1 async replica on timeline 1", st)
	}
	if w := st.Warnings(); len(w) != 1 || !strings.Contains(w[0], "only asynchronous replicas (1)") || st.AtRisk() {
		t.Fatalf("warnings %q, at risk %v; want one about asynchronous replicas, not at risk (idmint waits)", w, st.AtRisk())
	}
	if _, err := one.Allocate(ctx, newRequest("order", 10)); err != nil {
		t.Fatalf("allocate with the standby streaming: %v", err)
	}

	t.Run("stalled standby holds the grant back", func(t *testing.T) {
		r.StallWAL(t)
		req := newRequest("order", 10)
		actx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		_, err := one.Allocate(actx, req)
		cancel()
		if !errors.Is(err, allocator.ErrNotReplicated) {
			t.Fatalf("allocate with the standby stalled: %v; want ErrNotReplicated", err)
		}
		lctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		_, err = one.Lookup(lctx, req.ID)
		cancel()
		if !errors.Is(err, allocator.ErrNotReplicated) {
			t.Fatalf("lookup with the standby stalled: %v; want ErrNotReplicated", err)
		}
		r.ResumeWAL(t)
		lctx, cancel = context.WithTimeout(ctx, 30*time.Second)
		seg, err := one.Lookup(lctx, req.ID)
		cancel()
		if err != nil || seg.First != 11 || seg.Last != 20 {
			t.Fatalf("lookup once the standby caught up: %+v, %v; want [11, 20]", seg, err)
		}
		st, _ := one.ReplicationStatus(ctx)
		if st.WaitFailures < 2 || st.Waits < 2 || st.LastWaitError == "" {
			t.Fatalf("status %+v; want the failed and the successful waits counted", st)
		}
	})

	t.Run("more required than connected", func(t *testing.T) {
		two := withReplicas(t, r.URL(db), 2)
		actx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		start := time.Now()
		_, err := two.Allocate(actx, newRequest("order", 10))
		if !errors.Is(err, allocator.ErrNotReplicated) || !strings.Contains(err.Error(), "2 standbys required, 1 connected") {
			t.Fatalf("allocate needing 2 standbys of 1: %v", err)
		}
		if time.Since(start) > 5*time.Second {
			t.Fatalf("failing for want of standbys took %v; want at once", time.Since(start))
		}
		st, _ := two.ReplicationStatus(ctx)
		if w := strings.Join(st.Warnings(), "; "); !strings.Contains(w, "replicas_required 2 but 1 connected") {
			t.Fatalf("warnings %q", w)
		}
	})

	t.Run("role without pg_monitor", func(t *testing.T) {
		if _, err := one.Pool().Exec(ctx, `CREATE ROLE idmint_app LOGIN PASSWORD 'app';
GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO idmint_app`); err != nil {
			t.Fatal(err)
		}
		u, _ := url.Parse(r.PrimaryURL(db))
		u.User = url.UserPassword("idmint_app", "app")
		auto := withReplicas(t, u.String(), allocator.ReplicasAuto)
		st, err := auto.ReplicationStatus(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if st.Hidden != 1 || !st.AtRisk() || !strings.Contains(strings.Join(st.Warnings(), ";"), "pg_monitor") {
			t.Fatalf("status %+v, warnings %q; want 1 hidden sender, at risk, advice to grant pg_monitor", st, st.Warnings())
		}
		if _, err := auto.Allocate(ctx, newRequest("order", 10)); err != nil {
			t.Fatalf("auto without pg_monitor should serve (and warn): %v", err)
		}
		strict := withReplicas(t, u.String(), 1)
		if _, err := strict.Allocate(ctx, newRequest("order", 10)); !errors.Is(err, allocator.ErrNotReplicated) || !strings.Contains(err.Error(), "pg_monitor") {
			t.Fatalf("1 standby required without pg_monitor: %v; want ErrNotReplicated naming pg_monitor", err)
		}
	})

	t.Run("promotion changes the timeline", func(t *testing.T) {
		r.KillPrimary(t)
		r.Promote(t)
		var st allocator.ReplicationStatus
		deadline := time.Now().Add(30 * time.Second)
		for {
			st, err = one.ReplicationStatus(ctx)
			if err == nil || time.Now().After(deadline) {
				break
			}
			time.Sleep(50 * time.Millisecond) // connections the kill broke are dropped one by one
		}
		if err != nil {
			t.Fatal(err)
		}
		if !st.TimelineChanged() || st.InitialTimeline != 1 || st.Timeline != 2 || st.Replicas != 0 {
			t.Fatalf("status after the promotion %+v; want timeline 1 -> 2, no replica", st)
		}
	})
}

// BenchmarkPostgres_AllocateReplicated measures what waiting for the
// standby adds to one segment grant (a load, not a request: the double
// buffer fetches ahead), on a primary with one asynchronous standby, and
// with a synchronous one for comparison:
//
//	go test -run '^$' -bench AllocateReplicated ./allocator
func BenchmarkPostgres_AllocateReplicated(b *testing.B) {
	for _, bb := range []struct {
		name string
		sync bool
		cfg  allocator.ReplicationConfig
	}{
		{name: "async/off", cfg: allocator.ReplicationConfig{Required: 0}},
		{name: "async/auto-flush", cfg: allocator.ReplicationConfig{Required: allocator.ReplicasAuto, Ack: allocator.AckFlush}},
		{name: "async/auto-replay", cfg: allocator.ReplicationConfig{Required: allocator.ReplicasAuto, Ack: allocator.AckReplay}},
		{name: "sync/off", sync: true, cfg: allocator.ReplicationConfig{Required: 0}},
	} {
		b.Run(bb.name, func(b *testing.B) {
			r := pgtest.NewReplication(b, pgtest.ReplicationOptions{Synchronous: bb.sync})
			db := r.NewDatabase(b)
			store := connect(b, r.URL(db))
			sqlDB := stdlib.OpenDBFromPool(store.Pool())
			if _, err := migrations.Up(context.Background(), sqlDB, migrations.PostgreSQL, nil); err != nil {
				b.Fatal(err)
			}
			sqlDB.Close()
			createTag(b, store, allocator.TagSpec{Name: "order", Step: 10})
			bb.cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
			store.SetReplication(bb.cfg)
			ctx := context.Background()
			b.ResetTimer()
			for b.Loop() {
				if _, err := store.Allocate(ctx, newRequest("order", 10)); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			// The wait alone, apart from the grant's own round trips.
			if st, err := store.ReplicationStatus(ctx); err == nil && st.Waits > 0 {
				b.ReportMetric(float64(st.WaitTime.Microseconds())/float64(st.Waits)/1000, "wait-ms/op")
			}
		})
	}
}
