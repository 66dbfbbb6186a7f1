package httpapi_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idmint/idmint/allocator"
	"github.com/idmint/idmint/allocator/memstore"
	"github.com/idmint/idmint/allocator/postgres"
	"github.com/idmint/idmint/httpapi"
	"github.com/idmint/idmint/internal/redact"
	"github.com/idmint/idmint/lease"
	"github.com/idmint/idmint/segment"
	"github.com/idmint/idmint/snowflake"
	"github.com/idmint/idmint/testkit/pgtest"
	"github.com/idmint/idmint/testkit/testlog"
	"github.com/idmint/idmint/testkit/testutil"
	"github.com/idmint/idmint/wire"
)

// Details of the database that no surface may show.
const (
	leakUser     = "leak_user"
	leakPassword = "leak-pass-9f3"
	leakDatabase = "leak_db"
	leakHost     = "db-primary.internal.invalid"
)

// anyIPv4 finds an IPv4 address in any surface.
var anyIPv4 = regexp.MustCompile(`\b[0-9]{1,3}\.[0-9]{1,3}\.[0-9]{1,3}\.[0-9]{1,3}\b`)

// TestRedact_ConnectErrors: real pgx connection failures (an unresolvable
// host, a refused port, an unknown role, a wrong password, an unknown
// database) reach every surface of the service, and none shows the user,
// password, database, host name, port or an address: /id/health (per tag,
// for one tag, its snowflake and replication blocks, which the dashboard
// reads), an API error reply, /metrics, and the log of the handler idmint
// logs through. The failures themselves are still told.
func TestRedact_ConnectErrors(t *testing.T) {
	dns := nxdomainServer(t)
	real := pgtest.Shared(t)
	realURL, err := url.Parse(real.NewDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	realPassword, _ := realURL.User.Password()
	withURL := func(f func(u *url.URL)) string {
		u := *realURL
		f(&u)
		return u.String()
	}
	closedPort := strconv.Itoa(testutil.FreePort(t))

	tests := []struct {
		name    string
		url     string
		secrets []string
		// told is what the reply must still say happened.
		told string
	}{
		{"unresolvable host", "postgres://" + leakUser + ":" + leakPassword + "@" + leakHost + ":5433/" + leakDatabase + "?connect_timeout=2",
			[]string{leakUser, leakPassword, leakDatabase, leakHost, "db-primary", ":5433"}, "no such host"},
		{"refused port", "postgres://" + leakUser + ":" + leakPassword + "@127.0.0.1:" + closedPort + "/" + leakDatabase + "?connect_timeout=2",
			[]string{leakUser, leakPassword, leakDatabase, ":" + closedPort}, "connection refused"},
		{"unknown role", withURL(func(u *url.URL) { u.User = url.UserPassword(leakUser, leakPassword); u.Path = "/" + leakDatabase }),
			[]string{leakUser, leakPassword, leakDatabase, ":" + realURL.Port(), realURL.Hostname()}, "failed to connect"},
		{"wrong password", withURL(func(u *url.URL) { u.User = url.UserPassword(realURL.User.Username(), leakPassword) }),
			[]string{realURL.User.Username(), leakPassword, strings.TrimPrefix(realURL.Path, "/"), ":" + realURL.Port(), realURL.Hostname()}, "failed to connect"},
		{"unknown database", withURL(func(u *url.URL) { u.Path = "/" + leakDatabase }),
			[]string{realURL.User.Username(), realPassword, leakDatabase, ":" + realURL.Port(), realURL.Hostname()}, "does not exist"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pool := badPool(t, tt.url, dns)
			connectErr := pool.Ping(context.Background())
			if connectErr == nil {
				if tt.name == "wrong password" {
					pgtest.Skip(t, "the PostgreSQL server accepts any password (trust authentication): run it on Docker")
				}
				t.Fatalf("%s: connected", tt.url)
			}
			var logs testlog.Buffer
			logger := slog.New(redact.NewHandler(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})))

			// idmint over the store that cannot connect, with Snowflake
			// mode whose leases fail the same way.
			pg := postgres.New(pool)
			metrics := httpapi.NewMetrics()
			a := allocator.New(allocator.Config{Store: pg, Instance: "redact", Logger: logger,
				Segment: segment.Config{LoadTimeout: 2 * time.Second, WaitTimeout: 2 * time.Second, OnLoad: metrics.ObserveLoad}})
			t.Cleanup(func() { a.Close(context.Background()) })
			node := failingLeases(t, pool, logger)
			bad := httptest.NewServer(httpapi.NewServer(httpapi.Config{Allocator: a, Instance: "redact", Logger: logger,
				Metrics: metrics, Snowflake: node, Replication: pg}))
			t.Cleanup(bad.Close)

			// An instance whose database answers but whose last grant
			// could not be confirmed on a standby, with that same error.
			mem := memstore.New()
			b := allocator.New(allocator.Config{Store: mem, Instance: "redact", Logger: logger})
			t.Cleanup(func() { b.Close(context.Background()) })
			standby := httptest.NewServer(httpapi.NewServer(httpapi.Config{Allocator: b, Instance: "redact", Logger: logger,
				Replication: waitFailed{replicationSource{err: connectErr}}}))
			t.Cleanup(standby.Close)

			surfaces := map[string]string{}
			servers := map[*httptest.Server]string{bad: "failing instance", standby: "instance with replication"}
			get := func(srv *httptest.Server, path string, want int) string {
				t.Helper()
				status, _, body := getURL(t, srv.URL+path)
				if status != want {
					t.Fatalf("GET %s: %d, want %d: %s", path, status, want, body)
				}
				surfaces[servers[srv]+": GET "+path] = string(body)
				return string(body)
			}
			get(bad, "/id?biz_tag=orders", 503)
			get(bad, "/ids?biz_tag=orders&count=3", 503)
			get(bad, "/snowflake", 503)
			var health, one httpapi.Health
			decode(t, get(bad, "/id/health", 503), &health)
			decode(t, get(bad, "/id/health?biz_tag=orders", 503), &one)
			var standbyHealth httpapi.Health
			decode(t, get(standby, "/id/health", 200), &standbyHealth)
			get(bad, "/metrics", 200)
			surfaces["log"] = logs.String()

			// The errors reached the surfaces...
			told := func(where, text string) {
				t.Helper()
				if text == "" {
					t.Errorf("%s: empty; the failure is not told", where)
				}
			}
			if len(one.Tags) != 1 {
				t.Fatalf("health for one tag: %d tags", len(one.Tags))
			}
			told("tag last_error", one.Tags[0].LastError)
			if health.Snowflake == nil {
				t.Fatal("no snowflake block in health")
			}
			told("snowflake last_error", health.Snowflake.LastError)
			if standbyHealth.Replication == nil {
				t.Fatal("no replication block in health")
			}
			told("replication last_wait_error", standbyHealth.Replication.LastWaitError)
			if !strings.Contains(standbyHealth.Replication.LastWaitError, tt.told) {
				t.Errorf("replication last_wait_error %q does not say %q", standbyHealth.Replication.LastWaitError, tt.told)
			}
			if !strings.Contains(surfaces["log"], tt.told) {
				t.Errorf("the log does not say %q:\n%s", tt.told, surfaces["log"])
			}
			t.Logf("tag: %s\nsnowflake: %s\nreplication: %s", one.Tags[0].LastError, health.Snowflake.LastError, standbyHealth.Replication.LastWaitError)
			// ... and none of them shows a detail.
			for where, text := range surfaces {
				for _, s := range tt.secrets {
					if i := strings.Index(text, s); s != "" && i >= 0 {
						t.Errorf("%s shows %q: …%s…", where, s, around(text, i))
					}
				}
				if loc := anyIPv4.FindStringIndex(text); loc != nil {
					t.Errorf("%s shows the address %s: …%s…", where, text[loc[0]:loc[1]], around(text, loc[0]))
				}
			}
		})
	}
}

// around is the text near i, for a failure message.
func around(text string, i int) string {
	return text[max(i-150, 0):min(i+150, len(text))]
}

func decode(t *testing.T, body string, v any) {
	t.Helper()
	if err := json.Unmarshal([]byte(body), v); err != nil {
		t.Fatalf("%v: %s", err, body)
	}
}

// badPool is a pool over url that resolves host names through dns only, so
// that no lookup leaves the machine.
func badPool(tb testing.TB, rawURL, dns string) *pgxpool.Pool {
	tb.Helper()
	cfg, err := pgxpool.ParseConfig(rawURL)
	if err != nil {
		tb.Fatal(err)
	}
	r := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "udp", dns)
	}}
	cfg.ConnConfig.LookupFunc = r.LookupHost
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(pool.Close)
	return pool
}

// nxdomainServer answers every DNS query on a loopback UDP port with "no
// such name" and returns its address.
func nxdomainServer(tb testing.TB) string {
	tb.Helper()
	conn, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		buf := make([]byte, 1500)
		for {
			n, from, err := conn.ReadFrom(buf)
			if err != nil {
				return // closed
			}
			if n < 12 {
				continue
			}
			reply := append([]byte(nil), buf[:n]...)
			reply[2] = 0x80 | reply[2]&0x79 // a response, same opcode and RD
			reply[3] = 0x80 | 3             // recursion available, NXDOMAIN
			conn.WriteTo(reply, from)
		}
	})
	tb.Cleanup(func() {
		conn.Close()
		wg.Wait()
	})
	return conn.LocalAddr().String()
}

// failingLeases starts a Snowflake node whose leases are taken from the
// pool: its layout is prepared in memory, and every acquisition meets the
// pool's connection error.
func failingLeases(tb testing.TB, pool *pgxpool.Pool, logger *slog.Logger) *snowflake.Node {
	tb.Helper()
	store := preparedLeases{Postgres: lease.NewPostgres(pool), mem: lease.NewMemory(time.Now)}
	node, err := snowflake.Start(context.Background(), snowflake.Config{Layout: snowflake.DefaultLayout(), Store: store,
		Holder: "redact", Logger: logger})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { node.Close(context.Background()) })
	return node
}

type preparedLeases struct {
	*lease.Postgres
	mem *lease.Memory
}

func (p preparedLeases) Prepare(ctx context.Context, l snowflake.Layout) error {
	return p.mem.Prepare(ctx, l)
}

// waitFailed is a replication source whose last grant could not be
// confirmed on the standbys because of err. It remembers no standby.
type waitFailed struct{ replicationSource }

func (w waitFailed) Replication(context.Context) (wire.Replication, error) {
	if w.err == nil {
		return wire.Replication{}, errors.New("no error to report")
	}
	return postgres.ReplicationStatus{Timeline: 1, InitialTimeline: 1, SynchronousCommit: "on", Required: postgres.ReplicasAuto,
		Ack: postgres.AckFlush, WaitFailures: 1, LastWaitError: "grant 42: " + w.err.Error()}.Report(), nil
}
