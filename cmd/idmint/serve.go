package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"os"
	"runtime/pprof"
	"strings"
	"time"

	"github.com/idmint/idmint/allocator"
	"github.com/idmint/idmint/allocator/postgres"
	"github.com/idmint/idmint/httpapi"
	"github.com/idmint/idmint/internal/tracing"
	"github.com/idmint/idmint/rpcapi"
	"github.com/idmint/idmint/segment"
)

type serveConfig struct {
	store           storeConfig
	tags            tagList
	listen          string
	migrate         bool
	instance        string
	maxCount        int
	requestTimeout  time.Duration
	period          time.Duration
	threshold       float64
	runway          time.Duration
	waitTimeout     time.Duration
	loadTimeout     time.Duration
	shutdownTimeout time.Duration
	pruneAfter      time.Duration
	accessLog       bool
	leafRoutes      bool
	cpuProfile      string
	log             logConfig
	snowflake       snowflakeConfig
	access          accessConfig
	replication     postgres.ReplicationConfig
	tls             tlsServerConfig
	grpc            grpcListenConfig
}

// accessConfig holds the flags of access control and limits.
type accessConfig struct {
	auth              string
	protectMonitoring bool
	tokenRate         float64
	addressRate       float64
	rangeRate         float64
	floorLeadRate     float64
	readTimeout       time.Duration
	tokenMaxStale     time.Duration
	loginRate         float64
	loginSession      time.Duration
}

func (a *accessConfig) register(fs *flag.FlagSet) {
	fs.StringVar(&a.auth, "auth", "open", "who may ask for IDs: open (anyone who reaches the port) or token (a bearer token with an ID scope); /v1 admin routes always need an admin token")
	fs.BoolVar(&a.protectMonitoring, "protect-monitoring", false, "make /metrics, /id/health and /id/dashboard need a token with the monitor or admin scope (a browser logs in at /id/login)")
	fs.Float64Var(&a.loginRate, "login-attempts-per-minute", 10, "logins (POST /id/login, each a token check) per minute each client address may try with --protect-monitoring, burst as many (0: unlimited; behind a proxy all clients share its address)")
	fs.DurationVar(&a.loginSession, "login-session", httpapi.DefaultLoginSession, fmt.Sprintf("how long a browser's login at /id/login lasts (%v to %v); revoking the token ends it sooner", minLoginSession, maxLoginSession))
	fs.Float64Var(&a.tokenRate, "ids-per-second-per-token", 0, "IDs per second each token may take with --auth token (0: unlimited); /ids counts its count")
	fs.Float64Var(&a.addressRate, "ids-per-second-per-address", 0, "IDs per second each client address may take with --auth open (0: unlimited; behind a proxy all clients share its address)")
	fs.Float64Var(&a.rangeRate, "range-grants-per-second", 20, "range requests (POST /v1/segments and its give-back, each a database write) per second each client address (--auth open) or token (--auth token) may make, burst twice that (0: unlimited)")
	fs.Float64Var(&a.floorLeadRate, "floor-lead-per-second", httpapi.DefaultFloorLeadPerSecond, "IDs per second each client address (--auth open) or token (--auth token) may make max_id skip by claiming a floor on POST /v1/segments (the lead above the tag's max_id; it counts against the IDs-per-second limits too), burst 2^32; past it a floor above max_id is refused (429). The default keeps one caller from moving a tag past 2^53 in under a year")
	fs.DurationVar(&a.readTimeout, "read-timeout", 10*time.Second, "longest a client may take to send a whole request (slow clients are disconnected)")
	fs.DurationVar(&a.tokenMaxStale, "token-max-stale", httpapi.DefaultMaxStale, fmt.Sprintf("while the token store cannot be read, how long the tokens last read are still trusted; past it every token is refused with 503 (at least %v, the refresh interval, at most %v): a revocation takes effect within it whatever happens to the store", minTokenMaxStale, maxTokenMaxStale))
}

// The bounds of --token-max-stale: tokens are read again every second, and
// a revoked token must not be trusted for long.
const (
	minTokenMaxStale = time.Second
	maxTokenMaxStale = time.Hour
)

// The bounds of --login-session: a login cookie copied from a browser
// opens the dashboard until its session ends, so not for months.
const (
	minLoginSession = time.Minute
	maxLoginSession = 30 * 24 * time.Hour
)

// validate checks the access flags before anything is opened.
func (a *accessConfig) validate() error {
	mode := httpapi.AuthMode(a.auth)
	if mode != httpapi.AuthOpen && mode != httpapi.AuthToken {
		return fmt.Errorf("--auth %q: want open or token", truncateArg(a.auth))
	}
	if !(a.rangeRate >= 0) || math.IsInf(a.rangeRate, 1) {
		return fmt.Errorf("--range-grants-per-second %v: want 0 (unlimited) or a positive number", a.rangeRate)
	}
	if !(a.floorLeadRate > 0) || math.IsInf(a.floorLeadRate, 1) {
		return fmt.Errorf("--floor-lead-per-second %v: want a positive number", a.floorLeadRate)
	}
	if a.tokenMaxStale < minTokenMaxStale || a.tokenMaxStale > maxTokenMaxStale {
		return fmt.Errorf("--token-max-stale %v: want %v to %v", a.tokenMaxStale, minTokenMaxStale, maxTokenMaxStale)
	}
	if !(a.loginRate >= 0) || math.IsInf(a.loginRate, 1) {
		return fmt.Errorf("--login-attempts-per-minute %v: want 0 (unlimited) or a positive number", a.loginRate)
	}
	if a.loginSession < minLoginSession || a.loginSession > maxLoginSession {
		return fmt.Errorf("--login-session %v: want %v to %v", a.loginSession, minLoginSession, maxLoginSession)
	}
	return nil
}

func (a *accessConfig) httpConfig(tokens httpapi.TokenLister) (httpapi.AuthConfig, httpapi.Limits, error) {
	if err := a.validate(); err != nil {
		return httpapi.AuthConfig{}, httpapi.Limits{}, err
	}
	return httpapi.AuthConfig{Tokens: tokens, IDs: httpapi.AuthMode(a.auth), ProtectMonitoring: a.protectMonitoring,
			MaxStale: a.tokenMaxStale, LoginSession: a.loginSession},
		httpapi.Limits{IDsPerSecondPerToken: a.tokenRate, IDsPerSecondPerAddress: a.addressRate,
			RangeGrantsPerSecond: a.rangeRate, LoginAttemptsPerMinute: a.loginRate, FloorLeadPerSecond: a.floorLeadRate, ReadTimeout: a.readTimeout}, nil
}

// serveFlags is `idmint serve`.
func serveFlags(fs *flag.FlagSet) runFunc {
	var c serveConfig
	c.store.register(fs)
	fs.Var(&c.tags, "tag", "create these tags at start if missing, with the default step (repeat or comma-separate)")
	fs.StringVar(&c.listen, "listen", ":8080", "HTTP listen address")
	fs.BoolVar(&c.migrate, "migrate", false, "apply database migrations before serving (a SQLite file is always migrated)")
	fs.StringVar(&c.instance, "instance", "", "name of this instance in the segment log and /id/health (default HOST-PID)")
	fs.IntVar(&c.maxCount, "max-count", 1000, "largest count accepted by /ids")
	fs.DurationVar(&c.requestTimeout, "request-timeout", 5*time.Second, "longest time one HTTP request may take")
	fs.DurationVar(&c.period, "segment-period", 15*time.Minute, "target life of one segment: the dynamic step aims for it")
	fs.Float64Var(&c.threshold, "prefetch-threshold", 0.1, "used fraction of a segment that starts fetching the next one")
	fs.DurationVar(&c.runway, "runway", 0, "hold IDs in memory for at least this long at each tag's recent peak rate, within its max_step (0: only --segment-period shapes the step); a tag's own runway overrides it")
	fs.DurationVar(&c.waitTimeout, "wait-timeout", 2*time.Second, "longest a request waits for a segment when both buffers are empty")
	fs.DurationVar(&c.loadTimeout, "load-timeout", 10*time.Second, "longest one segment load may retry")
	fs.DurationVar(&c.shutdownTimeout, "shutdown-timeout", 15*time.Second, "longest graceful shutdown waits for in-flight requests, and again for the rest to stop")
	fs.DurationVar(&c.pruneAfter, "prune-after", 7*24*time.Hour, fmt.Sprintf("delete segment-log rows older than this (0 keeps them; at least %v)", minPruneAfter))
	fs.BoolVar(&c.accessLog, "access-log", false, "log one line per HTTP request (off by default: it costs more than the ID)")
	fs.BoolVar(&c.leafRoutes, "leaf-routes", true, "serve Leaf's routes, GET /api/segment/get/{key} and /api/snowflake/get/{key}, with Leaf's plain-text replies (docs/from-leaf.md)")
	fs.StringVar(&c.cpuProfile, "cpu-profile", "", "write a CPU profile of the whole run to this file (for go tool pprof)")
	replicas := fs.String("replicas-required", "auto",
		"PostgreSQL standbys that must have a grant's WAL before its ids are served: auto (every server that could be promoted: connected standbys, unused physical slots, standbys remembered on this timeline), off, or N (auto and at least N standbys)")
	ack := fs.String("replica-ack", "flush", "how far a standby must have a grant's WAL: flush or replay")
	c.log.register(fs)
	c.snowflake.register(fs)
	c.access.register(fs)
	c.tls.register(fs)
	c.grpc.register(fs)
	return func(ctx context.Context, out output, _ []string) error {
		if c.maxCount < 1 || c.maxCount > allocator.MaxN {
			return fmt.Errorf("--max-count %d: want 1 to %d", c.maxCount, allocator.MaxN)
		}
		if c.runway < 0 || c.runway > allocator.MaxRunway {
			return fmt.Errorf("--runway %v: want 0 (none) to %v", c.runway, allocator.MaxRunway)
		}
		if c.pruneAfter != 0 && c.pruneAfter < minPruneAfter {
			return fmt.Errorf("--prune-after %v: want 0 (keep every row) or at least %v: a lost reply is settled by looking its request up in the segment log", c.pruneAfter, minPruneAfter)
		}
		if err := c.access.validate(); err != nil {
			return err
		}
		if err := c.tls.validate(); err != nil {
			return err
		}
		var err error
		if c.replication.Required, err = postgres.ParseReplicas(*replicas); err != nil {
			return fmt.Errorf("--replicas-required: %w", err)
		}
		if c.replication.Ack, err = postgres.ParseReplicaAck(*ack); err != nil {
			return fmt.Errorf("--replica-ack: %w", err)
		}
		if c.instance == "" {
			c.instance = defaultInstance()
		}
		logger, err := c.log.logger(out.stderr)
		if err != nil {
			return err
		}
		return serve(ctx, c, logger)
	}
}

// serve starts everything in order, pushing each part on a stack once it
// started, and stops them through that stack in reverse order, on shutdown
// and on every error alike: the Snowflake lease is released, the allocator
// gives its segments back before the store closes, and the listener closes.
func serve(ctx context.Context, c serveConfig, logger *slog.Logger) (err error) {
	gcPercent := tuneGC()
	var started stack
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), c.shutdownTimeout)
		defer cancel()
		started.close(cctx, logger)
		logger.Info("idmint stopped")
	}()

	// Tracing is stopped last, so that its last flush carries the spans
	// of everything stopped before it (give-backs, the lease's release).
	tr, err := tracing.FromEnv(ctx, os.Getenv, version(), logger)
	if err != nil {
		return err
	}
	if tr != nil {
		started.push("tracing", tr.Shutdown)
	}
	// A bad key pair is said before anything is opened.
	tlsConfig, err := c.tls.serverTLS(logger)
	if err != nil {
		return err
	}
	// Listen first: a port in use is said before migrations run or a
	// worker ID is leased.
	ln, err := net.Listen("tcp", c.listen)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", c.listen, err)
	}
	started.push("listener", func(context.Context) error {
		if err := ln.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
			return err
		}
		return nil
	})
	grpcLn, err := c.grpc.listen()
	if err != nil {
		return err
	}
	if grpcLn != nil {
		started.push("grpc listener", func(context.Context) error {
			if err := grpcLn.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
				return err
			}
			return nil
		})
	}
	store, err := openStore(ctx, c.store, c.migrate, logger, func(msg string) { logger.Warn(msg) })
	if err != nil {
		return err
	}
	started.push("store", func(context.Context) error { store.close(); return nil })
	auth, limits, err := c.access.httpConfig(store.tokens)
	if err != nil {
		return err
	}
	if err := ensureTags(ctx, store, c.tags, logger); err != nil {
		return err
	}
	// Grants wait for the standbys of a PostgreSQL primary; a SQLite file
	// has none.
	var (
		replication httpapi.ReplicationSource
		roundTrip   *allocator.RoundTrip
	)
	if pg, ok := store.store.(*postgres.Store); ok {
		roundTrip = pg.RoundTrip()
		c.replication.Logger = logger
		pg.SetReplication(c.replication)
		replication = pg
		logReplication(ctx, pg, logger)
	}

	// Metrics come first: the allocator reports each segment load to them.
	metrics := httpapi.NewMetrics()
	granter := store.store
	if tr != nil {
		granter = tr.Store(granter)
	}
	alloc := allocator.New(allocator.Config{
		Store:        granter,
		Instance:     c.instance,
		Logger:       logger,
		LogRetention: c.pruneAfter,
		// Fetch timeouts follow the measured round trip (at least 3 s).
		RoundTrip: roundTrip,
		Segment: segment.Config{
			Period:      c.period,
			Threshold:   c.threshold,
			Runway:      c.runway,
			WaitTimeout: c.waitTimeout,
			LoadTimeout: c.loadTimeout,
			OnLoad:      metrics.ObserveLoad,
		},
	})
	started.push("allocator", alloc.Close)
	node, err := startSnowflake(ctx, c.snowflake, store, c.instance, tr, logger)
	if err != nil {
		return err
	}
	if node != nil {
		started.push("snowflake worker id", func(ctx context.Context) error {
			if err := node.Close(ctx); err != nil {
				return fmt.Errorf("not released; it frees up when its lease expires: %w", err)
			}
			return nil
		})
	}
	rpc := rpcapi.New()
	api := httpapi.NewServer(httpapi.Config{
		Allocator:      alloc,
		Instance:       c.instance,
		Tags:           c.tags,
		MaxCount:       c.maxCount,
		RequestTimeout: c.requestTimeout,
		AccessLog:      c.accessLog,
		LeafRoutes:     c.leafRoutes,
		Metrics:        metrics,
		Replication:    replication,
		Logger:         logger,
		Snowflake:      snowflakeAPI(node),
		Auth:           auth,
		Limits:         limits,
		Admin:          store.admin,
		TokenAdmin:     store.tokens,
		TLS:            c.tls.health(),
		RPC:            rpc,
	})
	srv := api.HTTPServer()
	srv.ErrorLog = slog.NewLogLogger(logger.Handler(), slog.LevelWarn)
	srv.Protocols = serverProtocols()
	srv.TLSConfig = tlsConfig
	if tr != nil {
		srv.Handler = tr.HTTP(srv.Handler, api.Router())
	}
	if c.cpuProfile != "" {
		stop, err := startCPUProfile(c.cpuProfile)
		if err != nil {
			return err
		}
		started.push("cpu profile", func(context.Context) error { stop(); return nil })
	}
	if p, ok := store.store.(pruner); ok && c.pruneAfter > 0 {
		bg, stopBG := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			defer close(done)
			prune(bg, p, c.pruneAfter, logger)
		}()
		started.push("segment-log pruning", func(context.Context) error { stopBG(); <-done; return nil })
	}

	var grpcSrv *grpcListener
	grpcFailed := (<-chan struct{})(nil)
	grpcAddr := "off"
	if grpcLn != nil {
		grpcSrv = newGRPCListener(grpcLn, rpc, tlsConfig, srv, c.accessLog, tr, logger)
		grpcAddr = grpcLn.Addr().String()
	}
	logger.Info("idmint serving", "listen", ln.Addr().String(), "grpc_listen", grpcAddr, "instance", c.instance, "version", version(),
		"auth", auth.IDs, "protect_monitoring", auth.ProtectMonitoring,
		"tls", c.tls.health().Enabled, "client_certificates", c.tls.health().ClientCertificates, "gogc", gcPercent)
	serveErr := make(chan error, 1)
	go func() {
		if tlsConfig != nil {
			// The certificate comes from TLSConfig.GetCertificate.
			serveErr <- srv.ServeTLS(ln, "", "")
			return
		}
		serveErr <- srv.Serve(ln)
	}()
	// The gRPC server starts after the HTTP one and stops before it.
	if grpcSrv != nil {
		grpcSrv.start()
		started.push("grpc server", grpcSrv.stop)
		grpcFailed = grpcSrv.failed()
	}
	select {
	case err = <-serveErr:
		return fmt.Errorf("http server: %w", err)
	case <-grpcFailed:
		return fmt.Errorf("grpc server: %w", grpcSrv.stop(ctx))
	case <-ctx.Done():
	}
	logger.Info("shutting down: draining in-flight requests", "timeout", c.shutdownTimeout)
	sctx, cancel := context.WithTimeout(context.Background(), c.shutdownTimeout)
	defer cancel()
	if grpcSrv != nil {
		if e := grpcSrv.stop(sctx); e != nil {
			logger.Warn("grpc graceful stop", "err", e)
		}
	}
	if e := srv.Shutdown(sctx); e != nil {
		logger.Warn("graceful shutdown cut short", "err", e)
	}
	<-serveErr // Serve returns at once when Shutdown starts
	return nil
}

// minPruneAfter is the shortest --prune-after: a lost reply is settled by
// looking its request up in the segment log, and unsettled requests are kept
// (and resumed) for up to half the retention, so rows must outlive them by
// far.
const minPruneAfter = time.Hour

// startCPUProfile profiles the process into path until stop is called.
func startCPUProfile(path string) (stop func(), err error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("--cpu-profile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("--cpu-profile: %w", err)
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}, nil
}

// logReplication says at start what a failover could cost.
func logReplication(ctx context.Context, pg *postgres.Store, logger *slog.Logger) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	st, err := pg.ReplicationStatus(ctx)
	if err != nil {
		logger.Warn("cannot read the database's replication status", "err", err)
		return
	}
	log := logger.With("replicas", st.Replicas, "sync_replicas", st.SyncReplicas, "timeline", st.Timeline,
		"replicas_required", st.Required.String(), "replica_ack", st.Ack)
	if w := st.Warnings(); len(w) > 0 {
		log.Warn("replication: " + strings.Join(w, "; "))
		return
	}
	log.Info("replication")
}

// prune deletes old segment-log rows every hour.
func prune(ctx context.Context, store pruner, age time.Duration, logger *slog.Logger) {
	t := time.NewTicker(time.Hour)
	defer t.Stop()
	for {
		n, err := store.Prune(ctx, age)
		switch {
		case err != nil && ctx.Err() == nil:
			logger.Warn("prune segment log", "err", err)
		case n > 0:
			logger.Info("pruned segment log", "rows", n, "older_than", age)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func defaultInstance() string {
	host, err := os.Hostname()
	if err != nil {
		host = "idmint"
	}
	return fmt.Sprintf("%s-%d", host, os.Getpid())
}

// logConfig holds the logging flags shared by every command.
type logConfig struct {
	format string
	level  string
}

func (l *logConfig) register(fs *flag.FlagSet) {
	fs.StringVar(&l.format, "log-format", "auto", "log format: auto (JSON unless stderr is a terminal), json or text")
	fs.StringVar(&l.level, "log-level", "info", "log level: debug, info, warn or error")
}

func (l *logConfig) logger(w io.Writer) (*slog.Logger, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(l.level)); err != nil {
		return nil, fmt.Errorf("--log-level %q: want debug, info, warn or error", l.level)
	}
	opts := &slog.HandlerOptions{Level: level, ReplaceAttr: durationText}
	format := l.format
	if format == "auto" {
		format = "json"
		if f, ok := w.(*os.File); ok {
			if st, err := f.Stat(); err == nil && st.Mode()&os.ModeCharDevice != 0 {
				format = "text"
			}
		}
	}
	switch format {
	case "json":
		return slog.New(redacting(slog.NewJSONHandler(w, opts))), nil
	case "text":
		return slog.New(redacting(slog.NewTextHandler(w, opts))), nil
	}
	return nil, fmt.Errorf("--log-format %q: want auto, json or text", l.format)
}

// The PostgreSQL store is the API's replication source and standby admin.
var (
	_ httpapi.ReplicationSource = (*postgres.Store)(nil)
	_ httpapi.StandbyAdmin      = (*postgres.Store)(nil)
)
