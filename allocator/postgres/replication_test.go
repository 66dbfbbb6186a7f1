package postgres_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idmint/idmint/allocator"
	"github.com/idmint/idmint/allocator/postgres"
	"github.com/idmint/idmint/segment"
	"github.com/idmint/idmint/testkit/pgstore"
	"github.com/idmint/idmint/testkit/pgtest"
	"github.com/idmint/idmint/testkit/storetest"
	"github.com/idmint/idmint/testkit/testutil"
)

func TestParseReplicas(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want postgres.Replicas
		err  bool
	}{
		{in: "auto", want: postgres.ReplicasAuto},
		{in: "off", want: 0},
		{in: "0", want: 0},
		{in: " 2 ", want: 2},
		{in: "-1", err: true},
		{in: "many", err: true},
		{in: "101", err: true},
	} {
		got, err := postgres.ParseReplicas(tt.in)
		if (err != nil) != tt.err || got != tt.want {
			t.Errorf("ParseReplicas(%q) = %v, %v; want %v, error %v", tt.in, got, err, tt.want, tt.err)
		}
	}
	if _, err := postgres.ParseReplicaAck("replay"); err != nil {
		t.Error(err)
	}
	if _, err := postgres.ParseReplicaAck("apply"); err == nil {
		t.Error("ParseReplicaAck accepted apply")
	}
}

// replicated returns a migrated database on a new primary+standby pair,
// with the tag "order" (step 10), and a store on it with cfg.
func replicated(t *testing.T, opts pgtest.ReplicationOptions) (*pgtest.Replication, string) {
	t.Helper()
	r := pgtest.NewReplication(t, opts)
	db := r.NewDatabase(t)
	pgstore.Migrate(t, r.URL(db))
	admin := pgstore.Open(t, r.URL(db))
	createTag(t, admin, allocator.TagSpec{Name: "order", Step: 10, MaxStep: 10})
	return r, db
}

func withReplicas(t *testing.T, dbURL string, required postgres.Replicas) *postgres.Store {
	t.Helper()
	store := pgstore.Open(t, dbURL)
	store.SetReplication(postgres.ReplicationConfig{Required: required, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
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
	if _, err := one.Allocate(ctx, storetest.NewRequest("order", 10)); err != nil {
		t.Fatalf("allocate with the standby streaming: %v", err)
	}

	t.Run("stalled standby holds the grant back", func(t *testing.T) {
		// The standby's receiver stops, the primary keeps sending: sent_lsn
		// runs ahead of flush_lsn, so only a wait on flush_lsn holds.
		r.StallReceiver(t)
		req := storetest.NewRequest("order", 10)
		actx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		_, err := one.Allocate(actx, req)
		cancel()
		if !errors.Is(err, allocator.ErrNotReplicated) {
			t.Fatalf("allocate with the standby stalled: %v; want ErrNotReplicated", err)
		}
		var ahead bool
		if err := one.Pool().QueryRow(ctx, `SELECT bool_and(sent_lsn > flush_lsn) FROM pg_stat_replication`).Scan(&ahead); err != nil || !ahead {
			t.Fatalf("stalled receiver: sent_lsn ahead of flush_lsn %v, %v; want true (the stall would not tell sent from flushed)", ahead, err)
		}
		lctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		_, err = one.Lookup(lctx, req.ID)
		cancel()
		if !errors.Is(err, allocator.ErrNotReplicated) {
			t.Fatalf("lookup with the standby stalled: %v; want ErrNotReplicated", err)
		}
		if st, _ := one.ReplicationStatus(ctx); len(st.Held) != 1 || st.Held[0].Kind != postgres.KindStreaming ||
			!strings.Contains(strings.Join(st.Warnings(), ";"), "held back since") {
			t.Fatalf("status while held: %+v, warnings %q; want the streaming standby held", st.Held, st.Warnings())
		}
		r.ResumeReceiver(t)
		lctx, cancel = context.WithTimeout(ctx, 30*time.Second)
		seg, err := one.Lookup(lctx, req.ID)
		cancel()
		if err != nil || seg.First != 11 || seg.Last != 20 {
			t.Fatalf("lookup once the standby caught up: %+v, %v; want [11, 20]", seg, err)
		}
		st, _ := one.ReplicationStatus(ctx)
		if st.WaitFailures < 2 || st.Waits < 2 || st.LastWaitError == "" || len(st.Held) != 0 {
			t.Fatalf("status %+v; want the failed and the successful waits counted, nothing held", st)
		}
	})

	t.Run("more required than connected", func(t *testing.T) {
		two := withReplicas(t, r.URL(db), 2)
		actx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		start := time.Now()
		_, err := two.Allocate(actx, storetest.NewRequest("order", 10))
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
		auto := withReplicas(t, u.String(), postgres.ReplicasAuto)
		st, err := auto.ReplicationStatus(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if st.Hidden != 1 || st.AtRisk() || !strings.Contains(strings.Join(st.Warnings(), ";"), "pg_monitor") {
			t.Fatalf("status %+v, warnings %q; want 1 hidden sender, advice to grant pg_monitor", st, st.Warnings())
		}
		// A standby nobody can judge (no slot tells its position) could be
		// promoted without the grant: held.
		if _, err := auto.Allocate(ctx, storetest.NewRequest("order", 10)); !errors.Is(err, allocator.ErrNotReplicated) || !strings.Contains(err.Error(), "pg_monitor") {
			t.Fatalf("auto without pg_monitor: %v; want ErrNotReplicated naming pg_monitor", err)
		}
		strict := withReplicas(t, u.String(), 1)
		if _, err := strict.Allocate(ctx, storetest.NewRequest("order", 10)); !errors.Is(err, allocator.ErrNotReplicated) || !strings.Contains(err.Error(), "pg_monitor") {
			t.Fatalf("1 standby required without pg_monitor: %v; want ErrNotReplicated naming pg_monitor", err)
		}
	})

	t.Run("promotion changes the timeline", func(t *testing.T) {
		r.KillPrimary(t)
		r.Promote(t)
		var st postgres.ReplicationStatus
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
		if !st.TimelineChanged() || st.InitialTimeline != 1 || st.Timeline != 2 || st.Replicas != 0 || len(st.Standbys) != 0 {
			t.Fatalf("status after the promotion %+v; want timeline 1 -> 2, no replica", st)
		}
		// The promoted server has the record of itself as a standby of
		// timeline 1: it no longer counts, and a new instance serves at once.
		auto := withReplicas(t, r.URL(db), postgres.ReplicasAuto)
		actx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		if _, err := auto.Allocate(actx, storetest.NewRequest("order", 10)); err != nil {
			t.Fatalf("allocate on the promoted server without standbys: %v", err)
		}
	})
}

// held allocates with a short deadline and requires the grant held back,
// with want in the error.
func held(t *testing.T, store *postgres.Store, want string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_, err := store.Allocate(ctx, storetest.NewRequest("order", 10))
	if !errors.Is(err, allocator.ErrNotReplicated) || !strings.Contains(err.Error(), want) {
		t.Fatalf("allocate: %v; want ErrNotReplicated mentioning %q", err, want)
	}
}

// served allocates and requires the grant confirmed within 30s (a standby
// that came back catches up first).
func served(t *testing.T, store *postgres.Store) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var err error
	for ctx.Err() == nil {
		if _, err = store.Allocate(ctx, storetest.NewRequest("order", 10)); err == nil {
			return
		}
		if !errors.Is(err, allocator.ErrNotReplicated) {
			break
		}
		time.Sleep(50 * time.Millisecond) // a standby reconnecting is not streaming yet
	}
	t.Fatalf("allocate: %v; want it served", err)
}

// TestPostgres_RequiredSet checks who holds a grant besides the standbys
// streaming now (R1): a standby that disconnected is still a candidate
// until something proves it is not.
func TestPostgres_RequiredSet(t *testing.T) {
	ctx := context.Background()

	t.Run("remembered standby without a slot", func(t *testing.T) {
		r, db := replicated(t, pgtest.ReplicationOptions{})
		first := withReplicas(t, r.URL(db), postgres.ReplicasAuto)
		served(t, first)
		recs, err := first.Standbys(ctx)
		if err != nil || len(recs) != 1 || recs[0].Slot || recs[0].Timeline != 1 {
			t.Fatalf("recorded standbys %+v, %v; want one without a slot on timeline 1", recs, err)
		}
		r.Standby.Stop(t, false)
		// An instance started after the standby left knows it from the table.
		late := withReplicas(t, r.URL(db), postgres.ReplicasAuto)
		held(t, late, "remembered")
		st, err := late.ReplicationStatus(ctx)
		if err != nil || st.Replicas != 0 || len(st.Standbys) != 1 || st.Standbys[0].Kind != postgres.KindRemembered || len(st.Held) != 1 {
			t.Fatalf("status %+v, %v; want the remembered standby required and held", st, err)
		}
		if err := late.ForgetStandby(ctx, recs[0].Name); err != nil {
			t.Fatal(err)
		}
		if err := late.ForgetStandby(ctx, recs[0].Name); !errors.Is(err, allocator.ErrNotFound) {
			t.Fatalf("forget twice: %v; want ErrNotFound", err)
		}
		served(t, late)
		r.Standby.Start(t)
		r.WaitReplayed(t)
		served(t, late)
		if recs, _ := late.Standbys(ctx); len(recs) != 1 || recs[0].ForgottenAt != nil {
			t.Fatalf("records %+v; want the standby seen again, no longer forgotten", recs)
		}
	})

	t.Run("standby with a slot", func(t *testing.T) {
		r, db := replicated(t, pgtest.ReplicationOptions{Slot: "standby_a"})
		store := withReplicas(t, r.URL(db), postgres.ReplicasAuto)
		served(t, store)
		r.Standby.Stop(t, false)
		held(t, store, "standby_a (slot, inactive)")
		r.Standby.Start(t)
		served(t, store)
		r.Standby.Stop(t, false)
		held(t, store, "standby_a")
		if _, err := store.Pool().Exec(ctx, `SELECT pg_drop_replication_slot('standby_a')`); err != nil {
			t.Fatal(err)
		}
		served(t, store)
	})

	t.Run("pg_receivewal is not a standby", func(t *testing.T) {
		r, db := replicated(t, pgtest.ReplicationOptions{})
		r.ReceiveWAL(t)
		store := withReplicas(t, r.URL(db), 1)
		// On PostgreSQL 15, pg_receivewal reports a write position but no
		// replay position (nor a flush one until it closes a WAL file); a
		// standby reports all three.
		deadline := time.Now().Add(30 * time.Second)
		for {
			var archivers, standbys int
			err := store.Pool().QueryRow(ctx, `SELECT count(*) FILTER (WHERE replay_lsn IS NULL AND write_lsn IS NOT NULL),
    count(*) FILTER (WHERE replay_lsn IS NOT NULL) FROM pg_stat_replication`).Scan(&archivers, &standbys)
			if err != nil {
				t.Fatal(err)
			}
			if archivers == 1 && standbys == 1 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("pg_stat_replication: %d senders without a replay position, %d with; want pg_receivewal without, the standby with", archivers, standbys)
			}
			time.Sleep(50 * time.Millisecond)
		}
		served(t, store)
		if st, err := store.ReplicationStatus(ctx); err != nil || st.Replicas != 1 || st.Streamers != 1 || len(st.Standbys) != 1 {
			t.Fatalf("status %+v, %v; want 1 standby and 1 WAL streamer", st, err)
		}
		// The real standby lags; pg_receivewal has the grant: held.
		r.StallReceiver(t)
		held(t, store, "not flushed")
		r.ResumeReceiver(t)
		served(t, store)
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
		cfg  postgres.ReplicationConfig
	}{
		{name: "async/off", cfg: postgres.ReplicationConfig{Required: 0}},
		{name: "async/auto-flush", cfg: postgres.ReplicationConfig{Required: postgres.ReplicasAuto, Ack: postgres.AckFlush}},
		{name: "async/auto-replay", cfg: postgres.ReplicationConfig{Required: postgres.ReplicasAuto, Ack: postgres.AckReplay}},
		{name: "sync/off", sync: true, cfg: postgres.ReplicationConfig{Required: 0}},
	} {
		b.Run(bb.name, func(b *testing.B) {
			r := pgtest.NewReplication(b, pgtest.ReplicationOptions{Synchronous: bb.sync})
			db := r.NewDatabase(b)
			pgstore.Migrate(b, r.URL(db))
			store := pgstore.Open(b, r.URL(db))
			createTag(b, store, allocator.TagSpec{Name: "order", Step: 10})
			bb.cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
			store.SetReplication(bb.cfg)
			ctx := context.Background()
			b.ResetTimer()
			for b.Loop() {
				if _, err := store.Allocate(ctx, storetest.NewRequest("order", 10)); err != nil {
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

// streamingName is the name the primary of r knows its one standby by
// (application_name@client address: it streams without a slot), read
// without recording it.
func streamingName(t *testing.T, store *postgres.Store) string {
	t.Helper()
	var name string
	err := store.Pool().QueryRow(context.Background(),
		`SELECT COALESCE(application_name, '') || '@' || COALESCE(host(client_addr), 'local') FROM pg_stat_replication`).Scan(&name)
	if err != nil {
		t.Fatal(err)
	}
	return name
}

// TestPostgres_StandbyRecord checks that a standby seen streaming for the
// first time holds every grant until its record in idmint_standbys is
// written (R3): served before, the grant would be lost by a failover to it
// once it disconnected, as every instance started after would not know it.
func TestPostgres_StandbyRecord(t *testing.T) {
	ctx := context.Background()

	t.Run("refused by the database", func(t *testing.T) {
		r, db := replicated(t, pgtest.ReplicationOptions{})
		owner := pgstore.Open(t, r.PrimaryURL(db))
		if _, err := owner.Pool().Exec(ctx, `CREATE ROLE idmint_app LOGIN PASSWORD 'app' IN ROLE pg_monitor;
GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO idmint_app;
REVOKE INSERT ON idmint_standbys FROM idmint_app`); err != nil {
			t.Fatal(err)
		}
		u, _ := url.Parse(r.PrimaryURL(db))
		u.User = url.UserPassword("idmint_app", "app")
		app := withReplicas(t, u.String(), postgres.ReplicasAuto)
		name := streamingName(t, owner)

		refused := func(what string, err error) {
			t.Helper()
			if !errors.Is(err, allocator.ErrNotReplicated) || !strings.Contains(err.Error(), "record standby "+name) ||
				!strings.Contains(err.Error(), "permission denied") {
				t.Fatalf("%s while the standby's record is refused: %v; want ErrNotReplicated naming %s and the database's refusal", what, err, name)
			}
		}
		req := storetest.NewRequest("order", 10)
		actx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		_, err := app.Allocate(actx, req)
		refused("allocate", err)
		_, err = app.Lookup(actx, req.ID)
		refused("lookup of the same request", err)
		if recs, err := owner.Standbys(ctx); err != nil || len(recs) != 0 {
			t.Fatalf("records %+v, %v; want none", recs, err)
		}

		// Through the allocator: callers are told unavailable, and the
		// load is retried, never served.
		a := allocator.New(allocator.Config{Store: app, Instance: "record", RetryMin: time.Millisecond, RetryMax: 10 * time.Millisecond,
			Segment: segment.Config{WaitTimeout: 200 * time.Millisecond, MinBackoff: time.Millisecond, MaxBackoff: 10 * time.Millisecond},
			Logger:  slog.New(slog.NewTextHandler(io.Discard, nil))})
		defer a.Close(ctx)
		if id, err := a.Next(actx, "order"); !errors.Is(err, allocator.ErrUnavailable) {
			t.Fatalf("next while the standby's record is refused: %d, %v; want ErrUnavailable", id, err)
		}

		if _, err := owner.Pool().Exec(ctx, `GRANT INSERT ON idmint_standbys TO idmint_app`); err != nil {
			t.Fatal(err)
		}
		seg, err := app.Lookup(actx, req.ID)
		if err != nil || seg.First != 1 || seg.Last != 10 {
			t.Fatalf("lookup once the record can be written: %+v, %v; want [1, 10]", seg, err)
		}
		if recs, err := owner.Standbys(ctx); err != nil || len(recs) != 1 || recs[0].Name != name {
			t.Fatalf("records %+v, %v; want %s", recs, err, name)
		}
		var id int64
		testutil.Eventually(t, 10*time.Second, "the allocator to serve once the record is written", func() bool {
			id, err = a.Next(actx, "order")
			return err == nil
		})
		if id <= 10 {
			t.Fatalf("served %d; want above the grant of the first request, [1, 10], which the allocator never had", id)
		}
	})

	t.Run("a write in flight is no record", func(t *testing.T) {
		// The first grant's write of the record waits on a lock the test
		// holds, then fails. A grant meanwhile must not take the write in
		// flight for a record: it writes too, and fails with it.
		r, db := replicated(t, pgtest.ReplicationOptions{})
		store := withReplicas(t, r.PrimaryURL(db), postgres.ReplicasAuto)
		name := streamingName(t, store)
		locker, err := pgx.Connect(ctx, r.PrimaryURL(db))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { locker.Close(context.Background()) })
		if _, err := locker.Exec(ctx, `SELECT pg_advisory_lock(7411)`); err != nil {
			t.Fatal(err)
		}
		if _, err := store.Pool().Exec(ctx, `CREATE FUNCTION refuse_standby() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_advisory_xact_lock_shared(7411);
    RAISE EXCEPTION 'standby records refused';
END $$;
CREATE TRIGGER refuse_standby BEFORE INSERT OR UPDATE ON idmint_standbys FOR EACH ROW EXECUTE FUNCTION refuse_standby()`); err != nil {
			t.Fatal(err)
		}
		waiting := func() int {
			var n int
			if err := locker.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND wait_event = 'advisory'`).Scan(&n); err != nil {
				t.Fatal(err)
			}
			return n
		}
		gctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		grant := func() <-chan error {
			done := make(chan error, 1)
			go func() {
				_, err := store.Allocate(gctx, storetest.NewRequest("order", 10))
				done <- err
			}()
			return done
		}
		first := grant()
		testutil.Eventually(t, 10*time.Second, "the first grant's record to wait on the lock", func() bool { return waiting() == 1 })
		second := grant()
		testutil.Eventually(t, 10*time.Second, "the second grant to answer or write the record too", func() bool {
			return len(second) == 1 || waiting() == 2
		})
		if _, err := locker.Exec(ctx, `SELECT pg_advisory_unlock(7411)`); err != nil {
			t.Fatal(err)
		}
		for i, done := range []<-chan error{first, second} {
			if err := <-done; !errors.Is(err, allocator.ErrNotReplicated) || !strings.Contains(err.Error(), "record standby "+name) ||
				!strings.Contains(err.Error(), "standby records refused") {
				t.Fatalf("grant %d while the standby's first record is in flight and refused: %v; want ErrNotReplicated naming %s", i+1, err, name)
			}
		}
		if _, err := store.Pool().Exec(ctx, `DROP TRIGGER refuse_standby ON idmint_standbys`); err != nil {
			t.Fatal(err)
		}
		served(t, store)
		if recs, err := store.Standbys(ctx); err != nil || len(recs) != 1 || recs[0].Name != name {
			t.Fatalf("records %+v, %v; want %s", recs, err, name)
		}
	})
}
