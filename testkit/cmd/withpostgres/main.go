// Command withpostgres runs a command beside a PostgreSQL server of the test
// harness (testkit/pgtest: Docker, or local server binaries, see
// IDMINT_TEST_PG), with the server's URL in the environment variable -env
// names, and removes the server when the command ends. It keeps the
// harness out of the programs it runs: make bench-http starts
// idmint-bench through it.
//
//	withpostgres [-env IDMINT_BENCH_DATABASE_URL] COMMAND [ARG...]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"time"

	"github.com/idmint/idmint/testkit/pgtest"
)

func main() {
	code, err := run()
	if err != nil {
		fmt.Fprintln(os.Stderr, "withpostgres:", err)
	}
	os.Exit(code)
}

func run() (int, error) {
	fs := flag.NewFlagSet("withpostgres", flag.ContinueOnError)
	env := fs.String("env", "IDMINT_BENCH_DATABASE_URL", "environment variable that carries the server's URL to the command")
	if err := fs.Parse(os.Args[1:]); err != nil {
		return 2, nil
	}
	if fs.NArg() == 0 {
		return 2, errors.New("no command to run")
	}
	srv, err := pgtest.Start()
	if err != nil {
		return 1, fmt.Errorf("start PostgreSQL: %w", err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		srv.Close(ctx)
	}()
	fmt.Fprintf(os.Stderr, "withpostgres: PostgreSQL (%s) for %s\n", srv.Kind(), fs.Arg(0))

	cmd := exec.Command(fs.Arg(0), fs.Args()[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Env = append(os.Environ(), *env+"="+srv.URL())
	// An interrupt reaches the command (same process group); this process
	// waits for it to end, then removes the server.
	signal.Ignore(os.Interrupt, syscall.SIGTERM)
	if err := cmd.Run(); err != nil {
		if exit, ok := errors.AsType[*exec.ExitError](err); ok {
			return exit.ExitCode(), nil
		}
		return 1, err
	}
	return 0, nil
}
