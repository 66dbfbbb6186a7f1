// Command conformance is the Go client's program for the conformance suite
// of every idmint client (docs/clients.md): it takes --count IDs of --tag
// from --threads goroutines with one client.Client, prints each ID on its
// own line to stdout, closes the client (giving back the unused tail) and
// exits 0 only if every call succeeded. Its last line on stderr is the
// summary the harness reads: "conformance: ids=N threads=T seconds=S".
//
//	go run ./clients/go/conformance --url http://127.0.0.1:8080,http://127.0.0.1:8081 --tag order --count 100000 --threads 4
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/idmint/idmint/client"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "conformance:", err)
		os.Exit(1)
	}
}

// urlList is a repeatable, comma-separated --url.
type urlList []string

func (u *urlList) String() string { return strings.Join(*u, ",") }
func (u *urlList) Set(v string) error {
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			*u = append(*u, s)
		}
	}
	return nil
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("conformance", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var urls urlList
	fs.Var(&urls, "url", "base URL of an idmint instance (repeat, or comma-separate)")
	tag := fs.String("tag", "", "biz_tag to take IDs from (required)")
	count := fs.Int("count", 0, "IDs to take in all")
	threads := fs.Int("threads", 4, "goroutines calling Next")
	token := fs.String("token", os.Getenv("IDMINT_TOKEN"), "bearer token with an ID scope (default $IDMINT_TOKEN)")
	ca := fs.String("ca", "", "PEM CA bundle of https:// instances (default: the system's)")
	cert := fs.String("cert", "", "PEM client certificate (with --key)")
	key := fs.String("key", "", "PEM key of --cert")
	if err := fs.Parse(args); err != nil {
		return err
	}
	switch {
	case len(urls) == 0:
		return errors.New("give at least one --url")
	case *tag == "":
		return errors.New("give --tag")
	case *count < 0 || *threads < 1:
		return errors.New("--count must be at least 0 and --threads at least 1")
	}
	cfg := client.Config{URLs: urls, Token: *token}
	if *ca != "" || *cert != "" || *key != "" {
		tlsConfig, err := client.LoadTLS(*ca, *cert, *key)
		if err != nil {
			return err
		}
		cfg.TLS = tlsConfig
	}
	cfg.Logger = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	c, err := client.New(ctx, cfg)
	if err != nil {
		return err
	}

	got := make([][]int64, *threads)
	var failed atomic.Bool
	var wg sync.WaitGroup
	start := time.Now()
	for w := range *threads {
		n := *count / *threads
		if w < *count%*threads {
			n++
		}
		wg.Go(func() {
			ids := make([]int64, 0, n)
			for range n {
				id, err := c.Next(ctx, *tag)
				if err != nil {
					fmt.Fprintf(stderr, "conformance: goroutine %d: %v\n", w, err)
					failed.Store(true)
					break
				}
				ids = append(ids, id)
			}
			got[w] = ids
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	closeCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.Close(closeCtx); err != nil {
		fmt.Fprintln(stderr, "conformance: close:", err)
	}

	out := bufio.NewWriterSize(stdout, 1<<16)
	n := 0
	buf := make([]byte, 0, 24)
	for _, ids := range got {
		for _, id := range ids {
			buf = strconv.AppendInt(buf[:0], id, 10)
			buf = append(buf, '\n')
			out.Write(buf)
		}
		n += len(ids)
	}
	if err := out.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(stderr, "conformance: ids=%d threads=%d seconds=%.3f\n", n, *threads, elapsed.Seconds())
	if failed.Load() || n != *count {
		return fmt.Errorf("%d of %d ids taken", n, *count)
	}
	return nil
}
