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

	"github.com/idmint/idmint/deploy/ha"
	"github.com/idmint/idmint/testkit/pgtest"
)

// dirPrefix starts the name of every cluster's temporary directory;
// ownerFile in it holds the PID of the process that started the cluster.
const (
	dirPrefix = "idmint-hacluster-"
	ownerFile = "owner.pid"
)

// The roles of a drill's cluster (deploy/ha's patroni.yml and
// post-bootstrap.sh): the superuser the drill inspects nodes as, and the
// role and database idmint uses (with pg_monitor).
const (
	superuser     = "postgres"
	password      = "postgres"
	replPassword  = "replicator"
	appUser       = "idmint"
	appPassword   = "idmint"
	appDatabase   = "idmint"
	postBootstrap = "post-bootstrap.sh"
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
	cut             bool // Disconnect froze its Patroni and killed its server
}

// gone reports whether n can answer: neither crashed nor cut off.
func (n *node) gone() bool { return n.crashed || n.cut }

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
			err = errors.Join(fmt.Errorf("%w\n%s", err, c.Logs(3000)), c.Close())
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
	etcdConf := filepath.Join(etcdDir, "etcd.yml")
	if err := c.render("etcd.yml", etcdConf, map[string]string{
		"ETCD_NAME": "drill", "ETCD_DIR": etcdDir, "HOST": loopHost, "SCOPE": scope,
		"ETCD_CLIENT_PORT": strconv.Itoa(client), "ETCD_PEER_PORT": strconv.Itoa(peer),
	}); err != nil {
		return nil, err
	}
	if c.etcd, err = c.start(etcdDir, "etcd.log", nil, etcdBin, "--config-file", etcdConf); err != nil {
		return nil, err
	}
	script, err := ha.Files.ReadFile(postBootstrap)
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(c.dir, postBootstrap), script, 0o755); err != nil {
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
		if err := c.render("patroni.yml", conf, c.patroniVars(n, client)); err != nil {
			return nil, err
		}
		if n.patroni, err = c.start(n.dir, "patroni.log", []string{"IDMINT_DB_PASSWORD=" + appPassword}, patroniBin, conf); err != nil {
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

// patroniVars fills in deploy/ha's patroni.yml for node n, etcd's client
// port given. The drill departs from a deployment in three values only: a
// short TTL (10s by default) and a one-second loop, so that a failover
// takes seconds, and fsync off, since it kills processes, not machines.
func (c *Cluster) patroniVars(n *node, etcdPort int) map[string]string {
	ttl := int(c.cfg.TTL.Seconds())
	return map[string]string{
		"SCOPE": scope, "NAME": n.name, "HOST": loopHost,
		"PG_PORT": strconv.Itoa(n.pgPort), "API_PORT": strconv.Itoa(n.apiPort),
		"ETCD_HOSTS": loopAddr(etcdPort),
		"NODE_DIR":   n.dir, "DATA_DIR": n.data, "BIN_DIR": c.cfg.BinDir,
		"TTL": strconv.Itoa(ttl), "LOOP_WAIT": "1", "RETRY_TIMEOUT": strconv.Itoa(max(2, ttl/3)),
		"SYNCHRONOUS_MODE":   strconv.FormatBool(c.cfg.Synchronous),
		"FSYNC":              "off",
		"CLIENT_NET":         loopHost + "/32",
		"SUPERUSER_PASSWORD": password, "REPLICATION_PASSWORD": replPassword,
		"POST_BOOTSTRAP": filepath.Join(c.dir, postBootstrap),
	}
}

// render fills in deploy/ha's template name with vars and writes it to
// path, readable by the server's user.
func (c *Cluster) render(name, path string, vars map[string]string) error {
	tmpl, err := ha.Files.ReadFile(name)
	if err != nil {
		return err
	}
	out, err := ha.Render(tmpl, vars)
	if err != nil {
		return fmt.Errorf("hacluster: %s: %w", name, err)
	}
	if err := os.WriteFile(path, out, 0o600); err != nil {
		return err
	}
	if c.cred != nil {
		return os.Chown(path, int(c.cred.Uid), int(c.cred.Gid))
	}
	return nil
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
// writable one (target_session_attrs=read-write): what idmint is given. It
// connects as the role post-bootstrap.sh created (idmint, with pg_monitor)
// to its database.
func (c *Cluster) URL() string {
	hosts := make([]string, len(c.nodes))
	for i, n := range c.nodes {
		hosts[i] = loopAddr(n.pgPort)
	}
	return fmt.Sprintf("postgres://%s:%s@%s/%s?sslmode=disable&target_session_attrs=read-write",
		appUser, appPassword, strings.Join(hosts, ","), appDatabase)
}

// NodeURL returns the superuser's connection URL of one node.
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
		if n.gone() {
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
// streams from it, and returns the leader. In synchronous mode every
// replica must also be a synchronous standby and listed as one in etcd
// (Patroni's /sync answers 200): only then may Patroni promote it.
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
			if !n.gone() && n.name != l {
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
		if c.cfg.Synchronous {
			for _, name := range replicas {
				if err := getOK(ctx, "http://"+loopAddr(c.node(name).apiPort)+"/sync"); err != nil {
					return fmt.Errorf("%s streams but is not the synchronous standby in etcd yet: %w", name, err)
				}
			}
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

// Disconnect cuts node name off as a network partition would, until
// Reconnect: its Patroni is frozen (SIGSTOP: it neither answers nor
// restarts the server, and its member key stays in etcd until the TTL runs
// out), then its PostgreSQL is killed, so it receives no WAL. The leader
// goes on committing without it (asynchronous mode), or once Patroni
// notices drops it from the synchronous set (synchronous mode); its
// replication slot on the leader stays where it stopped.
func (c *Cluster) Disconnect(name string) error {
	n := c.node(name)
	if n == nil || n.gone() {
		return fmt.Errorf("hacluster: no live node %q", name)
	}
	n.cut = true
	if err := n.patroni.signal(syscall.SIGSTOP); err != nil {
		return err
	}
	return killPostmaster(n.data)
}

// Reconnect resumes a node Disconnect cut off: its Patroni goes on, sees
// its server gone and starts it again as a replica, which then streams
// from the leader (or, if the leader died meanwhile, may be promoted).
func (c *Cluster) Reconnect(name string) error {
	n := c.node(name)
	if n == nil || !n.cut {
		return fmt.Errorf("hacluster: node %q is not disconnected", name)
	}
	n.cut = false
	return n.patroni.signal(syscall.SIGCONT)
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

// The drill's clusters listen on loopback only, under one Patroni scope.
const (
	loopHost = "127.0.0.1"
	scope    = "idmint-drill"
)

func loopAddr(port int) string { return net.JoinHostPort(loopHost, strconv.Itoa(port)) }
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
