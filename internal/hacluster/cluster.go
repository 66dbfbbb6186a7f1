package hacluster

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idmint/idmint/internal/pgtest"
)

// dirPrefix starts the name of every cluster's temporary directory;
// ownerFile in it holds the PID of the process that started the cluster.
const (
	dirPrefix = "idmint-hacluster-"
	ownerFile = "owner.pid"
)

// The superuser idmint connects as; trust authentication on loopback, the
// password only satisfies Patroni's bootstrap.
const (
	superuser = "postgres"
	password  = "postgres"
)

// Config describes a cluster to start.
type Config struct {
	// Nodes is the number of PostgreSQL nodes, each run by its own Patroni
	// (default 2).
	Nodes int
	// Synchronous turns on Patroni's synchronous_mode: a commit returns
	// once a standby flushed it, and only a synchronous standby is promoted.
	Synchronous bool
	// TTL is the leader key's time to live: how long after the leader's
	// last heartbeat another node may take over (default 10s). Patroni
	// runs its loop every second.
	TTL time.Duration
	// BinDir holds the PostgreSQL server binaries; default
	// pgtest.Binaries: $IDMINT_TEST_PG_BIN, `pg_config --bindir`, the newest
	// /usr/lib/postgresql/*/bin, …
	BinDir string
}

// Cluster is a running etcd with Patroni nodes. Its methods are not safe
// for concurrent use.
type Cluster struct {
	cfg   Config
	dir   string
	cred  *syscall.Credential // run as this user (postgres) when we are root
	etcd  *proc
	nodes []*node
}

// node is one Patroni with the PostgreSQL server it runs.
type node struct {
	name            string
	pgPort, apiPort int
	dir, data       string
	patroni         *proc
	crashed         bool
}

// Start starts etcd and the Patroni nodes and returns once each answers;
// the nodes then elect a leader and clone it (see WaitReplicating). On error
// everything started is stopped again.
func Start(ctx context.Context, cfg Config) (_ *Cluster, err error) {
	if cfg.Nodes == 0 {
		cfg.Nodes = 2
	}
	if cfg.TTL == 0 {
		cfg.TTL = 10 * time.Second
	}
	if cfg.Nodes < 1 || cfg.TTL < 5*time.Second {
		return nil, fmt.Errorf("hacluster: want at least 1 node and a TTL of at least 5s, got %d and %v", cfg.Nodes, cfg.TTL)
	}
	if cfg.BinDir == "" {
		if cfg.BinDir, err = pgtest.Binaries(); err != nil {
			return nil, fmt.Errorf("hacluster: %w (Debian: apt-get install postgresql)", err)
		}
	}
	patroniBin, err := exec.LookPath("patroni")
	if err != nil {
		return nil, fmt.Errorf("hacluster: patroni not found (Debian: apt-get install patroni python3-etcd python3-psycopg2): %w", err)
	}
	etcdBin, err := exec.LookPath("etcd")
	if err != nil {
		return nil, fmt.Errorf("hacluster: etcd not found (Debian: apt-get install etcd-server): %w", err)
	}
	c := &Cluster{cfg: cfg}
	if c.cred, err = pgtest.ServerUser(); err != nil {
		return nil, fmt.Errorf("hacluster: %w", err)
	}
	reap()

	if c.dir, err = os.MkdirTemp("", dirPrefix); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, c.Close())
		}
	}()
	if err := os.Chmod(c.dir, 0o755); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(c.dir, ownerFile), []byte(strconv.Itoa(os.Getpid())+"\n"), 0o644); err != nil {
		return nil, err
	}

	etcdDir, err := c.mkdir("etcd")
	if err != nil {
		return nil, err
	}
	ports, err := freePorts(2 + 2*cfg.Nodes)
	if err != nil {
		return nil, err
	}
	client, peer := ports[0], ports[1]
	c.etcd, err = c.start(etcdDir, "etcd.log", etcdBin,
		"--name", "drill", "--data-dir", filepath.Join(etcdDir, "data"),
		"--listen-client-urls", loopURL(client), "--advertise-client-urls", loopURL(client),
		"--listen-peer-urls", loopURL(peer), "--initial-advertise-peer-urls", loopURL(peer),
		"--initial-cluster", "drill="+loopURL(peer), "--initial-cluster-state", "new",
		"--logger", "zap", "--log-level", "warn")
	if err != nil {
		return nil, err
	}
	if err := waitFor(ctx, 30*time.Second, "etcd to answer", func() error {
		return c.etcd.check(getOK(ctx, loopURL(client)+"/health"))
	}); err != nil {
		return nil, err
	}

	for i := range cfg.Nodes {
		n := &node{name: fmt.Sprint("node", i), pgPort: ports[2+2*i], apiPort: ports[3+2*i]}
		if n.dir, err = c.mkdir(n.name); err != nil {
			return nil, err
		}
		n.data = filepath.Join(n.dir, "data")
		conf := filepath.Join(n.dir, "patroni.yml")
		// JSON is YAML: no YAML library needed.
		raw, err := json.MarshalIndent(c.patroniConfig(n, client), "", "  ")
		if err != nil {
			return nil, err
		}
		if err := os.WriteFile(conf, raw, 0o644); err != nil {
			return nil, err
		}
		if n.patroni, err = c.start(n.dir, "patroni.log", patroniBin, conf); err != nil {
			return nil, err
		}
		c.nodes = append(c.nodes, n)
	}
	for _, n := range c.nodes {
		if err := waitFor(ctx, 30*time.Second, n.name+"'s Patroni to answer", func() error {
			_, err := n.status(ctx)
			return n.patroni.check(err)
		}); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// patroniConfig is the configuration of node n, etcd's client port given.
func (c *Cluster) patroniConfig(n *node, etcdPort int) map[string]any {
	ttl := int(c.cfg.TTL.Seconds())
	hba := []string{
		"local all all trust",
		"host all all 127.0.0.1/32 trust",
		"host replication all 127.0.0.1/32 trust",
	}
	return map[string]any{
		"scope":     "idmint-drill",
		"namespace": "/idmint-drill/",
		"name":      n.name,
		"log":       map[string]any{"level": "INFO"},
		"restapi":   map[string]any{"listen": loopAddr(n.apiPort), "connect_address": loopAddr(n.apiPort)},
		"etcd3":     map[string]any{"hosts": []string{loopAddr(etcdPort)}},
		"bootstrap": map[string]any{
			"dcs": map[string]any{
				"ttl":                     ttl,
				"loop_wait":               1,
				"retry_timeout":           max(2, ttl/3),
				"maximum_lag_on_failover": 1 << 20,
				"synchronous_mode":        c.cfg.Synchronous,
				"postgresql": map[string]any{
					"use_pg_rewind": false,
					"use_slots":     true,
					"parameters": map[string]any{
						"max_connections":       100,
						"shared_buffers":        "32MB",
						"max_wal_senders":       10,
						"max_replication_slots": 10,
						"wal_keep_size":         "64MB",
						"hot_standby":           "on",
						// The drill kills processes, not machines: the
						// page cache survives, and no node's disk is
						// reused after an operating-system crash.
						"fsync": "off",
					},
				},
			},
			"initdb": []any{map[string]string{"encoding": "UTF8"}, map[string]string{"locale": "C"}, "no-sync"},
		},
		"postgresql": map[string]any{
			"listen":          loopAddr(n.pgPort),
			"connect_address": loopAddr(n.pgPort),
			"data_dir":        n.data,
			"bin_dir":         c.cfg.BinDir,
			"pgpass":          filepath.Join(n.dir, "pgpass"),
			"pg_hba":          hba,
			"authentication": map[string]any{
				"superuser":   map[string]string{"username": superuser, "password": password},
				"replication": map[string]string{"username": "replicator", "password": "replicator"},
			},
			"parameters": map[string]any{
				"unix_socket_directories": n.dir,
				"logging_collector":       "on",
				"log_directory":           filepath.Join(n.dir, "log"),
				"log_filename":            "postgresql.log",
			},
		},
	}
}

// Nodes returns the names of the nodes: node0, node1, …
func (c *Cluster) Nodes() []string {
	names := make([]string, len(c.nodes))
	for i, n := range c.nodes {
		names[i] = n.name
	}
	return names
}

// URL returns a connection URL over every node that only settles on the
// writable one (target_session_attrs=read-write): what idmint is given.
func (c *Cluster) URL() string {
	hosts := make([]string, len(c.nodes))
	for i, n := range c.nodes {
		hosts[i] = loopAddr(n.pgPort)
	}
	return fmt.Sprintf("postgres://%s:%s@%s/postgres?sslmode=disable&target_session_attrs=read-write",
		superuser, password, strings.Join(hosts, ","))
}

// NodeURL returns the connection URL of one node.
func (c *Cluster) NodeURL(name string) string {
	n := c.node(name)
	if n == nil {
		return ""
	}
	return fmt.Sprintf("postgres://%s:%s@%s/postgres?sslmode=disable", superuser, password, loopAddr(n.pgPort))
}

func (c *Cluster) node(name string) *node {
	for _, n := range c.nodes {
		if n.name == name {
			return n
		}
	}
	return nil
}

// Leader returns the node that holds the leader key and runs a writable
// server, by Patroni's REST API; an error if none does right now.
func (c *Cluster) Leader(ctx context.Context) (string, error) {
	var errs []error
	for _, n := range c.nodes {
		if n.crashed {
			continue
		}
		st, err := n.status(ctx)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if st.Role == "master" || st.Role == "primary" {
			if st.State != "running" {
				errs = append(errs, fmt.Errorf("%s: leader in state %q", n.name, st.State))
				continue
			}
			return n.name, nil
		}
	}
	return "", errors.Join(append([]error{errors.New("no leader")}, errs...)...)
}

// WaitLeader waits until a node other than except leads and accepts
// writes, and returns it. except may be empty.
func (c *Cluster) WaitLeader(ctx context.Context, except string) (string, error) {
	var leader string
	err := waitFor(ctx, 3*c.cfg.TTL+30*time.Second, "a leader other than "+strconv.Quote(except), func() error {
		l, err := c.Leader(ctx)
		if err != nil {
			return err
		}
		if l == except {
			return fmt.Errorf("%s still leads", l)
		}
		var recovering bool
		if err := c.query(ctx, l, `SELECT pg_is_in_recovery()`, &recovering); err != nil {
			return err
		}
		if recovering {
			return fmt.Errorf("%s leads but is still in recovery", l)
		}
		leader = l
		return nil
	})
	return leader, err
}

// WaitReplicating waits until a node leads and every other live node
// streams from it (as a synchronous standby in synchronous mode), and
// returns the leader.
func (c *Cluster) WaitReplicating(ctx context.Context) (string, error) {
	var leader string
	err := waitFor(ctx, 120*time.Second, "every replica to stream from the leader", func() error {
		l, err := c.WaitLeader(ctx, "")
		if err != nil {
			return err
		}
		// Patroni names each replica's connection after its node; a
		// pg_basebackup still running streams too, under its own name.
		var replicas []string
		for _, n := range c.nodes {
			if !n.crashed && n.name != l {
				replicas = append(replicas, n.name)
			}
		}
		var streaming int
		if err := c.query(ctx, l, `SELECT count(*) FROM pg_stat_replication
			WHERE state = 'streaming' AND application_name = ANY($1) AND (NOT $2 OR sync_state = 'sync')`,
			&streaming, replicas, c.cfg.Synchronous); err != nil {
			return err
		}
		if streaming != len(replicas) {
			return fmt.Errorf("%d of %d replicas stream from %s", streaming, len(replicas), l)
		}
		leader = l
		return nil
	})
	return leader, err
}

// query runs one single-row query on node name.
func (c *Cluster) query(ctx context.Context, name, sql string, dst any, args ...any) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, c.NodeURL(name))
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	return conn.QueryRow(ctx, sql, args...).Scan(dst)
}

// Crash kills node name as a machine crash would: SIGKILL to its Patroni
// first (it can neither restart the server nor release its leadership),
// then to the postmaster and every server process.
func (c *Cluster) Crash(name string) error {
	n := c.node(name)
	if n == nil {
		return fmt.Errorf("hacluster: no node %q", name)
	}
	n.crashed = true
	return errors.Join(n.patroni.kill(), killPostmaster(n.data))
}

// StallReplication freezes (SIGSTOP) the WAL senders of node name: its
// replicas stop receiving WAL, as behind a slow network or a busy standby,
// while the node goes on committing (in asynchronous mode) or waits for its
// synchronous standby (in synchronous mode). It returns how many it froze.
// Crash kills them all the same.
func (c *Cluster) StallReplication(name string) (int, error) {
	n := c.node(name)
	if n == nil {
		return 0, fmt.Errorf("hacluster: no node %q", name)
	}
	pid, err := postmasterPID(n.data)
	if err != nil {
		return 0, err
	}
	stopped := 0
	for _, child := range childrenOf(pid) {
		title, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", child))
		if !bytes.Contains(title, []byte("walsender")) {
			continue
		}
		if err := syscall.Kill(child, syscall.SIGSTOP); err != nil {
			return stopped, fmt.Errorf("hacluster: stop WAL sender %d: %w", child, err)
		}
		stopped++
	}
	return stopped, nil
}

// Close kills every process of the cluster and removes its directory.
func (c *Cluster) Close() error {
	var errs []error
	for _, n := range c.nodes {
		if n.patroni != nil {
			errs = append(errs, n.patroni.kill())
		}
		errs = append(errs, killPostmaster(n.data))
	}
	if c.etcd != nil {
		errs = append(errs, c.etcd.kill())
	}
	if c.dir != "" {
		errs = append(errs, os.RemoveAll(c.dir))
	}
	return errors.Join(errs...)
}

// Logs returns the last bytes of every log of the cluster, for a report
// on failure.
func (c *Cluster) Logs(n int) string {
	var b strings.Builder
	files, _ := filepath.Glob(filepath.Join(c.dir, "*", "*.log"))
	more, _ := filepath.Glob(filepath.Join(c.dir, "*", "log", "*.log"))
	files = append(files, more...)
	sort.Strings(files)
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		rel, _ := filepath.Rel(c.dir, f)
		fmt.Fprintf(&b, "==> %s <==\n%s\n", rel, raw[max(0, len(raw)-n):])
	}
	return b.String()
}

// mkdir makes a directory in the cluster's, owned by the server's user.
func (c *Cluster) mkdir(name string) (string, error) {
	dir := filepath.Join(c.dir, name)
	if err := os.Mkdir(dir, 0o700); err != nil {
		return "", err
	}
	if c.cred != nil {
		if err := os.Chown(dir, int(c.cred.Uid), int(c.cred.Gid)); err != nil {
			return "", err
		}
	}
	return dir, nil
}

// status is what Patroni's REST API says of its node.
type status struct {
	State string `json:"state"`
	Role  string `json:"role"`
}

func (n *node) status(ctx context.Context) (status, error) {
	var st status
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+loopAddr(n.apiPort)+"/patroni", nil)
	if err != nil {
		return st, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return st, fmt.Errorf("%s: %w", n.name, err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		return st, fmt.Errorf("%s: status %d: %w", n.name, resp.StatusCode, err)
	}
	return st, nil
}

// getOK returns nil if url answers 200.
func getOK(ctx context.Context, url string) error {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: status %d", url, resp.StatusCode)
	}
	return nil
}

// waitFor calls try until it returns nil, ctx ends or limit passes, and
// then returns try's last error.
func waitFor(ctx context.Context, limit time.Duration, what string, try func() error) error {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		err := try()
		if err == nil || errors.Is(err, errExited) {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("hacluster: waited %v for %s: %w", limit, what, err)
		case <-tick.C:
		}
	}
}

func loopAddr(port int) string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)) }
func loopURL(port int) string  { return "http://" + loopAddr(port) }

// freePorts returns n distinct ports free on 127.0.0.1 right now.
func freePorts(n int) ([]int, error) {
	ports := make([]int, 0, n)
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		defer ln.Close()
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}
