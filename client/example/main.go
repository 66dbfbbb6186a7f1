// Command example takes IDs from idmint instances with the Go client, as a
// caller would, and checks them: every ID unique, every goroutine's IDs
// increasing.
//
//	go run ./client/example --url http://127.0.0.1:8080 --url http://127.0.0.1:8081 --tag order --duration 10s
//	IDMINT_TOKEN=idm_… go run ./client/example --url https://idmint:8443 --ca ca.pem --cert app.pem --key app-key.pem
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/idmint/idmint/client"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "example:", err)
		os.Exit(1)
	}
}

type urlList []string

func (u *urlList) String() string     { return strings.Join(*u, ",") }
func (u *urlList) Set(v string) error { *u = append(*u, v); return nil }

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("example", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var urls urlList
	fs.Var(&urls, "url", "base URL of an idmint instance (repeat)")
	tag := fs.String("tag", "order", "biz_tag to take IDs from")
	workers := fs.Int("goroutines", 4, "goroutines calling Next")
	duration := fs.Duration("duration", 10*time.Second, "how long to take IDs")
	maxIDs := fs.Int("max-ids", 20_000_000, "stop after this many IDs (they are all kept for the check)")
	ca := fs.String("ca", "", "PEM CA bundle for https:// instances (default: the system's)")
	cert := fs.String("cert", "", "PEM client certificate, for instances that ask for one (with --key)")
	key := fs.String("key", "", "PEM key of --cert")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if len(urls) == 0 {
		return errors.New("give at least one --url")
	}
	// The token comes from the environment only, so that it is not in the
	// process list.
	cfg := client.Config{URLs: urls, Tags: []string{*tag}, Token: os.Getenv("IDMINT_TOKEN")}
	if *ca != "" || *cert != "" {
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
	ctx, cancel := context.WithTimeout(ctx, *duration)
	defer cancel()

	per := *maxIDs / *workers
	got := make([][]int64, *workers)
	var failures sync.Map // message → struct{}
	var wg sync.WaitGroup
	start := time.Now()
	for w := range *workers {
		wg.Go(func() {
			ids := make([]int64, 0, min(per, 1<<20))
			for len(ids) < per && ctx.Err() == nil {
				id, err := c.Next(ctx, *tag)
				if err != nil {
					if ctx.Err() == nil {
						failures.Store(err.Error(), struct{}{})
						time.Sleep(10 * time.Millisecond)
					}
					continue
				}
				ids = append(ids, id)
			}
			got[w] = ids
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	st := c.Stats()
	closeCtx, cancelClose := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancelClose()
	if err := c.Close(closeCtx); err != nil {
		fmt.Fprintln(stderr, "close:", err)
	}

	var all []int64
	disorder := 0
	for _, ids := range got {
		for i := 1; i < len(ids); i++ {
			if ids[i] <= ids[i-1] {
				disorder++
			}
		}
		all = append(all, ids...)
	}
	slices.Sort(all)
	dups := 0
	for i := 1; i < len(all); i++ {
		if all[i] == all[i-1] {
			dups++
		}
	}
	var loads, recovered int64
	for _, t := range st.Tags {
		loads += t.Loads
		recovered += t.Recovered
	}
	fmt.Fprintf(stdout, "%d ids in %v (%.1f M ids/s) from %d instances; %d ranges, %d range requests, %d recovered after a lost reply\n",
		len(all), elapsed.Round(time.Millisecond), float64(len(all))/elapsed.Seconds()/1e6, len(urls), loads, st.Requests, recovered)
	failures.Range(func(k, _ any) bool { fmt.Fprintln(stdout, "error seen:", k); return true })
	fmt.Fprintf(stdout, "duplicates: %d, order violations: %d\n", dups, disorder)
	if dups > 0 || disorder > 0 || len(all) == 0 {
		return errors.New("check failed")
	}
	return nil
}
