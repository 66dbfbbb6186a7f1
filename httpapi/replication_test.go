package httpapi_test

import (
	"context"
	"errors"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/idmint/idmint/testkit/testlog"

	"github.com/idmint/idmint/allocator"
	"github.com/idmint/idmint/allocator/memstore"
	"github.com/idmint/idmint/allocator/postgres"
	"github.com/idmint/idmint/httpapi"
	"github.com/idmint/idmint/wire"
)

// replicationSource is a fixed replication status: the health rules are
// about what the status says; the failover tests read real ones.
type replicationSource struct {
	st  postgres.ReplicationStatus
	err error
}

func (s replicationSource) Replication(context.Context) (wire.Replication, error) {
	return s.st.Report(), s.err
}

// Standbys lists none: the fixed status remembers no standby.
func (replicationSource) Standbys(context.Context) ([]wire.StandbyRecord, error) { return nil, nil }

// ForgetStandby finds none.
func (replicationSource) ForgetStandby(context.Context, string) error { return allocator.ErrNotFound }

func TestHealth_Replication(t *testing.T) {
	base := postgres.ReplicationStatus{Timeline: 1, InitialTimeline: 1, Required: postgres.ReplicasAuto, Ack: postgres.AckFlush}
	with := func(f func(*postgres.ReplicationStatus)) postgres.ReplicationStatus {
		st := base
		f(&st)
		return st
	}
	for _, tt := range []struct {
		name    string
		src     replicationSource
		status  string
		reason  string // in reasons, when set
		atRisk  bool
		changed bool
		metric  string // in /metrics, when set
	}{
		{name: "single server", src: replicationSource{st: base}, status: httpapi.StatusOK, metric: "idmint_database_replicas_connected 0"},
		{name: "synchronous standby", src: replicationSource{st: with(func(s *postgres.ReplicationStatus) { s.Replicas, s.SyncReplicas = 1, 1 })},
			status: httpapi.StatusOK, metric: "idmint_database_sync_replicas 1"},
		{name: "async, idmint waits", src: replicationSource{st: with(func(s *postgres.ReplicationStatus) { s.Replicas = 2 })},
			status: httpapi.StatusDegraded, reason: "only asynchronous replicas (2)", metric: "idmint_database_grants_at_risk 0"},
		{name: "async, wait off", src: replicationSource{st: with(func(s *postgres.ReplicationStatus) { s.Replicas, s.Required = 1, 0 })},
			status: httpapi.StatusDegraded, reason: "can lose grants already served", atRisk: true, metric: "idmint_database_grants_at_risk 1"},
		{name: "fewer than required", src: replicationSource{st: with(func(s *postgres.ReplicationStatus) { s.Replicas, s.SyncReplicas, s.Required = 1, 1, 2 })},
			status: httpapi.StatusDegraded, reason: "replicas_required 2 but 1 connected"},
		{name: "hidden from the role", src: replicationSource{st: with(func(s *postgres.ReplicationStatus) { s.Hidden = 1 })},
			status: httpapi.StatusDegraded, reason: "grant it pg_monitor", metric: "idmint_database_replicas_hidden 1"},
		{name: "hidden, wait off", src: replicationSource{st: with(func(s *postgres.ReplicationStatus) { s.Hidden, s.Required = 1, 0 })},
			status: httpapi.StatusDegraded, reason: "grant it pg_monitor", atRisk: true, metric: "idmint_database_grants_at_risk 1"},
		{name: "standby held", src: replicationSource{st: with(func(s *postgres.ReplicationStatus) {
			away := postgres.Standby{Name: "db2", Kind: postgres.KindRemembered, State: "disconnected"}
			s.Standbys, s.Held = []postgres.Standby{away}, []postgres.HeldStandby{{Standby: away, Since: time.Now().Add(-time.Minute)}}
		})},
			status: httpapi.StatusDegraded, reason: "waiting for db2 (remembered, disconnected)", metric: "idmint_replication_held_standbys 1"},
		{name: "failover seen", src: replicationSource{st: with(func(s *postgres.ReplicationStatus) { s.Timeline = 2 })},
			status: httpapi.StatusOK, changed: true, metric: "idmint_database_timeline_changed 1"},
		{name: "status unreadable", src: replicationSource{err: errors.New("boom")}, status: httpapi.StatusOK},
	} {
		t.Run(tt.name, func(t *testing.T) {
			store := memstore.New()
			a := allocator.New(allocator.Config{Store: store, Logger: testlog.Discard()})
			t.Cleanup(func() { a.Close(context.Background()) })
			srv := httptest.NewServer(httpapi.NewServer(httpapi.Config{Allocator: a, Logger: testlog.Discard(), Replication: tt.src}))
			t.Cleanup(srv.Close)

			_, h := (&pgInstance{srv: srv}).health(t, "")
			if h.Status != tt.status || h.Replication == nil {
				t.Fatalf("status %q, replication %+v; want %q", h.Status, h.Replication, tt.status)
			}
			r := h.Replication
			if tt.src.err != nil {
				if r.Error == "" || strings.Contains(r.Error, "boom") {
					t.Fatalf("unreadable status: error %q; want a fixed message, no detail", r.Error)
				}
				return
			}
			reasons := strings.Join(h.Reasons, "; ")
			if tt.reason != "" && !strings.Contains(reasons, "replication: ") || !strings.Contains(reasons, tt.reason) {
				t.Fatalf("reasons %q; want %q", reasons, tt.reason)
			}
			if r.GrantsAtRisk != tt.atRisk || r.TimelineChanged != tt.changed || r.ReplicasRequired != tt.src.st.Required.String() {
				t.Fatalf("replication %+v", *r)
			}
			if tt.metric != "" {
				_, _, body := getURL(t, srv.URL+"/metrics")
				if !strings.Contains(string(body), tt.metric+"\n") {
					t.Fatalf("/metrics lacks %q", tt.metric)
				}
			}
		})
	}

	t.Run("no source", func(t *testing.T) {
		a := allocator.New(allocator.Config{Store: memstore.New(), Logger: testlog.Discard()})
		t.Cleanup(func() { a.Close(context.Background()) })
		srv := httptest.NewServer(httpapi.NewServer(httpapi.Config{Allocator: a, Logger: testlog.Discard()}))
		t.Cleanup(srv.Close)
		if _, h := (&pgInstance{srv: srv}).health(t, ""); h.Replication != nil {
			t.Fatalf("replication block without a source: %+v", h.Replication)
		}
	})
}

// TestAdmin_Standbys: GET /v1/standbys lists the remembered standbys and
// DELETE /v1/standbys/{name} forgets one, with an admin token only; a name
// not remembered is a 404.
func TestAdmin_Standbys(t *testing.T) {
	pg := stores(t)["postgres"](t).(*postgres.Store)
	if _, err := pg.Pool().Exec(context.Background(), `INSERT INTO idmint_standbys (name, slot, timeline) VALUES ('db2@10.0.0.2', false, 1)`); err != nil {
		t.Fatal(err)
	}
	a := allocator.New(allocator.Config{Store: pg, Logger: testlog.Discard()})
	t.Cleanup(func() { a.Close(context.Background()) })
	srv := validated(httptest.NewServer(httpapi.NewServer(httpapi.Config{
		Allocator: a, Logger: testlog.Discard(), Admin: pg, Replication: pg, Auth: httpapi.AuthConfig{Tokens: pg},
	})))
	t.Cleanup(srv.Close)
	_, admin := newToken(t, pg, "ops", "admin")

	if s, _, body := do(t, srv, "GET", "/v1/standbys", "", nil); s != 401 {
		t.Fatalf("list without a token: %d %s", s, body)
	}
	s, _, body := do(t, srv, "GET", "/v1/standbys", admin, nil)
	if s != 200 || !strings.Contains(string(body), `"name":"db2@10.0.0.2"`) || strings.Contains(string(body), "forgotten_at") {
		t.Fatalf("list: %d %s", s, body)
	}
	if s, _, body := do(t, srv, "DELETE", "/v1/standbys/db2@10.0.0.2", admin, nil); s != 204 {
		t.Fatalf("forget: %d %s", s, body)
	}
	if s, _, body := do(t, srv, "DELETE", "/v1/standbys/db2@10.0.0.2", admin, nil); s != 404 {
		t.Fatalf("forget again: %d %s", s, body)
	}
	if s, _, body := do(t, srv, "GET", "/v1/standbys", admin, nil); s != 200 || !strings.Contains(string(body), "forgotten_at") {
		t.Fatalf("list after forget: %d %s", s, body)
	}
}
