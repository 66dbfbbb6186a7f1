package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// The two reference servers idmint is compared with. Each runs in a process
// of its own (this binary, re-executed), as idmint does, so that no two
// servers share a heap or a scheduler.

// bareHandler is the ceiling: what GET /id costs when an ID is a shared
// atomic counter and nothing else. It parses biz_tag the idiomatic way
// (r.URL.Query), refuses a missing one, and writes the same JSON as idmint.
func bareHandler() http.Handler {
	var n atomic.Int64
	return idHandler(func(context.Context) (int64, error) { return n.Add(1), nil })
}

// nextvalHandler is what GET /id costs without idmint's buffers: one
// PostgreSQL nextval() round trip per ID.
func nextvalHandler(pool *pgxpool.Pool) http.Handler {
	return idHandler(func(ctx context.Context) (int64, error) {
		var id int64
		err := pool.QueryRow(ctx, "SELECT nextval('idmint_bench_seq')").Scan(&id)
		return id, err
	})
}

func idHandler(next func(context.Context) (int64, error)) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /id", func(w http.ResponseWriter, r *http.Request) {
		tag := r.URL.Query().Get("biz_tag")
		if tag == "" {
			http.Error(w, `{"error":{"code":"invalid_biz_tag","message":"biz_tag is required"}}`, http.StatusBadRequest)
			return
		}
		id, err := next(r.Context())
		if err != nil {
			http.Error(w, `{"error":{"code":"unavailable","message":"no id"}}`, http.StatusServiceUnavailable)
			return
		}
		buf := make([]byte, 0, 64+len(tag))
		buf = append(buf, `{"biz_tag":`...)
		buf = strconv.AppendQuote(buf, tag)
		buf = append(buf, `,"id":"`...)
		buf = strconv.AppendInt(buf, id, 10)
		buf = append(buf, "\"}\n"...)
		w.Header().Set("Content-Type", "application/json")
		w.Write(buf)
	})
	return mux
}

// runReference serves one reference handler until ctx ends: the
// "serve-bare" and "serve-nextval" subcommands.
func runReference(ctx context.Context, kind string, args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet(kind, flag.ContinueOnError)
	fs.SetOutput(stderr)
	listen := fs.String("listen", "127.0.0.1:0", "listen address")
	dbURL := fs.String("database-url", "", "PostgreSQL URL (serve-nextval)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	var h http.Handler
	switch kind {
	case "serve-bare-grpc":
		return runBareGRPC(ctx, *listen)
	case "serve-bare-connect":
		return runBareConnect(ctx, *listen)
	case "serve-bare":
		h = bareHandler()
	case "serve-nextval":
		pool, err := pgxpool.New(ctx, *dbURL)
		if err != nil {
			return fmt.Errorf("connect: %w", err)
		}
		defer pool.Close()
		if _, err := pool.Exec(ctx, "CREATE SEQUENCE IF NOT EXISTS idmint_bench_seq"); err != nil {
			return fmt.Errorf("create sequence: %w", err)
		}
		h = nextvalHandler(pool)
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return nil
}
